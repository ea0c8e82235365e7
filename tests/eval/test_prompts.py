"""`vidax-gen MODEL --prompts FILE --out-dir DIR` (a clip per prompt and seed, sidecars, resumable) and VBench's
prompt list by name, so that `vidax-gen ... --prompts vbench && vidax-eval DIR` is the whole loop."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vidax.cli.gen import app as gen_app
from vidax.eval import EvalOptions, evaluate
from vidax.zoo import api
from vidax.zoo.errors import PipelineError


def test_vbench_prompt_lists_come_from_the_installed_package():
    everything = api.read_prompts("vbench")
    assert len(everything) == 946  # VBench 0.1.5's VBench_full_info.json
    static = api.read_prompts("vbench:temporal_flickering")
    assert 0 < len(static) < len(everything) and set(static) <= set(everything)
    with pytest.raises(PipelineError, match="no such VBench dimension"):
        api.read_prompts("vbench:sharpness")


def test_prompt_files_names_and_resuming(tmp_path, monkeypatch):
    (tmp_path / "p.txt").write_text("A red circle, moving left!\n# not a prompt\n\nsecond\n")
    items = api.batch_outputs(api.read_prompts(str(tmp_path / "p.txt")), [0, 3], tmp_path / "out")
    assert [(p, s, o.name) for p, s, o in items] == [
        ("A red circle, moving left!", 0, "0000-a-red-circle-moving-left-s0.mp4"),
        ("A red circle, moving left!", 3, "0000-a-red-circle-moving-left-s3.mp4"),
        ("second", 0, "0001-second-s0.mp4"), ("second", 3, "0001-second-s3.mp4")]
    calls = []

    def fake_generate(options, progress=None, *, cache=None):
        calls.append((options.prompt, options.seed, options.out, cache))
        options.out.parent.mkdir(exist_ok=True)
        options.out.write_bytes(b"video")
        options.out.with_suffix(".json").write_text("{}")

    monkeypatch.setattr(api, "generate", fake_generate)
    from vidax.zoo.generator.options import GenerateOptions

    options = GenerateOptions(model="wan-tiny", prompt="")
    items[1][2].parent.mkdir()
    items[1][2].write_bytes(b"done before")
    items[1][2].with_suffix(".json").write_text("{}")  # a finished clip of an interrupted batch
    seen = []
    api.generate_batch(options, items, report=lambda i, n, path, skipped: seen.append((i, n, skipped)))
    assert [(p, s) for p, s, _, _ in calls] == [("A red circle, moving left!", 0), ("second", 0), ("second", 3)]
    assert len({id(c) for *_, c in calls}) == 1  # one StageCache: the weights placed once
    assert seen == [(1, 4, False), (2, 4, True), (3, 4, False), (4, 4, False)]


def test_the_whole_loop_on_the_embedded_model(tmp_path):
    (tmp_path / "p.txt").write_text("a red circle moves left on a blue background\n")
    result = CliRunner().invoke(gen_app, ["wan-tiny", "--prompts", str(tmp_path / "p.txt"), "--seeds", "3,4",
                                          "--out-dir", str(tmp_path / "clips"), "--steps", "1", "--frames", "16"])
    assert result.exit_code == 0, result.output
    sidecars = sorted((tmp_path / "clips").glob("*.json"))
    assert [json.loads(s.read_text())["seed"] for s in sidecars] == [3, 4]
    # the batch's clips run 17 frames for --frames 16, as WanPipeline runs them: said once, not per clip
    assert result.output.replace("\n", "").count("note: wan-tiny runs --frames 16 as 17") == 1, result.output
    scores = evaluate(EvalOptions(generated=tmp_path / "clips", metrics=("temporal_flickering",), no_cache=True))
    assert set(scores.per_clip["temporal_flickering"]) == {s.stem for s in sidecars}


def test_prompts_needs_out_dir_and_no_prompt(tmp_path):
    for args in (["--prompts", "vbench"], ["--prompts", "vbench", "--prompt", "x", "--out-dir", str(tmp_path)]):
        result = CliRunner().invoke(gen_app, ["wan-tiny", *args])
        assert result.exit_code == 2 and "--prompts takes --out-dir and no --prompt" in result.output
