"""What HunyuanVideo 1.0 and 1.5 do alike on the family contract.

Both run one DiT in its weights' dtype (sizes read off its converted tree) over the reference's
unshifted `linspace(1, 0, steps + 1)[:-1]` grid; their image-to-video variants take `--image`, whose
aspect bucket decides the size; the VAE's output becomes frames as diffusers' `postprocess_video`
does; and the planner sees joint attention (the text tokens are in every block's sequence).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.generator.contract import DiTPart, Family, Settings
from vidax.zoo.compute.planner import Job


class HunyuanBase(Family):
    """A HunyuanVideo family: subclasses supply `dit_config` and `i2v`."""

    i2v: bool

    def heads(self) -> int:
        return self.dit_config.num_attention_heads

    def image_roles(self) -> dict[str, bool]:
        return {"image": True} if self.i2v else {}

    def base_sigmas(self, s: Settings) -> np.ndarray:
        """The reference's grid before the shift: `linspace(1, 0, steps + 1)[:-1]`."""
        return np.linspace(1.0, 0.0, s.steps + 1)[:-1]

    def dit_parts(self, s: Settings) -> list[DiTPart]:
        return [self.component("transformer")]

    @staticmethod
    def tree_shapes(tree: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
        """The converted DiT tree's shapes."""
        return {p: tuple(a.shape) for p, a in tree.items()}

    @staticmethod
    def weights_dtype(tree: Mapping[str, np.ndarray]) -> str:
        """The DiT's compute dtype: its weights' (bf16 as shipped; `--dtype float32` for parity)."""
        return jnp.dtype(tree["x_embedder/proj/kernel"].dtype).name

    def planned_settings(self, options) -> Settings:
        """The settings `--plan` sizes for (I2V: the image's aspect bucket decides the size)."""
        images = {}
        if options.image is not None and self.i2v:
            from vidax.zoo.video_io import read_image

            images["image"] = read_image(options.image)
        return self.resolve_settings(options, images)


def video_frames(video: jax.Array) -> np.ndarray:
    """Frames `[F, H, W, 3]` float32 in [0, 1] of the VAE's `[1, 3, F, H, W]` in [-1, 1] (diffusers'
    `postprocess_video(output_type="np")`)."""
    out = jnp.clip(video.astype(jnp.float32) / 2 + 0.5, 0, 1)
    return np.asarray(jnp.moveaxis(out, 1, -1))[0]


def size_bucket(height: int, width: int, target_size: int, patch: int = 16, *, exact_wide: bool = True
                ) -> tuple[int, int]:
    """(height, width) of the reference's size bucket closest to `height / width` at `target_size`.

    Follows `generate_crop_size_list` + `get_closest_ratio`: every patch grid of about
    (target_size / patch)^2 cells with aspect ratio at most 4, the closest ratio not past the
    request's (a tall request: no taller bucket; a wide one: no wider, and with `exact_wide=False`,
    as HunyuanVideo-I2V's code has it, not its own ratio either).
    """
    patches = round((target_size / patch) ** 2)
    buckets, rows, cols = [], patches, 1
    while rows > 0:
        if max(rows, cols) / min(rows, cols) <= 4.0:
            buckets.append((rows * patch, cols * patch))  # (height, width)
        if (cols + 1) * rows <= patches:
            cols += 1
        else:
            rows -= 1
    ratio = height / width
    diffs = [round(h / w, 5) - ratio for h, w in buckets]
    wider = (lambda d: d >= 0) if exact_wide else (lambda d: d > 0)
    candidates = [(i, d) for i, d in enumerate(diffs) if (d <= 0 if ratio >= 1 else wider(d))]
    return buckets[min(candidates, key=lambda pair: abs(pair[1]))[0]]


def joint_job(dit: Any, vae: Any, latent_grid: tuple[int, int, int], s: Settings, *, text_tokens: int,
              dtype_bytes: int, text_encoder_params: int, vae_weight_bytes: int, vae_peak_activation_bytes: int,
              blockwise_attention: bool) -> Job:
    """The planner's job for a HunyuanVideo DiT (`dit`, with its VAE model `vae`) on latents of
    `latent_grid` (F', H', W'): every block group's sizes; the video tokens plus `text_tokens` in every
    block's sequence (joint attention); CFG's two branches as the batch; weights, activations and the
    residual stream in `dtype_bytes`."""
    cfg = dit.cfg
    sizes = dit.memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.mlp_dim, heads=cfg.num_attention_heads)
    f, h, w = latent_grid
    video_tokens = (f // cfg.patch_size_t) * (h // cfg.patch_size) * (w // cfg.patch_size)
    return Job(
        sizes,
        tokens=video_tokens + text_tokens,
        text_tokens=0,
        batch=2 if s.guided else 1,
        weight_bytes=dtype_bytes,
        activation_bytes=dtype_bytes,
        residual_bytes=dtype_bytes,
        text_encoder_params=text_encoder_params,
        text_encoder_bytes=dtype_bytes,
        vae_params=sum(math.prod(shape) for shape in vae.param_shapes().values()),
        vae_weight_bytes=vae_weight_bytes,
        vae_peak_activation_bytes=vae_peak_activation_bytes,
        blockwise_attention=blockwise_attention,
    )
