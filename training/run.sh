#!/usr/bin/env bash
# The whole recipe, as run for the shipped weights (see training/README.md for the times).
# Stage 2 starts when stage 1's image phase has written its final encoder (training/out/vae_encoder),
# while stage 1's video phase (decoder only) goes on; both at the lowest CPU priority.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
nice -n 19 $PY -m training.train_vae --image-steps 400 --steps 480 --image-batch 12 --batch 4 --lr 2e-3 &
vae=$!
until [ -f training/out/vae_encoder/config.json ]; do sleep 10; done
nice -n 19 $PY -m training.train_dit --steps "${DIT_STEPS:-700}" --batch 32 --lr 1e-3
wait $vae
$PY -m training.export
$PY -m training.plot
$PY -m training.strip
