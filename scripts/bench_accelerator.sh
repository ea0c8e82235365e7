#!/usr/bin/env bash
# The accelerator benchmark (bench/accelerator) as one command with a time limit; its table goes to a file.
#
#   bash scripts/bench_accelerator.sh --prepare      # once, where pip can reach PyPI: the diffusers wheel
#                                                    # the GPU image lacks, into .bench/wheels (git-ignored)
#   bash scripts/bench_accelerator.sh [BUDGET_S] [ARGS...]
#                                                    # on the GPU/TPU host: measures for BUDGET_S seconds
#                                                    # (default 330), killed at BUDGET_S + 40
#
# Output: $OUT (when set, as on the device tool's machine) or .bench/out: accelerator.md (the table),
# accelerator.json (every figure), accelerator.log (the whole log), hlo_*.txt.gz and profile_*.tar.gz.
# The table is rewritten after every part, so a run stopped by the limit keeps what it finished.
# Python: $PYTHON, else .venv/bin/python, else python3 (the GPU image's, which has jax, flax and torch).
# ARGS go to `python -m bench.accelerator` (--only dit,compile --peak-tflops 989 --profile toy ...).
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=.bench/wheels
DIFFUSERS=diffusers==0.42.1  # the version the parity tests pin (pyproject.toml [test])

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$WHEELS"
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "$DIFFUSERS"
fi

budget=330
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then budget=$1; shift; fi
out=${OUT:-.bench/out}
mkdir -p "$out"
log="$out/accelerator.log"

python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi

{
  echo "[bench] $(date -u '+%Y-%m-%d %H:%M UTC') budget ${budget}s python $python"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null
  if ! "$python" -c 'import diffusers' 2>/dev/null && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    site=$(mktemp -d /tmp/vidax-bench-site.XXXX)
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$WHEELS"/*.whl \
      && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  "$python" -c 'import jax, flax; print("[bench] jax", jax.__version__, jax.devices(), "flax", flax.__version__)'
  # a fixed cache folder: empty on a fresh machine (the cold compile is measured), kept for a rerun on a warm one
  PYTHONUNBUFFERED=1 timeout --kill-after=10 $((budget + 40)) "$python" -m bench.accelerator \
    --budget "$budget" --out "$out/accelerator.md" --artifacts "$out" --cache-dir /tmp/vidax-bench-cache "$@"
  rc=$?
  echo "[bench] exit $rc$([ $rc = 124 ] && echo ' (time limit: the table holds the parts that finished)')"
  exit $rc
} 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ -f "$out/accelerator.md" ] && echo "[bench] table: $out/accelerator.md"
exit "$rc"
