"""Wan2.1 VAE decode on CPU: vidax (chunked, jit) vs diffusers `AutoencoderKLWan` (eager), side by side.

The released Wan2.1 VAE shape (base 96, z 16, random perturbed weights through the real spec),
decoding 3 latent frames 30x52 into 9 frames at 240x416, fp32, as the reference's own loop does:
one latent frame per chunk with the causal cache carried between chunks. Each side's first call is
its warm-up (vidax's compiles its two chunk units, first and steady state; its time is reported
beside); the timed calls follow `bench/protocol.py`: interleaved, best and median wall seconds, CPU
seconds, load average before and after, both sides on the same cores.

    .venv/bin/python -m bench wan_vae
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.protocol import interleaved, print_table, reference_flops

FRAMES, HEIGHT, WIDTH = 9, 240, 416
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))


def main() -> None:
    import jax
    import numpy as np
    import torch
    from diffusers import AutoencoderKLWan
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec
    from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(len(os.sched_getaffinity(0)))
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

    def run_reference():
        with torch.inference_mode():
            return ref.decode(latents).sample

    contenders = {"vidax": lambda: vae.decode(params, ours_in), "diffusers": run_reference}
    first = {}
    for name, fn in contenders.items():  # the warm-up calls; vidax's compiles
        start = time.perf_counter()
        jax.block_until_ready(fn())
        first[name] = time.perf_counter() - start
    timings = interleaved(contenders, repeats=REPEATS, warmup=0, flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax"]), timings.outputs["diffusers"].numpy()
    err = float(np.abs(ours - theirs).max())

    cpu_ratio = timings.results["vidax"].cpu_best / timings.results["diffusers"].cpu_best
    title = (f"Wan2.1 VAE decode (vidax: jit chunks; diffusers: eager), {latent_frames} latent frames -> "
             f"{FRAMES}f {HEIGHT}x{WIDTH}, fp32, {torch.get_num_threads()} torch threads")
    print_table(title, timings, reference="diffusers",
                note=f"CPU s best {cpu_ratio:.2f}x; max |diff| {err:.2e}; first calls (vidax's compiles) "
                     f"{first['vidax']:.1f} s / {first['diffusers']:.1f} s")


if __name__ == "__main__":
    main()
