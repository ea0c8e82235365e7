"""Test checkpoints of the Cosmos3 transformer spec, for the translator's mutation test and ours.

Tiny perturbed diffusers `Cosmos3OmniTransformer`s in the two released backbones: "nano" (SwiGLU, q/k
norms on both pathways, sound and action heads present as in nvidia/Cosmos3-Nano, attention biases on
so the optional bias rule fires) and "edge" (relu2, no text q/k norm, `k_norm_und_for_gen`, as
nvidia/Cosmos3-Edge), saved as the diffusers folder; "edge" is also saved with the pre-flat `model.`
prefix on the text model's keys. The expected tree is computed from the state dict alone.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from vidax.translator.spec import module_path
from vidax.translator.testing import SpecCase, register_spec_fixture

BASE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, rope_axes_dim=[2, 1, 1], latent_channel=4, latent_patch_size=2, patch_latent_dim=16,
            vocab_size=64, base_fps=24, enable_fps_modulation=True, unified_3d_mrope_temporal_modality_margin=15000,
            timestep_scale=0.001)
VARIANTS = {
    "nano": dict(hidden_act="silu", qk_norm_for_text=True, use_und_k_norm_for_gen=False, rms_norm_eps=1e-6,
                 rope_theta=5e6, attention_bias=True, sound_gen=True, sound_dim=6, action_gen=True, action_dim=5,
                 num_embodiment_domains=3),
    "edge": dict(hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True, rms_norm_eps=1e-5,
                 rope_theta=1e8),
}
DROPPED = r"lm_head\.weight|norm\.weight|audio_.*|action_.*"  # not converted (video generation only)
PREFIXED = re.compile(r"(embed_tokens|layers|norm)\.")  # the text model's keys (under `model.` before the flat layout)


def perturb(model: torch.nn.Module, seed: int = 0, std: float = 0.02) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.add_(torch.randn(param.shape, generator=gen) * std)
    return model.eval()


def dit_reference(variant: str, seed: int = 0, **overrides):
    from diffusers import Cosmos3OmniTransformer

    torch.manual_seed(seed)
    return perturb(Cosmos3OmniTransformer(**{**BASE, **VARIANTS[variant], **overrides}), seed)


def save_diffusers(module, folder: Path, prefix_text_model: bool = False) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {("model." + k if prefix_text_model and PREFIXED.match(k) else k): v.contiguous()
             for k, v in module.state_dict().items()}
    save_file(state, folder / "diffusion_pytorch_model.safetensors")
    (folder / "config.json").write_text(json.dumps(dict(module.config), default=list))
    return folder


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    flat, stacks = {}, {}
    for key, tensor in state.items():
        if re.fullmatch(DROPPED, key):
            continue
        value = tensor.detach().float().numpy()
        module, name = key.rsplit(".", 1)
        if name == "weight":
            if module == "embed_tokens":
                name = "embedding"
            else:
                name, value = ("kernel", value.T) if value.ndim == 2 else ("scale", value)
        path = f"{module_path(module)}/{name}"
        m = re.fullmatch(r"layers_(\d+)/(.*)", path)
        if m:
            stacks.setdefault(f"blocks/{m[2]}", {})[int(m[1])] = value
        else:
            flat[path] = value
    for path, layers in stacks.items():
        flat[path] = np.stack([layers[i] for i in range(len(layers))])
    return flat


@register_spec_fixture("cosmos3/transformer")
def cosmos3_transformer_cases(tmp_path):
    cases = []
    for variant in VARIANTS:
        ref = dit_reference(variant)
        expected = expected_tree(ref.state_dict())
        save_diffusers(ref, tmp_path / variant / "transformer")
        cases.append(SpecCase(variant, tmp_path / variant, expected))
    save_diffusers(ref, tmp_path / "edge_prefixed" / "transformer", prefix_text_model=True)
    cases.append(SpecCase("edge_prefixed", tmp_path / "edge_prefixed", expected))
    return cases
