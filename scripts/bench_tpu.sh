#!/usr/bin/env bash
# The TPU table as one command, on a TPU host where jax[tpu] is installed: no torch, vidax not installed.
#
#   bash scripts/bench_tpu.sh [BUDGET_S]          # default 540 s; every step is time-boxed, in priority order
#
# Steps, in priority order: the TPU tier (pytest -m tpu), MaxDiffusion's Wan transformer and vidax's at the
# same shapes called in turns in one process (only where .bench/maxdiffusion holds its source:
# scripts/prepare_maxdiffusion.sh), attention alone at the Wan and HunyuanVideo-1.5 480p shapes (every
# candidate block choice), vidax's DiTs at 480p (Wan2.1-14B blocks with cold and warm compile,
# HunyuanVideo-1.5 blocks, the whole Wan2.1-1.3B step), then the 720p blocks, each case in a process of its
# own (JAX's memory pool keeps the largest size it grew to), then every registered family's DiT at its native
# size (bench.accelerator.chip.every_dit) with the time left: each family's one-block program compiled in
# 40-130 s on the v5e (2026-12-06), so the whole table takes several calls of the device's 10 minutes.
# Output: $OUT (the device tool's folder) or .bench/tpu: tpu.md (the table), the JSON and logs.
# Python: $PYTHON or python3. Missing runtime packages (flax, ...) are installed into a temporary
# folder appended to PYTHONPATH, so the host's own JAX stays first: set PIP_INDEX_URL (or
# VIDAX_BENCH_PIP_ARGS, e.g. "--index-url file:///opt/pypi/simple") where PyPI is not reachable.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-540}
out=${OUT:-.bench/tpu}
mkdir -p "$out"
python=${PYTHON:-python3}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
step() { echo "[bench_tpu] $1 at $(( $(date +%s) - start )) s" ; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_CACHE_DIR=${VIDAX_CACHE_DIR:-/tmp/vidax-bench-tpu-cache}

if ! "$python" -c 'import flax, typer, rich, psutil' 2>/dev/null; then
  site=$(mktemp -d /tmp/vidax-bench-site.XXXX)
  # shellcheck disable=SC2086  # VIDAX_BENCH_PIP_ARGS is a list of pip options
  PIP_CONFIG_FILE=${PIP_CONFIG_FILE:-/dev/null} "$python" -m pip install -q --only-binary=:all: --target "$site" \
    ${VIDAX_BENCH_PIP_ARGS:-} flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 \
    safetensors ftfy av gguf einops pyyaml pytest > /tmp/vidax-bench-pip.log 2>&1 || tail -5 /tmp/vidax-bench-pip.log
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$site
fi
shim=$(mktemp -d /tmp/vidax-shim.XXXX)  # `vidax.*` from this checkout without installing it
mkdir -p "$shim/vidax"
for d in translator zoo cli conversion_specs; do ln -s "$PWD/$d" "$shim/vidax/$d"; done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$shim:$PWD
step "set up"

# the tier took 124 s of pytest on a warm host (run N) and more than 150 s as the first step of a cold one (run M)
VIDAX_TEST_TPU=1 timeout 200 "$python" -m pytest -m tpu tests/tpu -q -s -p no:cacheprovider --tb=line -rf \
  > "$out/tier.log" 2>&1
step "TPU tier"
if [ -d .bench/maxdiffusion ]; then  # the peer in the same process, called in turns with vidax (the issue's ratio first)
  timeout $(( $(left) > 200 ? 200 : $(left) )) "$python" -m bench.accelerator.side_by_side --shape wan14b_480p \
    --layers 1 --blocks 2048,4096,1024 --blocks 512,512,512 --vidax-always-own --rounds 5 \
    --out "$out/side.json" > "$out/side.log" 2>&1
  step "vidax and MaxDiffusion interleaved"
fi
timeout 120 "$python" -m vidax.zoo.compute.kernels.tpu_blocks 2,40,32760,32760,128 2,40,32760,512,128 \
  2,16,51275,51275,128,masked > "$out/sweep.log" 2>&1
step "attention alone"
# each case in a process of its own: JAX's pool keeps what the Wan 8-block case grew to, and the
# HunyuanVideo-1.5 program could not be loaded beside it (run I: 8.72 GB to reserve, 8.51 GB free)
for case in wan-480p hv15-480p wan13-480p; do
  [ "$(left)" -lt 60 ] && { step "skipped $case (budget)"; continue; }
  only=dit; [ "$case" = wan-480p ] && only=dit,compile
  VIDAX_NO_TPU_TUNING=1 timeout $(( $(left) > 110 ? 110 : $(left) )) "$python" -m bench.accelerator --profile real \
    --torch-device none --only "$only" --cases "$case" --budget 100 --out "/tmp/vidax-$case.md" \
    --json "$out/vidax-$case.json" --cache-dir "$VIDAX_CACHE_DIR" > "/tmp/vidax-$case.log" 2>&1
  step "vidax $case"
done
for case in wan-720p hv15-720p; do
  [ "$(left)" -lt 50 ] && { step "skipped $case (budget)"; continue; }
  VIDAX_NO_TPU_TUNING=1 timeout $(( $(left) > 80 ? 80 : $(left) )) "$python" -m bench.accelerator --profile real \
    --torch-device none --only dit --cases "$case" --budget 60 --out "/tmp/vidax-$case.md" \
    --json "$out/vidax-$case.json" --cache-dir "$VIDAX_CACHE_DIR" > "/tmp/vidax-$case.log" 2>&1
  step "vidax $case"
done
if [ "$(left)" -gt 200 ]; then  # every family's DiT at its native size, from the dry run's step programs
  timeout "$(left)" "$python" -m bench.accelerator.chip.every_dit all --out-dir /tmp/vidax-every-dit \
    --budget $(( $(left) - 15 )) --per-model 200 > "$out/every_dit.log" 2>&1
  cp /tmp/vidax-every-dit/every_dit.md "$out/" 2>/dev/null
  step "every family's DiT"
fi
"$python" -m bench.accelerator.tpu_table "$out" | tee "$out/tpu.md"
[ -f "$out/every_dit.md" ] && cat "$out/every_dit.md" | tee -a "$out/tpu.md"
