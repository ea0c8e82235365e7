"""The VAE decodes of LTX-Video, LTX-2, CogVideoX and HunyuanVideo (1.0, 1.5) under `--dry-run`, at native size,
and untiled at two sizes (temporaries linear in the pixels).

Each family's decode runs as a host loop over compiled units (a padded tile, a frame batch with its causal cache,
a decoder stage on one tile); the dry run compiles the units on abstract fp32 weights and counts beside each what
the device holds while it runs (the VAE's weights it is not passed, earlier tiles' outputs not yet blended). The
planner's VAE figure is checked against the widest unit (the last full-resolution stage, the steady frame batch,
the tile), with the tiling each family decodes with by default (LTX-Video's is chosen by device memory: forced on
here, as on a CPU share or a 24 GiB card). One unit per model keeps the compiles short.
"""

from __future__ import annotations

import math

import jax
import pytest

from vidax.zoo.plan.dry_run import compile_decode_unit, planned_vae_bytes, stages_of, weight_dtype
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline

TOLERANCE = 0.10
# model: (the decode's widest unit, flags)
WIDEST = {
    "ltx-video-13b": ("vae decode (tile)", {"vae_tiling": True}),
    "ltx-2": ("vae decode (tile)", {}),
    "cogvideox1.5-5b": ("vae decode (next batches)", {}),
    "hunyuanvideo-1.5-480p-t2v": ("vae decode (up_blocks_4)", {}),
    "hunyuanvideo": ("vae decode (up_blocks_3)", {}),
}


def _units(model: str, extra: dict, planned: bool = True, **size):
    options = GenerateOptions(model=model, prompt="", dtype="float32", extra=extra, **size)
    family = make_pipeline(model, options)
    s = family.resolve_settings(options)
    units = stages_of(family).vae_decode(family, s, weight_dtype(options), jax.devices()[0])
    return {unit.name: unit for unit in units}, planned_vae_bytes(family.memory_job(options)) if planned else None


def test_kernel_free_units_compile_as_the_decode_compiles_them():
    """The Wan, CogVideoX, LTX-Video and LTX-2 VAEs hold no Pallas kernel: their decodes compile with
    `xla_only_options` (libtpu's own scoped VMEM on a TPU, where convolutions compile faster), and the dry run's
    units say so, so the dry run and the compile-ahead pool compile the programs the decode runs. So do
    HunyuanVideo's (1.0 and 1.5) stages but the mid block, whose attention may be a kernel."""
    from vidax.zoo.cogvideox import vae as cogvideox_vae
    from vidax.zoo.compute.runtime import xla_only_options
    from vidax.zoo.ltx2 import family as ltx2_family
    from vidax.zoo.ltx2.decoding import vae as ltx2_vae
    from vidax.zoo.ltx_video import vae as ltx_video_vae
    from vidax.zoo.parts import vae_layers, wan_vae

    for run in (wan_vae._run_stage, wan_vae._run_chunk, cogvideox_vae._run_batch, ltx_video_vae._decode,
                ltx_video_vae._decode_tile, ltx_video_vae._encode, ltx_video_vae._encode_tile, ltx2_vae._decode_tile,
                ltx2_vae._encode_tile, ltx2_family._vae_decode, ltx2_family._vae_encode):
        assert run.options is xla_only_options, run.__wrapped__.__qualname__
    for model, size in (("cogvideox1.5-5b", {}), ("ltx-video-13b", {}), ("ltx-2", {})):
        units, _ = _units(model, {}, planned=False, **size)
        assert units and all(unit.xla_only for unit in units.values()), model
    assert vae_layers._run_kernel_free_stage.options is xla_only_options
    for model in ("hunyuanvideo", "hunyuanvideo-1.5-480p-t2v"):
        units, _ = _units(model, {}, planned=False)
        attending = {name for name, unit in units.items() if not unit.xla_only}
        assert attending == {"vae decode (mid_block)"} and len(units) > 3, (model, list(units))
        stages = {name: unit.args[0] for name, unit in units.items()}
        assert vae_layers.stage_runner(stages["vae decode (mid_block)"]) is vae_layers._run_stage


@pytest.mark.parametrize("model", list(WIDEST))
def test_vae_decode_planner_within_ten_percent_of_xla(model):
    name, extra = WIDEST[model]
    units, planned = _units(model, extra)
    unit = compile_decode_unit(units[name], planned)
    assert unit.temp > 0
    assert abs(unit.planned - unit.total) <= TOLERANCE * unit.total, (model, unit.planned / 2**20, unit.total / 2**20)


def test_vae_mid_block_attention_temp_is_linear_in_tokens():
    """HunyuanVideo-1.5 decodes every frame of a spatial tile at once, so its mid block's frame-causal attention
    sees more tokens as the video grows (the other decodes' units have a fixed size: a padded tile, a frame batch,
    HunyuanVideo 1.0's window of 5 latent frames). 1.94 times the tokens, at most 1.25 x 1.94 times the
    temporaries (3.8 times if it held S x S scores)."""
    model = "hunyuanvideo-1.5-480p-t2v"
    blocks = [_units(model, {}, planned=False, frames=n)[0]["vae decode (mid_block)"] for n in (61, 121)]
    ratio = math.prod(blocks[1].args[2].shape[1:4]) / math.prod(blocks[0].args[2].shape[1:4])
    short, long = (compile_decode_unit(block, None) for block in blocks)
    assert ratio > 1.9, ratio
    assert long.temp / short.temp < 1.25 * ratio, (ratio, short.temp / 2**20, long.temp / 2**20)


# model: (the unit whose temporaries are compared, flags, frames, scale of the sizes). Untiled, so the unit itself
# grows with the video (tiled, each unit has a fixed size whatever the video); HunyuanVideo 1.0's mid block holds
# the decode's attention. CogVideoX's decoder (no attention) at half the sizes: its compile is the longest
LINEAR = {
    "ltx-video-13b": ("vae decode", {"vae_tiling": False}, 9, 2),
    "ltx-2": ("vae decode", {"vae_tiling": False}, 9, 2),
    "cogvideox1.5-5b": ("vae decode (next batches)", {"vae_tiling": False}, 17, 1),
    "hunyuanvideo": ("vae decode (mid_block)", {"vae_tiling": False}, 9, 2),
}
SMALL, LARGE = (128, 128), (192, 176)  # 2.06 times the pixels (times the scale squared)


@pytest.mark.slow
@pytest.mark.parametrize("model", list(LINEAR))
def test_vae_decode_temp_is_linear_in_pixels(model):
    """The VAEs the Wan test (`test_dry_run.py`) and the mid-block test above do not cover: 2.06 times the pixels,
    at most 1.25 x 2.06 times the temporaries (4.2 times if any unit held S x S scores)."""
    name, extra, frames, scale = LINEAR[model]
    small, large = (compile_decode_unit(_units(model, extra, planned=False, height=h * scale, width=w * scale,
                                               frames=frames)[0][name], None) for h, w in (SMALL, LARGE))
    ratio = math.prod(LARGE) / math.prod(SMALL)
    assert large.temp / small.temp < 1.25 * ratio, (model, small.temp / 2**20, large.temp / 2**20)
