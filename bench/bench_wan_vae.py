"""Wan2.1 VAE decode on CPU: vidax (chunked, jit) vs diffusers `AutoencoderKLWan` (eager), side by side.

The released Wan2.1 VAE shape (base 96, z 16, random perturbed weights through the real spec),
decoding 3 latent frames 30x52 into 9 frames at 240x416, fp32, as the reference's own loop does:
one latent frame per chunk with the causal cache carried between chunks. vidax's first call
includes compiling its two chunk units (first and steady state); the next calls reuse them. The
calls alternate between the two, so a shared machine's changing load hits both alike.

    .venv/bin/python -m bench wan_vae
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

FRAMES, HEIGHT, WIDTH = 9, 240, 416
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "2"))


def _interleaved(fns: dict, repeats: int) -> dict[str, tuple[float, float]]:
    """name -> (first call, best of `repeats` further calls) in seconds, the calls alternating
    between the contenders so that a change in machine load hits both alike."""
    times = {name: [] for name in fns}
    for _ in range(1 + repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (t[0], min(t[1:])) for name, t in times.items()}


def main() -> None:
    import jax
    import numpy as np
    import torch
    from diffusers import AutoencoderKLWan
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec
    from vidax.zoo.wan.vae import WanVAE, WanVAEConfig

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.manual_seed(0)
    ref = AutoencoderKLWan().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    vae = WanVAE(WanVAEConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "vae").mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, Path(tmp) / "vae" / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("wan/vae"), tmp, vae.param_shapes())
        params = jax.device_put(unflatten_dict(dict(tree), sep="/"))
    del tree

    latent_frames = (FRAMES - 1) // 4 + 1
    latents = torch.randn(1, 16, latent_frames, HEIGHT // 8, WIDTH // 8, generator=torch.Generator().manual_seed(1))
    ours_in = jax.numpy.asarray(latents.numpy())
    ours_out, ref_out = [], []

    def run_reference():
        with torch.inference_mode():
            ref_out.append(ref.decode(latents).sample)

    timings = _interleaved({"vidax": lambda: ours_out.append(vae.decode(params, ours_in).block_until_ready()),
                            "diffusers": run_reference}, REPEATS)
    (ours_first, ours_best), (ref_first, ref_best) = timings["vidax"], timings["diffusers"]
    err = float(np.abs(np.asarray(ours_out[-1]) - ref_out[-1].numpy()).max())

    print(f"Wan2.1 VAE decode, {latent_frames} latent frames -> {FRAMES}f {HEIGHT}x{WIDTH}, fp32, "
          f"{torch.get_num_threads()} torch threads, {os.cpu_count()} cpus")
    print(f"{'':24}{'first call s':>14}{'best of ' + str(REPEATS) + ' s':>14}{'first-best s':>14}")  # ~ compile time on a quiet machine
    print(f"{'diffusers (eager)':24}{ref_first:>14.2f}{ref_best:>14.2f}{'-':>14}")
    print(f"{'vidax (jit chunks)':24}{ours_first:>14.2f}{ours_best:>14.2f}{ours_first - ours_best:>14.2f}")
    print(f"vidax / diffusers (best): {ours_best / ref_best:.2f}x   max |diff| {err:.2e}")


if __name__ == "__main__":
    main()
