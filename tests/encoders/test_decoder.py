"""The Llama / Qwen2.5-VL decoder text tower against transformers, through the shipped spec."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
import transformers

from tests.encoders.oracle import assert_close, converted_params
from tests.oracle import perturb
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel, inverse_frequencies

COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, rms_norm_eps=1e-6)


def qwen2_5_vl_text():
    config = transformers.Qwen2_5_VLTextConfig(**COMMON, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})
    return transformers.Qwen2_5_VLTextModel(config)


def llama():
    # biases everywhere so that every optional term is exercised
    config = transformers.LlamaConfig(**COMMON, attention_bias=True, mlp_bias=True, rope_theta=5000.0)
    return transformers.LlamaModel(config)


def llama3_1():
    # Llama 3.1 rope scaling; with head_dim 8 and 64 original positions every wavelength band is hit
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    return transformers.LlamaModel(transformers.LlamaConfig(**COMMON, rope_parameters=rope))


def qwen2_5_vl_full():
    # a whole Qwen2.5-VL checkpoint (vision tower and LM head present, as Cosmos ships it)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=2,
                  spatial_merge_size=1, temporal_patch_size=1, window_size=4, fullatt_block_indexes=[0])
    text = dict(**COMMON, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})
    config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision)
    return transformers.Qwen2_5_VLForConditionalGeneration(config)


VARIANTS = {"qwen2_5_vl_text": qwen2_5_vl_text, "llama": llama, "llama3_1": llama3_1, "qwen2_5_vl_full": qwen2_5_vl_full}
IDS = np.random.default_rng(0).integers(3, 96, size=(2, 12)).astype(np.int32)
LENGTHS = np.array([[7], [12]])
RIGHT = (np.arange(12)[None] < LENGTHS).astype(np.int32)
LEFT = RIGHT[:, ::-1].copy()


def text_tower(model):
    return model.model.language_model if isinstance(model, transformers.Qwen2_5_VLForConditionalGeneration) else model


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request, tmp_path_factory):
    torch.manual_seed(0)
    reference = perturb(VARIANTS[request.param]())
    reference.config._attn_implementation = "eager"
    folder = tmp_path_factory.mktemp(request.param)
    reference.save_pretrained(folder / "text_encoder")
    ours = DecoderTextModel(DecoderConfig.from_hf_config(reference.config.to_dict()))
    params = converted_params("encoders/decoder", folder, ours, IDS, RIGHT)
    return text_tower(reference), jax.jit(ours.apply), params  # one compile per variant, both paddings


def reference_run(tower, mask):
    tower.config._attn_implementation = "eager"
    with torch.no_grad():
        return tower(input_ids=torch.from_numpy(IDS).long(), attention_mask=torch.from_numpy(mask), output_hidden_states=True)


def test_right_padding_every_hidden_state(variant):
    tower, forward, params = variant
    ref_out = reference_run(tower, RIGHT)
    out = forward(params, IDS, RIGHT)
    assert len(out.hidden_states) == len(ref_out.hidden_states)
    for i, ref_hidden in enumerate(ref_out.hidden_states):
        assert_close(out.hidden_states[i], ref_hidden, what=f"hidden state {i}")
    assert_close(out.last_hidden_state, ref_out.last_hidden_state)


def test_left_padding_valid_tokens(variant):
    # padded query rows are meaningless in both (fully masked); valid tokens must agree
    tower, forward, params = variant
    ref_out = reference_run(tower, LEFT)
    out = forward(params, IDS, LEFT)
    valid = LEFT.astype(bool)
    assert_close(np.asarray(out.hidden_states[-3])[valid], ref_out.hidden_states[-3].numpy()[valid],
                 what="hidden_states[-3] (HunyuanVideo-1.5's text features)")


def test_llama3_frequencies_match_reference():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = llama3_1()
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](model.config, "cpu")
    ours = DecoderConfig.from_hf_config(model.config.to_dict())
    np.testing.assert_allclose(inverse_frequencies(ours.dim_per_head, ours.rope_theta, ours.llama3_rope),
                               expected.numpy(), rtol=1e-6)
    assert len(set(np.round(expected.numpy() / inverse_frequencies(8, 1e4), 4))) == 3  # scaled, blended, kept


def test_config_switches():
    qwen = DecoderConfig.from_hf_config(qwen2_5_vl_text().config.to_dict())
    assert (qwen.qkv_bias, qwen.o_bias, qwen.mlp_bias) == (True, False, False)
    lla = DecoderConfig.from_hf_config(llama().config.to_dict())
    assert (lla.qkv_bias, lla.o_bias, lla.mlp_bias, lla.rope_theta) == (True, True, True, 5000.0)
    with pytest.raises(ValueError, match="rope type 'yarn'"):
        DecoderConfig.from_hf_config({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})
