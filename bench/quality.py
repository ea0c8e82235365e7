"""Picture quality beside the times: frames of a faster or smaller run against the exact run's.

The yardstick is the trained embedded `wan-tiny` (it draws its prompt, so a difference is one a viewer
would see): `tiny_run` generates one clip of the fixed prompt and seed with the options under test, and
`psnr` / `ssim` compare its frames with the exact run's. The step-cache and quantization benches print them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PROMPT = "a red circle moves left on a blue background"
STEPS = int(os.environ.get("VIDAX_BENCH_QUALITY_STEPS", "30"))


def tiny_folder() -> Path:
    """wan-tiny's diffusers-layout folder, as its generator finds it (the registry's embedded source)."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    return Path(make_pipeline("wan-tiny", GenerateOptions(model="wan-tiny", prompt="")).source.root)


def tiny_run(out: Path, **options: Any) -> tuple[Any, dict]:
    """(frames [F, H, W, 3] in [0, 1], the run's sidecar) of one fp32 wan-tiny run of `PROMPT`, seed 0,
    `STEPS` steps, with `options` (`GenerateOptions` fields: `cache=...`, `weights_dtype=...`), written to
    `out` (`.npy`)."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.api import generate

    settings = GenerateOptions(model="wan-tiny", prompt=PROMPT, steps=STEPS, seed=0, out=out, dtype="float32",
                               **options)
    frames = generate(settings).frames
    return frames, json.loads(out.with_suffix(".json").read_text())



def psnr(a, b) -> float:
    """Peak signal-to-noise ratio in dB of frames in [0, 1]."""
    import numpy as np

    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(1.0 / mse)


def _gaussian_blur(image, size: int = 11, sigma: float = 1.5):
    """`image` [..., H, W] filtered by a separable Gaussian window (valid positions only)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    offsets = np.arange(size) - (size - 1) / 2
    window = np.exp(-(offsets**2) / (2 * sigma**2))
    window /= window.sum()
    rows = sliding_window_view(image, size, axis=-2) @ window
    return sliding_window_view(rows, size, axis=-2) @ window


def ssim(a, b) -> float:
    """Mean structural similarity (Wang et al. 2004: Gaussian window 11, sigma 1.5, K1 .01, K2 .03) of frames
    `[F, H, W, C]` in [0, 1], each frame and channel on its own, averaged."""
    import numpy as np

    x = np.moveaxis(np.asarray(a, np.float64), -1, 1)  # [F, C, H, W]
    y = np.moveaxis(np.asarray(b, np.float64), -1, 1)
    c1, c2 = 0.01**2, 0.03**2
    mx, my = _gaussian_blur(x), _gaussian_blur(y)
    sxx = _gaussian_blur(x * x) - mx**2
    syy = _gaussian_blur(y * y) - my**2
    sxy = _gaussian_blur(x * y) - mx * my
    index = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return float(index.mean())


# --- over a set of clips: FVD-style and VBench-style figures (vidax.eval) -----------------------------------

SET_PROMPTS = int(os.environ.get("VIDAX_BENCH_QUALITY_PROMPTS", "8"))


def set_prompts() -> list[str]:
    """The first `SET_PROMPTS` of wan-tiny's 24 held-out prompts (`training.json`): clips it was not trained on."""
    record = json.loads((tiny_folder() / "training.json").read_text())
    return record["held_out_prompts"][:SET_PROMPTS]


def tiny_set(folder: Path, name: str, seed: int = 0, prompts: list[str] | None = None, **options: Any) -> list:
    """One fp32 wan-tiny clip (`STEPS` steps) per prompt of `prompts` (default `set_prompts()`), with `options`."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.api import generate

    clips = []
    for index, prompt in enumerate(set_prompts() if prompts is None else prompts):
        settings = GenerateOptions(model="wan-tiny", prompt=prompt, steps=STEPS, seed=seed, dtype="float32",
                                   out=folder / f"{name}-{index}.npy", **options)
        clips.append(generate(settings).frames)
    return clips


def vae_features(clips: list) -> Any:
    """Per latent frame of each clip: the mean and standard deviation over space of each channel of wan-tiny's
    VAE posterior mean (`[clips * F', 2z]`): the only video encoder trained on these clips that vidax has
    weights for here, standing in for I3D (whose Kinetics weights cannot be downloaded on this machine)."""
    import jax.numpy as jnp
    import numpy as np

    from vidax.translator import convert
    from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig

    folder = tiny_folder() / "vae"
    vae = WanVAE(WanVAEConfig.from_hf_config(json.loads((folder / "config.json").read_text())))
    from flax.traverse_util import unflatten_dict

    params = unflatten_dict(dict(convert("wan/vae", folder, dtype="float32")), sep="/")
    rows = []
    for frames in clips:
        video = jnp.asarray(np.moveaxis(np.asarray(frames, np.float32) * 2 - 1, -1, 0)[None])  # [1, C, F, H, W]
        mean = np.asarray(vae.encode(params, video))[0]  # [z, F', H', W']
        rows.append(np.concatenate([mean.mean(axis=(2, 3)), mean.std(axis=(2, 3))]).T)  # [F', 2z]
    return np.concatenate(rows)


def set_quality(clips: list, exact: list) -> dict[str, float]:
    """A clip set against the exact run's: the Fréchet distance of their VAE features (FVD's maths, unbiased
    covariance) and VBench's temporal flickering of each set (on the 8-bit frames an MP4 would hold)."""
    import numpy as np

    from vidax.eval.dimensions import temporal_flickering
    from vidax.eval.frechet import fvd
    from vidax.zoo.video_io import to_uint8

    flicker = lambda group: float(np.mean([temporal_flickering(to_uint8(c)) for c in group]))  # noqa: E731
    return {"frechet_vae": fvd(vae_features(clips), vae_features(exact)), "flickering": flicker(clips),
            "exact_flickering": flicker(exact)}
