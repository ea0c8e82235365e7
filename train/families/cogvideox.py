"""CogVideoX 1.0 / 1.5 text-to-video for `vidax-train`, as diffusers' `examples/cogvideo/train_cogvideox_lora.py`
trains it: the VAE posterior times `scaling_factor` as x0 (the mean here, as every family's), T5 features of the
caption (226 tokens, unmasked, as the pipeline encodes them), the DDPM v-prediction loss on the scheduler's ᾱ table
(`objective.VPrediction`) with integer timesteps drawn uniformly (`--timestep-sampling uniform`, the default here).
CogVideoX 1.5 (`patch_size_t` 2) needs an even count of latent frames: the first is repeated in front as that
script pads it. The DiT builds its RoPE from the latent grid as the pipeline does. Clips are 1 + 8k frames (the
VAE encodes 8 frames at a time after the first). The image-to-video models are refused."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from vidax.train.families.base import TrainFamily, TrainRefused
from vidax.train.objective import VPrediction


@dataclasses.dataclass(frozen=True)
class CogVideoXInputs:
    """The CogVideoX DiT's arguments for a batch (follows `vidax.zoo.cogvideox.family.CogVideoXPredict`, T2V)."""

    dtype: str

    def __call__(self, x0, noisy, timestep, sigmas, batch):
        dtype = jnp.dtype(self.dtype)
        text = batch["text"].astype(jnp.float32)  # the DiT keeps the text stream in fp32
        return (noisy.astype(dtype), timestep.astype(jnp.float32), text, None), None

    def output(self, out, x0):
        return out


class CogVideoXTrainFamily(TrainFamily):
    frame_step = 8
    default_sampling = "uniform"

    @property
    def grid(self) -> int:
        return self.family.size_multiple

    def check(self) -> None:
        if self.family.i2v:
            raise TrainRefused(f"{self.family.name}: vidax-train trains the CogVideoX text-to-video models only")

    def encoding_settings(self, s) -> dict:
        return {"max_sequence_length": s.max_sequence_length}

    def encode_text(self, run, s, caption: str) -> dict:
        return {"text": self.family.encode_text(run, s, caption, None)}

    def encode(self, run, s, pixels: np.ndarray, caption: str) -> dict:
        from vidax.zoo.cogvideox.vae import CogVideoXVAE

        fam = self.family
        vae, dit = fam.vae_config, fam.dit_config
        part = fam.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        moments = CogVideoXVAE(vae).encode_moments(params, jnp.asarray(pixels), tiled=s.vae_tiling)
        latents = moments[:, : moments.shape[1] // 2] * vae.scaling_factor
        if dit.patch_size_t and latents.shape[2] % dit.patch_size_t:  # 1.5: the first frame repeated in front
            pad = dit.patch_size_t - latents.shape[2] % dit.patch_size_t
            latents = jnp.concatenate([jnp.repeat(latents[:, :, :1], pad, axis=2), latents], axis=2)
        return {"latents": latents, **self.encode_text(run, s, caption)}

    def loss(self, s) -> VPrediction:
        from vidax.zoo.samplers import cogvideox_alphas_cumprod

        config = self.family.scheduler_config()
        if config.get("beta_schedule", "scaled_linear") != "scaled_linear":
            raise TrainRefused(f"{self.family.name}: its scheduler's beta_schedule {config['beta_schedule']!r} is not "
                               "CogVideoX's scaled_linear")
        keys = ("num_train_timesteps", "beta_start", "beta_end", "snr_shift_scale", "rescale_betas_zero_snr")
        table = cogvideox_alphas_cumprod(**{k: config[k] for k in keys if k in config})
        return VPrediction(tuple(float(a) for a in table))

    def dit_model(self, s, dtype: str = "bfloat16"):
        from vidax.zoo.cogvideox.transformer import CogVideoXTransformer

        return CogVideoXTransformer(self.family.dit_config, dtype=jnp.dtype(dtype), residual_dtype=jnp.float32)

    def example_conditions(self, s, batch: int, text: int) -> dict:
        import jax

        return {"text": jax.ShapeDtypeStruct((batch, s.max_sequence_length, self.family.dit_config.text_embed_dim),
                                             jnp.float32)}

    def inputs(self, model, s) -> CogVideoXInputs:
        return CogVideoXInputs(jnp.dtype(model.dtype).name)
