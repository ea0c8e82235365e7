#!/usr/bin/env bash
# One model's video on a TPU host made as a user makes it, and the table row README shows for it:
#
#   bash scripts/tpu_e2e.sh MODEL [HEIGHTxWIDTHxFRAMES] [STEPS]      e.g. bash scripts/tpu_e2e.sh wan2.1-t2v-1.3b
#
# 1. `vidax-convert MODEL --synthetic` writes real-size weights on the host (random values; kept between calls in
#    $E2E_DIR, so a second call on the same machine converts nothing);
# 2. `vidax-gen MODEL --weights DIR` with an empty compile cache: the cold run (a fresh host's first video);
# 3. the same command in a second process over that cache: the warm run (WARM_STEPS steps, default STEPS);
# 4. python -m bench.accelerator.chip.e2e_table: wall time by stage, seconds per step warm, programs compiled and
#    their seconds cold and warm, time from process start to the first denoise step, peak HBM, host peak RSS,
#    the layout chosen; as JSON and as a markdown row.
# The model's native size, frames and steps unless given. Everything goes under $OUT (the device tool's folder;
# .bench/tpu/e2e elsewhere): run.log, logs.tgz (cold.log, warm.log), cold/warm-programs.txt (each program and its
# seconds, slowest first), cold.json / warm.json (vidax-gen's output, sidecar
# and process figures), table.md, e2e.json. Runtime packages missing on the host are installed as scripts/tpu_setup.sh says.
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bash scripts/tpu_e2e.sh MODEL [HEIGHTxWIDTHxFRAMES] [STEPS]}
size=${2:-}
steps=${3:-}
out=${OUT:-.bench/tpu/e2e}
work=${E2E_DIR:-/tmp/vidax-e2e}
mkdir -p "$out" "$work"
source scripts/tpu_setup.sh "$out"

flags=(--prompt "a red fox runs through fresh snow at dawn, cinematic" --seed 0)
if [ -n "$size" ]; then
  IFS=x read -r height width frames <<< "$size"
  flags+=(--height "$height" --width "$width" --frames "$frames")
fi
[ -n "$steps" ] && flags+=(--steps "$steps")
weights="$work/$model"

step "convert $model (synthetic)"
/usr/bin/time -v "$python" -c 'import sys; from vidax.cli import convert_main; sys.argv[0] = "vidax-convert"; convert_main()' \
  "$model" --synthetic --out "$weights" > "$work/convert.log" 2>&1 || { tail -20 "$work/convert.log"; exit 1; }
grep -E "Maximum resident|Elapsed" "$work/convert.log" | tee -a "$out/run.log"

# one vidax-gen process: its sidecar, when it started and how long it ran, its peak RSS (from /usr/bin/time)
generate() {  # NAME [extra flags...]
  local name=$1; shift
  local began; began=$(date +%s.%N)
  /usr/bin/time -v "$python" -c 'import sys; from vidax.cli import gen_main; sys.argv[0] = "vidax-gen"; gen_main()' \
    "$model" --weights "$weights" "${flags[@]}" "$@" --out "$work/$name.mp4" > "$out/$name.log" 2>&1
  local code=$?
  "$python" -m bench.accelerator.chip.e2e_table record --name "$name" --began "$began" --code "$code" \
    --sidecar "$work/$name.json" --time-log "$out/$name.log" --json "$out/$name.json"
  cp "$out/$name.json" "$work/$name.record.json"  # for a later call's table (RUNS=warm)
  # each program the process obtained (JAX_LOG_COMPILES), slowest first: its seconds, a compile or a load
  grep -E "Finished XLA compilation" "$out/$name.log" | sed -E 's/.*compilation of (.*) in ([0-9.]+) sec.*/\2 \1/' \
    | sort -rn > "$out/$name-programs.txt"
  grep -c "Persistent compilation cache hit" "$out/$name.log" | sed 's/^/persistent cache hits: /' >> "$out/$name-programs.txt"
  tail -3 "$out/$name.log" | tee -a "$out/run.log"
}

# every program named in the logs, and why a program was not found in the persistent cache (or not written to it)
export VIDAX_CACHE_DIR="$work/compile-cache" JAX_LOG_COMPILES=1 JAX_EXPLAIN_CACHE_MISSES=1
runs=${RUNS:-cold warm}  # RUNS=warm: a warm run alone, over the cache an earlier call on this machine left
if [[ " $runs " == *" cold "* ]]; then
  rm -rf "$VIDAX_CACHE_DIR"
  step "cold run"
  generate cold
  # what the cold run left in the persistent cache for the DiT's step (a warm process that compiles it again: why)
  ls -l "$VIDAX_CACHE_DIR" | grep -E "resident_prediction|step" | tee -a "$out/run.log"
fi
if [[ " $runs " == *" warm "* ]]; then
  step "warm run"
  if [ -n "${WARM_STEPS:-}" ]; then generate warm --steps "$WARM_STEPS"; else generate warm; fi
  grep -c "Finished XLA compilation" "$out/warm.log" | sed 's/^/warm XLA compilations logged: /' | tee -a "$out/run.log"
fi
[ -f "$out/cold.json" ] || cp "$work/cold.record.json" "$out/cold.json" 2>/dev/null
# the processes' whole logs in one archive (the device tool brings back a few files per call)
tar czf "$out/logs.tgz" -C "$out" $(cd "$out" && ls cold.log warm.log 2>/dev/null) && rm -f "$out/cold.log" "$out/warm.log"
[ -f "$out/cold.json" ] && [ -f "$out/warm.json" ] || exit 0
step "table"
"$python" -m bench.accelerator.chip.e2e_table table --model "$model" --cold "$out/cold.json" --warm "$out/warm.json" \
  --markdown "$out/table.md" --json "$out/e2e.json" | tee -a "$out/run.log"
