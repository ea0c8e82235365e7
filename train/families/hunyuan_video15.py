"""HunyuanVideo-1.5 for `vidax-train` (T2V and I2V, 480p / 720p, the CFG-distilled variants too). The DiT's inputs
are built as `vidax.zoo.hunyuan_video15`'s predictor builds them: the condition channels (the first frame's
latents and a first-frame mask for I2V, zeros for T2V) concatenated to the noisy latents, the Qwen2.5-VL and ByT5
features with their masks, and the SigLIP tokens of the first frame (zeros for T2V), all encoded by the family's
own `encode_text` / `encode_image` as a generation encodes its prompt and image.

Two cuts that cannot change the loss (the DiT masks what they drop) keep the joint sequence short: the prompts'
padding is cut to the longest prompt of the run (the pipeline pads Qwen's to 1000 tokens and ByT5's to 256), and a
text-to-video model gets one all-zero SigLIP token instead of 729 (all-zero image tokens are masked out)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from vidax.train.families.base import TrainFamily, TrainRefused


@dataclasses.dataclass(frozen=True)
class HunyuanVideo15Inputs:
    """The HunyuanVideo-1.5 DiT's arguments for a batch (follows `vidax.zoo.hunyuan_video15.family.HunyuanPredict`)."""

    dtype: str
    condition_channels: int  # the DiT's input channels past the latents' (condition latents + mask)
    image_tokens: int
    image_embed_dim: int
    i2v: bool

    def __call__(self, x0, noisy, timestep, sigmas, batch):
        dtype = jnp.dtype(self.dtype)
        b = noisy.shape[0]
        if self.i2v:
            condition, tokens = batch["condition"], batch["image_tokens"]
        else:  # text-to-video: zero condition channels and image tokens (the DiT masks them)
            condition = jnp.zeros((b, self.condition_channels, *noisy.shape[2:]), noisy.dtype)
            tokens = jnp.zeros((b, self.image_tokens, self.image_embed_dim), dtype)
        x = jnp.concatenate([noisy, condition.astype(noisy.dtype)], axis=1).astype(dtype)
        args = (x, timestep.astype(jnp.float32), batch["text"].astype(dtype), batch["text_mask"].astype(bool),
                batch["text_2"].astype(dtype), batch["text_mask_2"].astype(bool), tokens.astype(dtype), None)
        return args, None

    def output(self, out, x0):
        return out


class HunyuanVideo15TrainFamily(TrainFamily):
    text_keys = ("text", "text_mask", "text_2", "text_mask_2")
    default_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")

    @property
    def grid(self) -> int:
        return self.family.size_grid

    def check(self) -> None:
        if self.family.i2v and self.family.dit_config.use_meanflow:
            raise TrainRefused(f"{self.family.name}: vidax-train does not train the step-distilled (meanflow) "
                               "HunyuanVideo-1.5 models")

    def trim(self, conds: list[dict]) -> dict:
        out = {}
        for key, mask in (("text", "text_mask"), ("text_2", "text_mask_2")):
            masks = [np.asarray(c[mask], bool) for c in conds]
            length = max(1, max(int(m.sum()) for m in masks))
            if all(not m[length:].any() for m in masks):  # right-padded: the valid tokens come first
                out[key] = out[mask] = length
        return out

    def encode_text(self, run, s, caption: str) -> dict:
        features = self.family.encode_text(run, [caption])[0]
        return {"text": features.text, "text_mask": features.text_mask, "text_2": features.text_2,
                "text_mask_2": features.text_mask_2}

    def encode(self, run, s, pixels: np.ndarray, caption: str) -> dict:
        from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

        fam = self.family
        vae = HunyuanVideo15VAE(fam.vae_config)
        part = fam.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        out = {"latents": vae.latent_mean(params, jnp.asarray(pixels)) * vae.cfg.scaling_factor,
               **self.encode_text(run, s, caption)}
        if fam.i2v:
            frame = np.round((pixels[0, :, 0].transpose(1, 2, 0) + 1.0) * 127.5).astype(np.uint8)
            condition = fam.encode_image(run, frame, s)
            out["condition"], out["image_tokens"] = condition.latents, condition.tokens
        return out

    def dit_model(self, s, dtype: str = "bfloat16"):
        from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer

        return HunyuanVideo15Transformer(self.family.dit_config, dtype)

    def example_conditions(self, s, batch: int, text: int) -> dict:
        """`text` Qwen tokens and one (masked) ByT5 token: the prompts as `trim` leaves them, no quoted text."""
        import jax

        cfg = self.family.dit_config
        f32, flag = jnp.float32, jnp.bool_
        return {"text": jax.ShapeDtypeStruct((batch, text, cfg.text_embed_dim), f32),
                "text_mask": jax.ShapeDtypeStruct((batch, text), flag),
                "text_2": jax.ShapeDtypeStruct((batch, 1, cfg.text_embed_2_dim), f32),
                "text_mask_2": jax.ShapeDtypeStruct((batch, 1), flag)}

    def inputs(self, model, s) -> HunyuanVideo15Inputs:
        from vidax.zoo.hunyuan_video15.family import IMAGE_TOKENS

        cfg = model.cfg
        return HunyuanVideo15Inputs(jnp.dtype(model.dtype).name, cfg.in_channels - self.family.vae_config.latent_channels,
                                    IMAGE_TOKENS if self.family.i2v else 1, cfg.image_embed_dim, self.family.i2v)
