"""Cosmos-Predict2.5's text features: Cosmos-Reason1 (Qwen2.5-VL-7B) hidden states as
`Cosmos2_5_PredictBasePipeline._get_prompt_embeds` builds them, on the shared decoder text tower.

Each prompt is wrapped in a (system, user) chat with list-of-parts contents, rendered by the
tokenizer's own chat template without the generation prompt, tokenised without added specials,
truncated and right-padded to 512 tokens, and run through the decoder with no attention mask
(causal only: padding tokens are ordinary tokens to it, and their rows are kept). Every hidden
state after the embeddings (the last one after the final norm) is standardised over its features
with the unbiased standard deviation, `(h - mean) / (std + 1e-8)`, and the layers are concatenated
on the feature axis: 28 x 3584 = 100352 features per token for Reason1-7B, which the DiT's
`crossattn_proj` maps to 1024.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from vidax.zoo.parts.encoders.tokenizer import (
    Tokenizer,
    load_tokenizer,
    read_chat_template,
    render_chat,
    special_tokens,
)

MAX_LENGTH = 512
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
# The reference pipelines' negative prompt (diffusers DEFAULT_NEGATIVE_PROMPT; cosmos_predict2/config.py)
DEFAULT_NEGATIVE_PROMPT = (
    "The video captures a series of frames showing ugly scenes, static with no motion, motion blur, "
    "over-saturation, shaky footage, low resolution, grainy texture, pixelated images, poorly lit areas, "
    "underexposed and overexposed scenes, poor color balance, washed out colors, choppy sequences, "
    "jerky movements, low frame rate, artifacting, color banding, unnatural transitions, outdated special effects, "
    "fake elements, unconvincing visuals, poorly edited content, jump cuts, visual noise, and flickering. "
    "Overall, the video is of poor quality."
)


class PromptTokenizer:
    """The Reason1 tokenizer with its chat template: prompts -> padded input ids `[B, max_length]`.

    Args:
      folder: the tokenizer folder (diffusers repo `tokenizer/`, or Qwen/Qwen2.5-VL-7B-Instruct).
    """

    def __init__(self, folder: str | Path):
        self.tokenizer: Tokenizer = load_tokenizer(folder)
        self.template = read_chat_template(folder)
        self.specials = special_tokens(folder)

    def text(self, prompt: str) -> str:
        """The rendered chat of one prompt."""
        messages = [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": prompt}]},
        ]
        return render_chat(self.template, messages, add_generation_prompt=False, specials=self.specials,
                           add_vision_id=False)

    def __call__(self, prompts: Sequence[str], max_length: int = MAX_LENGTH) -> np.ndarray:
        batch = self.tokenizer([self.text(p) for p in prompts], max_length=max_length, padding="max_length",
                               truncation=True, add_special_tokens=False)
        return batch.input_ids


def standardized_layers(hidden_states: jax.Array) -> jax.Array:
    """`[L+1, B, S, D]` hidden states (embeddings first) -> `[B, S, L*D]`: every layer after the
    embeddings standardised over its features (unbiased std + 1e-8), concatenated, in fp32."""
    layers = hidden_states[1:].astype(jnp.float32)
    mean = jnp.mean(layers, axis=-1, keepdims=True)
    std = jnp.std(layers, axis=-1, keepdims=True, ddof=1)
    normed = (layers - mean) / (std + 1e-8)  # [L, B, S, D]
    n, b, s, d = normed.shape
    return normed.transpose(1, 2, 0, 3).reshape(b, s, n * d)


def reason1_features(model, params, input_ids) -> jax.Array:
    """Text features `[B, S, L*D]` of padded ids, the decoder run unmasked as the reference runs it.

    Args:
      model: a `DecoderTextModel` (`DecoderConfig.from_hf_config(text_encoder/config.json)`).
      params: its variables (`{"params": tree}` converted with `encoders/decoder`).
      input_ids: `[B, S]` from `PromptTokenizer`.
    """
    out = model.apply(params, jnp.asarray(input_ids), None)
    return standardized_layers(out.hidden_states)


def encode_prompts(model, params, tokenizer: PromptTokenizer, prompts: Sequence[str],
                   negative_prompts: Sequence[str] | None = None, *, guidance: bool = True,
                   max_length: int = MAX_LENGTH) -> tuple[jax.Array, jax.Array | None]:
    """`(prompt_embeds, negative_prompt_embeds)` as the pipeline's `encode_prompt` returns them.

    The negative prompt defaults to `DEFAULT_NEGATIVE_PROMPT` (one per prompt); without guidance
    (`guidance_scale <= 1` in the reference) no negative features are computed.
    """
    features = reason1_features(model, params, tokenizer(prompts, max_length))
    if not guidance:
        return features, None
    negatives = [DEFAULT_NEGATIVE_PROMPT] * len(prompts) if negative_prompts is None else list(negative_prompts)
    if len(negatives) != len(prompts):
        raise ValueError(f"{len(negatives)} negative prompts for {len(prompts)} prompts")
    return features, reason1_features(model, params, tokenizer(negatives, max_length))
