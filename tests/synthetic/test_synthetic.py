"""`vidax-convert MODEL --synthetic`: a converted folder of seeded random values at the real shapes and dtypes.

On the embedded wan-tiny (its configs are its shipped folder's): the written tree equals, leaf by leaf in shape
and dtype, what the translator converts from the shipped checkpoint; the values are at the promised scale and
fixed by the seed; the stand-in tokenizer has the encoder's vocabulary size; `vidax-gen --weights DIR` runs
end to end on it, says the weights are synthetic and gives finite frames; an interrupted write leaves no
folder that looks complete. The real-size plans are checked in tests/realscale/test_synthetic_realscale.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from vidax.cli.convert import app as convert_app
from vidax.cli.gen import app as gen_app
from vidax.translator import convert
from vidax.translator.errors import SourceError
from vidax.translator.models import MODEL_FILE, ConversionHooks
from vidax.translator.output import load, read_manifest
from vidax.translator.registry import get_model
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.plan.synthetic import STD, SyntheticOptions, synthetic_plan, write_synthetic
from vidax.zoo.wan.tiny import TRAINED

COMPONENTS = ("transformer", "vae", "text_encoder")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """`vidax-convert wan-tiny --synthetic --out DIR`, once for the module."""
    out = tmp_path_factory.mktemp("synthetic") / "wan-tiny"
    result = CliRunner().invoke(convert_app, ["wan-tiny", "--synthetic", "--seed", "7", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _table(tree) -> dict:
    return {path: (tuple(leaf.shape), np.dtype(leaf.dtype)) for path, leaf in tree.items()}


def test_tree_is_what_converting_the_checkpoint_gives(folder):
    entry = get_model("wan-tiny")
    for name in COMPONENTS:
        real = convert(entry.components[name].spec, str(TRAINED), subfolder=name, lazy=True)
        want = {path: (tuple(leaf.shape), np.dtype(leaf.dtype)) for path, leaf in real.leaves.items()}
        got = _table(load(folder / name))
        assert got == want, name
        manifest = read_manifest(folder / name)
        assert manifest["synthetic"]["seed"] == 7 and manifest["spec"] == entry.components[name].spec
        assert json.loads((folder / name / "config.json").read_text()) == json.loads((TRAINED / name / "config.json").read_text())
    record = json.loads((folder / MODEL_FILE).read_text())
    assert record["model"] == "wan-tiny" and record["synthetic"] == {"seed": 7}
    assert (folder / "scheduler" / "scheduler_config.json").is_file() and (folder / "model_index.json").is_file()


def test_values_scale_and_seed(folder):
    tree = load(folder / "transformer")
    kernel = tree["blocks/attn1/to_q/kernel"].astype(np.float32)
    scale = tree["blocks/norm2/scale"].astype(np.float32)
    assert abs(kernel.mean()) < 2e-3 and abs(kernel.std() / STD - 1) < 0.05  # N(0, 0.02) over ~2.5k values
    assert abs(scale.mean() - 1) < 5e-3 and 0 < scale.std() < 2 * STD  # norm scales near 1
    for name in COMPONENTS:
        assert all(np.isfinite(np.asarray(a, np.float32)).all() for a in load(folder / name).values())
    again = synthetic_plan(SyntheticOptions("wan-tiny", seed=7)).trees["transformer"]
    other = synthetic_plan(SyntheticOptions("wan-tiny", seed=8)).trees["transformer"]
    path = "blocks/ffn/net_0/proj/kernel"
    assert np.array_equal(again[path].view(np.uint16), np.asarray(tree[path]).view(np.uint16))
    assert not np.array_equal(other[path].view(np.uint16), np.asarray(tree[path]).view(np.uint16))


def test_tokenizer_has_the_encoders_vocabulary(folder):
    vocab = json.loads((folder / "text_encoder" / "config.json").read_text())["vocab_size"]
    tok = load_tokenizer(folder / "tokenizer")
    batch = tok(["a red circle moves left!", "Zebra 42"], max_length=16)
    assert batch.input_ids.shape == (2, 16) and batch.input_ids.max() < vocab
    assert batch.attention_mask.sum(axis=1).tolist()[0] > 3
    table = json.loads((folder / "tokenizer" / "tokenizer.json").read_text())
    assert len(table["model"]["vocab"]) == vocab


def test_vidax_gen_runs_on_it(folder, tmp_path):
    out = tmp_path / "clip.npy"
    result = CliRunner().invoke(gen_app, ["wan-tiny", "--weights", str(folder), "--prompt", "a red circle moves left",
                                          "--frames", "5", "--height", "32", "--width", "32", "--steps", "2",
                                          "--out", str(out)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if "synthetic weights" in line]
    assert len(notes) == 1, result.output
    frames = np.load(out)
    assert frames.shape == (5, 32, 32, 3) and np.isfinite(frames).all()


class _Interrupt(ConversionHooks):
    """Ctrl-C while the second component is being written."""

    def writing(self, component, nbytes):
        def advance(n):
            if component == "vae":
                raise KeyboardInterrupt

        return advance


def test_interrupted_write_does_not_look_complete(folder, tmp_path):
    out = tmp_path / "copy"
    write_synthetic(SyntheticOptions("wan-tiny", out=out, seed=1))
    assert (out / MODEL_FILE).is_file()
    with pytest.raises(KeyboardInterrupt):
        write_synthetic(SyntheticOptions("wan-tiny", out=out, seed=2), hooks=_Interrupt())
    assert not (out / MODEL_FILE).exists()  # the earlier run's record is gone, this run wrote none
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    assert read_manifest(out / "transformer")["synthetic"]["seed"] == 2 and read_manifest(out / "vae")["synthetic"]["seed"] == 1


def test_an_optional_files_only_component_may_be_left_out():
    """LTX-Video-13B-distilled's scheduler is optional in the registry (its passes name their timesteps) and none is
    recorded: the folder goes without it, as a conversion of the official single file does."""
    plan = synthetic_plan(SyntheticOptions("ltx-video-13b-distilled"))
    assert {"transformer", "vae", "text_encoder"} <= set(plan.trees) and not any(
        rel.startswith("scheduler/") for rel in plan.configs)


def test_what_it_cannot_do_is_one_line(tmp_path):
    assert set(synthetic_plan(SyntheticOptions("cosmos3-nano", components=("transformer", "vae"))).trees) == {"transformer", "vae"}
    result = CliRunner().invoke(convert_app, ["wan-tiny", "--synthetic", "--source", "x", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and result.output.strip() == "error: --synthetic takes no --source (it reads no checkpoint)"
    result = CliRunner().invoke(convert_app, ["wan-tiny", "--synthetic", "--components", "nope", "--out", str(tmp_path / "o")])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and "has no component(s) nope" in lines[0]
    assert not (tmp_path / "o").exists()


def test_conversion_starts_no_jax_backend(tmp_path):
    """The parameter trees are shape questions traced on no backend (`runtime.shapes_only`): on a TPU host a backend
    takes the chip and gigabytes of host memory (the v5e host's `vidax-convert wan2.1-t2v-1.3b --synthetic` peaked
    at 14.5 GB of RSS). A fresh process whose jax refuses to start one writes wan-tiny and plans the real 1.3B."""
    import subprocess
    import sys

    code = f"""
import jax._src.xla_bridge as xb
def refuse(*a, **k):
    raise RuntimeError("a jax backend was started")
xb.backends = refuse
from vidax.zoo.plan.synthetic import SyntheticOptions, write_synthetic
write_synthetic(SyntheticOptions(model="wan-tiny", out={str(tmp_path / "tiny")!r}))
write_synthetic(SyntheticOptions(model="wan2.1-t2v-1.3b", check=True))
print("no backend")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "no backend" in result.stdout, result.stderr[-2000:]
