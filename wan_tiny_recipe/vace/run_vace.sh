#!/usr/bin/env bash
# Stage 4, wan-tiny-vace, exactly as the shipped weights were trained (wan_tiny_recipe/README.md, "wan-tiny-vace"):
# VACE blocks on the frozen, shipped wan-tiny (zoo/wan/tiny_model/, which this stage only reads). One torch
# thread (TINY_THREADS, default 1), nice 5: the 2 cores were shared. Each step draws its batch from
# (seed, step), so a run stopped and resumed from its checkpoint in wan_tiny_recipe/out/vace/ draws what an unbroken
# one does (TINY_RUN_DIR moves the run folder).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=".venv/bin/python"

nice -n 5 $PY -m wan_tiny_recipe.vace.train_vace --steps 1500 --batch 16 --lr 1e-3 --checkpoint-every 100
$PY -m wan_tiny_recipe.vace.export_vace                 # -> zoo/wan/tiny_vace/ (transformer/, scheduler/, links to wan-tiny's parts)
$PY -m pytest -n 0 -q -s tests/embedded/test_vace_extension.py
$PY -m wan_tiny_recipe.vace.eval_vace --seeds 0         # 24 training prompts: windows read right, joins that continue
