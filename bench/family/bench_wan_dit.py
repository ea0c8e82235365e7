"""Wan DiT forward on CPU: vidax (compiled, warm) vs diffusers `WanTransformer3DModel` eager.

Wan2.1-T2V-1.3B layer shapes (hidden 1536 = 12 heads x 128, FFN 8960, text 4096 -> 1536) with
`num_layers=4`, at 33 frames 240x416 (latent 9 x 30 x 52 -> 9 x 15 x 26 = 3510 tokens), 512 text
tokens, one batch (no CFG), fp32 at highest matmul precision. Random weights go through the real
spec from a saved diffusers checkpoint. Timed per `bench/protocol.py`: the two run interleaved after
one warm-up call each, best and median wall seconds beside CPU seconds, load average before and
after; compile time is reported on its own. Both sides run on the same cores (torch's intra-op pool
is set to the cores XLA uses).

    .venv/bin/python -m bench wan_dit
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.protocol import interleaved, print_table, reference_flops

FRAMES, HEIGHT, WIDTH, TEXT_LEN = 33, 240, 416, 512
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
              text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=4, cross_attn_norm=True)
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))


def _reference(torch):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    ref = WanTransformer3DModel(**CONFIG).eval()
    g = torch.Generator().manual_seed(0)
    latent = ((FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)
    inputs = dict(
        hidden_states=torch.randn(1, CONFIG["in_channels"], *latent, generator=g),
        timestep=torch.tensor([700.0]),
        encoder_hidden_states=torch.randn(1, TEXT_LEN, CONFIG["text_dim"], generator=g),
    )
    return ref, inputs


def main() -> None:
    import jax
    import numpy as np
    import torch
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec

    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    WanTransformer, WanTransformerConfig = pieces("wan", "WanTransformer", "WanTransformerConfig")

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    ref, inputs = _reference(torch)
    model = WanTransformer(WanTransformerConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        state = {k: v.contiguous() for k, v in ref.state_dict().items()}
        save_file(state, folder / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("wan/transformer"), tmp, model.param_shapes(), dtype="float32")
        params = place_resident(model, unflatten_dict(dict(tree), sep="/"))  # as the pipeline places it
        del tree

    ours_in = [jax.numpy.asarray(v.numpy()) for v in inputs.values()]
    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, *ours_in).compile()
    compile_s = time.perf_counter() - start

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs, return_dict=False)[0]

    timings = interleaved({"vidax": lambda: compiled(params, *ours_in),
                           "diffusers": run_reference}, repeats=REPEATS,
                          flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax"]), timings.outputs["diffusers"].numpy()
    err, scale = float(np.abs(ours - theirs).max()), float(np.abs(theirs).max())

    cpu_ratio = timings.results["vidax"].cpu_best / timings.results["diffusers"].cpu_best
    tokens = ((FRAMES - 1) // 4 + 1) * (HEIGHT // 16) * (WIDTH // 16)
    title = (f"Wan2.1-1.3B DiT shapes (vidax: jit, warm; diffusers: eager), {CONFIG['num_layers']} blocks, "
             f"{FRAMES}f {HEIGHT}x{WIDTH} ({tokens} video + {TEXT_LEN} text tokens), fp32, "
             f"{torch.get_num_threads()} torch threads, {jax.device_count()} XLA device(s)")
    print_table(title, timings, reference="diffusers",
                note=f"CPU s best {cpu_ratio:.2f}x; max |diff| {err:.2e} (outputs up to {scale:.2f}); "
                     f"vidax compile {compile_s:.1f} s")


if __name__ == "__main__":
    main()
