"""Wan VACE's uploads on two processes: each host keeps its own copy of a job's files, as vidax-serve's
follower writes the bytes process 0 announces under its own data folder (`serve.lockstep`), so the processes
must agree on the files' contents, not their paths.

One launch of two processes (one CPU device each, sp=2 across them) runs two jobs of the tiny VACE pipeline
(`tests/wan_vace/test_pipeline.py`'s, converted): a control clip as a folder of PNG frames, a mask clip and two
reference images, process 1 reading its unpacked copies; then the same job with one reference image of other
bytes on process 1. The first job's frames equal this process's run of the same layout; the second stops both
processes before sampling with one line naming the reference images. (When the check compared paths, the
first job stopped both on `extra.reference_images`, the two hosts' paths, and a frame folder, unreadable as a
file, was not compared at all.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.multihost.launch import error_line, launch
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

MODEL = "wan2.1-vace-1.3b"
RUN = dict(model=MODEL, prompt="a red kite over a grey sea", negative_prompt="blurry", height=32, width=48, frames=5,
           steps=2, guidance=4.0, dtype="float32", compile_cache=False, sp=2)


@pytest.fixture(scope="module")
def vace_job(tmp_path_factory):
    """The converted tiny VACE pipeline and the job's files."""
    from PIL import Image

    from tests.wan_vace.test_pipeline import _box_mask, _clip, _reference, _save_folder
    from vidax.translator.models import ConvertOptions, convert_model

    root = tmp_path_factory.mktemp("multihost_vace")
    _reference(root / "model")
    convert_model(ConvertOptions(MODEL, source=str(root / "model"), out=root / "converted", dtype="float32"))
    _save_folder(_clip(0), root / "frames")
    np.save(root / "mask.npy", _box_mask(inner=True))
    rng = np.random.default_rng(4)
    for name in ("ref_a", "ref_b", "ref_other"):
        Image.fromarray(rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)).save(root / f"{name}.png")
    np.save(root / "latents.npy", np.random.default_rng(5).standard_normal((1, 16, 4, 4, 6)).astype(np.float32))
    files = {"video": str(root / "frames"), "mask": str(root / "mask.npy"),
             "reference_images": [str(root / "ref_a.png"), str(root / "ref_b.png")]}
    return root, {**RUN, "weights": str(root / "converted"), "latents": str(root / "latents.npy")}, files


def test_processes_agree_on_upload_contents_not_paths(vace_job, tmp_path):
    root, base, files = vace_job
    other = {**files, "reference_images": [files["reference_images"][0], str(root / "ref_other.png")]}
    cases = {"same": {**base, "extra_files": files, "unpacked_on_process": 1},
             "other_bytes": {**base, "extra_files": files, "unpacked_on_process": 1,
                             "on_process": {"1": {"extra_files": other}}}}
    results, _ = launch(cases, tmp_path, 1, timeout=300)
    for code, output in results:
        assert code == 1, output[-4000:]  # the second job stops both
        line = error_line(output)
        assert "the processes were not given the same run: extra.reference_images is" in line, line
        assert "on process 1" in line and "sha256:" in line, line
    assert (tmp_path / "same.npy").exists() and not (tmp_path / "other_bytes.npy").exists()
    assert any((tmp_path / "same.uploads.p1").rglob("*.png"))  # process 1 read its own copies

    extra = {"video": Path(files["video"]), "mask": Path(files["mask"]),
             "reference_images": tuple(map(Path, files["reference_images"]))}
    expected = generate(GenerateOptions(**{**base, "latents": Path(base["latents"])}, extra=extra,
                                        out=tmp_path / "one.npy"))
    np.testing.assert_allclose(np.load(tmp_path / "same.npy"), expected.frames, atol=1e-6, rtol=0)


def test_file_contents_name_files_folders_and_lists_by_their_bytes(tmp_path):
    from vidax.zoo.compute.distributed import file_contents

    for host in ("a", "b"):
        (tmp_path / host / "frames").mkdir(parents=True)
        for i in range(3):
            (tmp_path / host / "frames" / f"{i}.png").write_bytes(bytes([i]) * 9)
    a, b = file_contents(tmp_path / "a" / "frames"), file_contents(tmp_path / "b" / "frames")
    assert a == b and a.startswith("folder sha256:")
    (tmp_path / "b" / "frames" / "2.png").write_bytes(b"x")
    assert file_contents(tmp_path / "b" / "frames") != a
    pair = (tmp_path / "a" / "frames" / "0.png", tmp_path / "a" / "frames" / "1.png")
    assert file_contents(pair) == [file_contents(p) for p in pair] and file_contents(pair)[0] != file_contents(pair)[1]
    assert file_contents("a prompt") == "a prompt" and file_contents(()) == ()
