"""LTX-2's two-stage generation (`--two-stage`), as diffusers documents it ("Two-stages Generation", LTX-2):

1. `LTX2Pipeline` at half the height and width, the request's settings (`output_type="latent"`);
2. `LTX2LatentUpsamplePipeline`: the stage-1 video latents de-normalised, x2 in space by the latent upsampler
   (no AdaIN, no tone mapping), as they are;
3. `LTX2Pipeline` at full size with the distilled LoRA (`two_stage_lora`, merged on top of the request's own
   LoRAs) from the upsampled video latents and the stage-1 audio latents: both normalised and re-noised to the
   first sigma (`noise_scale = 0.909375`: `x + 0.909375 (noise - x)`), then the three `STAGE_2_SIGMAS` on a
   flow-match Euler scheduler without dynamic shift or terminal stretch, video guidance 1 (every other
   guidance knob as the request's, as the documented call leaves them), then the usual decode.

The re-noise draws are host noise stream 4 (video tokens, then audio tokens), as diffusers draws them from its
generator in the packed token layouts. Stage 1's RoPE tables are built for its own (half) grid.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.generator.denoise import Denoisers, Schedule, denoise, place_dit
from vidax.zoo.generator.contract import FLOW_SAMPLERS
from vidax.zoo.ltx2 import latents as lat
from vidax.zoo.ltx2.rope import default_dit_rope_tables
from vidax.zoo.ltx2.decoding.upsampler import LTX2LatentUpsampler, UpsamplerConfig
from vidax.zoo.errors import PipelineError

# diffusers pipelines/ltx2/utils.py STAGE_2_DISTILLED_SIGMA_VALUES (ltx_pipelines' stage-2 grid)
STAGE_2_SIGMAS = (0.909375, 0.725, 0.421875)
RENOISE_STREAM = 4  # host noise: index 0 the video tokens, 1 the audio tokens


def stage_one(s):
    """The stage-1 settings: half the height and width."""
    return dataclasses.replace(s, height=s.height // 2, width=s.width // 2)


def stage_two(s):
    """The stage-2 settings: full size, the fixed sigmas, video guidance 1."""
    return dataclasses.replace(s, guidance=1.0, steps=len(STAGE_2_SIGMAS), sigmas=STAGE_2_SIGMAS, sampler=None,
                               shift=None)


def check(family, s, upsampler: UpsamplerConfig | None) -> None:
    """One-line errors before any work: an upsampler to run, x2 in space, and sizes it can halve."""
    if upsampler is None:
        raise PipelineError(f"--two-stage needs the spatial latent upsampler (latent_upsampler/ in "
                            f"{family.source.label}; Lightricks/LTX-2 ships one)")
    if upsampler.spatial_ratio != (2, 1) or upsampler.temporal_upsample:
        raise PipelineError(f"--two-stage: this latent upsampler scales by {upsampler.spatial_ratio[0]}/"
                            f"{upsampler.spatial_ratio[1]} (the two-stage pipeline doubles the size)")
    step = 2 * family.model.vae.spatial_ratio
    if s.height % step or s.width % step:
        raise PipelineError(f"--two-stage: height and width must be multiples of {step} (stage 1 runs at half "
                            f"size), got {s.height}x{s.width}")


def lora_record(s) -> dict | None:
    """What the sidecar keeps of stage 2's LoRA (None: stage 2 without one)."""
    from vidax.translator.lora import resolve_adapter

    return resolve_adapter(s.two_stage_lora).record() if s.two_stage_lora else None


def sample(family, run, s, latents: np.ndarray, cond, adapters: tuple, upsampler: UpsamplerConfig) -> jax.Array:
    """Stage 1 from `latents` (the stage-1 noise), the upsampler, stage 2 with `adapters` merged; the final
    full-size state `[1, S*C + L*Ca]`."""
    s1, s2 = stage_one(s), stage_two(s)
    with Denoisers(run, family, s1) as denoisers:
        first = denoise(run, denoisers, family.schedule(s1, latents.shape), latents, _half_grid(family, s1, cond),
                        partial(family.predictor, s1))
    video, audio = lat.split_tokens(first.astype(jnp.float32), *family._token_shapes(s1))
    up = lat.pack_video(upsample(family, run, s1, video, upsampler))
    sigma = np.float32(STAGE_2_SIGMAS[0])
    noise = [run.host_noise(RENOISE_STREAM, i, tuple(x.shape)) for i, x in enumerate((up, audio))]
    state = lat.join_tokens(*(x + sigma * (jnp.asarray(n) - x) for x, n in zip((up, audio), noise)))
    schedule = _stage_two_schedule(family, s2)
    with _LoraDenoisers(run, family, s2, adapters) as denoisers:
        return denoise(run, denoisers, schedule, np.asarray(state), cond, partial(family.predictor, s2), stage="refine")


def upsample(family, run, s1, video_tokens: jax.Array, cfg: UpsamplerConfig) -> jax.Array:
    """Normalised stage-1 video tokens -> normalised latents `[1, C, F, 2H, 2W]` (de-normalised around the
    upsampler, which works on the VAE's raw latents)."""
    _, _, f, h, w = family.latent_shape(s1)
    vae = family.model.vae
    params = run.load_part(family.component("latent_upsampler"))
    stats = run.load_part(family.component("vae"), "float32")
    mean, std = stats["latents_mean"], stats["latents_std"]
    with run.timer.stage("upsample"):
        raw = lat.denormalize_video(lat.unpack_video(video_tokens, (f, h, w)), mean, std, vae.scaling_factor)
        up = LTX2LatentUpsampler(cfg, params["initial_conv"]["kernel"].dtype)(params, raw)  # the weights' dtype
        out = lat.normalize_video(up, mean, std, vae.scaling_factor)
        out.block_until_ready()
    run.done((params, stats))
    return out


def _half_grid(family, s1, cond):
    """`cond` with RoPE tables for stage 1's grid (the encoded prompt is the same)."""
    _, _, f, h, w = family.latent_shape(s1)
    rope = default_dit_rope_tables(family.model.transformer, f, h, w, family.audio_shape(s1)[2],
                                   fps=s1.conditioning_fps)
    return dataclasses.replace(cond, rope=rope)


def _stage_two_schedule(family, s2) -> Schedule:
    """Flow-match Euler on the stage-2 sigmas: the folder scheduler's config without dynamic shift or
    terminal stretch (diffusers' `from_config(..., use_dynamic_shifting=False, shift_terminal=None)`)."""
    from vidax.zoo.samplers import stepper_from_config

    config = {**family.scheduler_config(), "_class_name": FLOW_SAMPLERS["euler"], "use_dynamic_shifting": False,
              "shift_terminal": None}
    stepper = stepper_from_config(config, s2.steps, sigmas=np.asarray(STAGE_2_SIGMAS, np.float64))
    return Schedule(stepper, (0,) * stepper.num_steps, partial(family.step_knobs, s2, stepper))


class _LoraDenoisers(Denoisers):
    """The DiT placed with `adapters` merged (stage 2's distilled LoRA on top of the request's), released at
    the end of the stage (not kept in a process's denoiser cache)."""

    def __init__(self, run, family, s, adapters: tuple):
        super().__init__(run, family, s)
        self.adapters = adapters

    def get(self, expert: int):
        if expert not in self.placed:
            self.release()
            self.placed[expert] = place_dit(self.run, self.family, self.parts[expert], self.settings, self.dtype,
                                            loras=self.adapters)
        return self.placed[expert]

    def release(self) -> None:
        for denoiser in self.placed.values():
            denoiser.release()
        self.placed.clear()
