"""`--dtype float32` is fp32 on every backend: each program of the run is traced at the highest matmul
precision (a TPU otherwise multiplies fp32 operands in bf16 passes, a GPU in TF32)."""

from __future__ import annotations

import jax
import pytest

from vidax.zoo.wan.family import WanFamily
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

SIZE = dict(height=32, width=32, frames=5, steps=1)


@pytest.fixture
def default_precision():
    """The suite runs at "highest" everywhere; these tests start from jax's own default."""
    saved = jax.config.jax_default_matmul_precision
    jax.config.update("jax_default_matmul_precision", None)
    yield
    jax.config.update("jax_default_matmul_precision", saved)


@pytest.mark.parametrize("dtype,expected", [("float32", "highest"), (None, None)])
def test_every_stage_traces_at_the_precision_of_its_dtype(tmp_path, monkeypatch, default_precision, dtype, expected):
    seen = {}
    for stage in ("encode", "sample", "decode"):
        original = getattr(WanFamily, stage)

        def spy(self, *args, _stage=stage, _original=original, **kwargs):
            seen[_stage] = jax.config.jax_default_matmul_precision
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(WanFamily, stage, spy)
    generate(GenerateOptions(model="wan-tiny", prompt="a red kite", out=tmp_path / "a.npy", compile_cache=False,
                             dtype=dtype, **SIZE))
    assert seen == {"encode": expected, "sample": expected, "decode": expected}
