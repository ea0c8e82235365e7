"""The zoo module's own parameter tree for a conversion spec and a component config: `{path: shape}` from
`jax.eval_shape` of the model each family builds from that config (nothing is allocated), one builder per
conversion spec. What a converted checkpoint of that config holds, leaf by leaf: `tests/realscale` checks
these trees against the reference classes' checkpoints for every registry model; `vidax.zoo.plan.synthetic`
writes folders of them.

    shapes = spec_shapes("wan/transformer", entry.config["transformer"])   # {"blocks/attn1/to_q/kernel": (30, 1536, 1536), ...}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from flax import traverse_util

Shapes = dict  # path -> shape


def module_shapes(module, *example) -> Shapes:
    """A linen module's params for `example` inputs (ShapeDtypeStructs): abstract init, flattened."""
    from vidax.zoo.compute.runtime import shapes_only

    with shapes_only():  # no backend started for a shape question
        tree = jax.eval_shape(lambda *a: module.init(jax.random.key(0), *a), *example)["params"]
    flat = traverse_util.flatten_dict(tree, sep="/")
    return {p: tuple(getattr(leaf, "value", leaf).shape) for p, leaf in flat.items()}


def _ids(length: int = 4):
    return jax.ShapeDtypeStruct((1, length), jnp.int32)


def _pixels(size: int):
    return jax.ShapeDtypeStruct((1, 3, size, size), jnp.float32)


def wan_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.wan.config import WanTransformerConfig
    from vidax.zoo.wan.transformer import WanTransformer

    return WanTransformer(WanTransformerConfig.from_hf_config(config)).param_shapes()


def wan_vace_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.wan.vace import WanVACEConfig, WanVACETransformer

    return WanVACETransformer(WanVACEConfig.from_hf_config(config)).param_shapes()


def wan_vae(config: Mapping) -> Shapes:
    from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig

    return WanVAE(WanVAEConfig.from_hf_config(config)).param_shapes()


def t5(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel

    return module_shapes(T5EncoderModel(T5Config.from_hf_config(config)), _ids(), _ids())


def clip_vision(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection, clip_vision_config

    vision = clip_vision_config(config)
    projection = "WithProjection" in (config.get("architectures") or ["WithProjection"])[0]  # as the family decides
    return module_shapes(CLIPVisionModelWithProjection(vision, with_projection=projection), _pixels(vision.image_size))


def siglip_vision(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.siglip import SiglipVisionModel, siglip_vision_config

    vision = siglip_vision_config(config)
    return module_shapes(SiglipVisionModel(vision), _pixels(vision.image_size))


def clip_text(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel

    return module_shapes(CLIPTextModel(CLIPTextConfig.from_hf_config(config)), _ids(), _ids())


def decoder(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel

    return module_shapes(DecoderTextModel(DecoderConfig.from_hf_config(config)), _ids(), _ids())


def llava(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.llava import LlavaConfig, LlavaTextEncoder

    cfg = LlavaConfig.from_hf_config(config)
    return module_shapes(LlavaTextEncoder(cfg), _ids(), _ids(), _pixels(cfg.vision.image_size))


def gemma(config: Mapping) -> Shapes:
    from vidax.zoo.parts.encoders.gemma import GemmaConfig, GemmaTextModel

    return module_shapes(GemmaTextModel(GemmaConfig.from_hf_config(config)), _ids(), _ids())


def cosmos_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.cosmos.config import CosmosTransformerConfig
    from vidax.zoo.cosmos.transformer import CosmosTransformer

    return CosmosTransformer(CosmosTransformerConfig.from_hf_config(config)).param_shapes()


def cosmos3_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.cosmos3.config import Cosmos3TransformerConfig
    from vidax.zoo.cosmos3.transformer import Cosmos3Transformer

    return Cosmos3Transformer(Cosmos3TransformerConfig.from_hf_config(config)).param_shapes()


def hunyuan_video_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.hunyuan_video.config import TransformerConfig
    from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer

    return HunyuanVideoTransformer(TransformerConfig.from_hf_config(config)).param_shapes()


def hunyuan_video_vae(config: Mapping) -> Shapes:
    from vidax.zoo.hunyuan_video.config import VAEConfig
    from vidax.zoo.hunyuan_video.vae import HunyuanVideoVAE

    return HunyuanVideoVAE(VAEConfig.from_hf_config(config)).param_shapes()


def hunyuan_video15_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.hunyuan_video15.config import TransformerConfig
    from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer

    return HunyuanVideo15Transformer(TransformerConfig.from_hf_config(config)).param_shapes()


def hunyuan_video15_vae(config: Mapping) -> Shapes:
    from vidax.zoo.hunyuan_video15.family import vae_config
    from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

    return HunyuanVideo15VAE(vae_config(config)).param_shapes()


def ltx2_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.config import TransformerConfig
    from vidax.zoo.ltx2.transformer import LTX2Transformer

    return LTX2Transformer(TransformerConfig.from_hf_config(config)).param_shapes()


def ltx2_connectors(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.config import ConnectorsConfig
    from vidax.zoo.ltx2.connectors import TextConnectors

    cfg = ConnectorsConfig.from_hf_config(config)
    tokens = cfg.video_connector_num_learnable_registers or 1  # a multiple of the registers, as the reference needs
    features = jax.ShapeDtypeStruct((1, tokens, cfg.text_dim), jnp.float32)
    return module_shapes(TextConnectors(cfg), features, jax.ShapeDtypeStruct((1, tokens), jnp.int32))


def ltx2_vae(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.config import VideoVAEConfig
    from vidax.zoo.ltx2.decoding.vae import LTX2VideoVAE

    return LTX2VideoVAE(VideoVAEConfig.from_hf_config(config)).param_shapes()


def ltx2_audio_vae(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.decoding.audio import LTX2AudioVAE
    from vidax.zoo.ltx2.config import AudioVAEConfig

    return LTX2AudioVAE(AudioVAEConfig.from_hf_config(config)).param_shapes()


def ltx2_vocoder(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.decoding.audio import LTX2Vocoder
    from vidax.zoo.ltx2.config import VocoderConfig

    return LTX2Vocoder(VocoderConfig.from_hf_config(config)).param_shapes()


def ltx2_diffusion_decoder(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.config import DiffusionDecoderConfig
    from vidax.zoo.ltx2.decoding.diffusion_decoder import LTX2DiffusionDecoder

    return LTX2DiffusionDecoder(DiffusionDecoderConfig.from_hf_config(config)).param_shapes()


def ltx_video_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.ltx_video.config import TransformerConfig
    from vidax.zoo.ltx_video.transformer import LTXVideoTransformer

    return LTXVideoTransformer(TransformerConfig.from_hf_config(config)).param_shapes()


def ltx_video_vae(config: Mapping) -> Shapes:
    from vidax.zoo.ltx_video.config import VAEConfig
    from vidax.zoo.ltx_video.vae import LTXVideoVAE

    return LTXVideoVAE(VAEConfig.from_hf_config(config)).param_shapes()


def ltx_video_upsampler(config: Mapping) -> Shapes:
    from vidax.zoo.ltx_video.config import UpsamplerConfig
    from vidax.zoo.ltx_video.upsampler import LTXLatentUpsampler

    return LTXLatentUpsampler(UpsamplerConfig.from_hf_config(config)).param_shapes()


def ltx2_latent_upsampler(config: Mapping) -> Shapes:
    from vidax.zoo.ltx2.decoding.upsampler import LTX2LatentUpsampler, UpsamplerConfig

    return LTX2LatentUpsampler(UpsamplerConfig.from_hf_config(config)).param_shapes()


def cogvideox_transformer(config: Mapping) -> Shapes:
    from vidax.zoo.cogvideox.config import CogVideoXTransformerConfig
    from vidax.zoo.cogvideox.transformer import CogVideoXTransformer

    return CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(config)).param_shapes()


def cogvideox_vae(config: Mapping) -> Shapes:
    from vidax.zoo.cogvideox.config import CogVideoXVAEConfig
    from vidax.zoo.cogvideox.vae import CogVideoXVAE

    return CogVideoXVAE(CogVideoXVAEConfig.from_hf_config(config)).param_shapes()


SPEC_SHAPES: dict[str, Callable[[Mapping], Shapes]] = {
    "wan/transformer": wan_transformer, "wan/vace_transformer": wan_vace_transformer, "wan/vae": wan_vae, "wan/vae22": wan_vae,
    "encoders/umt5": t5, "encoders/t5": t5, "encoders/clip_vision": clip_vision,
    "encoders/siglip_vision": siglip_vision, "encoders/clip_text": clip_text, "encoders/decoder": decoder,
    "encoders/llava": llava, "encoders/gemma": gemma,
    "cosmos/transformer": cosmos_transformer, "cosmos3/transformer": cosmos3_transformer,
    "hunyuan_video/transformer": hunyuan_video_transformer, "hunyuan_video/vae": hunyuan_video_vae,
    "hunyuan_video15/transformer": hunyuan_video15_transformer, "hunyuan_video15/vae": hunyuan_video15_vae,
    "ltx2/transformer": ltx2_transformer, "ltx2/connectors": ltx2_connectors, "ltx2/vae": ltx2_vae,
    "ltx2/audio_vae": ltx2_audio_vae, "ltx2/vocoder": ltx2_vocoder, "ltx2/diffusion_decoder": ltx2_diffusion_decoder,
    "ltx_video/transformer": ltx_video_transformer, "ltx_video/vae": ltx_video_vae,
    "ltx_video/upsampler": ltx_video_upsampler, "ltx2/latent_upsampler": ltx2_latent_upsampler,
    "cogvideox/transformer": cogvideox_transformer, "cogvideox/transformer15": cogvideox_transformer,
    "cogvideox/vae": cogvideox_vae,
}


def spec_shapes(spec: str, config: Mapping) -> Shapes:
    """The zoo tree `{path: shape}` of `spec`'s module built from `config` (a component's config.json).

    Raises:
      KeyError: no zoo module is known for `spec`.
    """
    if spec not in SPEC_SHAPES:
        raise KeyError(f"{spec}: no zoo module builds this spec's tree (known: {', '.join(SPEC_SHAPES)})")
    return SPEC_SHAPES[spec](config)
