"""The Gemma text towers as transformers writes them to disk: the whole conditional-generation model
(vision tower, projectors, audio) saved with `save_pretrained`, which renames keys on the way out (Gemma 4
unified's patch embedder is `model.vision_embedder.*` on disk, `model.embed_vision.*` in memory; Gemma 3
goes back to the legacy `language_model.model.*`). Every tensor must be accounted for (the towers the
text path does not use ignored by name) and the text tower's leaves must be the model's own tensors, on
the zoo module's tree.

Also the in-memory names (what a transformers 5 release without the save-time renaming wrote)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert
from vidax.zoo.parts.encoders.gemma import GemmaConfig, GemmaTextModel

from tests.encoders.oracle import expected_shapes
from tests.encoders.gemma_spec_fixtures import GEMMA4_TEXT, gemma3_reference, gemma4_reference, gemma_expected, save_transformers
from tests.oracle import perturb


def gemma4_multimodal_reference(seed: int = 0):
    """Gemma 4 with its own vision and audio towers (`Gemma4ForConditionalGeneration`, no per-layer inputs)."""
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(GEMMA4_TEXT, hidden_size_per_layer_input=0)
    cfg = Gemma4Config(text_config=text, vision_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                                            num_attention_heads=2),
                       audio_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2))
    return perturb(Gemma4ForConditionalGeneration(cfg), seed + 1)


def gemma4_unified_audio_reference(seed: int = 0):
    """Gemma 4 unified with its audio embedder too (the 12B release takes audio)."""
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    torch.manual_seed(seed)
    cfg = Gemma4UnifiedConfig(text_config=GEMMA4_TEXT, audio_config=dict(audio_embed_dim=16),
                              vision_config=dict(mm_embed_dim=16, output_proj_dims=16, mm_posemb_size=8))
    return perturb(Gemma4UnifiedForConditionalGeneration(cfg), seed + 1)


BUILDERS = {"gemma3": gemma3_reference, "gemma4_unified": gemma4_reference,
            "gemma4_unified_audio": gemma4_unified_audio_reference, "gemma4": gemma4_multimodal_reference}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def reference(request):
    return request.param, BUILDERS[request.param]()


def _zoo_shapes(model) -> dict[str, tuple[int, ...]]:
    cfg = GemmaConfig.from_hf_config(model.config.to_dict())
    ids = jnp.zeros((1, 4), jnp.int32)
    return expected_shapes(GemmaTextModel(cfg), ids, ids)


def _check(folder, model):
    tree = convert("encoders/gemma", folder, _zoo_shapes(model), dtype="float32")
    expected = gemma_expected(model)
    assert tree.keys() == expected.keys()
    for path, value in expected.items():
        np.testing.assert_array_equal(tree[path], value, err_msg=path)


def test_save_pretrained_layout(reference, tmp_path):
    """`save_pretrained` of the full model: the file holds the vision (and audio) towers under their disk names."""
    name, model = reference
    model.save_pretrained(tmp_path)
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "np") as fh:
        keys = list(fh.keys())
    assert any(".vision_" in k or k.startswith("vision_tower.") for k in keys)  # the towers really are there
    if name.startswith("gemma4_unified"):
        assert any(k.startswith("model.vision_embedder.") for k in keys)
    _check(tmp_path, model)


def test_in_memory_names(reference, tmp_path):
    """The runtime state dict's names (`model.language_model.*`, `model.embed_vision.*`, ...)."""
    _, model = reference
    _check(save_transformers(model, tmp_path), model)

