"""HunyuanVideo-1.5 prompt encoding (follows diffusers `HunyuanVideo15Pipeline.encode_prompt`).

Two towers from `vidax.zoo.parts.encoders`: the Qwen2.5-VL language model reads the prompt inside the
chat template with the reference's video-description system message; its third-to-last hidden
state, with the template's first 108 tokens cropped, gives the main text tokens. ByT5 reads only the
quoted text in the prompt (glyphs to render, `Text "OPEN". `); a prompt with no quotes gives zero
features and an all-False mask.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.decoder import DecoderTextModel
from vidax.zoo.parts.encoders.t5 import T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import Tokenizer, qwen_chat_prompt
from vidax.zoo.parts.encoders.common import by_layer

# The reference's system message; its source wraps lines with `\` inside the string literal, so
# the numbered items are separated by the 8 spaces of indentation the continuation keeps.
SYSTEM_MESSAGE = "        ".join([
    "You are a helpful assistant. Describe the video by detailing the following aspects: ",
    "1. The main content and theme of the video. ",
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects. ",
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects. ",
    "4. background environment, light, style and atmosphere. ",
    "5. camera angles, movements, and transitions used in the video.",
])
MLLM_MAX_LENGTH = 1000  # text tokens after the crop
TEMPLATE_CROP = 108  # tokens of the rendered system prompt dropped from the front
BYT5_MAX_LENGTH = 256
HIDDEN_STATE = -3  # hidden_states[-(2 + 1)]: two layers skipped

_QUOTED = re.compile(r"\"(.*?)\"|“(.*?)”")


@dataclasses.dataclass(frozen=True)
class TextFeatures:
    """Prompt features as the DiT takes them; masks are bool. Shapes `[B, T1, D1]`, `[B, T2, D2]`."""

    text: jax.Array
    text_mask: jax.Array
    text_2: jax.Array
    text_mask_2: jax.Array

    @staticmethod
    def concat(cond: "TextFeatures", uncond: "TextFeatures") -> "TextFeatures":
        return jax.tree.map(lambda c, u: jnp.concatenate([c, u], 0), cond, uncond)


jax.tree_util.register_dataclass(TextFeatures, data_fields=["text", "text_mask", "text_2", "text_mask_2"],
                                 meta_fields=[])


def glyph_text(prompt: str) -> str | None:
    """The reference's `extract_glyph_texts`: quoted spans, de-duplicated, as `Text "a". Text "b". `."""
    found = [a or b for a, b in _QUOTED.findall(prompt)]
    if len(found) > 1:
        found = list(dict.fromkeys(found))
    return ". ".join(f'Text "{t}"' for t in found) + ". " if found else None


class PromptEncoder:
    """Prompts -> `TextFeatures` for the DiT.

    Args:
        tokenizer, decoder, decoder_params: the Qwen2.5-VL tokenizer and text tower with its tree.
        tokenizer_2, byt5, byt5_params: the ByT5 tokenizer and encoder with its tree.
        max_length, crop_start, max_length_2: the reference's lengths (1000, 108, 256).
    """

    def __init__(self, tokenizer: Tokenizer, decoder: DecoderTextModel, decoder_params: Any, tokenizer_2: Tokenizer,
                 byt5: T5EncoderModel, byt5_params: Any, *, max_length: int = MLLM_MAX_LENGTH,
                 crop_start: int = TEMPLATE_CROP, max_length_2: int = BYT5_MAX_LENGTH):
        self.tokenizer, self.decoder, self.decoder_params = tokenizer, decoder, decoder_params
        self.tokenizer_2, self.byt5, self.byt5_params = tokenizer_2, byt5, byt5_params
        self.max_length, self.crop_start, self.max_length_2 = max_length, crop_start, max_length_2

    def mllm(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """Qwen2.5-VL features `[B, max_length, D]` and mask, template cropped."""
        texts = [qwen_chat_prompt(SYSTEM_MESSAGE, p) for p in prompts]
        batch = self.tokenizer(texts, max_length=self.max_length + self.crop_start, add_special_tokens=False)
        hidden = _run_decoder(self.decoder, self.decoder_params, jnp.asarray(batch.input_ids),
                              jnp.asarray(batch.attention_mask))
        return hidden[:, self.crop_start:], jnp.asarray(batch.attention_mask[:, self.crop_start:].astype(bool))

    def glyphs(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """ByT5 features `[B, max_length_2, d_model]` and mask of each prompt's quoted text."""
        d_model = self.byt5.config.d_model
        feats, masks = [], []
        for prompt in prompts:
            text = glyph_text(prompt)
            if text is None:
                feats.append(jnp.zeros((1, self.max_length_2, d_model), jnp.float32))
                masks.append(np.zeros((1, self.max_length_2), bool))
                continue
            batch = self.tokenizer_2([text], max_length=self.max_length_2)
            feats.append(_run_t5(self.byt5, self.byt5_params, jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask)))
            masks.append(batch.attention_mask.astype(bool))
        return jnp.concatenate(feats, 0), jnp.asarray(np.concatenate(masks, 0))

    def __call__(self, prompts: str | list[str]) -> TextFeatures:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        text, mask = self.mllm(prompts)
        text_2, mask_2 = self.glyphs(prompts)
        return TextFeatures(text, mask, text_2, mask_2)


@by_layer
def _run_decoder(decoder: DecoderTextModel, params: Any, ids: jax.Array, mask: jax.Array) -> jax.Array:
    return decoder.apply({"params": params}, ids, mask).hidden_states[HIDDEN_STATE]


@by_layer
def _run_t5(byt5: T5EncoderModel, params: Any, ids: jax.Array, mask: jax.Array) -> jax.Array:
    return byt5.apply({"params": params}, ids, mask)[0]
