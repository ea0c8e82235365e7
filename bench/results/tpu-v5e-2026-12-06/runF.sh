#!/usr/bin/env bash
# run F (after runE.sh on the same warm machine): Wan2.1-1.3B at its defaults (480x832, 81 frames, 50 steps),
# compile cache warm, through `vidax-gen` (bench.accelerator.chip.native_run).
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1 VIDAX_CACHE_DIR=/tmp/vc
source "$(dirname "$0")/host_setup.sh"
uptime | tee -a $OUT/run.log
timeout 560 python3 -m bench.accelerator.chip.native_run --json $OUT/warm.json -- wan2.1-t2v-1.3b --weights /tmp/w13 --prompt "a cat walks on the grass" --out /tmp/w13.mp4 > $OUT/warm.log 2>&1
tail -4 $OUT/warm.log
