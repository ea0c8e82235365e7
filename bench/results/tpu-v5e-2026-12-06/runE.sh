#!/usr/bin/env bash
# run E: Wan2.1-1.3B end to end at its native size (480x832, 81 frames) from a synthetic real-size folder
# (`vidax-convert --synthetic`, UMT5-XXL included): a cold run (empty compile cache, 2 steps) through `vidax-gen`
# (bench.accelerator.chip.native_run records the device's peak), then `--dry-run` compiled for the chip.
# runF.sh, on the same machine while it stays warm, is the warm run at the model's 50 steps.
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1 VIDAX_CACHE_DIR=/tmp/vc
start=$(date +%s); el() { echo "[runE] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
source "$(dirname "$0")/host_setup.sh"
el deps; { uptime; df -h /tmp | tail -1; } 2>&1 | tee -a $OUT/run.log
[ -f /tmp/w13/vidax_model.json ] || timeout 150 python3 -c 'from vidax.cli import convert_main; convert_main()' wan2.1-t2v-1.3b --synthetic --out /tmp/w13 > $OUT/convert.log 2>&1
tail -2 $OUT/convert.log; du -sh /tmp/w13 | tee -a $OUT/run.log; el synthetic
timeout 330 python3 -m bench.accelerator.chip.native_run --json $OUT/cold.json -- wan2.1-t2v-1.3b --weights /tmp/w13 --prompt "a cat walks on the grass" --steps 2 --out /tmp/w13_cold.mp4 > $OUT/cold.log 2>&1
tail -4 $OUT/cold.log; el "cold run, 2 steps"
timeout 120 python3 -c 'from vidax.cli import gen_main; gen_main()' wan2.1-t2v-1.3b --weights /tmp/w13 --dry-run --devices 1 --device-memory 15.75 > $OUT/dry_run.log 2>&1
tail -12 $OUT/dry_run.log; el "dry run (compiled for the chip, nothing allocated)"
