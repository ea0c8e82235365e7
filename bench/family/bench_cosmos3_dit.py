"""Cosmos3 DiT forward on CPU: vidax (compiled, warm) vs diffusers `Cosmos3OmniTransformer` eager.

Cosmos3-Nano layer shapes (hidden 4096 = 32 heads x 128 with 8 key/value heads, SwiGLU 12288, both
pathways) with 2 layers, at 9 frames 192x320 (latent 3 x 12 x 20 -> 3 x 6 x 10 = 180 video tokens)
and a 64-token prompt, image-conditioned (latent frame 0 clean), fp32 at highest matmul precision.
The vocabulary is cut to 4096 rows (a lookup: its size costs memory, not time; Nano's 151936 rows
would add 2.5 GB per side). `VIDAX_BENCH_COSMOS3=edge` takes Cosmos3-Edge's shapes instead (hidden
2048, 16 heads, relu2 9216, k_norm_und_for_gen). Random weights go through the real spec from a
saved diffusers checkpoint; both sides run on the same threads, timed interleaved (`bench/protocol.py`).
The reference runs one prompt per call, as its pipeline does. vidax runs as the pipeline places it
(`zoo.parts.dit.place_resident`: on CPU each layer's weights in their own buffers), beside the same model
with the layers stacked and scanned, whose dots read each layer's weights through a copy on CPU.

    .venv/bin/python -m bench cosmos3_dit          # VIDAX_BENCH_PLAN_ONLY=1: the planner figures alone

First it prints the memory planner's figures for Cosmos3-Nano at 704x1280 x 93 frames (bf16, flash attention,
CFG batch 2) at TP=4, beside the vidax paper's 29.5 GB per chip.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

FRAMES, HEIGHT, WIDTH, TEXT_LEN, FPS, TIMESTEP = 9, 192, 320, 64, 24.0, 700
COMMON = dict(head_dim=128, num_key_value_heads=8, num_hidden_layers=2, latent_channel=48, latent_patch_size=2,
              patch_latent_dim=192, vocab_size=4096, rope_axes_dim=[24, 20, 20], base_fps=24,
              enable_fps_modulation=True, attention_bias=False)
SHAPES = {
    "nano": dict(hidden_size=4096, num_attention_heads=32, intermediate_size=12288, hidden_act="silu",
                 qk_norm_for_text=True, rms_norm_eps=1e-6, rope_theta=5e6),
    "edge": dict(hidden_size=2048, num_attention_heads=16, intermediate_size=9216, hidden_act="relu2",
                 qk_norm_for_text=False, use_und_k_norm_for_gen=True, rms_norm_eps=1e-5, rope_theta=1e8),
}
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))


PAPER_NANO_TP4_GB = 29.5  # vidax paper: Cosmos3 Nano at TP=4, 704x1280x93, per chip (TPU v4)


def planner_figures() -> None:
    """The planner's GB per device for Cosmos3-Nano at 704x1280 x 93 frames from the registry's configs alone
    (`vidax-gen cosmos3-nano --plan`), beside the paper's measured 29.5 GB per chip at TP=4."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import Layout, predict
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model="cosmos3-nano", prompt="", out=Path("unused.mp4"))
    import dataclasses

    job = make_pipeline(options.model, options).memory_job(options)
    job = dataclasses.replace(job, blockwise_attention=False)  # flash attention, as on the paper's TPU
    print(f"Cosmos3-Nano, 704x1280 x 93 frames ({job.tokens} joint tokens, {job.dit.depth} layers), bf16, flash "
          f"attention, CFG batch {job.batch}: planner, GB per device (10^9 bytes)")
    print(f"{'layout':28}{'DiT weights':>12}{'activations':>12}{'denoise':>9}{'VAE':>8}{'peak':>8}{'paper':>8}")
    for layout in (Layout(tp=4), Layout(tp=4, sp=1, offload_chunk=1), Layout(), Layout(sp=4)):
        p = predict(job, layout)
        paper = f"{PAPER_NANO_TP4_GB:.1f}" if (layout.tp, layout.offload_chunk) == (4, None) else ""
        print(f"{layout.describe():28}{p.weights / 1e9:>12.2f}{p.activations / 1e9:>12.2f}{p.denoise_peak / 1e9:>9.2f}"
              f"{p.vae / 1e9:>8.2f}{p.total / 1e9:>8.2f}{paper:>8}")
    print()


def main() -> None:
    planner_figures()
    if os.environ.get("VIDAX_BENCH_PLAN_ONLY"):
        return
    import jax
    import numpy as np
    import torch
    from diffusers import Cosmos3OmniTransformer
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        get_3d_mrope_ids_text_tokens,
        get_3d_mrope_ids_vae_tokens,
    )
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file
    from vidax.translator import convert, load_spec
    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    Cosmos3Transformer, Cosmos3TransformerConfig, cosmos3_rope = pieces(
        "cosmos3", "Cosmos3Transformer", "Cosmos3TransformerConfig", "rope")

    from bench.protocol import interleaved, print_table, reference_flops

    variant = os.environ.get("VIDAX_BENCH_COSMOS3", "nano")
    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    ref = Cosmos3OmniTransformer(**COMMON, **SHAPES[variant]).eval()
    model = Cosmos3Transformer(Cosmos3TransformerConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("cosmos3/transformer"), tmp, model.param_shapes(), dtype="float32")
        host = unflatten_dict(dict(tree), sep="/")
        params = place_resident(model, host)  # as the pipeline places it
        stacked = jax.device_put(host)  # the alternative: one scanned stack (what accelerators run)
        del tree, host

    g = torch.Generator().manual_seed(0)
    t, h, w = (FRAMES - 1) // 4 + 1, HEIGHT // 32, WIDTH // 32
    tokens = t * h * w
    ids = torch.randint(0, COMMON["vocab_size"], (TEXT_LEN,), generator=g)
    latents = torch.randn(1, 48, t, 2 * h, 2 * w, generator=g)
    text_pos, offset = get_3d_mrope_ids_text_tokens(TEXT_LEN, 0, use_float_positions=True)
    vision_pos, _ = get_3d_mrope_ids_vae_tokens(t, h, w, offset + 15000, fps=FPS, base_fps=24.0)
    noisy = torch.arange(1, t)
    inputs = dict(input_ids=ids, text_indexes=torch.arange(TEXT_LEN), position_ids=torch.cat([text_pos, vision_pos], 1),
                  und_len=TEXT_LEN, sequence_length=TEXT_LEN + tokens, vision_tokens=[latents],
                  vision_token_shapes=[(t, h, w)], vision_sequence_indexes=torch.arange(TEXT_LEN, TEXT_LEN + tokens),
                  vision_mse_loss_indexes=torch.arange(TEXT_LEN + h * w, TEXT_LEN + tokens),
                  vision_timesteps=torch.full((tokens - h * w,), TIMESTEP), vision_noisy_frame_indexes=[noisy],
                  return_dict=False)

    cos, sin = cosmos3_rope.rope_tables(model.cfg, cosmos3_rope.batch_positions(model.cfg, [TEXT_LEN], (t, h, w), FPS))
    jnp = jax.numpy
    ours_in = (jnp.asarray(ids.numpy()[None], jnp.int32), jnp.ones((1, TEXT_LEN), bool), jnp.asarray(latents.numpy()),
               jnp.full((1,), TIMESTEP, jnp.float32), jnp.asarray([[0.0] + [1.0] * (t - 1)]), jnp.asarray(cos),
               jnp.asarray(sin))
    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, *ours_in).compile()
    compile_s = time.perf_counter() - start
    scanned = jax.jit(model.__call__).lower(stacked, *ours_in).compile()

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs)[0][0]

    timings = interleaved({"diffusers (eager)": run_reference, "vidax (jit, warm)": lambda: compiled(params, *ours_in),
                           "vidax, stacked layers scanned": lambda: scanned(stacked, *ours_in)},
                          repeats=REPEATS, flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax (jit, warm)"]), timings.outputs["diffusers (eager)"].numpy()
    print_table(f"Cosmos3-{variant.capitalize()} DiT shapes, {COMMON['num_hidden_layers']} layers, {FRAMES}f "
                f"{HEIGHT}x{WIDTH} ({tokens} video + {TEXT_LEN} text tokens), fp32, {torch.get_num_threads()} torch "
                f"threads, {jax.device_count()} XLA device(s)", timings, reference="diffusers (eager)",
                note=f"vidax compile {compile_s:.1f} s; max |diff| {np.abs(ours - theirs).max():.2e} "
                     f"(outputs up to {np.abs(theirs).max():.2f})")


if __name__ == "__main__":
    main()
