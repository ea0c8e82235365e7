#!/usr/bin/env bash
# run H (prepared for the next chip session, not run yet): settle run G's 3.6x. The same Wan2.1-14B 480p depth-1
# step (bench.accelerator.chip.every_dit) token-major (VIDAX_HEADS_MAJOR=0) and heads-major (=1), each in its own
# process, with XLA's memory-usage report of what ran; then vidax.train.bench's 1.3B LoRA step (issue 49 item 6).
# The host's jax must stay first on PYTHONPATH: /tmp/site is appended (a jax in it has no TPU backend).
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[runH] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
source "$(dirname "$0")/host_setup.sh"
el deps; python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tail -1 | tee -a $OUT/run.log
for hm in 0 1; do
  mkdir -p /tmp/dump$hm
  VIDAX_HEADS_MAJOR=$hm XLA_FLAGS=--xla_dump_to=/tmp/dump$hm timeout 170 python3 -m bench.accelerator.chip.every_dit one \
    wan2.1-t2v-14b@832x480x81 --out $OUT/wan14b_hm$hm.json > /tmp/hm$hm.log 2>&1
  grep "\[every_dit " /tmp/hm$hm.log | tee -a $OUT/run.log
  cat /tmp/dump$hm/*memory-usage-report* 2>/dev/null | head -60 > /tmp/report$hm.txt
  el "heads-major $hm"
done
tar czf $OUT/reports.tgz -C /tmp report0.txt report1.txt hm0.log hm1.log
timeout 240 python3 -m vidax.train.bench wan2.1-t2v-1.3b --height 480 --width 832 --frames 81 --rank 32 --steps 3 --out $OUT/train.json > $OUT/train.log 2>&1
tail -3 $OUT/train.log; el train
