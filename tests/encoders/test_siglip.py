"""SigLIP vision tower against transformers (both key layouts) and its preprocessing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from tests.encoders.oracle import assert_close, converted_params
from tests.oracle import perturb
from vidax.zoo.parts.encoders.siglip import SiglipVisionModel, siglip_preprocess, siglip_vision_config

HF_CONFIG = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=44,
                 patch_size=14)  # 44 px: the stride-14 convolution drops a 2 px remainder, as so400m at 384 does
PIXELS = np.random.default_rng(0).normal(size=(2, 3, 44, 44)).astype(np.float32)


@pytest.fixture(scope="module")
def siglip():
    reference = perturb(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**HF_CONFIG)))
    ours = SiglipVisionModel(siglip_vision_config(reference.config.to_dict()))
    with torch.no_grad():
        ref_out = reference(torch.from_numpy(PIXELS), output_hidden_states=True)
    return reference, ours, ref_out


@pytest.mark.parametrize("prefix", ["", "vision_model."], ids=["transformers5", "transformers4"])
def test_per_layer_end_to_end_and_pooled(siglip, prefix, tmp_path):
    reference, ours, ref_out = siglip
    (tmp_path / "image_encoder").mkdir()
    state = {prefix + k: v.contiguous() for k, v in reference.state_dict().items()}
    save_file(state, tmp_path / "image_encoder" / "model.safetensors")
    out = ours.apply(converted_params("encoders/siglip_vision", tmp_path, ours, PIXELS), PIXELS)
    assert len(out.hidden_states) == len(ref_out.hidden_states)
    for i, ref_hidden in enumerate(ref_out.hidden_states):
        assert_close(out.hidden_states[i], ref_hidden, what=f"hidden state {i}")
    assert_close(out.last_hidden_state, ref_out.last_hidden_state, what="last_hidden_state (HunyuanVideo-1.5 I2V)")
    assert_close(out.pooled, ref_out.pooler_output, what="pooling head")


def test_saved_layout_is_transformers5(siglip, tmp_path):
    # save_pretrained is what the diffusers repos hold; check it converts as is
    reference, ours, ref_out = siglip
    reference.save_pretrained(tmp_path / "image_encoder")
    out = ours.apply(converted_params("encoders/siglip_vision", tmp_path, ours, PIXELS), PIXELS)
    assert_close(out.last_hidden_state, ref_out.last_hidden_state)


@pytest.mark.parametrize("shape", [(300, 250, 3), (96, 128, 3)])
def test_preprocess_matches_siglip_image_processor(shape):
    image = np.random.default_rng(2).integers(0, 256, size=shape, dtype=np.uint8)
    processor = transformers.SiglipImageProcessor(size={"height": 384, "width": 384})
    expected = processor(images=image, return_tensors="np")["pixel_values"]
    np.testing.assert_allclose(siglip_preprocess(image), expected, atol=1e-5, rtol=1e-5)
