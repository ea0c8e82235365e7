"""Tiny diffusers LTX pipelines saved with `save_pretrained`, and the host-noise replay the parity tests use.

Every reference run draws its noise from one seeded torch generator in the reference's order; vidax draws
its own from the run's seed on the host (`Run.host_noise(stream, index, shape)`). For parity a test
replays the reference's draws: `Replay` maps (stream, index) to the torch draw the reference made there
(checking the shape), and is patched over `Run.host_noise`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers

from tests.oracle import perturb
from tests.encoders.test_tokenizer import t5_like_folder

from .ltx_spec_fixtures import dit_reference, perturbed, upsampler_reference, vae_reference

PROMPT = "a red kite over a grey sea"
NEGATIVE = "blurry, low quality"
T5 = dict(vocab_size=80, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu")


def components(seed: int, tmp: Path) -> dict:
    """A tiny 0.9.5+-style set: DiT (caption 32), timestep-conditioned VAE, T5 (32 wide), a T5-like tokenizer."""
    torch.manual_seed(seed)
    t5_like_folder(tmp / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp / "tokenizer_source")
    text_encoder = perturb(transformers.T5EncoderModel(transformers.T5Config(**T5)), seed=seed)
    return dict(transformer=dit_reference(seed=seed, caption_channels=32), vae=vae_reference("0.9.5", seed=seed + 1),
                text_encoder=text_encoder, tokenizer=tokenizer)


def static_scheduler():
    """The 0.9.5+ diffusers scheduler: static shift 1, no terminal stretch."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)


def dynamic_scheduler():
    """The 0.9.0 / 0.9.1 diffusers scheduler: dynamic shift 0.95..2.05 over 1024..4096 tokens, terminal 0.1."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_image_seq_len=1024, max_image_seq_len=4096,
                                           base_shift=0.95, max_shift=2.05, shift_terminal=0.1)


def upsampler(seed: int = 9):
    return perturbed(upsampler_reference(seed=seed, in_channels=8), seed)


class Replay:
    """`Run.host_noise` replaying a reference's torch draws: `record(stream, index, shape)` in the reference's
    order against a generator seeded like the reference's; lookups check the shape."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)
        self.draws: dict[tuple[int, int], np.ndarray] = {}
        self.used: set[tuple[int, int]] = set()

    def draw(self, shape) -> np.ndarray:
        return torch.randn(tuple(shape), generator=self.generator).numpy()

    def record(self, stream: int, index: int, shape) -> np.ndarray:
        self.draws[stream, index] = self.draw(shape)
        return self.draws[stream, index]

    def __call__(self, run, stream: int, index: int, shape) -> np.ndarray:
        key = (stream, index)
        if key not in self.draws:
            raise AssertionError(f"vidax drew noise {key} {tuple(shape)} the reference never drew")
        want = self.draws[key]
        if tuple(want.shape) != tuple(shape):
            raise AssertionError(f"noise {key}: vidax wants {tuple(shape)}, the reference drew {want.shape}")
        self.used.add(key)
        return want

    def install(self, monkeypatch) -> "Replay":
        """Patched over `Run.host_noise` (the family itself routes the second pass's per-step draws to
        their stream)."""
        from vidax.zoo.generator.stages import Run

        replay = self
        monkeypatch.setattr(Run, "host_noise", lambda run, stream, index, shape: replay(run, stream, index, shape))
        return self


def pack(latents: torch.Tensor) -> torch.Tensor:
    """diffusers `_pack_latents` with patch 1: `[B, C, F, H, W]` -> `[B, F·H·W, C]`."""
    b, c = latents.shape[:2]
    return latents.reshape(b, c, -1).transpose(1, 2)
