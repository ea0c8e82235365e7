"""HunyuanVideo 1.0 prompt encoding (follows diffusers `HunyuanVideoPipeline.encode_prompt` and
`HunyuanVideoImageToVideoPipeline.encode_prompt`).

T2V: the Llama-3 tower (llava-llama-3's language model, `LlamaModel`) reads the prompt inside the
reference's video-description template, padded to `crop_start + 256` tokens; the pipeline keeps
`hidden_states[-3]` from token `crop_start` (95) on, with the mask cropped alike. The crop drops the
BOS, the system turn and the user header and keeps the prompt's closing `<|eot_id|>` (the template's
own `<|eot_id|>` after `{}`): that token is a valid text token of the DiT.

I2V: the Llava tower sees the image through 576 placeholder tokens expanded in place of `<image>`;
its `hidden_states[-3]` gives (a) the image tokens (positions 5..581) taken every 4th for the
token_replace model (every 2nd for latent_concat), all valid, and (b) the text tokens from
`crop_start - 1 + 576` (103 + 575) with the four tokens that close the user turn and open the
assistant's (`<|eot_id|><|start_header_id|>assistant<|end_header_id|>`) cut out; the mask is cropped
alike on the unexpanded ids. The DiT gets `[image tokens, text tokens]`.

Both: CLIP-L's pooled output of the raw prompt (77 tokens, no attention mask) is the pooled
conditioning.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.tokenizer import Tokenizer
from vidax.zoo.parts.encoders.common import by_layer

MAX_LENGTH = 256  # text tokens after the crop (the pipelines' `max_sequence_length`)
CLIP_MAX_LENGTH = 77
SKIP_LAYERS = 2  # hidden_states[-(2 + 1)]
IMAGE_EMBED_INTERLEAVE = {"token_replace": 4, "latent_concat": 2}  # the I2V pipeline's default per model
END_HEADER = "<|end_header_id|>"  # the I2V text crop cuts around the assistant's header


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """A reference prompt template (diffusers' `prompt_template` dict); image fields for I2V only."""

    template: str
    crop_start: int
    image_emb_start: int | None = None
    image_emb_end: int | None = None
    image_emb_len: int | None = None


_ASPECTS = (
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
)

T2V_TEMPLATE = PromptTemplate(
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
    + _ASPECTS + "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>",
    crop_start=95,
)

I2V_TEMPLATE = PromptTemplate(
    "<|start_header_id|>system<|end_header_id|>\n\n<image>\nDescribe the video by detailing the following aspects "
    "according to the reference image: " + _ASPECTS + "\n\n<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    crop_start=103,
    image_emb_start=5,
    image_emb_end=581,
    image_emb_len=576,
)


def llama_text_features(model, params: Any, tokenizer: Tokenizer, prompts: Sequence[str], *,
                        template: PromptTemplate = T2V_TEMPLATE, max_length: int = MAX_LENGTH,
                        skip_layers: int = SKIP_LAYERS) -> tuple[jnp.ndarray, jnp.ndarray]:
    """T2V text tokens `(features [B, max_length, D], mask [B, max_length])` (`_get_llama_prompt_embeds`).

    Args:
        model: a `DecoderTextModel` (Llama); params its parameter tree.
        tokenizer: the Llama tokenizer (`load_tokenizer(repo, "tokenizer")`, right padding).
        prompts: user prompts.
        template: the reference template and its crop.
        max_length: tokens kept after the crop.
        skip_layers: hidden states skipped from the end (2 -> `hidden_states[-3]`).
    """
    crop = template.crop_start
    batch = tokenizer([template.template.format(p) for p in prompts], max_length=max_length + crop)
    hidden = _hidden_state(model, params, -(skip_layers + 1), jnp.asarray(batch.input_ids),
                           jnp.asarray(batch.attention_mask))
    return hidden[:, crop:], jnp.asarray(batch.attention_mask[:, crop:])


def clip_pooled(model, params: Any, tokenizer: Tokenizer, prompts: Sequence[str], *,
                max_length: int = CLIP_MAX_LENGTH) -> jnp.ndarray:
    """CLIP's pooled text embedding `[B, D]` of the raw prompts (`_get_clip_prompt_embeds`: no mask)."""
    batch = tokenizer(list(prompts), max_length=max_length)
    return _pooled(model, params, jnp.asarray(batch.input_ids))


def expand_image_tokens(input_ids: np.ndarray, image_token_id: int, pad_token_id: int,
                        template: PromptTemplate) -> tuple[np.ndarray, np.ndarray]:
    """diffusers `_expand_input_ids_with_image_tokens`: each `<image>` becomes `image_emb_len` placeholders
    (and `[image_emb_start, image_emb_end)` is set to them); the mask marks every non-pad token."""
    ids = np.asarray(input_ids)
    is_image = ids == image_token_id
    extra = int(is_image.sum(axis=1).max()) * (template.image_emb_len - 1)
    positions = np.cumsum(is_image * (template.image_emb_len - 1) + 1, axis=1) - 1
    out = np.full((ids.shape[0], ids.shape[1] + extra), pad_token_id, ids.dtype)
    rows, cols = np.nonzero(~is_image)
    out[rows, positions[rows, cols]] = ids[rows, cols]
    out[:, template.image_emb_start:template.image_emb_end] = image_token_id
    return out, (out != pad_token_id).astype(np.int32)


def _assistant_starts(input_ids: np.ndarray, end_header_id: int) -> np.ndarray:
    """Per row, the position after the last `<|end_header_id|>` of the unexpanded ids; a row whose prompt
    was truncated before the assistant header uses the sequence length (diffusers' fallback)."""
    starts = []
    for row in np.asarray(input_ids):
        found = np.nonzero(row == end_header_id)[0]
        starts.append(found[-1] + 1 if len(found) >= 3 else len(row))
    return np.asarray(starts)


def llava_text_features(model, params: Any, tokenizer: Tokenizer, prompts: Sequence[str], pixel_values, *,
                        end_header_id: int, template: PromptTemplate = I2V_TEMPLATE, max_length: int = MAX_LENGTH,
                        interleave: int = IMAGE_EMBED_INTERLEAVE["token_replace"],
                        skip_layers: int = SKIP_LAYERS) -> tuple[jnp.ndarray, jnp.ndarray]:
    """I2V tokens `(features [B, N_img + T, D], mask)`: image tokens then text tokens
    (`HunyuanVideoImageToVideoPipeline._get_llama_prompt_embeds`).

    Args:
        model: a `LlavaTextEncoder`; params its parameter tree (`model.config` gives the image and pad ids).
        tokenizer: the Llava tokenizer (right padding).
        prompts: user prompts (one image each).
        pixel_values: `[B, 3, S, S]` from `zoo.parts.encoders.clip.clip_preprocess` at the vision tower's size.
        end_header_id: the id of `<|end_header_id|>`.
        template: the reference template, its crop and image span.
        max_length: text tokens before expansion, after the crop.
        interleave: keep every n-th image token (4 for token_replace, 2 for latent_concat; 1 keeps all).
        skip_layers: hidden states skipped from the end (2 -> `hidden_states[-3]`).
    """
    cfg, crop, n_image = model.config, template.crop_start, template.image_emb_len
    batch = tokenizer([template.template.format(p) for p in prompts], max_length=max_length + crop)
    ids, mask = expand_image_tokens(batch.input_ids, cfg.image_token_id, cfg.pad_token_id, template)
    hidden = _hidden_state(model, params, -(skip_layers + 1), jnp.asarray(ids), jnp.asarray(mask),
                           jnp.asarray(pixel_values))

    # 1. Text tokens: from the crop, without the 4 tokens ending the user turn / opening the assistant's.
    starts = _assistant_starts(batch.input_ids, end_header_id)
    text_index = np.stack([np.concatenate([np.arange(crop - 1 + n_image, a - 5 + n_image), np.arange(a - 1 + n_image, ids.shape[1])])
                           for a in starts])
    mask_index = np.stack([np.concatenate([np.arange(crop, a - 4), np.arange(a, batch.input_ids.shape[1])]) for a in starts])
    text = jnp.take_along_axis(hidden, jnp.asarray(text_index)[..., None], axis=1)
    text_mask = np.take_along_axis(batch.attention_mask, mask_index, axis=1)

    # 2. Image tokens: the placeholder span, every `interleave`-th (the reference strides for 0 < n < 6).
    image = hidden[:, template.image_emb_start:template.image_emb_end]
    if 0 < interleave < 6:
        image = image[:, ::interleave]
    image_mask = np.ones(image.shape[:2], text_mask.dtype)
    return jnp.concatenate([image, text], axis=1), jnp.asarray(np.concatenate([image_mask, text_mask], axis=1))


@by_layer(static_argnums=(0, 2))
def _hidden_state(model, params: Any, index: int, *inputs) -> jax.Array:
    """One compiled unit per tower and shape: `hidden_states[index]` of `model.apply(params, *inputs)`."""
    return model.apply({"params": params}, *inputs).hidden_states[index]


@by_layer
def _pooled(model, params: Any, ids: jax.Array) -> jax.Array:
    return model.apply({"params": params}, ids).pooler_output
