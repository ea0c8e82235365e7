#!/usr/bin/env bash
# run C (2026-12-06), after the house restructure: vidax (its own blocks) and MaxDiffusion (the same
# blocks, and its shipped 512-blocks) interleaved in one process at Wan2.1-14B 480p, one layer, with op
# traces; then `--dtype float32` on the chip against the CPU (bench.accelerator.fp32_check).
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[runC] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml optax orbax-checkpoint requests > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs train; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps; uptime | tee -a $OUT/run.log
timeout 180 python3 -m bench.accelerator.side_by_side --shape wan14b_480p --layers 1 --blocks 2048,4096,1024 --blocks 512,512,512 --vidax-always-own --rounds 5 --trace --out $OUT/side.json > $OUT/side.log 2>&1
tail -5 $OUT/side.log; el side
timeout 90 python3 -m bench.accelerator.fp32_check run --out $OUT/fp32 > $OUT/fp32.log 2>&1
tail -12 $OUT/fp32.log; el fp32
