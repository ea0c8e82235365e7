#!/usr/bin/env bash
# The TPU bench as device calls, each within one 10-minute call of a TPU host where jax with libtpu is installed
# (no torch; vidax is not installed: it runs from this checkout):
#
#   bash scripts/bench_tpu.sh kernels                  # attention kernels at the families' shapes; vidax beside
#                                                      # MaxDiffusion on the Wan2.1-14B 480p forward
#   bash scripts/bench_tpu.sh step                     # vidax beside MaxDiffusion on the Wan2.1-1.3B step; the tier
#   bash scripts/bench_tpu.sh dits-wan                 # every family's DiT at native size, in three groups
#   bash scripts/bench_tpu.sh dits-hunyuan-cogvideox   #   (bench.accelerator.chip.every_dit: each group compiles
#   bash scripts/bench_tpu.sh dits-ltx-cosmos          #   its programs at once, then runs them one by one)
#   bash scripts/bench_tpu.sh tier                     # the TPU test tier (pytest -m tpu) alone
#
# Every call writes its logs and JSON under $OUT (the device tool's folder; .bench/tpu/CALL elsewhere) and prints
# its table at the end. BUDGET (seconds, default 560) bounds the call; its steps are time-boxed, in priority order.
# `kernels` and `step` need MaxDiffusion's export in .bench/maxdiffusion (scripts/prepare_maxdiffusion.sh; carry it); its
# tiles: MD_CUSTOM (default 4096,1024,1024, the fewest bundles per logit of its custom kernel compiled for a v5e
# without a chip among 4864/1024/1024 (its default), 6400/2048/2048 (its v7 pick), 4096/2048/2048, 2048/4096/2048).
# TPU_LONG=KERNEL:Q,KV,KC sets vidax's attention for long keys in every call (VIDAX_TPU_ATTENTION_LONG), e.g.
# the kernel `kernels` timed fastest: TPU_LONG=exp2_bounded:2048,4096,1024 bash scripts/bench_tpu.sh dits-wan.
# TOY=1: the same steps at toy sizes on the CPU (`dits-toy` is wan-tiny), so that the script's CPU path is checked.
# Python: $PYTHON or python3. Runtime packages missing there are installed into /tmp/vidax-site, appended to
# PYTHONPATH (the host's jax stays first), from $VIDAX_BENCH_PIP_ARGS (default: the host's own index at
# /opt/pypi/simple when it exists).
set -uo pipefail
cd "$(dirname "$0")/.."
call=${1:-kernels}
budget=${BUDGET:-560}
out=${OUT:-.bench/tpu/$call}
mkdir -p "$out"
python=${PYTHON:-python3}
start=$(date +%s)
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }  # a step's limit: its own or what is left
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_CACHE_DIR=${VIDAX_CACHE_DIR:-/tmp/vidax-bench-tpu-cache}
[ -n "${TPU_LONG:-}" ] && export VIDAX_TPU_ATTENTION_LONG=$TPU_LONG

# the runtime packages, MaxDiffusion's and the tier's too, and `vidax.*` from this checkout (scripts/tpu_setup.sh)
# (it defines `left`: seconds of $BUDGET still to go; `step` is redefined here for this script's lines)
VIDAX_SETUP_EXTRA="orbax-checkpoint pytest" VIDAX_SETUP_CHECK="orbax.checkpoint, pytest" source scripts/tpu_setup.sh "$out"
step() { echo "[bench_tpu $call] $1 at $(( $(date +%s) - start )) s" | tee -a "$out/run.log"; }

# the shapes whose attention decides the families' blocks: Wan2.1-14B 480p self-attention, CogVideoX1.5-5B's joint
# attention (head dim 64), HunyuanVideo-1.5 480p's joint attention (text padding masked), then LTX-2's
# video-to-audio and audio-to-video cross-attention (its 4 guidance rows, head dim 64)
SHAPES="2,40,32760,32760,128 2,48,45106,45106,64 2,16,51275,51275,128,masked 4,32,13376,126,64 4,32,126,13376,64"
CHOICES="exp2:2048,4096,1024 exp2_bounded:2048,4096,1024 exp2_bounded:4096,2048,1024 exp2_bounded:1024,4096,1024"
MD_CUSTOM=${MD_CUSTOM:-4096,1024,1024}
VIDAX_EXP2=${VIDAX_EXP2:-exp2_bounded:2048,4096,1024}
toy=()
if [ "${TOY:-0}" = 1 ]; then
  export JAX_PLATFORMS=cpu
  SHAPES="1,2,300,300,64 1,2,200,700,128,masked"
  CHOICES="exp2:128,256,128 exp2_bounded:128,256,128"
  MD_CUSTOM=128,128,128 VIDAX_EXP2=exp2_bounded:128,256,128 toy=(--toy)
fi

side_by_side() {  # shape, layers, limit, json name, rounds
  [ -d .bench/maxdiffusion ] || { step "no .bench/maxdiffusion: MaxDiffusion skipped"; return; }
  local t layers=$2; t=$(cap "$3"); [ "$t" -lt 90 ] && { step "side by side $1 skipped ($t s left)"; return; }
  [ "${TOY:-0}" = 1 ] && layers=1
  # vidax at MaxDiffusion's splash blocks (the same kernel, tiles and chip), then vidax's exp2 kernel beside
  # MaxDiffusion's custom kernel with its fixed softmax bound, calls interleaved in one process
  timeout "$t" "$python" -m bench.accelerator.side_by_side "${toy[@]}" --shape "$1" --layers "$layers" --rounds "${5:-5}" \
    --blocks 2048,4096,1024 --peer "ulysses_custom_fixed_m:$MD_CUSTOM" --vidax-attention "$VIDAX_EXP2" \
    --out "$out/$4.json" > "$out/$4.log" 2>&1
  step "side by side $1, $2 layers: rc $?"
}

tables() {  # the side-by-side tables of this call
  for f in "$out"/side-*.log; do [ -f "$f" ] && { echo; echo "## $(basename "$f" .log)"; grep "^|\|^#" "$f"; }; done
}

case "$call" in
  kernels)
    t=$(cap 220)
    timeout "$t" "$python" -m vidax.zoo.compute.kernels.tpu_blocks --only $SHAPES $CHOICES > "$out/attention.log" 2>&1
    step "attention kernels: rc $?"
    cp "$VIDAX_CACHE_DIR/tpu-attention.json" "$out/" 2>/dev/null
    side_by_side wan14b_480p 1 290 side-wan14b-480p
    { echo "## attention alone"; grep -v "^vidax:" "$out/attention.log"; } > "$out/table.md"
    tables >> "$out/table.md"
    ;;
  step)
    side_by_side wan1.3b_480p 30 300 side-wan13b-step 3
    tables > "$out/table.md"
    if [ "$(left)" -gt 150 ]; then
      VIDAX_TEST_TPU=1 timeout "$(left)" "$python" -m pytest -m tpu tests/tpu -q -s -p no:cacheprovider --tb=line \
        -rf > "$out/tier.log" 2>&1
      step "TPU tier: rc $?"
      { echo; echo "## TPU tier"; tail -3 "$out/tier.log"; } >> "$out/table.md"
    fi
    ;;
  dits-*)
    group=${call#dits-}
    timeout "$(left)" "$python" -m bench.accelerator.chip.every_dit all --group "$group" --out-dir "$out/rows" \
      --budget $(( $(left) - 10 )) --workers "${WORKERS:-6}" > "$out/every_dit.log" 2>&1
    step "every_dit $group: rc $?"
    "$python" -m bench.accelerator.chip.every_dit table "$out/rows" > "$out/table.md" 2>&1
    ;;
  tier)
    VIDAX_TEST_TPU=1 timeout "$(cap 300)" "$python" -m pytest -m tpu tests/tpu -q -s -p no:cacheprovider --tb=line \
      -rf > "$out/tier.log" 2>&1
    step "TPU tier: rc $?"
    tail -3 "$out/tier.log" > "$out/table.md"
    ;;
  *)
    echo "unknown call $call: kernels, step, dits-wan, dits-hunyuan-cogvideox, dits-ltx-cosmos, tier" >&2
    exit 2 ;;
esac
uptime >> "$out/run.log"
cat "$out/table.md"
