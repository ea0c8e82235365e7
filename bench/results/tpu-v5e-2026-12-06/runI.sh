#!/usr/bin/env bash
# run I (and M: `RUN=M bash runI.sh`): `scripts/bench_tpu.sh` (the TPU tier, attention alone, vidax's 480p DiTs, vidax and MaxDiffusion called in
# turns in one process, the 720p blocks) on this tree, its folder packed into $OUT/bench.tgz (the device tool brings
# back at most 8 files). MaxDiffusion's source travels as .bench/maxdiffusion (scripts/prepare_maxdiffusion.sh).
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_CACHE_DIR=/tmp/vc
start=$(date +%s); el() { echo "[run${RUN:-I}] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
source "$(dirname "$0")/host_setup.sh"
el deps; { uptime; python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tail -1; } | tee -a $OUT/run.log
OUT=/tmp/bt timeout $(( ${BUDGET:-545} - ($(date +%s) - start) )) bash scripts/bench_tpu.sh $(( ${BUDGET:-545} - 15 - ($(date +%s) - start) )) > /tmp/bt.log 2>&1
el bench_tpu; cp /tmp/bt.log $OUT/bench_tpu.log; cp /tmp/bt/tpu.md $OUT/ 2>/dev/null
tar czf $OUT/bench.tgz -C /tmp bt vidax480.log vidax-wan-720p.log vidax-hv15-720p.log 2>/dev/null; uptime | tee -a $OUT/run.log
