"""Tiny Gemma 3 / Gemma 4 references and the test checkpoints of `encoders/gemma`.

Registered with `vidax.translator.testing`: a tiny perturbed `Gemma3ForConditionalGeneration` and a
`Gemma4UnifiedForConditionalGeneration` (keys-as-values full layers with their own head size, KV
sharing, double-wide MLP, so every optional rule fires), saved as transformers saves them, and the
tree each must convert to, computed from the state dict alone.

Imported by file path (no package): absolute imports only.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.oracle import expected_tree, perturb
from vidax.translator.testing import SpecCase, register_spec_fixture

TINY_TEXT = dict(vocab_size=96, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=8, sliding_window=4, rms_norm_eps=1e-6)
GEMMA3_TEXT = dict(TINY_TEXT, num_hidden_layers=3, query_pre_attn_scalar=8,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}})
GEMMA4_TEXT = dict(TINY_TEXT, num_hidden_layers=4, global_head_dim=16, attention_k_eq_v=True,
                   num_global_key_value_heads=1, num_kv_shared_layers=2, use_double_wide_mlp=True,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])


def _perturbed(module, seed: int):
    gen = torch.Generator().manual_seed(seed)
    perturb(module, gen)
    with torch.no_grad():
        for name, b in module.named_buffers():
            if name.endswith("layer_scalar"):  # a trained buffer in the checkpoint: make it matter
                b.add_(torch.randn(b.shape, generator=gen) * 0.1)
    return module.eval()


def gemma3_reference(seed: int = 0):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    vision = dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    torch.manual_seed(seed)
    cfg = Gemma3Config(text_config=GEMMA3_TEXT, vision_config=vision, mm_tokens_per_image=4)
    return _perturbed(Gemma3ForConditionalGeneration(cfg), seed + 1)


def gemma4_reference(seed: int = 0):
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    torch.manual_seed(seed)
    cfg = Gemma4UnifiedConfig(text_config=GEMMA4_TEXT, audio_config=None,
                              vision_config=dict(mm_embed_dim=16, output_proj_dims=16, mm_posemb_size=8))
    return _perturbed(Gemma4UnifiedForConditionalGeneration(cfg), seed + 1)


def save_transformers(model, folder: Path) -> Path:
    """model.safetensors (lm_head tied, as transformers drops it) and config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(model.config.to_json_string())
    return folder


def gemma_expected(model) -> dict:
    """The text model's tree, its layers unstacked (`layers_N`)."""
    prefix = "model.language_model."
    state = {k[len(prefix):]: v for k, v in model.state_dict().items() if k.startswith(prefix)}
    return expected_tree(state, tables=("embed_tokens",))


@register_spec_fixture("encoders/gemma")
def gemma_cases(tmp_path):
    cases = []
    for name, build in (("gemma3", gemma3_reference), ("gemma4", gemma4_reference)):
        model = build()
        cases.append(SpecCase(f"transformers-{name}", save_transformers(model, tmp_path / name), gemma_expected(model)))
    return cases
