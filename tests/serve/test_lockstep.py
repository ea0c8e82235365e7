"""What process 0 announces of a job's files (`vidax.serve.lockstep`), read back as a following process reads
it: one file, a repeatable flag's files in their order, a folder of frames, each under its own name (readers go
by suffix: `.npy`, a frame folder's PNGs), with the same bytes. Through JSON, as the key-value store carries it."""

from __future__ import annotations

import json
from pathlib import Path

from vidax.serve.lockstep import _options, job_message
from vidax.zoo.generator.options import GenerateOptions


def test_a_jobs_files_reach_the_other_processes_by_name_and_order(tmp_path):
    here = tmp_path / "uploads"
    (here / "video").mkdir(parents=True)
    for i in (1, 0, 2):
        (here / "video" / f"{i:05d}.png").write_bytes(b"frame %d" % i)
    files = {"mask.npy": b"mask", "reference_images-0.png": b"second", "reference_images-1.png": b"first",
             "image.png": b"image"}
    for name, data in files.items():
        (here / name).write_bytes(data)
    refs = (here / "reference_images-1.png", here / "reference_images-0.png")
    options = GenerateOptions(model="wan2.1-vace-1.3b", prompt="p", image=here / "image.png", out=here / "v.npy",
                              extra={"video": here / "video", "mask": here / "mask.npy", "reference_images": refs,
                                     "conditioning_scale": "0.5"})
    message = json.loads(json.dumps(job_message(options)))
    there = _options(GenerateOptions, message, tmp_path / "follower")
    assert there.extra["conditioning_scale"] == "0.5" and Path(there.out).suffix == ".npy"
    assert there.image.name == "image.png" and there.image.read_bytes() == b"image"
    assert there.extra["mask"].name == "mask.npy" and there.extra["mask"].read_bytes() == b"mask"
    video = there.extra["video"]
    assert video.is_dir() and [(p.name, p.read_bytes()) for p in sorted(video.iterdir())] == [
        (f"{i:05d}.png", b"frame %d" % i) for i in range(3)]
    assert [(p.name, p.read_bytes()) for p in there.extra["reference_images"]] == [
        ("reference_images-1.png", b"first"), ("reference_images-0.png", b"second")]
    assert not str(there.extra["video"]).startswith(str(here))
