"""`vidax-convert MODEL --synthetic` at real size, without writing gigabytes: the synthetic plan (every leaf's shape
and dtype, the bytes) of a registry model equals what `vidax-convert MODEL --check` plans from the released
checkpoint's tensor table (the reference classes built on the meta device from the registry config, written as
header-only files: `test_registry_realscale`), component by component; and `--synthetic --check` prints the plan
and writes nothing.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from vidax.cli.convert import app
from vidax.translator.models import convert_model
from vidax.translator.registry import get_model
from vidax.zoo.plan.synthetic import SyntheticOptions, synthetic_plan

from .test_registry_realscale import _write

# (model, components: () for all), families whole, and one by its DiT and VAE alone (`--components`)
CASES = [("wan2.1-t2v-1.3b", ()), ("wan2.2-t2v-a14b", ()), ("cogvideox1.5-5b", ()), ("ltx-video-13b", ()),
         ("hunyuanvideo-1.5", ("transformer", "vae"))]


def _checkpoint_plan(model: str, components: tuple[str, ...], root) -> dict:
    """`vidax-convert MODEL --check` on header-only files of the released layout (diffusers where the model has
    it, else its own; official single files one by one): component -> {path: (shape, dtype)}."""
    entry = get_model(model)
    layout = "diffusers" if "diffusers" in entry.repos else entry.default_layout
    in_folder, single = _write(entry, layout, root)
    keep = lambda names: tuple(c for c in names if not components or c in components)  # noqa: E731
    trees = {}
    if keep(in_folder):
        trees.update(convert_model(model, source=str(root / "model"), layout=layout, components=keep(in_folder),
                                   check=True).trees)
    for name in keep(single):
        trees.update(convert_model(model, source=str(single[name]), components=(name,), check=True).trees)
    return {name: {p: (leaf.shape, np.dtype(leaf.dtype)) for p, leaf in tree.leaves.items()} for name, tree in trees.items()}


@pytest.mark.parametrize("model, components", CASES, ids=[c[0] for c in CASES])
def test_synthetic_plan_is_the_checkpoints(model, components, tmp_path):
    try:
        want = _checkpoint_plan(model, components, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # sparse files: tens of GB apparent
    plan = synthetic_plan(SyntheticOptions(model, components=components))
    got = {name: {p: (leaf.shape, leaf.dtype) for p, leaf in tree.leaves.items()} for name, tree in plan.trees.items()}
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    nbytes = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for tree in want.values() for s, d in tree.values())
    assert plan.nbytes == nbytes


def test_check_prints_the_plan_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["wan2.1-t2v-1.3b", "--synthetic", "--check"])
    assert result.exit_code == 0, result.output
    total = next(line for line in result.output.splitlines() if "total" in line)
    plan = synthetic_plan(SyntheticOptions("wan2.1-t2v-1.3b"))
    assert f"{plan.nbytes / 1e9:.3f}" in total and plan.nbytes == 16_727_306_316  # the figure docs/SYNTHETIC.md gives
    assert list(tmp_path.iterdir()) == []
