"""Shared pieces of the training scripts: seeding, the run folder, batches of rendered clips, loss logs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from wan_tiny_recipe import data

RUN = Path(os.environ.get("TINY_RUN_DIR", Path(__file__).parent / "out"))


def setup_torch(seed: int):
    import torch

    torch.set_num_threads(int(os.environ.get("TINY_THREADS", "1")))  # 1 thread: the cores are shared
    torch.manual_seed(seed)
    return torch


def clip_batch(rng: np.random.Generator, combos: list, count: int, frames: int,
               crop: int = data.SIZE, chosen: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`[B, 3, frames, crop, crop]` in [-1, 1] and a `[B, 1, frames, crop, crop]` shape mask, at random
    places in time, across the motion and (`crop` < 64) in the frame, kept near the shape. The drawn
    combinations are appended to `chosen` when given."""
    videos, masks = [], []
    for _ in range(count):
        combo = combos[rng.integers(len(combos))]
        if chosen is not None:
            chosen.append(combo)
        clip = data.render(combo, float(rng.uniform(14, 50)))
        start = int(rng.integers(0, data.FRAMES - frames + 1))
        clip = clip[start:start + frames]
        if crop < data.SIZE:  # a window around the shape's first position, so most crops hold some of it
            top, left = (int(np.clip(rng.integers(16, 48) - crop // 2, 0, data.SIZE - crop)) for _ in range(2))
            clip = clip[:, top:top + crop, left:left + crop]
        background = np.asarray(data.PALETTE[combo.background], np.float32) / 255
        masks.append(np.abs(clip - background).sum(-1, keepdims=True) > 0.01)
        videos.append(clip)
    to_torch_layout = lambda a: np.ascontiguousarray(np.stack(a).transpose(0, 4, 1, 2, 3))
    return to_torch_layout(videos) * 2 - 1, to_torch_layout(masks).astype(np.float32)


class LossLog:
    """Appends `{"step", "loss", "seconds"}` lines to a JSONL file (read back by plot.py)."""

    def __init__(self, path: Path, resume: bool):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.start = time.time()
        self.offset = 0.0
        if resume and path.is_file():
            lines = path.read_text().splitlines()
            self.offset = json.loads(lines[-1])["seconds"] if lines else 0.0
        elif path.is_file():
            path.unlink()

    def add(self, step: int, **values: float) -> None:
        row = {"step": step, "seconds": round(self.offset + time.time() - self.start, 1),
               "cpu_seconds_this_run": round(time.process_time(), 1), **values}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def each_step_once(rows: list[dict]) -> list[dict]:
    """A loss log's rows with each step once: a resumed run logs again the steps after its last
    checkpoint, and its rows are the ones kept."""
    return list({row["step"]: row for row in rows}.values())
