"""Wan 2.1 / 2.2 for `vidax-train`: text-to-video, image-to-video (Wan2.1 I2V, Wan2.2 I2V-A14B), first-last-frame
(FLF2V), TI2V-5B and the A14B experts. The DiT's inputs are built as `vidax.zoo.wan`'s predictor builds them:

- I2V / FLF2V: the sample's first frame (and last, FLF2V) VAE-encoded as the pipeline encodes its images
  (followed by zero frames, a 4-channel frame mask) concatenated to the noisy latents, and Wan2.1's CLIP tokens of
  the frame(s) (`WanFamily.encode_images`): the condition musubi-tuner's Wan I2V training caches.
- TI2V-5B: per-token timesteps; a row given its first frame (`--first-frame-p`) has its first latent frame clean,
  its tokens at t = 0 and out of the loss, as the pipeline's image-to-video substitutes it.
- A14B: `transformer` (high noise) sees σ >= boundary, `transformer_2` the rest (`--expert`).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from vidax.train.families.base import Expert, TrainFamily, TrainRefused, first_frame_keep

EXPERTS = {"high": ("transformer", "high_noise"), "low": ("transformer_2", "low_noise")}


@dataclasses.dataclass(frozen=True)
class WanInputs:
    """The Wan DiT's arguments for a batch (follows `vidax.zoo.wan.base_family.WanPredict`)."""

    dtype: str
    patch: tuple[int, int]  # (ph, pw): TI2V's per-token timesteps follow the patch grid
    per_token: bool  # Wan2.2 TI2V-5B (`expand_timesteps`)
    condition: bool  # I2V / FLF2V: the condition latents and mask concatenated on the channels
    image: bool  # Wan2.1 I2V / FLF2V: CLIP tokens `[B, n, 257, D]`

    def __call__(self, x0, noisy, timestep, sigmas, batch):
        dtype = jnp.dtype(self.dtype)
        text = batch["text"].astype(dtype)
        image = None
        if self.image:
            clip = batch["clip"]
            image = clip.reshape(-1, *clip.shape[2:]).astype(dtype)  # FLF2V: first and last of a row, consecutive
        if self.per_token:
            keep = first_frame_keep(batch, x0.shape[2])
            if keep is None:
                keep = jnp.zeros((x0.shape[0], 1, x0.shape[2], 1, 1), jnp.float32)
            x = keep * x0 + (1.0 - keep) * noisy
            per_frame = timestep[:, None] * (1.0 - keep[:, 0, :, 0, 0])  # [B, F']
            tokens = (x0.shape[3] // self.patch[0]) * (x0.shape[4] // self.patch[1])
            t = jnp.repeat(per_frame, tokens, axis=1)  # [B, seq]: the clean frame's tokens at t = 0
            return (x.astype(dtype), t, text, image), 1.0 - keep
        x = noisy if not self.condition else jnp.concatenate([noisy, batch["condition"].astype(noisy.dtype)], axis=1)
        return (x.astype(dtype), timestep.astype(jnp.float32), text, image), None

    def output(self, out, x0):
        return out


class WanTrainFamily(TrainFamily):
    block_list = "blocks"
    default_targets = ("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2")

    @property
    def grid(self) -> int:
        return self.family.size_grid

    @property
    def first_frame_p(self) -> float:  # TI2V-5B: the image-to-video share of its rows (as LTX-2's trainer)
        return 0.1 if self.family.model.expand_timesteps else 0.0

    def check(self) -> None:
        if self.family.vace:
            raise TrainRefused(f"{self.family.name}: vidax-train does not train VACE models yet")

    def experts(self, s) -> list[Expert]:
        if not self.family.model.two_experts:
            return [Expert("transformer")]
        b = float(s.boundary_ratio)
        return [Expert("transformer", "high_noise", b, 1.0), Expert("transformer_2", "low_noise", 0.0, b)]

    def encoding_settings(self, s) -> dict:
        return {"max_sequence_length": s.max_sequence_length}

    def encode_text(self, run, s, caption: str) -> dict:
        return {"text": self.family.encode_prompts(run, caption, None, s.max_sequence_length)}

    def encode(self, run, s, pixels: np.ndarray, caption: str) -> dict:
        from vidax.zoo.parts.wan_vae import WanVAE, normalize_latents

        fam, m = self.family, self.family.model
        text = self.encode_text(run, s, caption)["text"]
        part = fam.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        out = {"latents": normalize_latents(m.vae, WanVAE(m.vae).encode(params, jnp.asarray(pixels))), "text": text}
        if m.concat_condition:
            frame = lambda i: np.round((pixels[0, :, i].transpose(1, 2, 0) + 1.0) * 127.5).astype(np.uint8)  # noqa: E731
            cond = fam.encode_images(run, s, frame(0), frame(-1) if m.first_last_frame else None, text)
            out["condition"] = cond.latents
            if cond.image is not None:
                out["clip"] = cond.image[None]  # [1, 1 or 2 frames, 257, D]
        return out

    def dit_model(self, s, dtype: str = "bfloat16"):
        from vidax.zoo.wan.transformer import WanTransformer

        return WanTransformer(self.family.model.transformer, dtype=jnp.dtype(dtype))

    def example_conditions(self, s, batch: int, text: int) -> dict:
        import jax

        return {"text": jax.ShapeDtypeStruct((batch, text, self.family.model.transformer.text_dim), jnp.float32)}

    def inputs(self, model, s) -> WanInputs:
        m = self.family.model
        _, ph, pw = m.transformer.patch_size
        return WanInputs(jnp.dtype(model.dtype).name, (ph, pw), m.expand_timesteps,
                         m.concat_condition, m.transformer.has_image)
