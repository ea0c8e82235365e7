"""LTX-2.x for `vidax-train`: the video of the joint audio + video DiT (LTX-2.0, 2.3, 2.5), its audio branch frozen.

The DiT's inputs follow Lightricks' LTX-2 trainer's text-to-video strategy (`ltx_trainer.training_strategies.
text_to_video`) where diffusers' transformer allows it: the packed video latents noised as x_t = (1 − σ)·x0 + σ·noise
with the velocity noise − x0 as the target; a share of rows (`--first-frame-p`, its `first_frame_conditioning_p`,
0.1) keeps its first latent frame clean, its tokens at timestep 0 and out of the loss (the image-to-video task);
the prompt's video and audio connector features with their mask. Lightricks' trainer leaves the audio modality
out of a video-only step; diffusers' `LTX2VideoTransformer3DModel` (and vidax's) always runs the audio stream, so
here it sees what it sees at a generation's first step: standard normal audio latents at σ = 1 (timestep 1000),
drawn per step on the host, and its output is not trained. `--audio` (training the audio with the clips' sound)
is not done.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vidax.train.families.base import TrainFamily, first_frame_keep

AUDIO_TIMESTEP = 1000.0  # the frozen audio stream's noise level: pure noise (σ = 1)


@dataclasses.dataclass(frozen=True)
class LTX2Inputs:
    """The LTX-2 DiT's arguments for a batch (follows `vidax.zoo.ltx2.family.LTX2Predict`'s single pass)."""

    dtype: str
    cfg: object  # the DiT's TransformerConfig (RoPE tables, depth)
    fps: float  # the RoPE's frame rate (the model's native conditioning fps)

    def __call__(self, x0, noisy, timestep, sigmas, batch):
        from vidax.zoo.ltx2 import latents as lat
        from vidax.zoo.ltx2.rope import default_dit_rope_tables
        from vidax.zoo.ltx2.transformer import DiTInputs

        dtype = jnp.dtype(self.dtype)
        b, _, f, h, w = x0.shape
        keep = first_frame_keep(batch, f)
        if keep is None:
            keep = jnp.zeros((b, 1, f, 1, 1), jnp.float32)
        x = keep * x0 + (1.0 - keep) * noisy
        tokens_keep = jnp.repeat(keep[:, 0, :, 0, 0], h * w, axis=1)  # [B, S]: the packed tokens' order (f, h, w)
        audio = batch["audio_noise"]
        audio_t = jnp.full((b,), AUDIO_TIMESTEP, jnp.float32)
        t = timestep.astype(jnp.float32)
        inputs = DiTInputs.make(
            lat.pack_video(x).astype(dtype), audio.astype(dtype), batch["text"].astype(dtype),
            batch["audio_text"].astype(dtype), lat.i2v_video_timestep(t, tokens_keep), num_layers=self.cfg.num_layers,
            text_mask=batch["text_mask"], audio_timestep=audio_t, sigma=t, audio_sigma=audio_t)
        rope = default_dit_rope_tables(self.cfg, f, h, w, audio.shape[1], fps=self.fps)
        return (inputs, jax.tree.map(jnp.asarray, rope)), 1.0 - keep

    def output(self, out, x0):
        from vidax.zoo.ltx2 import latents as lat

        return lat.unpack_video(out[0], x0.shape[2:])


class LTX2TrainFamily(TrainFamily):
    text_keys = ("text", "audio_text", "text_mask")
    default_targets = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                       "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0")
    frame_step = 8  # the video VAE's temporal factor: clips of 1 + 8k frames
    first_frame_p = 0.1  # Lightricks' trainer's first_frame_conditioning_p

    @property
    def grid(self) -> int:
        return self.family.model.vae.spatial_ratio

    def encode_text(self, run, s, caption: str) -> dict:
        text, audio_text, mask = self.family.encode_text(run, s, [caption])
        return {"text": text, "audio_text": audio_text, "text_mask": mask}

    def encode(self, run, s, pixels: np.ndarray, caption: str) -> dict:
        from vidax.zoo.ltx2 import latents as lat
        from vidax.zoo.ltx2.decoding.vae import LTX2VideoVAE, encode_peak_bytes
        from vidax.zoo.parts.vae_tiling import tiles_for

        cfg = self.family.model.vae
        params = run.load_part(self.family.component("vae"), "float32")
        weights = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
        _, _, f, h, w = pixels.shape
        tiles = tiles_for(s.vae_tiling, weights + encode_peak_bytes(cfg, f, h, w))
        z = LTX2VideoVAE(cfg).encode(params, jnp.asarray(pixels), tiling=tiles)
        latents = lat.normalize_video(jnp.asarray(z), params["latents_mean"], params["latents_std"])
        return {"latents": latents, **self.encode_text(run, s, caption)}

    def extras(self, batch: dict, rng: np.random.Generator, s) -> dict:
        frames = (batch["latents"].shape[2] - 1) * self.family.model.vae.temporal_ratio + 1
        _, c, length, mel = self.family.audio_shape(dataclasses.replace(s, frames=frames))
        return {"audio_noise": rng.standard_normal((len(batch["latents"]), length, c * mel), dtype=np.float32)}

    def dit_model(self, s, dtype: str = "bfloat16"):
        from vidax.zoo.ltx2.transformer import LTX2Transformer

        cfg = dataclasses.replace(self.family.model.transformer, perturbed_attn=True)  # as LTX2Family.build_dit
        return LTX2Transformer(cfg, use_cross_timestep=s.use_cross_timestep, dtype=jnp.dtype(dtype))

    def example_conditions(self, s, batch: int, text: int) -> dict:
        cfg = self.family.model.transformer
        widths = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
        _, c, length, mel = self.family.audio_shape(s)
        f32 = jnp.float32
        return {"text": jax.ShapeDtypeStruct((batch, text, widths[0]), f32),
                "audio_text": jax.ShapeDtypeStruct((batch, text, widths[1]), f32),
                "text_mask": jax.ShapeDtypeStruct((batch, text), jnp.bool_),
                "audio_noise": jax.ShapeDtypeStruct((batch, length, c * mel), f32)}

    def inputs(self, model, s) -> LTX2Inputs:
        return LTX2Inputs(jnp.dtype(model.dtype).name, model.cfg, float(s.conditioning_fps))
