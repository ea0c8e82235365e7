#!/usr/bin/env bash
# vidax-eval's feature extraction on a TPU host as one command (jax[tpu] installed; no torch, vidax not installed):
#
#   bash scripts/eval_tpu.sh            # ~4-8 min: CLIP ViT-B/32, DINO ViT-B/16, I3D, RAFT, CLIP ViT-L/14 at real sizes
#
# bench.accelerator.chip.eval_features in one process: 16 clips of 16 frames at 256x256 per network, random
# weights drawn on the device, fp32 at "highest" precision (the metrics' setting), then the same at the
# backend's default precision. Output: $OUT (the device tool's folder) or .bench/eval-tpu: eval.json,
# eval-default.json and the logs. Missing runtime packages are installed into a temporary folder appended to
# PYTHONPATH (the host's own JAX stays first), as scripts/bench_tpu.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.bench/eval-tpu}
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1
if ! "$python" -c 'import flax, scipy, av' 2>/dev/null; then
  site=$(mktemp -d /tmp/vidax-eval-site.XXXX)
  # shellcheck disable=SC2086  # VIDAX_BENCH_PIP_ARGS is a list of pip options
  PIP_CONFIG_FILE=${PIP_CONFIG_FILE:-/dev/null} "$python" -m pip install -q --only-binary=:all: --target "$site" \
    ${VIDAX_BENCH_PIP_ARGS:-} flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 \
    safetensors ftfy av gguf scipy > /tmp/vidax-eval-pip.log 2>&1 || tail -5 /tmp/vidax-eval-pip.log
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$site
fi
shim=$(mktemp -d /tmp/vidax-shim.XXXX)  # `vidax.*` from this checkout without installing it
mkdir -p "$shim/vidax"
for d in translator zoo cli eval conversion_specs; do ln -s "$PWD/$d" "$shim/vidax/$d"; done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$shim:$PWD
timeout 330 "$python" -m bench.accelerator.chip.eval_features --out "$out/eval.json" > "$out/eval.log" 2>&1
tail -5 "$out/eval.log"
timeout 150 "$python" -m bench.accelerator.chip.eval_features --precision default --networks clip_b32,dino,i3d \
  --out "$out/eval-default.json" > "$out/eval-default.log" 2>&1
tail -3 "$out/eval-default.log"
