"""Wan VACE on the family contract (follows diffusers' `WanVACEPipeline` step by step).

The Wan family (`vidax.zoo.wan.family`) with the VACE DiT and its conditioning:

- inputs: `--video` (control or source clip), `--mask` (white = generate), `--reference-image` (repeatable),
  `--conditioning-scale` (one value or one per VACE layer), or `--extend CLIP` (the clip's last
  `--extend-overlap` frames kept under a black mask, grey frames generated after them). With no
  `--height/--width` the size is the video's as the pipeline sizes it (never scaled up); with no `--frames`,
  the video's frame count.
- encode: UMT5 as Wan; the control latents `[1, 96, refs + F', H', W']`: the VAE's latents of the video's
  inactive (mask < 0.5) and reactive parts, each reference image's latents (then zeros) in front, and the
  mask folded into 64 channels (zeros for the references) (`vidax.zoo.wan.vace_inputs`).
- sample: the latents `[1, z, refs + F', H', W']` (the `--latents` layout) through the VACE DiT with CFG.
- decode: the reference frames dropped, then the Wan VAE; `--extend` returns the whole longer clip.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.generator.contract import Decoded, DiTPart, Inputs, cfg_predict
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job
from vidax.zoo.generator.stages import Run
from vidax.zoo.video_io import read_image
from vidax.zoo.wan import vace_inputs as vi
from vidax.zoo.wan.base_family import WanFamily, WanSettings
from vidax.zoo.wan.vace import WanVACEConfig, WanVACETransformer
from vidax.zoo.parts.wan_vae import WanVAE

VACE_SPEC = "wan/vace_transformer"


@dataclasses.dataclass(frozen=True)
class VACECondition:
    """What the VACE DiT gets besides the latents at every step."""

    text: jax.Array  # [1 or 2, 512, text_dim]: prompt, then negative prompt when guided
    control: jax.Array  # [1, vace_in_channels, refs + F', H', W']
    scale: jax.Array  # [1, len(vace_layers)] fp32


jax.tree_util.register_dataclass(VACECondition, data_fields=["text", "control", "scale"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class VACEPredict:
    """The guided velocity at one step: both branches see the same control latents and scales."""

    guided: bool
    dtype: str
    layers: int  # the DiT's VACE layers (the dry run's shallow DiTs take the first scales)

    def __call__(self, run, latents, timestep, cond: VACECondition, knobs):
        dtype = jnp.dtype(self.dtype)
        t = jnp.full((latents.shape[0],), timestep, jnp.float32)
        x, text, control = latents.astype(dtype), cond.text.astype(dtype), cond.control.astype(dtype)
        scale = cond.scale[:, : self.layers]
        positive = (x, t, text[:1], None, control, scale)
        negative = (x, t, text[1:], None, control, scale) if self.guided else None
        return cfg_predict(run, positive, negative, knobs["scale"])


class WanVACEFamily(WanFamily):
    """Wan2.1 VACE (1.3B, 14B): a registry entry whose transformer's spec is `wan/vace_transformer`."""

    vace = True
    transformer_config = WanVACEConfig

    @property
    def vace_config(self) -> WanVACEConfig:
        return self.model.transformer

    # --- settings ---------------------------------------------------------------------------

    def resolve_settings(self, options: GenerateOptions, images: Mapping | None = None) -> WanSettings:
        """The size and frame count of the video (or `--extend` clip) when the flags give none."""
        if options.cache is not None:  # the step caches' first-block split would cut the VACE group, not Wan's blocks
            raise PipelineError(f"--cache is not supported for {self.name} yet (VACE's control blocks run first)")
        clip = (images or {}).get("video")
        if clip is not None and options.height is None and options.width is None:
            native = dataclasses.replace(options, height=None, width=None)
            s = super().resolve_settings(native, {})
            h, w = vi.video_size(clip.shape[1:3], s.height, s.width, self.size_grid)
            options = dataclasses.replace(options, height=h, width=w)
        extra = options.extra or {}
        if clip is not None and options.frames is None and extra.get("extend") is None:
            options = dataclasses.replace(options, frames=len(clip))
        return super().resolve_settings(options, images)

    def check_settings(self, s: WanSettings) -> None:
        super().check_settings(s)
        vi.parse_scale(s.conditioning_scale, len(self.vace_config.vace_layers))
        if s.extend is not None and (s.video is not None or s.mask is not None):
            raise PipelineError("--extend builds its own source clip and mask: give it without --video and --mask")
        if s.mask is not None and s.video is None:
            raise PipelineError("--mask needs --video (the mask marks what of the video to generate)")
        if s.extend_overlap is not None and s.extend is None:
            raise PipelineError("--extend-overlap is for --extend")
        if s.extend is not None and not 1 <= self.overlap(s) < s.frames:
            raise PipelineError(f"--extend-overlap must be from 1 to --frames - 1 = {s.frames - 1}, got {self.overlap(s)}")

    @staticmethod
    def overlap(s: WanSettings) -> int:
        return 1 if s.extend_overlap is None else s.extend_overlap

    def check_images(self, s: WanSettings, images: Mapping) -> None:
        clip, mask = images.get("video"), images.get("mask")
        if clip is None:
            return
        what = "--extend clip" if s.extend is not None else "--video"
        want = vi.video_size(clip.shape[1:3], s.height, s.width, self.size_grid)
        if want != (s.height, s.width):
            raise PipelineError(f"the {what} ({clip.shape[2]}x{clip.shape[1]}) is sized {want[1]}x{want[0]} as "
                                f"WanVACEPipeline sizes it (never up): give --width {want[1]} --height {want[0]}, or "
                                f"a larger video")
        if s.extend is not None:
            if len(clip) < self.overlap(s):
                raise PipelineError(f"the --extend clip has {len(clip)} frames, fewer than --extend-overlap "
                                    f"{self.overlap(s)}")
            return
        if len(clip) != s.frames:
            raise PipelineError(f"--video has {len(clip)} frames; --frames is {s.frames} (Wan takes 4k+1 frames: "
                                f"trim the video or give --frames {len(clip)} if it is 4k+1)")
        if mask is not None and len(mask) != len(clip):
            raise PipelineError(f"--mask has {len(mask)} frames, --video {len(clip)}: they must match")

    def latent_shape(self, s: WanSettings) -> tuple[int, ...]:
        one, z, frames, h, w = super().latent_shape(s)
        return (one, z, frames + len(s.reference_images or ()), h, w)

    # --- inputs -----------------------------------------------------------------------------

    def read_inputs(self, options: GenerateOptions) -> Inputs:
        inputs = super().read_inputs(options)
        extra = options.extra or {}
        images = dict(inputs.images)
        if extra.get("extend") is not None:
            images["video"] = vi.read_frames(extra["extend"])
        for field in ("video", "mask"):
            if extra.get(field) is not None:
                images[field] = vi.read_frames(extra[field])
        refs = extra.get("reference_images") or ()
        if refs:
            images["reference_images"] = tuple(read_image(path) for path in refs)
        return dataclasses.replace(inputs, images=images)

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: WanSettings, inputs: Inputs) -> VACECondition:
        text = self.encode_prompts(run, inputs.prompt, inputs.negative_prompt, s.max_sequence_length)
        control = self.control_latents(run, s, inputs.images)
        scale = vi.parse_scale(s.conditioning_scale, len(self.vace_config.vace_layers))
        return VACECondition(text, control, jnp.asarray([scale], jnp.float32))

    def source_frames(self, s: WanSettings, images: Mapping) -> tuple[np.ndarray, np.ndarray]:
        """(video `[1, 3, F, H, W]` in [-1, 1], mask `[1, 3, F, H, W]` in [0, 1]) as `preprocess_conditions`."""
        clip, mask = images.get("video"), images.get("mask")
        if s.extend is not None:
            clip, mask = vi.extension_video(clip, self.overlap(s), s.frames)
        if clip is None:
            video = np.zeros((1, 3, s.frames, s.height, s.width), np.float32)
        else:
            video = vi.lanczos_frames(clip, s.height, s.width)[None]
        if mask is None:
            return video, np.ones_like(video)
        return video, np.clip((vi.lanczos_frames(mask, s.height, s.width)[None] + 1) / 2, 0.0, 1.0)

    def control_latents(self, run: Run, s: WanSettings, images: Mapping) -> jax.Array:
        """`[1, vace_in_channels, refs + F', H', W']` (`prepare_video_latents` and `prepare_masks`)."""
        video, mask = self.source_frames(s, images)
        refs = [vi.reference_canvas(image, s.height, s.width) for image in images.get("reference_images", ())]
        binary = np.where(mask > 0.5, np.float32(1), np.float32(0))
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        vae = WanVAE(self.model.vae)
        encode = lambda x: self._normalize(vae.encode(params, jnp.asarray(x)))  # noqa: E731
        latents = jnp.concatenate([encode(video * (1 - binary)), encode(video * binary)], axis=1)
        for ref in refs:  # each reference goes in front of the ones before it (the pipeline's order)
            ref_latent = encode(ref[None, :, None])
            latents = jnp.concatenate([jnp.concatenate([ref_latent, jnp.zeros_like(ref_latent)], axis=1), latents],
                                      axis=2)
        latents.block_until_ready()
        run.done(params)
        masks = vi.mask_latents(mask[0], self.latent_shape(s)[2] - len(refs), len(refs))
        return jnp.concatenate([latents, jnp.asarray(masks)[None]], axis=1)

    def _normalize(self, latents: jax.Array) -> jax.Array:
        """`(z - mean) * (1 / std)`, as `prepare_video_latents` writes it."""
        cfg = self.model.vae
        mean = np.asarray(cfg.latents_mean, np.float32).reshape(1, -1, 1, 1, 1)
        inv_std = (np.float32(1) / np.asarray(cfg.latents_std, np.float32)).reshape(1, -1, 1, 1, 1)
        return (latents.astype(jnp.float32) - mean) * inv_std

    # --- denoise ----------------------------------------------------------------------------

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: WanSettings) -> WanVACETransformer:
        return WanVACETransformer(self.vace_config, dtype=jnp.dtype(tree["proj_out/kernel"].dtype))

    def predictor(self, s: WanSettings, expert: int, dit: WanVACETransformer, step: int) -> VACEPredict:
        return VACEPredict(s.guided, jnp.dtype(dit.dtype).name, len(dit.cfg.vace_layers))

    def sample(self, run: Run, s: WanSettings, latents: np.ndarray, cond: VACECondition) -> jax.Array:
        return super(WanFamily, self).sample(run, s, latents, cond)  # one pass (Wan's TI2V substitution is not VACE's)

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: WanSettings, latents: jax.Array) -> Decoded:
        """The reference frames dropped, then the Wan VAE; `--extend`: the clip continued by the new frames."""
        decoded = super().decode(run, s, latents[:, :, len(s.reference_images or ()):])
        if s.extend is None:
            return decoded
        clip = vi.clip_frames(vi.read_frames(s.extend), s.height, s.width)
        frames = vi.blend_extension(clip, decoded.frames, self.overlap(s))
        return dataclasses.replace(decoded, frames=frames)

    # --- memory -----------------------------------------------------------------------------

    def dry_run_dit(self, s: WanSettings, depth: int | None, dtype) -> WanVACETransformer:
        """`--dry-run`'s DiT: `depth` main blocks (None: all) and the VACE blocks whose hints they take."""
        cfg = self.vace_config
        if depth is not None:
            cfg = dataclasses.replace(cfg, num_layers=depth, vace_layers=tuple(i for i in cfg.vace_layers if i < depth))
        return WanVACETransformer(cfg, dtype=jnp.dtype(dtype))

    def dry_run_cond(self, s: WanSettings, batch: int) -> VACECondition:
        """`--dry-run`'s abstract condition (text rows of `batch`, the control latents, the scales)."""
        from vidax.zoo.wan.text import MAX_SEQUENCE_LENGTH

        cfg, f32 = self.vace_config, jnp.float32
        _, _, frames, h, w = self.latent_shape(s)
        return VACECondition(jax.ShapeDtypeStruct((batch, MAX_SEQUENCE_LENGTH, cfg.text_dim), f32),
                             jax.ShapeDtypeStruct((1, cfg.vace_in_channels, frames, h, w), f32),
                             jax.ShapeDtypeStruct((1, len(cfg.vace_layers)), f32))


    def memory_job(self, options) -> Job:
        """Wan's job with the VACE DiT's sizes (its VACE blocks counted as blocks)."""
        job = super().memory_job(options)
        cfg = self.vace_config
        dit = WanVACETransformer(cfg).memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.ffn_dim,
                                                   heads=cfg.num_attention_heads, text_dim=cfg.inner_dim)
        return dataclasses.replace(job, dit=dit, accelerator_units=VACE_ACCELERATOR_UNITS)


# Activation units (bf16 [B, S, D]) the VACE step holds on one TPU device beyond the planner's terms, read off XLA's
# v5e buffer report of the 1.3B step at 480x832x81: beside the stacked hints its feed-forward's two token chunks are
# live at once (four [B, S/2, ffn] buffers where the planner counts one chunk's two: 5.8 units), with more fp32
# stream and heads-major q/k/v copies than a plain Wan block's; the step planned 16.6 units under XLA without them
VACE_ACCELERATOR_UNITS = 16.0
