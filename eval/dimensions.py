"""VBench's dimensions and CLIP score, from per-frame features (or frames), as the `vbench` package computes them.

Each function returns a clip's score and what the overall score pools: VBench averages the consistency
dimensions over frame pairs of all clips (not over clips), the others over clips.

- subject / background consistency (`vbench.subject_consistency`, `background_consistency`): features
  L2-normalised; for each frame i >= 1, the mean of max(0, cos(f[i-1], f[i])) and max(0, cos(f[0], f[i]));
  a clip scores the mean over its i, the dimension the sum over all clips' pairs divided by their count.
- temporal flickering (`vbench.temporal_flickering`): (255 - mean over consecutive frame pairs of the mean
  absolute difference of their 8-bit pixels) / 255. VBench evaluates it on the clips of its static prompts.
- aesthetic quality (`vbench.aesthetic_quality`): LAION's score of each frame's normalised CLIP ViT-L/14
  features, divided by 10, averaged over the clip.
- CLIP score (as torchmetrics' `CLIPScore`, per frame): 100 * max(0, cos(image, text)), averaged over the clip.
- dynamic degree (`vbench.dynamic_degree`): frames taken every round(fps / 8) (at least 1), RAFT's flow between
  consecutive ones (each frame padded to a multiple of 8), a pair's score the mean of its largest 5% flow
  magnitudes; a clip moves when at least round(4 * frames / 16) scores pass 6 * min(H, W) / 256 (Python's
  rounding, half to even, as VBench's); the dimension is the share of clips that move.
"""

from __future__ import annotations

import numpy as np

NORMALIZE_EPS = 1e-12  # torch.nn.functional.normalize


def normalised(features: np.ndarray) -> np.ndarray:
    x = np.asarray(features, np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), NORMALIZE_EPS)


def consistency(features: np.ndarray) -> tuple[float, float, int]:
    """(clip score, sum over its frame pairs, pair count) from per-frame features `[F, D]` (F >= 2)."""
    f = normalised(features).astype(np.float64)
    if f.shape[0] < 2:
        raise ValueError("consistency needs at least 2 frames")
    previous = np.maximum(0.0, np.sum(f[:-1] * f[1:], axis=-1))
    first = np.maximum(0.0, f[1:] @ f[0])
    total = float(np.sum((previous + first) / 2))
    return total / (f.shape[0] - 1), total, f.shape[0] - 1


def temporal_flickering(frames: np.ndarray) -> float:
    """A clip's score from its uint8 frames `[F, H, W, 3]` (F >= 2)."""
    x = np.asarray(frames, np.float32)
    if x.shape[0] < 2:
        raise ValueError("temporal flickering needs at least 2 frames")
    per_pair = np.abs(x[1:] - x[:-1]).reshape(x.shape[0] - 1, -1).mean(axis=1)
    return float((255.0 - np.mean(per_pair)) / 255.0)


def aesthetic_quality(scores: np.ndarray) -> float:
    """A clip's score from its frames' LAION scores `[F]`."""
    return float(np.mean(np.asarray(scores, np.float32) / 10))


def clip_score(image_features: np.ndarray, text_features: np.ndarray) -> float:
    """A clip's CLIP score from its frames' image features `[F, D]` and its prompt's text features `[D]`."""
    cos = normalised(image_features).astype(np.float64) @ normalised(text_features).astype(np.float64)
    return float(np.mean(np.maximum(100.0 * cos, 0.0)))


def frame_interval(fps: float | None) -> int:
    """VBench's sampling of frames for dynamic degree: every round(fps / 8)-th, at least every one."""
    return 1 if fps is None else max(1, round(fps / 8))


def dynamic_degree(scores, height: int, width: int, frames: int) -> bool:
    """Whether a clip moves, from its pair scores (VBench's `set_params` and `check_move`, including that a
    needed count of 0 makes any clip with a pair move)."""
    threshold = 6.0 * (min(height, width) / 256.0)
    needed = round(4 * (frames / 16.0))
    count = 0
    for score in scores:
        count += score > threshold
        if count >= needed:
            return True
    return False
