"""Llava (transformers `LlavaForConditionalGeneration`) as a text tower that also sees an image:
HunyuanVideo-I2V's `text_encoder` (xtuner/llava-llama-3-8b-v1_1-transformers).

The CLIP vision tower's `hidden_states[vision_feature_layer]` (-2), without its class token
(`vision_feature_select_strategy="default"`), goes through the two-layer projector and replaces the
embeddings of the image placeholder tokens (transformers' `masked_scatter`, row by row); the Llama
decoder then runs on the merged embeddings and every hidden state is returned.

The language model is `vidax.zoo.parts.encoders.decoder.DecoderTextModel`: its `embed` gives the token
embeddings, the image features are merged into them, and the decoder runs on the result (`inputs_embeds`).
Parameter paths mirror transformers 5 (`vision_tower/vision_model/...`, `multi_modal_projector/linear_1`,
`language_model/layers/...`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from vidax.zoo.parts.configs import check_known
from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection, clip_vision_config
from vidax.zoo.parts.encoders.common import ENCODER_SHARDING_RULES, TextOutput, activation
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.vision import VisionConfig
from vidax.zoo.compute.layers import Dense

SHARDING_RULES = ENCODER_SHARDING_RULES


@dataclasses.dataclass(frozen=True, kw_only=True)
class LlavaConfig:
    """Follows transformers `LlavaConfig` (its `vision_config` and `text_config` as our configs)."""

    vision: VisionConfig
    text: DecoderConfig
    image_token_id: int
    pad_token_id: int | None = None
    vision_feature_layer: int = -2
    vision_feature_select_strategy: str = "default"
    projector_hidden_act: str = "gelu"
    multimodal_projector_bias: bool = True

    # the keys `from_hf_config` reads (its towers' configs are checked by their own readers)
    READ: ClassVar[tuple[str, ...]] = ("vision_config", "text_config", "image_token_id", "image_token_index",
                                       "vision_feature_layer", "vision_feature_select_strategy",
                                       "projector_hidden_act", "multimodal_projector_bias")
    IGNORED: ClassVar[Mapping[str, str]] = {
        "image_seq_length": "image tokens the processor inserts; vidax counts the placeholders in the ids",
        "ignore_index": "training only: the loss's ignored label",
        "vocab_size": "transformers 4 copy of text_config's vocab_size",
    }

    def __post_init__(self):
        if self.vision_feature_select_strategy not in ("default", "full"):
            raise ValueError(f"Llava: vision_feature_select_strategy {self.vision_feature_select_strategy!r} "
                             "is not supported ('default' or 'full')")
        if not isinstance(self.vision_feature_layer, int):
            raise ValueError("Llava: a list of vision_feature_layer is not supported (one layer)")

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "LlavaConfig":
        """From a transformers `LlavaConfig` dict (`image_token_index` is the transformers 4 name)."""
        check_known(cls.__name__, hf, cls.READ, cls.IGNORED)
        image_token = hf.get("image_token_id", hf.get("image_token_index"))
        return cls(vision=clip_vision_config(hf["vision_config"]), text=DecoderConfig.from_hf_config(hf["text_config"]),
                   image_token_id=int(image_token), pad_token_id=hf.get("pad_token_id"),
                   vision_feature_layer=hf.get("vision_feature_layer", -2),
                   vision_feature_select_strategy=hf.get("vision_feature_select_strategy", "default"),
                   projector_hidden_act=hf.get("projector_hidden_act", "gelu"),
                   multimodal_projector_bias=hf.get("multimodal_projector_bias", True))


class Projector(nn.Module):
    """transformers `LlavaMultiModalProjector`: linear_1, activation, linear_2."""

    config: LlavaConfig

    @nn.compact
    def __call__(self, x):
        c = self.config
        dim, bias = c.text.hidden_size, c.multimodal_projector_bias
        h = activation(c.projector_hidden_act, "Llava projector")(Dense(dim, ("embed", "mlp"), bias, name="linear_1")(x))
        return Dense(dim, ("mlp", "embed"), bias, name="linear_2")(h)


def merge_image_features(embeds: jax.Array, input_ids: jax.Array, features: jax.Array, image_token_id: int) -> jax.Array:
    """Image features `[B, N, D]` into the placeholder positions of `embeds` `[B, S, D]`, in order, row by
    row (transformers' `masked_scatter` when every row holds N placeholders)."""
    is_image = input_ids == image_token_id
    index = jnp.clip(jnp.cumsum(is_image, axis=1) - 1, 0, features.shape[1] - 1)  # [B, S]
    gathered = jnp.take_along_axis(features, index[..., None], axis=1)
    return jnp.where(is_image[..., None], gathered.astype(embeds.dtype), embeds)


class LlavaTextEncoder(nn.Module):
    """The Llava tower as HunyuanVideo-I2V uses it.

    `__call__(input_ids [B, S], attention_mask [B, S], pixel_values [B, 3, H, W])` returns the language
    model's `TextOutput` (`hidden_states[i]` is transformers' `hidden_states[i]`); each row of
    `input_ids` holds one image's worth of placeholder tokens (`image_token_id`).

    Attributes:
      config: the Llava config.
      dtype: compute dtype.
    """

    config: LlavaConfig
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, input_ids, attention_mask, pixel_values) -> TextOutput:
        c = self.config
        vision = CLIPVisionModelWithProjection(c.vision, self.dtype, with_projection=False, name="vision_tower")
        features = vision(pixel_values).hidden_states[c.vision_feature_layer]
        if c.vision_feature_select_strategy == "default":
            features = features[:, 1:]  # drop the class token
        features = Projector(c, name="multi_modal_projector")(features)
        lm = DecoderTextModel(c.text, self.dtype, name="language_model")
        embeds = merge_image_features(lm.embed(input_ids), input_ids, features.astype(self.dtype), c.image_token_id)
        return lm(attention_mask=attention_mask, inputs_embeds=embeds)
