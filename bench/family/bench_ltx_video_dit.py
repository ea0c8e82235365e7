"""LTX-Video DiT forward on CPU: vidax (compiled, warm) vs diffusers `LTXVideoTransformer3DModel` eager.

The 13B's layer shapes (width 4096 = 32 heads x 128, FFN 16384, T5 4096 -> 4096) with `num_layers=2`, at
121 frames 352x608 (latent 16 x 11 x 19 = 3344 tokens; the issue's size, which fits 2 CPU cores in a few
minutes), 128 caption tokens (the last 40 padded), one batch (no CFG), fp32 at highest matmul precision.
Random weights go through the real spec from a saved diffusers checkpoint; RoPE tables are built on the
host (as the pipeline does, once per generation) outside the timed call. Both sides run on the same
threads, interleaved (bench/protocol.py); max |diff| is printed beside the times.

    .venv/bin/python -m bench ltx_video_dit        # VIDAX_BENCH_REPEATS=2 by default
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

FRAMES, HEIGHT, WIDTH, TEXT_LEN, FPS = 121, 352, 608, 128, 30
CONFIG = dict(in_channels=128, out_channels=128, num_attention_heads=32, attention_head_dim=128,
              cross_attention_dim=4096, num_layers=2, caption_channels=4096)
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "2"))


def main() -> None:
    import jax
    import numpy as np
    import torch
    from diffusers import LTXVideoTransformer3DModel
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from bench.protocol import interleaved, print_table, reference_flops
    from vidax.translator import convert
    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    rope, TransformerConfig, LTXVideoTransformer = pieces("ltx_video", "rope", "TransformerConfig",
                                                          "LTXVideoTransformer")

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    ref = LTXVideoTransformer3DModel(**CONFIG).eval()
    cfg = TransformerConfig.from_hf_config(dict(ref.config))
    model = LTXVideoTransformer(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        tree = convert("ltx_video/transformer", tmp, model.param_shapes(), dtype="float32", lazy=True)
        # one leaf at a time (the 2-block 13B slice is 2.8 GB in fp32 on each side), then as the pipeline places it
        params = place_resident(model, unflatten_dict({path: jax.device_put(tree[path]) for path in tree}, sep="/"))
        del tree

    grid = ((FRAMES - 1) // 8 + 1, HEIGHT // 32, WIDTH // 32)
    tokens = grid[0] * grid[1] * grid[2]
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(1, TEXT_LEN)
    mask[:, TEXT_LEN - 40:] = 0
    inputs = dict(hidden_states=torch.randn(1, tokens, 128, generator=g),
                  encoder_hidden_states=torch.randn(1, TEXT_LEN, 4096, generator=g),
                  timestep=torch.tensor([700.0]), encoder_attention_mask=mask)
    cos, sin = rope.rope_tables(rope.grid_coords(1, *grid, cfg, frame_rate=FPS), cfg)
    order = ("hidden_states", "encoder_hidden_states", "encoder_attention_mask", "timestep")  # embed's argument order
    ours_in = [jax.numpy.asarray(inputs[k].numpy()) for k in order] + [jax.numpy.asarray(cos), jax.numpy.asarray(sin)]

    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, *ours_in).compile()
    compile_s = time.perf_counter() - start

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs, num_frames=grid[0], height=grid[1], width=grid[2],
                       rope_interpolation_scale=(8 / FPS, 32, 32), return_dict=False)[0]

    timings = interleaved({"vidax (jit, warm)": lambda: compiled(params, *ours_in), "diffusers (eager)": run_reference},
                          repeats=REPEATS, flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax (jit, warm)"]), timings.outputs["diffusers (eager)"].numpy()
    err, scale = float(np.abs(ours - theirs).max()), float(np.abs(theirs).max())
    print_table(f"LTX-Video 13B DiT shapes, {CONFIG['num_layers']} blocks, {FRAMES}f {HEIGHT}x{WIDTH} ({tokens} video + "
                f"{TEXT_LEN} caption tokens), fp32, {torch.get_num_threads()} torch threads, {jax.device_count()} XLA device(s)",
                timings, reference="diffusers (eager)",
                note=f"vidax compile {compile_s:.1f} s; max |diff| {err:.2e} (outputs up to {scale:.2f})")


if __name__ == "__main__":
    main()
