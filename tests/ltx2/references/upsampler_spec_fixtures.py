"""Test checkpoints of LTX-2's latent upsampler (diffusers `LTX2LatentUpsamplerModel`), for the spec and parity tests.

Tiny: 8 latent channels (the tiny LTX-2 pipeline's), 32 mid channels (GroupNorm's 32 groups), one block per
stage; every float parameter perturbed. Heads: the rational resampler at x2 (LTX-2.0's released head, its blur
skipped) and x1.5 (the blur-downsample runs), and the plain conv + pixel shuffle (`upsampler.0`).
"""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file

from tests.oracle import build_perturbed, expected_tree, save_diffusers, state_of
from vidax.translator.testing import SpecCase, register_spec_fixture

TINY_UPSAMPLER = dict(in_channels=8, mid_channels=32, num_blocks_per_stage=1, dims=3)
HEADS = {
    "rational_x2": dict(use_rational_resampler=True, rational_spatial_scale=2.0),
    "rational_x1.5": dict(use_rational_resampler=True, rational_spatial_scale=1.5),
    "plain_x2": dict(use_rational_resampler=False),
}
BLUR_KERNEL = "upsampler.blur_down.kernel"  # a fixed buffer, rebuilt from the config


def upsampler_reference(head: str = "rational_x2", seed: int = 7, **overrides):
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

    return build_perturbed(LTX2LatentUpsamplerModel, {**TINY_UPSAMPLER, **HEADS[head], **overrides}, seed)


def upsampler_expected(model) -> dict:
    return expected_tree({k: v for k, v in state_of(model).items() if k != BLUR_KERNEL})


@register_spec_fixture("ltx2/latent_upsampler")
def ltx2_upsampler_cases(tmp_path: Path) -> list[SpecCase]:
    """Each head as a diffusers folder (`latent_upsampler/`, its blur buffer saved as diffusers saves it), and
    the x2 one as an official single file (same keys)."""
    cases = []
    for head in HEADS:
        ref = upsampler_reference(head)
        folder = tmp_path / head.replace(".", "_")
        save_diffusers(ref, folder / "latent_upsampler")
        cases.append(SpecCase(f"diffusers-{head}", folder, upsampler_expected(ref)))
    ref = upsampler_reference()
    single = tmp_path / "official"
    single.mkdir()
    save_file({k: v.contiguous() for k, v in state_of(ref).items()}, single / "ltx-2-spatial-upscaler-x2-1.0.safetensors")
    cases.append(SpecCase("official-rational_x2", single, upsampler_expected(ref)))
    return cases
