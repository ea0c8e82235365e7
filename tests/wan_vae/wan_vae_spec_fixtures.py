"""Tiny Wan VAEs (2.1 and 2.2 style) in both layouts, with their expected trees computed without the spec.

Registered for the specs `wan/vae` and `wan/vae22`; used by tests/wan/test_vae.py and the
translator's mutation test. The diffusers layout is the reference's real state dict (plus its
config.json, so the tests load the reference back from the same folder). The official layouts
rename those keys to the official module names: for Wan2.1 by inverting diffusers'
`convert_wan_vae_to_diffusers` (test_vae.py checks it maps back exactly); for Wan2.2 from the
module names of the official `wan/modules/vae2_2.py` (`WanVAE_`), which has no pip-side converter.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.oracle import build_perturbed, save_diffusers, state_of, tree_path
from tests.tiny_references import WAN_VAE_21, WAN_VAE_22
from vidax.translator.testing import SpecCase, register_spec_fixture

TINY_21, TINY_22 = WAN_VAE_21, WAN_VAE_22  # shared with the Cosmos tests (the VAE they ship)
CONFIGS = {"wan/vae": TINY_21, "wan/vae22": TINY_22}
OFFICIAL_FILE = {"wan/vae": "Wan2.1_VAE.pth", "wan/vae22": "Wan2.2_VAE.pth"}

# diffusers resnet sub-module -> official nn.Sequential index (norm, SiLU, conv, norm, SiLU, Dropout, conv)
_RESNET = [("norm1.", "residual.0."), ("conv1.", "residual.2."), ("norm2.", "residual.3."),
           ("conv2.", "residual.6."), ("conv_shortcut.", "shortcut.")]


def _resnet(rest: str) -> str:
    for ours, theirs in _RESNET:
        if rest.startswith(ours):
            return theirs + rest[len(ours):]
    raise KeyError(rest)


def _shared(part: str, rest: str) -> str | None:
    """Names both official VAEs share: stem, middle (resnet, attention, resnet), head."""
    if m := re.fullmatch(r"conv_in\.(.+)", rest):
        return f"{part}.conv1.{m[1]}"
    if m := re.fullmatch(r"norm_out\.(.+)", rest):
        return f"{part}.head.0.{m[1]}"
    if m := re.fullmatch(r"conv_out\.(.+)", rest):
        return f"{part}.head.2.{m[1]}"
    if m := re.fullmatch(r"mid_block\.resnets\.(\d)\.(.+)", rest):
        return f"{part}.middle.{2 * int(m[1])}.{_resnet(m[2])}"
    if m := re.fullmatch(r"mid_block\.attentions\.0\.(.+)", rest):
        return f"{part}.middle.1.{m[1]}"
    return None


def official_key(spec: str, key: str) -> str:
    """diffusers `AutoencoderKLWan` key -> the official checkpoint's key."""
    quant = {"quant_conv": "conv1", "post_quant_conv": "conv2"}
    part, rest = key.split(".", 1)
    if part in quant:
        return f"{quant[part]}.{rest}"
    if (name := _shared(part, rest)) is not None:
        return name
    if spec == "wan/vae":  # flat Sequentials; the decoder's holds 3 resnets + 1 upsampler per level
        if m := re.fullmatch(r"down_blocks\.(\d+)\.(resample\.1|time_conv)\.(.+)", rest):
            return f"encoder.downsamples.{m[1]}.{m[2]}.{m[3]}"
        if m := re.fullmatch(r"down_blocks\.(\d+)\.(.+)", rest):
            return f"encoder.downsamples.{m[1]}.{_resnet(m[2])}"
        if m := re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
            return f"decoder.upsamples.{4 * int(m[1]) + int(m[2])}.{_resnet(m[3])}"
        if m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.(.+)", rest):
            return f"decoder.upsamples.{4 * int(m[1]) + 3}.{m[2]}"
    else:  # one Sequential per level: resnets, then the resampler
        if m := re.fullmatch(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
            return f"encoder.downsamples.{m[1]}.downsamples.{m[2]}.{_resnet(m[3])}"
        if m := re.fullmatch(r"down_blocks\.(\d+)\.downsampler\.(.+)", rest):
            return f"encoder.downsamples.{m[1]}.downsamples.2.{m[2]}"
        if m := re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
            return f"decoder.upsamples.{m[1]}.upsamples.{m[2]}.{_resnet(m[3])}"
        if m := re.fullmatch(r"up_blocks\.(\d+)\.upsampler\.(.+)", rest):
            return f"decoder.upsamples.{m[1]}.upsamples.3.{m[2]}"
    raise KeyError(key)


def reference(spec: str, seed: int = 0):
    """A perturbed tiny diffusers AutoencoderKLWan."""
    from diffusers import AutoencoderKLWan

    return build_perturbed(AutoencoderKLWan, CONFIGS[spec], None, init_seed=seed)


def tree_leaf(key: str) -> tuple[str, str]:
    """diffusers key -> (tree path, kind): module path `a.b.0` -> `a/b_0`; weight -> kernel."""
    module, _, param = key.rpartition(".")
    leaf = {"gamma": "gamma", "weight": "kernel", "bias": "bias"}[param]
    return f"{tree_path(module)}/{leaf}", leaf


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    """The converted tree from the diffusers state dict alone: renamed, conv kernels channels-last."""
    tree = {}
    for key, tensor in state.items():
        path, kind = tree_leaf(key)
        value = tensor.numpy()
        if kind == "gamma":  # [C, 1, 1(, 1)] -> [C]
            value = value.reshape(-1)
        elif kind == "kernel":  # Conv2d/Conv3d (O, I, *k) -> (*k, I, O)
            value = np.ascontiguousarray(np.moveaxis(value, (0, 1), (-1, -2)))
        tree[path] = value
    return tree


def save_checkpoints(spec: str, model, root: Path) -> tuple[Path, Path]:
    """The diffusers repo folder (`vae/` with config.json) and the official single file, from one model."""
    import torch

    state = state_of(model)
    diffusers_root, official_root = root / "diffusers", root / "official"
    save_diffusers(model, diffusers_root / "vae", state)
    official_root.mkdir(parents=True)
    torch.save({official_key(spec, k): v for k, v in state.items()}, official_root / OFFICIAL_FILE[spec])
    return diffusers_root, official_root


def _cases(spec: str, tmp_path: Path) -> list[SpecCase]:
    model = reference(spec)
    expected = expected_tree(model.state_dict())
    diffusers_root, official_root = save_checkpoints(spec, model, tmp_path)
    return [SpecCase("diffusers", diffusers_root, expected), SpecCase("official", official_root, expected)]


@register_spec_fixture("wan/vae")
def wan21_vae_cases(tmp_path: Path) -> list[SpecCase]:
    return _cases("wan/vae", tmp_path)


@register_spec_fixture("wan/vae22")
def wan22_vae_cases(tmp_path: Path) -> list[SpecCase]:
    return _cases("wan/vae22", tmp_path)
