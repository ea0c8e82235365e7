"""T5 / ByT5 / UMT5 encoders against transformers, through the shipped specs (both UMT5 layouts)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
import transformers
from flax.traverse_util import flatten_dict

from tests.encoders.oracle import assert_close, converted_params, requires_pth_reader
from tests.oracle import perturb
from vidax.translator.errors import TranslatorError
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel, relative_position_buckets

SIZES = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4)
VARIANTS = {
    # name: (transformers config class, model class, spec, extra config)
    "t5_v1_1": (transformers.T5Config, transformers.T5EncoderModel, "encoders/t5", {"feed_forward_proj": "gated-gelu"}),
    "t5_v1_0": (transformers.T5Config, transformers.T5EncoderModel, "encoders/t5", {"feed_forward_proj": "relu"}),
    "umt5": (transformers.UMT5Config, transformers.UMT5EncoderModel, "encoders/umt5", {"feed_forward_proj": "gated-gelu"}),
}
# one padded and one full row: masking of padded keys must matter
IDS = np.array([[5, 17, 33, 9, 41, 1, 0, 0, 0, 0], [3, 60, 2, 11, 29, 8, 50, 44, 7, 1]], np.int32)
MASK = (np.arange(IDS.shape[1])[None] < np.array([[6], [10]])).astype(np.int32)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request, tmp_path_factory):
    config_cls, model_cls, spec, extra = VARIANTS[request.param]
    reference = perturb(model_cls(config_cls(**SIZES, **extra)))
    folder = tmp_path_factory.mktemp(request.param)
    reference.save_pretrained(folder / "text_encoder")
    config = T5Config.from_hf_config(reference.config.to_dict())
    ours = T5EncoderModel(config)
    params = converted_params(spec, folder, ours, IDS, MASK)
    with torch.no_grad():
        ref_out = reference(torch.from_numpy(IDS).long(), attention_mask=torch.from_numpy(MASK), output_hidden_states=True)
    # one compiled forward per variant, shared by its tests (the masks have one shape)
    return reference, jax.jit(ours.apply), params, ref_out, spec, folder


def test_config_matches_reference(variant):
    reference = variant[0]
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    assert ours.config.is_gated == reference.config.is_gated_act
    assert ours.config.act_name == reference.config.dense_act_fn
    assert ours.config.per_layer_position_bias == (reference.config.model_type == "umt5")


def test_per_layer_and_end_to_end(variant):
    _, forward, params, ref_out, *_ = variant
    last, hidden = forward(params, IDS, MASK)
    assert len(hidden) == len(ref_out.hidden_states)
    for i, ref_hidden in enumerate(ref_out.hidden_states):
        assert_close(hidden[i], ref_hidden, what=f"hidden state {i}")
    assert_close(last, ref_out.last_hidden_state, what="last_hidden_state")


def test_buckets_match_reference():
    attn = transformers.UMT5EncoderModel(transformers.UMT5Config(**SIZES)).encoder.block[0].layer[0].SelfAttention
    length = 300  # past max_distance=128: the logarithmic and clamped buckets are exercised
    relative = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    expected = attn._relative_position_bucket(relative).numpy()
    np.testing.assert_array_equal(relative_position_buckets(length, 32, 128), expected)


def test_padding_changes_output(variant):
    # the mask must reach the attention: unmasking the padding changes the valid tokens' outputs
    _, forward, params, *_ = variant
    masked, _ = forward(params, IDS, MASK)
    unmasked, _ = forward(params, IDS, np.ones_like(MASK))
    assert np.abs(np.asarray(masked[0, :6]) - np.asarray(unmasked[0, :6])).max() > 1e-4


def test_spec_rejects_missing_tensor(variant, tmp_path):
    from safetensors.torch import load_file, save_file

    reference, _, _, _, spec, folder = variant
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    state = load_file(folder / "text_encoder" / "model.safetensors")
    del state["encoder.block.1.layer.1.layer_norm.weight"]
    (tmp_path / "text_encoder").mkdir()
    save_file(state, tmp_path / "text_encoder" / "model.safetensors")
    with pytest.raises(TranslatorError, match="layer_norm"):
        converted_params(spec, tmp_path, ours, IDS, MASK)


# transformers UMT5 key -> the official Wan T5Encoder key (Wan-Video/Wan2.1 wan/modules/t5.py)
OFFICIAL_UMT5_NAMES = {
    r"shared\.weight": "token_embedding.weight",
    r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.relative_attention_bias\.weight":
        r"blocks.\1.pos_embedding.embedding.weight",
    r"encoder\.block\.(\d+)\.layer\.0\.SelfAttention\.([qkvo])\.weight": r"blocks.\1.attn.\2.weight",
    r"encoder\.block\.(\d+)\.layer\.0\.layer_norm\.weight": r"blocks.\1.norm1.weight",
    r"encoder\.block\.(\d+)\.layer\.1\.layer_norm\.weight": r"blocks.\1.norm2.weight",
    r"encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_0\.weight": r"blocks.\1.ffn.gate.0.weight",
    r"encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wi_1\.weight": r"blocks.\1.ffn.fc1.weight",
    r"encoder\.block\.(\d+)\.layer\.1\.DenseReluDense\.wo\.weight": r"blocks.\1.ffn.fc2.weight",
    r"encoder\.final_layer_norm\.weight": "norm.weight",
}


def to_official(state: dict, table: dict) -> dict:
    import re

    out = {}
    for key, value in state.items():
        names = [re.sub(p, r, key) for p, r in table.items() if re.fullmatch(p, key)]
        assert len(names) == 1, f"{key}: {names}"
        out[names[0]] = value
    return out


@pytest.fixture(scope="module")
def umt5_reference():
    config = transformers.UMT5Config(**SIZES, feed_forward_proj="gated-gelu")
    return perturb(transformers.UMT5EncoderModel(config), seed=1)


@requires_pth_reader
def test_official_wan_umt5_round_trip(umt5_reference, tmp_path):
    # tiny transformers weights -> official key names -> a torch zip .pth as Wan ships it -> our spec
    state = {k: v for k, v in umt5_reference.state_dict().items() if k != "encoder.embed_tokens.weight"}
    torch.save(to_official(state, OFFICIAL_UMT5_NAMES), tmp_path / "models_t5_umt5-xxl-enc-bf16.pth")
    config = T5Config.from_hf_config(umt5_reference.config.to_dict())
    ours = T5EncoderModel(config)
    params = converted_params("encoders/umt5", tmp_path, ours, IDS, MASK)
    # the official layout has no config.json: the sizes read off the tree must be the reference's
    shapes = {"/".join(path): leaf.shape for path, leaf in flatten_dict(params["params"]).items()}
    assert T5Config.from_shapes(shapes) == config
    with torch.no_grad():
        expected = umt5_reference(torch.from_numpy(IDS).long(), attention_mask=torch.from_numpy(MASK)).last_hidden_state
    assert_close(ours.apply(params, IDS, MASK)[0], expected)


def glyph_checkpoint(reference, path, wrapped: bool) -> None:
    """A ByT5 encoder saved as HunyuanVideo-1.5's Glyph-SDXL-v2 `byt5_model.pt` (encoder-stack keys)."""
    stack = {k.removeprefix("encoder."): v for k, v in reference.state_dict().items() if k != "shared.weight"}
    if wrapped:  # as Glyph-SDXL-v2 trained it: the text tower's encoder inside a wrapped module, beside other parts
        state = {"module.text_tower.encoder." + k: v for k, v in stack.items()}
        state["module.text_tower.mapper.weight"] = torch.zeros(2, 2)
        stack = {"state_dict": state}
    path.parent.mkdir(parents=True)
    torch.save(stack, path)


@requires_pth_reader
@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "wrapped"])
def test_official_hunyuan15_glyph_byt5_round_trip(tmp_path, wrapped):
    config = transformers.T5Config(**{**SIZES, "vocab_size": 390}, feed_forward_proj="gated-gelu")  # + added tokens
    reference = perturb(transformers.T5EncoderModel(config), seed=2)
    glyph_checkpoint(reference, tmp_path / "text_encoder" / "Glyph-SDXL-v2" / "checkpoints" / "byt5_model.pt", wrapped)
    ours = T5EncoderModel(T5Config.from_hf_config(reference.config.to_dict()))
    params = converted_params("encoders/t5", tmp_path, ours, IDS, MASK)
    with torch.no_grad():
        expected = reference(torch.from_numpy(IDS).long(), attention_mask=torch.from_numpy(MASK)).last_hidden_state
    assert_close(ours.apply(params, IDS, MASK)[0], expected)
