"""The reference class of each conversion spec, built on the meta device from a registry config, and the
key maps that turn its state dict into the official layouts.

A config names its class as the real config.json does (`_class_name` for diffusers, `architectures` for
transformers); otherwise the spec's usual class stands in. The official layouts come from the spec test
fixtures' inverses of the authors' key maps; where diffusers ships a single-file converter for that
layout, `CONVERTERS` names it and the test maps the official table back through it (the inverse is then
checked at the real sizes, not only the tiny ones).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Mapping

import torch

# the spec's usual reference class when the config names none
DEFAULT_CLASS = {
    "wan/transformer": "WanTransformer3DModel", "wan/vace_transformer": "WanVACETransformer3DModel", "wan/vae": "AutoencoderKLWan", "wan/vae22": "AutoencoderKLWan",
    "encoders/umt5": "UMT5EncoderModel", "encoders/t5": "T5EncoderModel", "encoders/clip_vision": "CLIPVisionModel",
    "encoders/siglip_vision": "SiglipVisionModel", "encoders/clip_text": "CLIPTextModel",
    "encoders/llava": "LlavaForConditionalGeneration",
    "cosmos/transformer": "CosmosTransformer3DModel", "cosmos3/transformer": "Cosmos3OmniTransformer",
    "hunyuan_video/transformer": "HunyuanVideoTransformer3DModel", "hunyuan_video/vae": "AutoencoderKLHunyuanVideo",
    "hunyuan_video15/transformer": "HunyuanVideo15Transformer3DModel", "hunyuan_video15/vae": "AutoencoderKLHunyuanVideo15",
    "ltx2/transformer": "LTX2VideoTransformer3DModel", "ltx2/connectors": "LTX2TextConnectors",
    "ltx2/vae": "AutoencoderKLLTX2Video", "ltx2/audio_vae": "AutoencoderKLLTX2Audio", "ltx2/vocoder": "LTX2Vocoder",
    "ltx2/diffusion_decoder": "LTX2VideoDiffusionDecoderModel",
    "ltx_video/transformer": "LTXVideoTransformer3DModel", "ltx_video/vae": "AutoencoderKLLTXVideo",
    "ltx_video/upsampler": "LTXLatentUpsamplerModel", "ltx2/latent_upsampler": "LTX2LatentUpsamplerModel",
    "cogvideox/transformer": "CogVideoXTransformer3DModel", "cogvideox/transformer15": "CogVideoXTransformer3DModel",
    "cogvideox/vae": "AutoencoderKLCogVideoX",
}
# diffusers classes that are not exported at the package's top level
_DIFFUSERS_MODULES = {"LTX2TextConnectors": "diffusers.pipelines.ltx2.connectors",
                      "LTX2Vocoder": "diffusers.pipelines.ltx2.vocoder",
                      "LTX2VocoderWithBWE": "diffusers.pipelines.ltx2.vocoder",
                      "LTXLatentUpsamplerModel": "diffusers.pipelines.ltx.modeling_latent_upsampler",
                      "LTX2LatentUpsamplerModel": "diffusers.pipelines.ltx2.latent_upsampler"}


def class_name(spec: str, config: Mapping, override: str | None = None) -> str:
    if override:
        return override
    named = config.get("_class_name") or (config.get("architectures") or [None])[0]
    if named is None and spec not in DEFAULT_CLASS:
        raise KeyError(f"{spec}: the registry config names no class (`_class_name` / `architectures`)")
    return named or DEFAULT_CLASS[spec]


def _diffusers_class(name: str):
    import diffusers

    found = getattr(diffusers, name, None)
    return found if found is not None else getattr(importlib.import_module(_DIFFUSERS_MODULES[name]), name)


def is_diffusers(name: str) -> bool:
    import diffusers

    return name in _DIFFUSERS_MODULES or hasattr(diffusers, name)


def _transformers_model(name: str, config: Mapping):
    import transformers

    cls = getattr(transformers, name)
    config = dict(config)
    hf = transformers.AutoConfig.for_model(**config) if "model_type" in config else cls.config_class(**config)
    if not isinstance(hf, cls.config_class):  # a text tower saved on its own (Qwen2_5_VLTextModel)
        hf = hf.get_text_config()
    return cls(hf)


@functools.lru_cache(maxsize=None)
def _meta_model(spec: str, config_json: str, name: str):
    config = json.loads(config_json)
    with torch.device("meta"):
        if is_diffusers(name):
            return _diffusers_class(name).from_config(config)
        return _transformers_model(name, config)


def meta_model(spec: str, config: Mapping, name: str):
    """The reference model of `spec` for `config` on the meta device (cached per config)."""
    return _meta_model(spec, json.dumps(config, sort_keys=True, default=list), name)


def saved_state(model, name: str) -> dict:
    """The (meta) tensors its library's `save_pretrained` writes, by key."""
    if is_diffusers(name):
        return dict(model.state_dict())
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    return dict(revert_weight_conversion(model, remove_tied_weights_from_state_dict(model.state_dict(), model)))


# --- official layouts --------------------------------------------------------------------------------


def _fixtures(module: str):
    return importlib.import_module(f"tests.{module}")


def _wan_transformer(state: dict) -> dict:
    fx = _fixtures("translator.wan_transformer_spec_fixtures")
    return {fx.official_key(k): v for k, v in state.items()}


def _wan_vace_transformer(state: dict) -> dict:
    fx = _fixtures("wan_vace.vace_spec_fixtures")
    return {fx.official_key(k): v for k, v in state.items()}


def _wan_vae(spec: str) -> Callable[[dict], dict]:
    return lambda state: {_fixtures("wan_vae.wan_vae_spec_fixtures").official_key(spec, k): v for k, v in state.items()}


def _ltx_video_vae(state: dict) -> dict:
    return _fixtures("ltx_video.references.ltx_spec_fixtures").official_vae_state(state, "0.9.5")  # the 0.9.5+ layout


def _ltx2_connectors(state: dict) -> dict:
    fx = _fixtures("ltx2.references.ltx2_spec_fixtures")
    return {fx.rename(k, fx.CONNECTORS_TO_OFFICIAL): v for k, v in state.items()}


def _ltx2_audio_vae(state: dict) -> dict:
    statistics = {"latents_mean": "mean-of-means", "latents_std": "std-of-means"}
    return {(f"audio_vae.per_channel_statistics.{statistics[k]}" if k in statistics else f"audio_vae.{k}"): v
            for k, v in state.items()}


def _umt5(state: dict) -> dict:
    fx = _fixtures("encoders.test_t5")
    return fx.to_official(state, fx.OFFICIAL_UMT5_NAMES)


def _attr(module: str, name: str) -> Callable[[dict], dict]:
    return lambda state: getattr(_fixtures(module), name)(state)


# (spec, spec layout) -> diffusers state dict -> the official file's
OFFICIAL: dict[tuple[str, str], Callable[[dict], dict]] = {
    ("wan/transformer", "official"): _wan_transformer,
    ("wan/vace_transformer", "official"): _wan_vace_transformer,
    ("wan/vae", "official"): _wan_vae("wan/vae"),
    ("wan/vae22", "official"): _wan_vae("wan/vae22"),
    ("encoders/umt5", "official"): _umt5,
    ("cosmos/transformer", "official"): _attr("cosmos.cosmos_spec_fixtures", "official_state_dict"),
    ("hunyuan_video/transformer", "official"): _attr("hunyuan_video.hunyuan_video_spec_fixtures", "official_dit_state"),
    ("hunyuan_video/vae", "official"): dict,  # the same keys in a torch.save
    ("hunyuan_video15/transformer", "official"): _attr("hunyuan_video15.hunyuan_spec_fixtures", "official_dit_state"),
    ("hunyuan_video15/vae", "official"): _attr("hunyuan_video15.hunyuan_spec_fixtures", "official_vae_state"),
    ("ltx_video/transformer", "official"): _attr("ltx_video.references.ltx_spec_fixtures", "official_dit_state"),
    ("ltx_video/vae", "official"): _ltx_video_vae,
    ("ltx2/transformer", "official"): _attr("ltx2.references.ltx2_spec_fixtures", "official_dit_state"),
    ("ltx2/connectors", "official"): _ltx2_connectors,
    ("ltx2/vae", "official"): _attr("ltx2.references.ltx2_spec_fixtures", "official_vae_state"),
    ("ltx2/audio_vae", "official"): _ltx2_audio_vae,
    ("ltx2/vocoder", "official"): _attr("ltx2.references.ltx2_spec_fixtures", "official_vocoder_state"),
    ("ltx2/diffusion_decoder", "official"): _attr("ltx2.references.ltx2_spec_fixtures", "official_diffusion_decoder_state"),
    ("cogvideox/transformer15", "sat"): _attr("cogvideox.cogvideox_spec_fixtures", "sat_state"),
    ("cogvideox/vae", "sat"): _attr("cogvideox.cogvideox_spec_fixtures", "sat_vae_state"),
}


def _converter(name: str) -> Callable[[dict], dict]:
    def convert(state: dict) -> dict:
        from diffusers.loaders import single_file_utils

        return getattr(single_file_utils, name)(dict(state))

    return convert


# diffusers' single-file converters of the official layouts: official state dict -> diffusers'
CONVERTERS: dict[str, Callable[[dict], dict]] = {
    "wan/transformer": _converter("convert_wan_transformer_to_diffusers"),
    "wan/vace_transformer": _converter("convert_wan_transformer_to_diffusers"),
    "wan/vae": _converter("convert_wan_vae_to_diffusers"),
    "cosmos/transformer": _converter("convert_cosmos_transformer_checkpoint_to_diffusers"),
    "hunyuan_video/transformer": _converter("convert_hunyuan_video_transformer_to_diffusers"),
    "ltx_video/transformer": _converter("convert_ltx_transformer_checkpoint_to_diffusers"),
    "ltx_video/vae": _converter("convert_ltx_vae_checkpoint_to_diffusers"),
    "ltx2/transformer": _converter("convert_ltx2_transformer_to_diffusers"),
    "ltx2/vae": _converter("convert_ltx2_vae_to_diffusers"),
    "ltx2/audio_vae": _converter("convert_ltx2_audio_vae_to_diffusers"),
}
