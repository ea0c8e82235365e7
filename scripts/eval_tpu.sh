#!/usr/bin/env bash
# vidax-eval's feature extraction on a TPU host as one command (jax[tpu] installed; no torch, vidax not installed):
#
#   bash scripts/eval_tpu.sh   # ~4-8 min: CLIP ViT-B/32, DINO ViT-B/16, I3D, CLIP ViT-L/14, then RAFT, at real sizes
#
# bench.accelerator.chip.eval_features, RAFT in a process of its own: 16 clips of 16 frames at 256x256 per
# network, random weights drawn on the device, fp32 at "highest" precision (the metrics' setting), then the same
# at the backend's default precision. Output: $OUT (the device tool's folder) or .bench/eval-tpu: eval.json,
# eval-raft.json, eval-default.json, the logs and run.log. Missing runtime packages are installed as
# scripts/bench_tpu.sh does (scripts/tpu_setup.sh: appended to PYTHONPATH, the host's own JAX stays first).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.bench/eval-tpu}
mkdir -p "$out"
# the runtime packages (scipy too) and `vidax.*` from this checkout, from the host's own index where it has one
VIDAX_SETUP_EXTRA="scipy" VIDAX_SETUP_CHECK="scipy" source scripts/tpu_setup.sh "$out"
# RAFT last and in its own box: on a3a1671 (2026-12-07) it ran past the ~190 s left after the others, and CLIP
# ViT-L/14, after it in one list, was never reached
timeout 200 "$python" -m bench.accelerator.chip.eval_features --networks clip_b32,dino,i3d,clip_l14 \
  --out "$out/eval.json" > "$out/eval.log" 2>&1
tail -4 "$out/eval.log"
step "highest precision done"
timeout 150 "$python" -m bench.accelerator.chip.eval_features --networks raft --out "$out/eval-raft.json" \
  > "$out/eval-raft.log" 2>&1
tail -1 "$out/eval-raft.log"
step "RAFT done"
timeout 100 "$python" -m bench.accelerator.chip.eval_features --precision default --networks clip_b32,dino,i3d \
  --out "$out/eval-default.json" > "$out/eval-default.log" 2>&1
tail -3 "$out/eval-default.log"
step "default precision done"
