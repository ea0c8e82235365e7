#!/usr/bin/env bash
# Runs Q1-Q3 (the sixth session of 2026-12-06): what docs/TPU.md's "Next on the chip" lists, one device call each.
#   STEP=1: the HunyuanVideo-1.5 480p attention shape alone (every candidate's blocks), then the 720p DiT cases
#           (wan-720p, hv15-720p), each in a process of its own;
#   STEP=2/3: every_dit for two models not yet run (MODELS=a,b).
# Results land in $OUT (at most 8 files come back: logs and a tgz).
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_CACHE_DIR=/tmp/vc
BUDGET=${BUDGET:-570}
start=$(date +%s); left() { echo $(( BUDGET - ($(date +%s) - start) )); }
el() { echo "[runQ${STEP}] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
source bench/results/tpu-v5e-2026-12-06/host_setup.sh
el deps; { uptime; python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tail -1; git log -1 --format=%h 2>/dev/null; } | tee -a $OUT/run.log
mkdir -p /tmp/q
limit() { local l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
if [ "$STEP" = 1 ]; then
  t=$(limit 150); timeout $t python3 -m vidax.zoo.compute.kernels.tpu_blocks 2,16,51275,51275,128,masked > /tmp/q/blocks-hv15-480p.log 2>&1
  el "blocks rc=$?"
  for pair in wan-720p:150 hv15-720p:260; do
    case=${pair%%:*}; t=$(limit ${pair##*:}); [ "$t" -lt 60 ] && { el "$case skipped ($t s left)"; continue; }
    VIDAX_NO_TPU_TUNING=1 timeout $t python3 -m bench.accelerator --profile real --torch-device none --only dit \
      --cases $case --budget $(( t - 15 )) --out /tmp/q/vidax-$case.md > /tmp/q/vidax-$case.log 2>&1
    el "$case rc=$?"
  done
else
  t=$(limit 560); timeout $t python3 -m bench.accelerator.chip.every_dit all --out-dir /tmp/q/every --models "$MODELS" \
    --budget $(( t - 10 )) --per-model $(( (t - 10) / 2 )) > /tmp/q/every_dit.log 2>&1
  el "every_dit rc=$?"; python3 -m bench.accelerator.chip.every_dit table /tmp/q/every > /tmp/q/every_dit.md 2>&1
fi
tar czf $OUT/q.tgz -C /tmp q; cp /tmp/q/*.md $OUT/ 2>/dev/null; uptime | tee -a $OUT/run.log
