"""`vidax-train`'s data (issue 63, item 3): aspect buckets at about one token count, each item at its nearest
bucket, images and clips mixed, `--repeats` per folder, `--frame-stride` and several windows per long clip,
`--caption-dropout`, and each step's rows from one bucket (pure NumPy: no model)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from PIL import Image

from vidax.train import data
from vidax.train.run import TrainError, TrainOptions


def test_buckets_hold_about_one_area_on_the_grid():
    buckets = data.aspect_buckets(480, 832, 16)
    assert (480, 832) in buckets and (832, 480) in buckets  # the asked size, and its portrait twin
    assert all(h % 16 == 0 and w % 16 == 0 for h, w in buckets)
    assert all(abs(h * w / (480 * 832) - 1) < 0.1 for h, w in buckets if min(h, w) >= 160)  # the same token count
    assert all(max(h / w, w / h) <= 4.0 for h, w in buckets)
    assert data.nearest_bucket(buckets, 1080, 1920) == (480, 832)  # 16:9 -> the 480p landscape bucket
    assert data.nearest_bucket(buckets, 1920, 1080) == (832, 480)
    square = data.nearest_bucket(buckets, 512, 512)
    assert abs(math.log(square[0] / square[1])) < 0.1


def test_windows_spread_over_a_long_clip():
    assert data.window_starts(100, 1, 17, 1) == (17, [0])
    frames, starts = data.window_starts(100, 2, 17, 3)  # 33 source frames a window: starts 0, 33, 67
    assert frames == 17 and starts == [0, 34, 67] and starts[-1] + 32 <= 99
    assert data.window_starts(20, 2, 17, 3) == (9, [0])  # 10 frames at stride 2: one window of 9
    assert data.window_starts(10, 1, 81, 4) == (9, [0])  # shorter than a window: one, of the most 1 + 4k frames
    assert data.window_starts(30, 1, 81, 1, step=8) == (25, [0])  # CogVideoX / LTX-2: 1 + 8k


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from vidax.zoo.video_io import write_mp4

    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    clips, stills = root / "clips", root / "stills"
    clips.mkdir(), stills.mkdir()
    write_mp4(clips / "long.mp4", rng.random((40, 36, 64, 3)).astype(np.float32), 16)  # wide, 40 frames
    (clips / "long.txt").write_text("a long wide clip")
    for name, (h, w) in {"tall": (64, 32), "wide": (32, 64)}.items():
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(stills / f"{name}.png")
        (stills / f"{name}.txt").write_text(f"a {name} picture")
    return clips, stills


def test_plan_mixes_images_and_windows_at_their_buckets(folders):
    clips, stills = folders
    items = data.find_items([clips, stills], [1, 3])
    assert [i.repeats for i in items] == [1, 3, 3]
    samples = data.plan_samples(items, data.Framing(32, 48, 9, grid=16, stride=2, windows=3))
    long = [s for s in samples if s.item.media.name == "long.mp4"]
    assert [(s.start, s.stride, s.frames) for s in long] == [(0, 2, 9), (12, 2, 9), (23, 2, 9)]
    assert {(s.height, s.width) for s in long} == {(data.nearest_bucket(data.aspect_buckets(32, 48, 16), 36, 64))}
    tall, wide = (next(s for s in samples if s.item.media.stem == n) for n in ("tall", "wide"))
    assert tall.frames == 1 and tall.height > tall.width and wide.width > wide.height
    pixels = data.pixels(long[1])
    assert pixels.shape == (1, 3, 9, long[1].height, long[1].width) and -1 <= pixels.min() <= pixels.max() <= 1
    fixed = data.plan_samples(items, data.Framing(32, 48, 9, buckets=False))
    assert {(s.height, s.width) for s in fixed} == {(32, 48)}


def encoded(shapes_and_weights):
    return [data.Encoded(np.zeros(shape, np.float32), {"text": np.full((3,), i, np.float32), "image": np.ones(2)})
            for i, shape in enumerate(shapes_and_weights)]


def test_rows_come_from_one_bucket_weighted_by_repeats():
    enc = encoded([(4, 3, 2, 4), (4, 3, 2, 4), (4, 1, 2, 4), (4, 3, 4, 2)])
    weights = [1, 1, 6, 2]
    draws = [data.batch_rows(enc, weights, 3, seed=5, step=s) for s in range(400)]
    for rows, _ in draws:
        assert len({enc[r].latents.shape for r in rows}) == 1  # one latent shape (bucket and frames) per batch
    firsts = np.bincount([rows[0] for rows, _ in draws], minlength=4) / len(draws)
    assert abs(firsts[2] - 0.6) < 0.07 and abs(firsts[0] - 0.1) < 0.05  # the image's folder counts 6 times
    assert data.batch_rows(enc, weights, 3, 5, 17) == data.batch_rows(enc, weights, 3, 5, 17)  # named by (seed, step)


def test_caption_dropout_swaps_the_text_for_the_empty_captions():
    enc = encoded([(4, 1, 2, 2)] * 5)
    dropped = [d for s in range(300) for d in data.batch_rows(enc, [1] * 5, 2, 0, s, dropout=0.25)[1]]
    assert abs(np.mean(dropped) - 0.25) < 0.05
    assert not any(d for s in range(50) for d in data.batch_rows(enc, [1] * 5, 2, 0, s)[1])
    empty = {"text": np.full((3,), -1, np.float32), "image": np.zeros(2)}
    batch = data.collate(enc, [1, 3], [False, True], empty, ("text",))
    assert batch["text"][0].tolist() == [1, 1, 1] and batch["text"][1].tolist() == [-1, -1, -1]
    assert batch["image"].tolist() == [[1, 1], [1, 1]]  # only the text keys drop
    assert batch["latents"].shape == (2, 4, 1, 2, 2)


@pytest.mark.parametrize("kw, message", [
    (dict(repeats=(1, 2, 3)), "--repeats takes one count"),
    (dict(caption_dropout=1.5), "--caption-dropout must be within [0, 1]"),
    (dict(windows=0), "--windows must be at least 1"),
    (dict(expert="middle"), "--expert must be one of high, low, both"),
    (dict(validation_sigmas=(0.5, 1.0)), "--validation-sigmas must be noise levels in [0, 1)"),
    (dict(remat="some"), "--remat must be one of full, attention"),
])
def test_bad_data_options_are_one_line(folders, tmp_path, kw, message):
    options = TrainOptions(model="wan-tiny", data=folders, out=tmp_path / "x.safetensors", **kw)
    with pytest.raises(TrainError, match=re.escape(message)):
        options.check()
