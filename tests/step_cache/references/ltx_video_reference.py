"""What the LTX-Video step-cache tests share: the tiny T2V pipeline of tests/ltx_video saved with its
noise (6 Euler steps, dynamic shift, guidance rescale, decode noise replayed), its run, and vidax's
options for the same request."""

from __future__ import annotations

import diffusers
import numpy as np
import torch

from vidax.zoo.generator.options import GenerateOptions

from tests.ltx_video.references.pipelines import NEGATIVE, PROMPT, Replay, components, dynamic_scheduler, pack
from tests.step_cache.references.batched import STEPS

HEIGHT, WIDTH, FRAMES, GUIDANCE = 64, 96, 9, 3.0
LATENT = (1, 8, 2, 2, 3)
FAMILY_KNOBS = dict(guidance_rescale=0.3, decode_timestep=0.05, decode_noise_scale=0.025)
SEED = 7


def saved_pipeline(root):
    """(pipeline, decode-noise replay, run) with the pipeline saved under `root/model`, the initial
    noise under `root/latents.npy`; `run()` gives the reference's frames."""
    pipe = diffusers.LTXPipeline(scheduler=dynamic_scheduler(), **components(12, root))
    pipe.save_pretrained(root / "model")
    noise = torch.randn(LATENT, generator=torch.Generator().manual_seed(2))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(SEED)
    replay.record(2, 0, LATENT)  # the decode noise

    def run():
        return pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, frame_rate=25,
                    num_inference_steps=STEPS, guidance_scale=GUIDANCE, output_type="np", latents=pack(noise),
                    generator=torch.Generator().manual_seed(SEED), **FAMILY_KNOBS).frames[0]

    return pipe, replay, run


def options(root, out, **cache) -> GenerateOptions:
    """vidax's request for the saved pipeline, with the cache fields `cache`."""
    return GenerateOptions(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE,
                           weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                           guidance=GUIDANCE, latents=root / "latents.npy", out=out, dtype="float32",
                           compile_cache=False, extra=FAMILY_KNOBS, **cache)
