"""Step caches on CPU: a guided sampling loop of the Wan DiT with each `--cache` method, vidax vs diffusers.

Wan2.1-T2V-1.3B layer shapes (hidden 1536 = 12 heads x 128, FFN 8960, text 4096) with a few blocks
(`VIDAX_BENCH_LAYERS`, default 2), 17 frames 160x288 (5 x 10 x 18 = 900 tokens; `VIDAX_BENCH_FRAMES` fewer for a
shorter run), 512 text tokens,
`VIDAX_BENCH_STEPS` (default 50) flow-Euler steps with CFG (two DiT calls per step in diffusers,
`cache_context("cond")` / `("uncond")`; one batched call in vidax), fp32 at highest precision, random
weights through the real spec. No cache and each method with the same settings on both sides are the
contenders of one `bench.protocol.interleaved` run: each vidax loop once untimed (it compiles there),
then `VIDAX_BENCH_REPEATS` (default 3) rounds in which every contender runs once in turn, so a change in
the machine's load hits all alike; the load is printed at start and the table says whether the run was
quiet enough to quote. Per contender: best and median seconds of the loop, its ratio to the same side's
uncached loop (best against best), the fraction of DiT calls that ran in full, and the largest
|difference| of the final latents from the uncached ones (random weights: a quality figure needs the
trained model). Then, on the trained embedded `wan-tiny` (`VIDAX_BENCH_QUALITY_STEPS`, default 30), each
method's PSNR and SSIM against the uncached frames of the same seed. Not a test: it prints figures and
asserts nothing.

    .venv/bin/python -m bench step_cache
    VIDAX_BENCH_STEPS=2 VIDAX_BENCH_LAYERS=1 VIDAX_BENCH_REPEATS=1 VIDAX_BENCH_QUALITY_STEPS=2 \
        VIDAX_BENCH_SETTLE_S=0 .venv/bin/python -m bench step_cache   # a quick functional run (no figures)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.protocol import announce_load, interleaved, print_table
from bench.quality import PROMPT as QUALITY_PROMPT
from bench.quality import STEPS as QUALITY_STEPS
from bench.quality import psnr, set_prompts, set_quality, ssim, tiny_run, tiny_set

FRAMES = int(os.environ.get("VIDAX_BENCH_FRAMES", "17"))  # 1 + 4k
HEIGHT, WIDTH, TEXT_LEN = 160, 288, 512
STEPS = int(os.environ.get("VIDAX_BENCH_STEPS", "50"))
LAYERS = int(os.environ.get("VIDAX_BENCH_LAYERS", "2"))
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
              text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=LAYERS, cross_attn_norm=True)
GUIDANCE = 5.0
# each method at settings that skip a fair share of 50 steps (MagCache with flat made-up ratios)
METHODS = {
    "taylorseer": dict(cache_interval=3, cache_warmup=3, cache_order=1),
    "first-block": dict(cache_threshold=0.05),
    "magcache": dict(cache_threshold=0.06, cache_max_skip=3, cache_retention=0.2),
    # no diffusers hook: vidax against its own uncached loop only (Wan2.1 1.3B's published TeaCache set)
    "teacache": dict(cache_threshold=0.08, cache_coefficients="wan2.1-t2v-1.3b"),
    "easycache": dict(cache_threshold=0.2),  # ComfyUI's default reuse threshold and percents
}
WITH_DIFFUSERS_HOOK = ("taylorseer", "first-block", "magcache")


def _diffusers_config(method: str, torch):
    import diffusers

    knobs = METHODS[method]
    if method == "taylorseer":
        return diffusers.TaylorSeerCacheConfig(
            cache_interval=knobs["cache_interval"], disable_cache_before_step=knobs["cache_warmup"],
            max_order=knobs["cache_order"], use_lite_mode=True, taylor_factors_dtype=torch.float32)
    if method == "first-block":
        return diffusers.FirstBlockCacheConfig(threshold=knobs["cache_threshold"])
    return diffusers.MagCacheConfig(threshold=knobs["cache_threshold"], max_skip_steps=knobs["cache_max_skip"],
                                    retention_ratio=knobs["cache_retention"], num_inference_steps=STEPS,
                                    mag_ratios=[1.0] + [0.99] * (STEPS - 1))


def _sigmas():
    import numpy as np

    return np.linspace(1.0, 0.0, STEPS + 1, dtype=np.float32)


def _diffusers_loop(ref, torch, latents, text, negative, method):
    """A zero-argument guided Euler loop of the diffusers model with `method`'s cache (enabled for the
    loop only: one model serves every contender), returning (final latents, fraction of DiT calls that
    ran in full)."""
    sigmas = _sigmas()

    def loop():
        full = [0]
        last_ffn = ref.blocks[-1].ffn.register_forward_hook(lambda *_: full.__setitem__(0, full[0] + 1))
        if method is not None:
            ref.enable_cache(_diffusers_config(method, torch))
        x = torch.from_numpy(latents.copy())
        try:
            with torch.inference_mode():
                for i in range(STEPS):
                    t = torch.tensor([sigmas[i] * 1000.0])
                    with ref.cache_context("cond"):
                        cond = ref(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
                    with ref.cache_context("uncond"):
                        uncond = ref(hidden_states=x, timestep=t, encoder_hidden_states=negative, return_dict=False)[0]
                    x = x + (sigmas[i + 1] - sigmas[i]) * (uncond + GUIDANCE * (cond - uncond))
        finally:
            last_ffn.remove()
            if method is not None:
                ref.disable_cache()
        return x.numpy(), full[0] / (2 * STEPS)

    return loop


def _vidax_loop(denoiser, latents, cond, method, ratios_file):
    """A zero-argument guided loop of the vidax DiT with `method`'s cache, returning (final latents,
    fraction of DiT calls that ran in full); its first call compiles every variant the loop takes."""
    import jax.numpy as jnp
    import numpy as np

    from bench.families import piece
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.step_caches.methods import step_cache_for
    from vidax.zoo.step_caches.rules import PercentScale

    predict = piece("wan", "WanPredict")(True, "float32", (2, 2))
    knobs = dict(METHODS.get(method, {}), **({"mag_ratios": ratios_file} if method == "magcache" else {}))
    options = GenerateOptions(model="wan2.1-t2v-1.3b", prompt="", cache=method, **knobs)
    sigmas = _sigmas()
    scale = {"scale": jnp.float32(GUIDANCE)}

    def loop():
        # the bench's sigmas are linear (flow shift 1); the host timesteps spare EasyCache a device read
        cache = step_cache_for(options, ("cond", "uncond"), STEPS, percents=PercentScale("flow", 1.0),
                               timesteps=sigmas[:-1] * 1000.0)
        x = jnp.asarray(latents)
        for i in range(STEPS):
            t = jnp.float32(sigmas[i] * 1000.0)
            v = denoiser.predict(predict, x, t, cond, scale) if cache is None else \
                cache.predict(denoiser, predict, 0, i, x, t, cond, scale)
            x = x + (sigmas[i + 1] - sigmas[i]) * v
        x.block_until_ready()
        log = cache.finish("denoise") if cache is not None else []
        ran = sum(sum(entry["full_dit"].values()) for entry in log) if log else 2 * STEPS
        return np.asarray(x), ran / (2 * STEPS)

    return loop


def main() -> None:
    import jax
    import numpy as np
    import torch
    from diffusers import WanTransformer3DModel
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec
    from vidax.zoo.generator.denoise import LoadedDiT
    from bench.families import pieces
    from vidax.zoo.parts.dit import place_resident

    WanTransformerConfig, WanCondition, WanTransformer = pieces("wan", "WanTransformerConfig", "WanCondition",
                                                                "WanTransformer")
    announce_load("bench step_cache")
    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    ref = WanTransformer3DModel(**CONFIG).eval()
    rng = np.random.default_rng(0)
    latents = rng.standard_normal((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8), dtype=np.float32)
    text = rng.standard_normal((2, TEXT_LEN, CONFIG["text_dim"]), dtype=np.float32)
    model = WanTransformer(WanTransformerConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("wan/transformer"), tmp, model.param_shapes(), dtype="float32")
        denoiser = LoadedDiT(model, place_resident(model, unflatten_dict(dict(tree), sep="/")))
        del tree
        ratios_file = Path(tmp) / "ratios.npy"
        np.save(ratios_file, np.asarray([1.0] + [0.99] * (STEPS - 1), np.float32))
        cond = WanCondition(jax.numpy.asarray(text), None, None, None)
        torch_text = [torch.from_numpy(text[i:i + 1]) for i in range(2)]
        contenders = {}
        for method in (None, *METHODS):
            contenders[f"vidax {method or 'none'}"] = _vidax_loop(denoiser, latents, cond, method, ratios_file)
            if method is None or method in WITH_DIFFUSERS_HOOK:
                contenders[f"diffusers {method or 'none'}"] = _diffusers_loop(ref, torch, latents, *torch_text, method)
        # diffusers compiles nothing: its 50-step loops (minutes each) are timed without an untimed run first
        timings = interleaved(contenders, repeats=REPEATS,
                              warmup={name: int(name.startswith("vidax")) for name in contenders})
    title = f"Wan DiT {LAYERS} blocks at 1.3B widths, {STEPS} guided steps, {FRAMES}x{HEIGHT}x{WIDTH}"
    print_table(title, timings, reference="diffusers none")
    print(f"{'cache':<12} {'side':<10} {'best s':>8} {'vs none':>8} {'full DiT':>9} {'max |dx|':>10}")
    for method in ("none", *METHODS):
        for side in ("vidax", "diffusers")[: 2 if method == "none" or method in WITH_DIFFUSERS_HOOK else 1]:
            seconds, (out, fraction) = timings.results[f"{side} {method}"].best, timings.outputs[f"{side} {method}"]
            base_seconds, (base_out, _) = timings.results[f"{side} none"].best, timings.outputs[f"{side} none"]
            drift = float(np.abs(out - base_out).max())
            print(f"{method:<12} {side:<10} {seconds:8.1f} {base_seconds / seconds:7.2f}x {fraction:8.0%} {drift:10.2e}")
    quality()


# --- quality on the trained embedded model ---------------------------------------------------------

# per method the settings of the quality runs (wan-tiny has no published TeaCache set: Wan2.1 1.3B's is used)
QUALITY = {
    "taylorseer": dict(cache_interval=3, cache_warmup=3, cache_order=1),
    "first-block": dict(cache_threshold=0.05),
    "magcache": dict(cache_threshold=0.06, cache_max_skip=3, cache_retention=0.2),  # ratios calibrated first
    "teacache": dict(cache_threshold=0.08, cache_coefficients="wan2.1-t2v-1.3b"),
    "easycache": dict(cache_threshold=0.2),  # ComfyUI's defaults
}


def _tiny_frames(folder: Path, **cache):
    """(frames, fraction of DiT calls that ran in full) of one wan-tiny run with the given cache options."""
    frames, sidecar = tiny_run(folder / f"{cache.get('cache') or 'none'}.npy", **cache)
    if not cache:
        return frames, 1.0
    flags = [ran for entry in sidecar["step_cache_steps"] for ran in entry["full_dit"].values()]
    return frames, sum(flags) / len(flags)


def set_quality_table() -> None:
    """Over wan-tiny's held-out prompts: each method's clips against the uncached ones, the Fréchet distance of
    their VAE features and VBench's temporal flickering (bench.quality.set_quality); the uncached model at
    seed 1 against seed 0 as the yardstick. MagCache's ratios are calibrated on the first prompt."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        exact = tiny_set(folder, "exact")
        ratios = folder / "ratios.npy"
        tiny_set(folder, "calibrate", prompts=set_prompts()[:1], cache="magcache", cache_calibrate=ratios)
        print(f"wan-tiny, {QUALITY_STEPS} steps, {len(exact)} held-out prompts at seed 0: cached vs uncached clips")
        print(f"{'cache':<14} {'Frechet (VAE)':>14} {'flickering':>11} {'uncached':>9}")
        baseline = set_quality(tiny_set(folder, "seed1", seed=1), exact)
        print(f"{'seed 1':<14} {baseline['frechet_vae']:14.4f} {baseline['flickering']:11.4f} {baseline['exact_flickering']:9.4f}")
        for method, knobs in QUALITY.items():
            extra = {"mag_ratios": ratios} if method == "magcache" else {}
            row = set_quality(tiny_set(folder, method, cache=method, **knobs, **extra), exact)
            print(f"{method:<14} {row['frechet_vae']:14.4f} {row['flickering']:11.4f} {row['exact_flickering']:9.4f}")


def quality() -> None:
    """PSNR and SSIM of each method's wan-tiny frames against the uncached frames of the same seed."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain, _ = _tiny_frames(folder)
        ratios = folder / "ratios.npy"
        _tiny_frames(folder, cache="magcache", cache_calibrate=ratios)
        print(f"wan-tiny, {QUALITY_STEPS} steps, {QUALITY_PROMPT!r}: cached vs uncached frames")
        print(f"{'cache':<12} {'full DiT':>9} {'PSNR dB':>8} {'SSIM':>7}")
        for method, knobs in QUALITY.items():
            extra = {"mag_ratios": ratios} if method == "magcache" else {}
            frames, fraction = _tiny_frames(folder, cache=method, **knobs, **extra)
            print(f"{method:<12} {fraction:8.0%} {psnr(frames, plain):8.2f} {ssim(frames, plain):7.4f}")
