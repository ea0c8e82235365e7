"""Test checkpoints of the Cosmos3 transformer spec, for the translator's mutation test and ours.

Tiny perturbed diffusers `Cosmos3OmniTransformer`s in the two released backbones: "nano" (SwiGLU, q/k
norms on both pathways, sound and action heads present as in nvidia/Cosmos3-Nano, attention biases on
so the optional bias rule fires) and "edge" (relu2, no text q/k norm, `k_norm_und_for_gen`, as
nvidia/Cosmos3-Edge), saved as the diffusers folder; "edge" is also saved with the pre-flat `model.`
prefix on the text model's keys. The expected tree is computed from the state dict alone.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

import re

import numpy as np
from vidax.translator.testing import SpecCase, register_spec_fixture

from tests import oracle
from tests.oracle import build_perturbed, save_diffusers, state_of

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


def dit_reference(variant: str, seed: int = 0, **overrides):
    from diffusers import Cosmos3OmniTransformer

    return build_perturbed(Cosmos3OmniTransformer, {**BASE, **VARIANTS[variant], **overrides}, seed)


def text_model_prefixed(state: dict) -> dict:
    """The state dict with the text model's keys under `model.`, as checkpoints before the flat layout."""
    return {("model." + k if PREFIXED.match(k) else k): v for k, v in state.items()}


def expected_tree(state: dict) -> dict[str, np.ndarray]:
    kept = {k: v for k, v in state.items() if not re.fullmatch(DROPPED, k)}
    return oracle.expected_tree(kept, {"layers": "blocks"}, tables=("embed_tokens",))


@register_spec_fixture("cosmos3/transformer")
def cosmos3_transformer_cases(tmp_path):
    cases = []
    for variant in VARIANTS:
        ref = dit_reference(variant)
        expected = expected_tree(ref.state_dict())
        save_diffusers(ref, tmp_path / variant / "transformer")
        cases.append(SpecCase(variant, tmp_path / variant, expected))
    save_diffusers(ref, tmp_path / "edge_prefixed" / "transformer", text_model_prefixed(state_of(ref)))
    cases.append(SpecCase("edge_prefixed", tmp_path / "edge_prefixed", expected))
    return cases
