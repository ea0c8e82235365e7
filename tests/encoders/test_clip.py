"""CLIP vision tower with projection against transformers, both Wan layouts, and its preprocessing."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers

from tests.encoders.oracle import assert_close, converted_params, requires_pth_reader
from tests.oracle import perturb
from vidax.translator.errors import TranslatorError
from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection, clip_preprocess, clip_vision_config

HF_CONFIG = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, image_size=42,
                 patch_size=14, projection_dim=16, hidden_act="gelu")  # ViT-H/14 (Wan) uses exact GELU
PIXELS = np.random.default_rng(0).normal(size=(2, 3, 42, 42)).astype(np.float32)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    reference = perturb(transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(**HF_CONFIG)))
    folder = tmp_path_factory.mktemp("clip")
    reference.save_pretrained(folder / "image_encoder")
    ours = CLIPVisionModelWithProjection(clip_vision_config(reference.config.to_dict()))
    with torch.no_grad():
        ref_out = reference(torch.from_numpy(PIXELS), output_hidden_states=True)
    return reference, ours, folder, ref_out


def test_per_layer_and_end_to_end(clip):
    _, ours, folder, ref_out = clip
    out = ours.apply(converted_params("encoders/clip_vision", folder, ours, PIXELS), PIXELS)
    assert len(out.hidden_states) == len(ref_out.hidden_states)
    for i, ref_hidden in enumerate(ref_out.hidden_states):
        assert_close(out.hidden_states[i], ref_hidden, what=f"hidden state {i}")
    assert_close(out.last_hidden_state, ref_out.last_hidden_state)
    assert_close(out.image_embeds, ref_out.image_embeds)


@pytest.mark.parametrize("prefix", ["", "vision_model."])
def test_checkpoint_without_projection(tmp_path, prefix):
    """diffusers' Wan I2V repos ship transformers' CLIPVisionModel: no visual_projection weights, keys
    saved with the `vision_model.` prefix by transformers 4.x and without it by transformers 5."""
    reference = perturb(transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**HF_CONFIG)))
    state = {prefix + k.removeprefix("vision_model."): v.contiguous() for k, v in reference.state_dict().items()}
    (tmp_path / "image_encoder").mkdir()
    safetensors.torch.save_file(state, tmp_path / "image_encoder" / "model.safetensors")
    ours = CLIPVisionModelWithProjection(clip_vision_config(reference.config.to_dict()), with_projection=False)
    with torch.no_grad():
        ref_out = reference(torch.from_numpy(PIXELS), output_hidden_states=True)
    out = ours.apply(converted_params("encoders/clip_vision", tmp_path, ours, PIXELS), PIXELS)
    assert_close(out.hidden_states[-2], ref_out.hidden_states[-2], what="penultimate hidden state (Wan I2V)")
    assert out.image_embeds is None


def to_official(reference) -> dict:
    """transformers CLIPVisionModelWithProjection weights under Wan's XLMRobertaCLIP names (wan/modules/clip.py)."""
    state = {k: v for k, v in reference.state_dict().items() if not k.endswith("position_ids")}
    out = {
        "visual.cls_embedding": state.pop("vision_model.embeddings.class_embedding").reshape(1, 1, -1),
        "visual.pos_embedding": state.pop("vision_model.embeddings.position_embedding.weight")[None],
        "visual.patch_embedding.weight": state.pop("vision_model.embeddings.patch_embedding.weight"),
        "visual.head": state.pop("visual_projection.weight").T.contiguous(),
        "textual.token_embedding.weight": torch.zeros(3, 2),  # the unused text tower
        "log_scale": torch.zeros(()),
    }
    for norm, official in (("pre_layrnorm", "pre_norm"), ("post_layernorm", "post_norm")):
        for param in ("weight", "bias"):
            out[f"visual.{official}.{param}"] = state.pop(f"vision_model.{norm}.{param}")
    for i in range(reference.config.num_hidden_layers):
        src, dst = f"vision_model.encoder.layers.{i}.", f"visual.transformer.{i}."
        for param in ("weight", "bias"):
            out[dst + f"attn.to_qkv.{param}"] = torch.cat([state.pop(src + f"self_attn.{p}_proj.{param}") for p in "qkv"])
            out[dst + f"attn.proj.{param}"] = state.pop(src + f"self_attn.out_proj.{param}")
            for hf, official in (("mlp.fc1", "mlp.0"), ("mlp.fc2", "mlp.2"), ("layer_norm1", "norm1"), ("layer_norm2", "norm2")):
                out[dst + f"{official}.{param}"] = state.pop(src + f"{hf}.{param}")
    assert not state, sorted(state)
    return out


@requires_pth_reader
def test_official_wan_clip_round_trip(clip, tmp_path):
    reference, ours, _, ref_out = clip
    torch.save(to_official(reference), tmp_path / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
    out = ours.apply(converted_params("encoders/clip_vision", tmp_path, ours, PIXELS), PIXELS)
    assert_close(out.hidden_states[-2], ref_out.hidden_states[-2], what="penultimate hidden state (Wan I2V)")
    assert_close(out.image_embeds, ref_out.image_embeds)


@requires_pth_reader
def test_spec_rejects_unknown_tensor(clip, tmp_path):
    reference, ours, *_ = clip
    state = to_official(reference)
    state["visual.transformer.0.attn.extra.weight"] = torch.zeros(2, 2)
    torch.save(state, tmp_path / "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth")
    with pytest.raises(TranslatorError, match="attn.extra"):
        converted_params("encoders/clip_vision", tmp_path, ours, PIXELS)


@pytest.mark.parametrize("shape", [(300, 250, 3), (180, 400, 3)])
def test_preprocess_matches_clip_image_processor(shape):
    image = np.random.default_rng(1).integers(0, 256, size=shape, dtype=np.uint8)
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    expected = processor(images=image, return_tensors="np")["pixel_values"]
    # bicubic resampling is PIL's in both; the residue is float32 normalisation order
    np.testing.assert_allclose(clip_preprocess(image), expected, atol=1e-5, rtol=1e-5)
