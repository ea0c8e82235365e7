"""`vidax-eval`: one library call behind flags, a table, JSON written whole, one-line errors before any work,
features cached by content (a second run reads them and scores the same)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
import tiny  # noqa: E402

from vidax.cli.eval import app
from vidax.eval import EvalOptions, evaluate
from vidax.zoo.video_io import write_frames


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    tiny.save_clip(tiny.tiny_clip(seed=7), root / "weights", torchscript=False)
    rng = np.random.default_rng(0)
    for i in range(2):
        write_frames(root / "clips" / f"c{i}.npy", rng.uniform(0, 1, (3, 24, 40, 3)).astype(np.float32), fps=8)
    (root / "clips" / "c0.json").write_text(json.dumps({"prompt": "from the sidecar"}))
    return root


def test_scores_table_json_and_cache(folders, tmp_path):
    out, cache = tmp_path / "scores.json", tmp_path / "cache"
    args = (folders / "clips", "--metrics", "background_consistency,temporal_flickering", "--weights", folders / "weights",
            "--out", out, "--cache-dir", cache, "--dp", 2, "--batch", 2)
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    assert "background_consistency" in first.output and "temporal_flickering" in first.output
    written = json.loads(out.read_text())
    assert set(written["per_clip"]["background_consistency"]) == {"c0", "c1"}
    assert len(list(cache.glob("*.npy"))) == 2  # one feature file per clip
    stamps = {p: p.stat().st_mtime_ns for p in cache.glob("*.npy")}
    again = evaluate(EvalOptions(generated=folders / "clips", metrics=("background_consistency",),
                                 weights=folders / "weights", cache=cache, dp=1, batch=3))
    assert again.scores["background_consistency"] == written["scores"]["background_consistency"]  # read, not recomputed
    assert {p: p.stat().st_mtime_ns for p in cache.glob("*.npy")} == stamps


@pytest.mark.parametrize("args, message", [
    (("--metrics", "fvd"), "fvd needs --reference"),
    (("--metrics", "dynamic_degree", "--weights", "{weights}"), "no weights for RAFT"),
    (("--metrics", "sharpness"), "unknown metric 'sharpness'"),
    (("--metrics", "clip_score", "--weights", "{weights}"), "clip_score needs each clip's prompt"),
    (("--metrics", "aesthetic_quality", "--weights", "{weights}"), "no weights for CLIP ViT-L/14"),
    (("--metrics", "temporal_flickering", "--out", "{tmp}/scores.txt"), "--out must end in .json"),
    (("--metrics", "background_consistency"), "need --weights"),
])
def test_user_errors_are_one_line_and_write_nothing(folders, tmp_path, args, message):
    args = [a.format(weights=folders / "weights", tmp=tmp_path) for a in args]
    result = _invoke(folders / "clips", *args, "--no-cache")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_an_empty_folder_is_refused(tmp_path):
    result = _invoke(tmp_path, "--metrics", "temporal_flickering")
    assert result.exit_code == 1 and "no clips" in result.output


def test_vidax_eval_runs_without_torch_or_the_oracles(folders, tmp_path):
    """The metrics' PyTorch packages are test oracles only: vidax.eval imports and scores clips with them blocked."""
    script = textwrap.dedent(f"""
        import sys
        BLOCKED = ("torch", "torchvision", "diffusers", "transformers", "vbench", "cdfvd", "clip", "open_clip", "cv2",
                   "decord")
        class Block:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"blocked: {{name}}")
        sys.meta_path.insert(0, Block())
        import vidax.cli.eval
        from vidax.eval import EvalOptions, evaluate
        from vidax.eval.networks import aesthetic, clip, dino, i3d, raft
        result = evaluate(EvalOptions(generated={str(folders / "clips")!r}, weights={str(folders / "weights")!r},
                                      metrics=("background_consistency", "temporal_flickering"), no_cache=True))
        assert set(result.scores) == {{"background_consistency", "temporal_flickering"}}
        leaked = [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED)]
        assert not leaked, leaked
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
