"""What LTX-Video's DiT sees at one step and the guided velocity it gives (the family's predictor).

`LTXText` is the encoded prompt (and negative prompt); `LTXCondition` what one pass's steps read besides
the latents (text, RoPE tables, the conditioning mask and tokens); `LTXPredict` joins the branch rows
(prompt, negative prompt, STG-perturbed prompt) into one batch, runs the DiT once and combines them as
the reference pipelines do (CFG, CFG*, STG, guidance rescale).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.ltx_video import latents as L


@dataclasses.dataclass(frozen=True)
class LTXText:
    text: jax.Array  # [1 or 2, T, caption_channels]: prompt, then negative prompt
    mask: jax.Array  # [1 or 2, T]


@dataclasses.dataclass(frozen=True)
class LTXCondition:
    """What the predictor reads besides the latents (one pass)."""

    text: jax.Array
    text_mask: jax.Array
    rope_cos: jax.Array  # [1, S, D]
    rope_sin: jax.Array
    token_mask: jax.Array | None  # [1, S]: I2V first-frame mask, or the conditioning strengths
    init_tokens: jax.Array | None  # [1, S, C]: the conditioned tokens (image-conditioning noise)


jax.tree_util.register_dataclass(LTXText, data_fields=["text", "mask"], meta_fields=[])
jax.tree_util.register_dataclass(LTXCondition, data_fields=["text", "text_mask", "rope_cos", "rope_sin", "token_mask",
                                                            "init_tokens"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class LTXPredict:
    """The guided velocity at one step (hashable: one compiled unit per branch configuration).

    Branch rows: the prompt, then (CFG) the negative prompt, then (STG with blocks to skip) the prompt
    again with those blocks' self-attention replaced by its values.
    """

    reference: str  # "ltx", "i2v", "condition", "official"
    cfg: bool
    stg: bool  # the STG term is added
    stg_row: bool  # ... from a perturbed row (False: no blocks to skip, the prompt row stands in)
    cfg_star: bool
    rescale: bool  # apply the guidance rescale (knobs["rescale"])
    skip: tuple[int, ...]
    num_layers: int
    dtype: str
    noise: bool  # image-conditioning noise in knobs["noise"]

    def __call__(self, run, latents, timestep, cond: LTXCondition, knobs):
        x = latents.astype(jnp.float32)
        t = jnp.asarray(timestep, jnp.float32)
        if self.noise:  # hard-conditioned tokens re-noised before the model sees them (PerTokenEuler does the same)
            x = L.add_conditioning_noise(t, cond.init_tokens, x, knobs["noise_scale"], cond.token_mask, knobs["noise"])
        if self.reference == "i2v":
            ts = L.image_to_video_timestep(t, cond.token_mask)  # [1, S]
        elif self.reference in ("condition", "official") and cond.token_mask is not None:
            ts = L.condition_timestep(t, cond.token_mask)
        else:
            ts = jnp.full((1, 1), t)
        rows = [(x, cond.text[:1], cond.text_mask[:1], ts)]
        if self.cfg:
            rows.append((x, cond.text[1:2], cond.text_mask[1:2], ts))
        if self.stg_row:
            rows.append(rows[0])
        batch = len(rows)
        joined = _join(rows)
        skip = None
        if self.stg_row:
            mask = np.ones((batch, self.num_layers), np.float32)
            mask[batch - 1, list(self.skip)] = 0.0
            skip = jnp.asarray(mask)
        x_b, text_b, mask_b, ts_b = joined
        dtype = jnp.dtype(self.dtype)
        out = run(x_b, text_b.astype(dtype), mask_b, ts_b, cond.rope_cos, cond.rope_sin, skip).astype(jnp.float32)
        positive = out[:1]
        pred = positive
        if self.cfg:
            negative = out[1:2]
            if self.cfg_star:
                negative = L.cfg_star(positive, negative)
            pred = negative + knobs["scale"] * (positive - negative)
        if self.stg:
            perturbed = out[batch - 1:] if self.stg_row else positive
            pred = pred + knobs["stg"] * (positive - perturbed)
        if self.rescale:
            from vidax.zoo.samplers import rescale_guidance

            pred = rescale_guidance(pred, positive, knobs["rescale"])
        return pred


def _join(rows):
    """The branch rows as one batch (two rows: `cfg_batch`, on the data axis when dp = 2)."""
    from vidax.zoo.compute.sharding import cfg_batch

    first = tuple(jnp.broadcast_to(a, (1, *a.shape[1:])) for a in rows[0])
    if len(rows) == 1:
        return first
    rest = tuple(jnp.concatenate([jnp.broadcast_to(r[k], (1, *r[k].shape[1:])) for r in rows[1:]], axis=0)
                 for k in range(4))
    return cfg_batch(first, rest)
