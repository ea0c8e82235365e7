#!/usr/bin/env bash
# The recipe exactly as the shipped weights were trained: the runs below, in order, each resuming
# from the last one's checkpoint (model, optimizer, step) in training/out/. Each step draws its batch
# from (seed, step), so the segments reproduce one run; the VAE's flags changed between segments as
# its recorded run was steered (README.md in this folder says why). Low CPU priority throughout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=".venv/bin/python"
VAE="nice -n 15 $PY -m training.train_vae"
DIT="nice -n 15 $PY -m training.train_dit"

# stage 1, encoder and decoder on single 64x64 frames
$VAE --image-steps 300 --steps 400 --image-batch 12 --batch 4 --lr 2e-3 --stop 200
$VAE --image-steps 400 --steps 480 --image-batch 12 --batch 4 --lr 2e-3 --stop 400
# ... on 32x32 windows (a quarter of the cost per step)
$VAE --image-steps 1000 --steps 1250 --image-batch 16 --crop 32 --batch 4 --lr 3e-3 --stop 875
# PCA head at step 875, encoder frozen from here on (training/out/vae_encoder); the decoder goes on
$VAE --image-steps 875 --video-start 1300 --steps 1450 --image-batch 16 --crop 32 --batch 4 --lr 3e-3 --stop 1350
# decoder: more single frames, then 9-frame clips
$VAE --image-steps 875 --video-start 1650 --steps 1720 --image-batch 16 --crop 32 --batch 4 --lr 5e-3
$VAE --image-steps 875 --video-start 1720 --steps 1820 --image-batch 16 --crop 32 --batch 4 --lr 3e-3

# stage 2 (needs only training/out/vae_encoder, so it may start at the VAE's step 875)
$DIT --steps 1500 --batch 16 --lr 2e-3 --shape-weight 3

$PY -m training.export
$PY -m training.eval      # held-out counts of the exported model, by the semantic test's path
$PY -m training.plot
$PY -m training.strip
