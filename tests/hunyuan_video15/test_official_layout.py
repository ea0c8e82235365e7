"""The official tencent/HunyuanVideo-1.5 layout, proved by a round trip to the diffusers keys.

No pip-side converter exists for HunyuanVideo-1.5, so the tiny diffusers references are renamed to
the official module names (the inverse of diffusers' scripts/convert_hunyuan_video1_5_to_diffusers.py,
written below as a table), saved in the official folder layout, converted through the spec's
`official` layout, and must give exactly the tree the `diffusers` layout gives.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from vidax.translator import AccountingError, convert, load_spec
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

from .helpers import perturb, save_diffusers, save_state_dict, torch
from .test_transformer import TINY as TINY_DIT
from .test_vae import TINY as TINY_VAE

# diffusers key (full match) -> official key, per diffusers' converter script.
DIT_TO_OFFICIAL = [
    (r"time_embed\.timestep_embedder\.linear_1\.(\w+)", r"time_in.mlp.0.\1"),
    (r"time_embed\.timestep_embedder\.linear_2\.(\w+)", r"time_in.mlp.2.\1"),
    (r"time_embed\.timestep_embedder_r\.linear_1\.(\w+)", r"time_r_in.mlp.0.\1"),
    (r"time_embed\.timestep_embedder_r\.linear_2\.(\w+)", r"time_r_in.mlp.2.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_1\.(\w+)", r"txt_in.t_embedder.mlp.0.\1"),
    (r"context_embedder\.time_text_embed\.timestep_embedder\.linear_2\.(\w+)", r"txt_in.t_embedder.mlp.2.\1"),
    (r"context_embedder\.time_text_embed\.text_embedder\.(linear_[12])\.(\w+)", r"txt_in.c_embedder.\1.\2"),
    (r"context_embedder\.proj_in\.(\w+)", r"txt_in.input_embedder.\1"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.(norm[12])\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.\2.\3"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.self_attn_proj.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc1.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.mlp.fc2.\2"),
    (r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.norm_out\.linear\.(\w+)", r"txt_in.individual_token_refiner.blocks.\1.adaLN_modulation.1.\2"),
    (r"context_embedder_2\.norm\.(\w+)", r"byt5_in.layernorm.\1"),
    (r"context_embedder_2\.linear_(\d)\.(\w+)", r"byt5_in.fc\1.\2"),
    (r"image_embedder\.norm_in\.(\w+)", r"vision_in.proj.0.\1"),
    (r"image_embedder\.linear_1\.(\w+)", r"vision_in.proj.1.\1"),
    (r"image_embedder\.linear_2\.(\w+)", r"vision_in.proj.3.\1"),
    (r"image_embedder\.norm_out\.(\w+)", r"vision_in.proj.4.\1"),
    (r"x_embedder\.proj\.(\w+)", r"img_in.proj.\1"),
    (r"cond_type_embed\.weight", r"cond_type_embedding.weight"),
    (r"transformer_blocks\.(\d+)\.norm1\.linear\.(\w+)", r"double_blocks.\1.img_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.norm1_context\.linear\.(\w+)", r"double_blocks.\1.txt_mod.linear.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.to_([qkv])\.(\w+)", r"double_blocks.\1.img_attn_\2.\3"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_([qk])\.weight", r"double_blocks.\1.img_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.to_out\.0\.(\w+)", r"double_blocks.\1.img_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.attn\.add_([qkv])_proj\.(\w+)", r"double_blocks.\1.txt_attn_\2.\3"),
    (r"transformer_blocks\.(\d+)\.attn\.norm_added_([qk])\.weight", r"double_blocks.\1.txt_attn_\2_norm.weight"),
    (r"transformer_blocks\.(\d+)\.attn\.to_add_out\.(\w+)", r"double_blocks.\1.txt_attn_proj.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.0\.proj\.(\w+)", r"double_blocks.\1.img_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff\.net\.2\.(\w+)", r"double_blocks.\1.img_mlp.fc2.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.0\.proj\.(\w+)", r"double_blocks.\1.txt_mlp.fc1.\2"),
    (r"transformer_blocks\.(\d+)\.ff_context\.net\.2\.(\w+)", r"double_blocks.\1.txt_mlp.fc2.\2"),
    (r"proj_out\.(\w+)", r"final_layer.linear.\1"),
]

VAE_TO_OFFICIAL = [
    (r"(encoder|decoder)\.(conv_in|conv_out)\.conv\.(\w+)", r"\1.\2.conv.\3"),
    (r"(encoder|decoder)\.norm_out\.gamma", r"\1.norm_out.gamma"),
    (r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", r"encoder.down.\1.block.\2.\3"),
    (r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", r"decoder.up.\1.block.\2.\3"),
    (r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.(.+)", r"encoder.down.\1.downsample.\2"),
    (r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)", r"decoder.up.\1.upsample.\2"),
    (r"(encoder|decoder)\.mid_block\.resnets\.0\.(.+)", r"\1.mid.block_1.\2"),
    (r"(encoder|decoder)\.mid_block\.resnets\.1\.(.+)", r"\1.mid.block_2.\2"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.norm\.gamma", r"\1.mid.attn_1.norm.gamma"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.to_([qkv])\.(\w+)", r"\1.mid.attn_1.\2.\3"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.proj_out\.(\w+)", r"\1.mid.attn_1.proj_out.\2"),
]


def rename(key: str, table) -> str:
    hits = [re.sub(pattern, repl, key) for pattern, repl in table if re.fullmatch(pattern, key)]
    assert len(hits) == 1, f"{key}: {len(hits)} renames"
    return hits[0]


def official_dit_state(state: dict) -> dict:
    """diffusers state dict -> official names: the refiner's q/k/v fused, the final AdaLN's halves swapped."""
    state = dict(state)
    out = {}
    for i in sorted({int(m.group(1)) for k in state if (m := re.match(r"context_embedder\.token_refiner\.refiner_blocks\.(\d+)\.", k))}):
        prefix = f"context_embedder.token_refiner.refiner_blocks.{i}.attn."
        for leaf in ("weight", "bias"):
            parts = [state.pop(f"{prefix}to_{p}.{leaf}") for p in "qkv"]
            out[f"txt_in.individual_token_refiner.blocks.{i}.self_attn_qkv.{leaf}"] = torch.cat(parts, 0)
    for leaf in ("weight", "bias"):
        scale, shift = state.pop(f"norm_out.linear.{leaf}").chunk(2, 0)
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = torch.cat([shift, scale], 0)
    out.update({rename(k, DIT_TO_OFFICIAL): v for k, v in state.items()})
    return out


def assert_same_tree(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for path in a:
        np.testing.assert_array_equal(np.asarray(a[path]), np.asarray(b[path]), err_msg=path)


@pytest.fixture(scope="module")
def dit_folders(tmp_path_factory):
    from diffusers import HunyuanVideo15Transformer3DModel

    torch.manual_seed(0)
    ref = perturb(HunyuanVideo15Transformer3DModel(**TINY_DIT))
    root = tmp_path_factory.mktemp("hv15_layouts")
    save_diffusers(ref, root / "diffusers" / "transformer")
    save_state_dict(official_dit_state(ref.state_dict()), root / "official" / "transformer" / "480p_t2v")
    return root, HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.config)))


def test_transformer_official_equals_diffusers(dit_folders):
    root, model = dit_folders
    spec, shapes = load_spec("hunyuan_video15/transformer"), model.param_shapes()
    from_diffusers = convert(spec, root / "diffusers", shapes)
    from_official = convert(spec, root / "official", shapes, subfolder="transformer/480p_t2v")
    assert_same_tree(from_official, from_diffusers)


def test_transformer_official_unknown_key_fails(dit_folders, tmp_path):
    """An official checkpoint with a module vidax does not model (e.g. a guidance embedder) is refused."""
    from safetensors.torch import load_file

    root, model = dit_folders
    state = load_file(root / "official" / "transformer" / "480p_t2v" / "diffusion_pytorch_model.safetensors")
    state["guidance_in.mlp.0.weight"] = torch.zeros(4, 4)
    save_state_dict(state, tmp_path)
    with pytest.raises(AccountingError, match="guidance_in"):
        convert(load_spec("hunyuan_video15/transformer"), tmp_path, model.param_shapes())


def test_vae_official_equals_diffusers(tmp_path):
    from diffusers import AutoencoderKLHunyuanVideo15

    torch.manual_seed(0)
    ref = perturb(AutoencoderKLHunyuanVideo15(**TINY_VAE), seed=3)
    save_diffusers(ref, tmp_path / "diffusers" / "vae")
    save_state_dict({rename(k, VAE_TO_OFFICIAL): v for k, v in ref.state_dict().items()}, tmp_path / "official" / "vae")
    spec = load_spec("hunyuan_video15/vae")
    shapes = HunyuanVideo15VAE(VAEConfig.from_hf_config(dict(ref.config))).param_shapes()
    assert_same_tree(convert(spec, tmp_path / "official", shapes), convert(spec, tmp_path / "diffusers", shapes))
