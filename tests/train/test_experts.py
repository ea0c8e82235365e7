"""Wan2.2 A14B's two experts in `vidax-train` (issue 63, item 1): each trained on its own noise levels, split at the
model's boundary as musubi-tuner splits them (`--min_timestep/--max_timestep` with `--preserve_distribution_shape`),
one file per expert that `vidax-gen --lora/--lora-2` and diffusers' `load_lora_weights` (`load_into_transformer_2`)
load."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from tests.train.tiny import one_clip
from tests.wan.test_pipeline import _reference_a14b
from vidax.train.objective import Objective, range_share, sample_sigmas
from vidax.train.run import TrainOptions, prepare, step_expert, train_lora
from vidax.translator.formats.safetensors_io import SafetensorsFile

SIZE = dict(height=32, width=48, frames=5)


def test_an_experts_noise_levels_keep_the_distributions_shape():
    """The range's draws are the full distribution's draws that land in it (compared by quantiles with rejection
    sampling), and the high expert's share of steps is the full distribution's mass above the boundary."""
    for sampling in ("shift", "uniform"):
        full = Objective(scale=1.0, sampling=sampling, shift=3.0)
        wide = np.asarray(sample_sigmas(jax.random.key(0), 400_000, full))
        for low, high in ((0.875, 1.0), (0.0, 0.875)):
            ranged = np.asarray(sample_sigmas(jax.random.key(1), 40_000, dataclasses.replace(full, low=low, high=high)))
            assert ranged.min() >= low and ranged.max() < high
            kept = wide[(wide >= low) & (wide < high)]
            q = np.linspace(0.01, 0.99, 25)
            assert np.abs(np.quantile(ranged, q) - np.quantile(kept, q)).max() < 0.01, (sampling, low)
        share = range_share(full, 0.875, 1.0)
        assert abs(share - np.mean(wide >= 0.875)) < 0.005


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return one_clip(tmp_path_factory.mktemp("a14b_clips"))


def test_both_experts_train_and_load_with_lora_and_lora_2(clips, tmp_path):
    import diffusers

    from vidax.zoo.api import generate
    from vidax.zoo.generator.options import GenerateOptions

    pipe = _reference_a14b(tmp_path / "model")
    options = TrainOptions(model="wan2.2-t2v-a14b", weights=str(tmp_path / "model"), data=clips,
                           out=tmp_path / "style.safetensors", rank=4, steps=6, lr=1e-2, dtype="float32", seed=2, **SIZE)
    prep = prepare(options)
    assert [(d.expert.component, d.objective.low, d.objective.high) for d in prep.denoisers] == \
        [("transformer", 0.875, 1.0), ("transformer_2", 0.0, 0.875)]
    assert {step_expert(prep, options, s) for s in range(options.steps)} == {0, 1}  # both step in this run
    paths = train_lora(options, prep=prep)
    assert [p.name for p in paths] == ["style_high_noise.safetensors", "style_low_noise.safetensors"]
    for path in paths:
        file = SafetensorsFile(path)
        assert max(np.abs(np.asarray(file.array(k))).max() for k in file.tensors if "lora_B" in k) > 0

    def frames(**loras):
        request = GenerateOptions(model="wan2.2-t2v-a14b", prompt="a red kite over a grey sea", weights=str(tmp_path / "model"),
                                  steps=3, dtype="float32", out=tmp_path / f"{len(loras)}.npy", **SIZE, **loras)
        return generate(request).frames

    plain, styled = frames(), frames(lora=(str(paths[0]),), lora_2=(str(paths[1]),))
    assert np.isfinite(styled).all() and np.abs(styled - plain).max() > 1e-4
    pipe.load_lora_weights(str(paths[0]), adapter_name="high")
    pipe.load_lora_weights(str(paths[1]), adapter_name="low", load_into_transformer_2=True)
    assert isinstance(pipe, diffusers.WanPipeline) and {"high", "low"} <= set(pipe.get_list_adapters()["transformer"]
                                                                             + pipe.get_list_adapters()["transformer_2"])


def test_expert_picks_one_of_two_and_refuses_one_dit(tmp_path):
    """`--expert high|low` keeps that expert (one file at --out); a one-DiT model refuses the flag in one line."""
    from vidax.train.families import Expert
    from vidax.train.run import TrainError, _chosen

    two = [Expert("transformer", "high_noise", 0.9, 1.0), Expert("transformer_2", "low_noise", 0.0, 0.9)]
    options = lambda expert: TrainOptions(model="m", data=tmp_path, out=tmp_path / "x.safetensors", expert=expert)  # noqa: E731
    assert [e.component for e in _chosen(two, options("low"))] == ["transformer_2"]
    assert [e.component for e in _chosen(two, options(None))] == ["transformer", "transformer_2"]
    with pytest.raises(TrainError, match="--expert is for two-expert models"):
        _chosen(two[:1], options("high"))
