#!/usr/bin/env bash
# One-time set-up of a fresh machine: a virtual environment in .venv with vidax installed (editable).
#   bash scripts/setup.sh          runtime (translator, zoo and both CLIs: `.[zoo]`)
#   bash scripts/setup.sh --test   plus the test-only PyTorch oracles (torch 2.13.0 CPU, diffusers, transformers)
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
extra="[zoo]"
if [ "${1:-}" = "--test" ]; then
  extra="[zoo,test]"
  # torch first and pinned: 2.13.0 is the CPU wheel; an unpinned torch would pull a CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".${extra}"
if [ "${1:-}" = "--test" ]; then
  # vidax-eval's metric oracles without their declared dependencies (pyproject.toml's test extra says why)
  .venv/bin/python -m pip install -q --no-deps "cd-fvd==0.1.1" "vbench==0.1.5" "openai-clip==1.0.1"
  # XLA's TPU compiler for `vidax-gen --dry-run --target` (no chip needed), in a folder apart (VIDAX_LIBTPU=.venv/libtpu)
  # so that jax on this host keeps its CPU backend; the version jax's own tpu extra names
  if [ ! -d .venv/libtpu/libtpu ]; then
    libtpu=$(.venv/bin/python -c 'import importlib.metadata as m; print(next(r.split(";")[0] for r in m.requires("jax") if r.startswith("libtpu")))')
    .venv/bin/python -m pip install -q --no-deps --target .venv/libtpu "$libtpu"
  fi
fi
