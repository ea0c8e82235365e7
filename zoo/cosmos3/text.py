"""Cosmos3's prompt construction (follows diffusers `Cosmos3OmniPipeline.tokenize_prompt`).

Cosmos3 has no text encoder: the prompt's token ids go into the transformer. The prompt gets the
metadata the model was trained with appended, as sentences: for video "The video is {frames/fps:.1f}
seconds long and is of {fps:.0f} FPS." (this is where `--fps` reaches the model, besides the
temporal RoPE) then "This video is of {H}x{W} resolution."; for an image (1 frame) only "This image
is of {H}x{W} resolution.". The negative prompt (default "") gets the inverse sentences ("... is not
..."). Each is wrapped in a chat (an optional mode-specific system message, then the user message),
rendered by the tokenizer's own chat template with the generation prompt, tokenised without added
specials, and followed by the EOS and `<|vision_start|>` ids. No padding, no truncation: the two
prompts differ in length (`pad_prompts` batches them for guidance).

Whether the system message is used is the checkpoint's `default_use_system_prompt`
(model_index.json: true for Nano, false for Edge).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from vidax.zoo.parts.encoders.tokenizer import (
    TokenizerError,
    load_tokenizer,
    read_chat_template,
    render_chat,
    special_tokens,
)

SYSTEM_PROMPT_IMAGE = "You are a helpful assistant who will generate images from a give prompt."
SYSTEM_PROMPT_VIDEO = "You are a helpful assistant who will generate videos from a give prompt."
DURATION = "The video is {duration:.1f} seconds long and is of {fps:.0f} FPS."
IMAGE_RESOLUTION = "This image is of {height}x{width} resolution."
VIDEO_RESOLUTION = "This video is of {height}x{width} resolution."
INVERSE_DURATION = "The video is not {duration:.1f} seconds long and is not of {fps:.0f} FPS."
INVERSE_IMAGE_RESOLUTION = "This image is not of {height}x{width} resolution."
INVERSE_VIDEO_RESOLUTION = "This video is not of {height}x{width} resolution."
START_OF_GENERATION = "<|vision_start|>"


def _append(base: str, addition: str) -> str:
    base = base.rstrip(".")
    return f"{base}. {addition}" if base else addition


def augment(text: str, *, num_frames: int, height: int, width: int, fps: float, negative: bool = False,
            add_resolution: bool = True, add_duration: bool = True) -> str:
    """The prompt (or, `negative`, the negative prompt) with its duration and resolution sentences."""
    image = num_frames == 1
    if not image and add_duration:
        template = INVERSE_DURATION if negative else DURATION
        text = _append(text, template.format(duration=num_frames / fps, fps=fps))
    if add_resolution:
        if image:
            template = INVERSE_IMAGE_RESOLUTION if negative else IMAGE_RESOLUTION
        else:
            template = INVERSE_VIDEO_RESOLUTION if negative else VIDEO_RESOLUTION
        text = _append(text, template.format(height=height, width=width))
    return text


class PromptTokenizer:
    """The Cosmos3 tokenizer folder (`text_tokenizer/`) with its chat template.

    Args:
      folder: the tokenizer folder.
      use_system_prompt: the checkpoint's `default_use_system_prompt` (model_index.json).
    """

    def __init__(self, folder: str | Path, use_system_prompt: bool = True):
        self.tokenizer = load_tokenizer(folder)
        self.template = read_chat_template(folder)
        self.specials = special_tokens(folder)
        self.use_system_prompt = use_system_prompt
        backend = getattr(self.tokenizer, "backend", None)
        eos = self.tokenizer.settings.eos_token
        ids = [None if backend is None or tok is None else backend.token_to_id(tok) for tok in (eos, START_OF_GENERATION)]
        if None in ids:
            raise TokenizerError(f"{folder}: the Cosmos3 tokenizer needs a tokenizer.json with an EOS token and "
                                 f"{START_OF_GENERATION}")
        self.eos_id, self.start_of_generation_id = ids

    def chat_ids(self, text: str, image: bool, use_system_prompt: bool | None = None) -> list[int]:
        """One prompt's ids: the rendered chat, then EOS and `<|vision_start|>`."""
        system = self.use_system_prompt if use_system_prompt is None else use_system_prompt
        messages = [{"role": "system", "content": SYSTEM_PROMPT_IMAGE if image else SYSTEM_PROMPT_VIDEO}] if system else []
        messages.append({"role": "user", "content": text})
        rendered = render_chat(self.template, messages, add_generation_prompt=True, specials=self.specials,
                               add_vision_id=False)
        ids = self.tokenizer.encode(rendered, add_special_tokens=False, max_length=None)
        return list(ids) + [self.eos_id, self.start_of_generation_id]

    def __call__(self, prompt: str, negative_prompt: str | None = None, *, num_frames: int, height: int, width: int,
                 fps: float, use_system_prompt: bool | None = None, add_resolution: bool = True,
                 add_duration: bool = True) -> tuple[list[int], list[int]]:
        """`(cond_ids, uncond_ids)` for one generation (`tokenize_prompt`)."""
        kw = dict(num_frames=num_frames, height=height, width=width, fps=fps, add_resolution=add_resolution,
                  add_duration=add_duration)
        cond = augment(prompt, **kw)
        uncond = augment("" if negative_prompt is None else negative_prompt, negative=True, **kw)
        image = num_frames == 1
        return self.chat_ids(cond, image, use_system_prompt), self.chat_ids(uncond, image, use_system_prompt)


def pad_prompts(ids: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`(input_ids [B, L], text_mask [B, L], lengths)`: prompts right-padded to the longest."""
    lengths = [len(row) for row in ids]
    out = np.full((len(ids), max(lengths)), pad_id, np.int32)
    mask = np.zeros(out.shape, bool)
    for i, row in enumerate(ids):
        out[i, :len(row)], mask[i, :len(row)] = row, True
    return out, mask, lengths
