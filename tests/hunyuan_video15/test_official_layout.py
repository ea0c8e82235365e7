"""Both layouts of both specs convert to the tree computed independently from the diffusers keys.

The official tencent/HunyuanVideo-1.5 layout has no pip-side converter, so the tiny diffusers
references are renamed to the official module names (the inverse of diffusers'
scripts/convert_hunyuan_video1_5_to_diffusers.py, tables in hunyuan_spec_fixtures.py): the official
layout is proved by this round trip to the diffusers keys, exact to the bit.
"""

from __future__ import annotations

import pytest
import torch

from vidax.translator import AccountingError, convert, load_spec
from vidax.translator.testing import mismatches
from vidax.zoo.hunyuan_video15 import HunyuanVideo15Transformer, TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

from tests.oracle import save_state

from .hunyuan_spec_fixtures import TINY_DIT, TINY_VAE, transformer_cases, vae_cases


def model_shapes(spec_name: str) -> dict:
    if spec_name.endswith("transformer"):
        return HunyuanVideo15Transformer(TransformerConfig(**TINY_DIT)).param_shapes()
    return HunyuanVideo15VAE(VAEConfig(**TINY_VAE)).param_shapes()


@pytest.mark.parametrize("spec_name,build", [("hunyuan_video15/transformer", transformer_cases), ("hunyuan_video15/vae", vae_cases)],
                         ids=["transformer", "vae"])
def test_both_layouts_give_the_expected_tree(spec_name, build, tmp_path):
    spec, shapes = load_spec(spec_name), model_shapes(spec_name)
    cases = build(tmp_path)
    assert {c.name for c in cases} == {"diffusers", "official"}
    for case in cases:
        subfolder = "transformer/480p_t2v" if case.name == "official" and spec_name.endswith("transformer") else None
        source = case.source
        if subfolder:  # the official repo keeps one folder per variant
            (source / subfolder).mkdir(parents=True)
            (source / "diffusion_pytorch_model.safetensors").rename(source / subfolder / "diffusion_pytorch_model.safetensors")
        tree = convert(spec, source, shapes, subfolder=subfolder, dtype=case.dtype)
        assert sorted(tree) == sorted(shapes)
        assert mismatches(tree, case.expected) == [], case.name


def test_official_dit_with_an_unmodelled_module_is_refused(tmp_path):
    """A module vidax does not model (e.g. a guidance embedder) fails the conversion, naming the key."""
    from safetensors.torch import load_file

    case = next(c for c in transformer_cases(tmp_path / "built") if c.name == "official")
    state = load_file(case.source / "diffusion_pytorch_model.safetensors")
    state["guidance_in.mlp.0.weight"] = torch.zeros(4, 4)
    save_state(state, tmp_path / "extra")
    with pytest.raises(AccountingError, match="guidance_in"):
        convert(load_spec("hunyuan_video15/transformer"), tmp_path / "extra", model_shapes("transformer"))


def test_layout_is_detected(tmp_path):
    cases = {c.name: c for c in vae_cases(tmp_path)}
    from vidax.translator.fetch.sources import resolve

    spec = load_spec("hunyuan_video15/vae")
    assert {name: resolve(spec, c.source).layout.name for name, c in cases.items()} == {"diffusers": "diffusers", "official": "official"}


def test_official_transformer_config_names():
    """hyvideo's `HunyuanVideo_1_5_DiffusionTransformer` arguments (the official config.json) give the sizes
    diffusers' names give: the 8.3B 480p T2V model, and a meanflow (step-distilled) one."""
    official = {"hidden_size": 2048, "heads_num": 16, "mm_double_blocks_depth": 54, "mm_single_blocks_depth": 0,
                "mlp_width_ratio": 4.0, "patch_size": [1, 1, 1], "rope_dim_list": [16, 56, 56], "rope_theta": 256,
                "text_states_dim": 3584, "text_states_dim_2": 1472, "use_meanflow": False}
    assert TransformerConfig.from_official_config(official) == TransformerConfig()
    small = {**official, "hidden_size": 256, "heads_num": 4, "mm_double_blocks_depth": 3, "rope_dim_list": [16, 24, 24],
             "patch_size": [1, 2, 2], "use_meanflow": True}
    cfg = TransformerConfig.from_official_config(small)
    assert (cfg.num_attention_heads, cfg.attention_head_dim, cfg.num_layers, cfg.patch_size, cfg.use_meanflow) == (4, 64, 3, 2, True)
