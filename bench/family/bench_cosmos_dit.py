"""Cosmos-Predict2.5 DiT forward on CPU: vidax (compiled, warm) vs diffusers `CosmosTransformer3DModel` eager.

Cosmos-Predict2.5-2B layer shapes (hidden 2048 = 16 heads x 128, FFN 8192, AdaLN-LoRA 256, Reason1
features 100352 -> 1024 through `crossattn_proj`, 512 text tokens) with 2 blocks, at 5 frames
256x448 (latent 2 x 32 x 56 -> 2 x 16 x 28 = 896 tokens), per-frame sigmas with the first frame
conditioned (image-to-world), one batch (no CFG), fp32 at highest matmul precision. Random weights
go through the real spec from a saved diffusers checkpoint; both sides run on the same threads and
are timed interleaved (`bench/protocol.py`).

    .venv/bin/python -m bench cosmos_dit          # VIDAX_BENCH_PLAN_ONLY=1: the planner figures alone

First it prints the memory planner's figures for Cosmos-Predict2.5-14B at its native 704x1280 x 93 frames
(bf16, flash attention, CFG batch 2) with the DiT's blocks streamed (`--offload-chunk`), beside the vidax paper's.
"""

from __future__ import annotations

import os
import tempfile
import time
import types
from pathlib import Path

FRAMES, HEIGHT, WIDTH, TEXT_LEN = 5, 256, 448, 512
CONFIG = dict(in_channels=17, out_channels=16, num_attention_heads=16, attention_head_dim=128, num_layers=2,
              mlp_ratio=4.0, text_embed_dim=1024, adaln_lora_dim=256, max_size=(128, 240, 240), patch_size=(1, 2, 2),
              rope_scale=(1.0, 3.0, 3.0), concat_padding_mask=True, extra_pos_embed_type=None,
              use_crossattn_projection=True, crossattn_proj_in_channels=100352, encoder_hidden_states_channels=1024)
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))


def _reference(torch):
    import torch.nn.functional as F
    from diffusers import CosmosTransformer3DModel
    from diffusers.models.transformers import transformer_cosmos

    # torchvision (the padding-mask resize) is not installed here; its tensor NEAREST resize is interpolate
    transformer_cosmos.transforms = types.SimpleNamespace(
        functional=types.SimpleNamespace(resize=lambda x, size, interpolation=None: F.interpolate(x, size=list(size))),
        InterpolationMode=types.SimpleNamespace(NEAREST="nearest"))
    torch.manual_seed(0)
    ref = CosmosTransformer3DModel(**CONFIG).eval()
    g = torch.Generator().manual_seed(0)
    frames = (FRAMES - 1) // 4 + 1
    cond = torch.zeros(1, 1, frames, 1, 1)
    cond[:, :, 0] = 1
    inputs = dict(
        hidden_states=torch.randn(1, 16, frames, HEIGHT // 8, WIDTH // 8, generator=g),
        timestep=cond * 1e-4 + (1 - cond) * 0.7,
        encoder_hidden_states=torch.randn(1, TEXT_LEN, CONFIG["crossattn_proj_in_channels"], generator=g),
        condition_mask=cond.expand(1, 1, frames, HEIGHT // 8, WIDTH // 8).contiguous(),
        padding_mask=torch.zeros(1, 1, HEIGHT, WIDTH),
    )
    return ref, inputs


def planner_figures() -> None:
    """The planner's GiB per device for Cosmos-Predict2.5-14B at 704x1280 x 93 frames, resident and streamed,
    from the registry's configs alone (`vidax-gen cosmos-predict2.5-14b --plan`); the paper's figure beside."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import Layout, predict
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model="cosmos-predict2.5-14b", prompt="", out=Path("unused.mp4"))
    import dataclasses

    job = make_pipeline(options.model, options).memory_job(options)
    job = dataclasses.replace(job, blockwise_attention=False)  # flash attention, as on the paper's TPU
    print(f"Cosmos-Predict2.5-14B, 704x1280 x 93 frames ({job.tokens} video tokens, {job.dit.depth} blocks), bf16, "
          f"flash attention, CFG batch {job.batch}: planner, GB per device (10^9 bytes)")
    print(f"{'layout':28}{'DiT weights':>12}{'activations':>12}{'Reason1':>10}{'VAE':>8}{'peak':>8}")
    layouts = (Layout(), Layout(offload_chunk=4), Layout(offload_chunk=1), Layout(tp=4), Layout(tp=4, offload_chunk=1))
    for layout in layouts:
        p = predict(job, layout)
        print(f"{layout.describe():28}{p.weights / 1e9:>12.2f}{p.activations / 1e9:>12.2f}{p.text_encoder / 1e9:>10.2f}"
              f"{p.vae / 1e9:>8.2f}{p.total / 1e9:>8.2f}")
    print("vidax paper: Cosmos-Predict2.5-14B at 93 frames runs with offload on TPU v4 (30.75 GB per chip); "
          "its per-chip figure is not recorded (docs/MODELS.md)\n")


def main() -> None:
    planner_figures()
    if os.environ.get("VIDAX_BENCH_PLAN_ONLY"):
        return
    import jax
    import numpy as np
    import torch
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file
    from vidax.translator import convert, load_spec
    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    CosmosTransformer, CosmosTransformerConfig = pieces("cosmos", "CosmosTransformer", "CosmosTransformerConfig")

    from bench.protocol import interleaved, print_table, reference_flops

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(os.cpu_count() or 1)
    ref, inputs = _reference(torch)
    model = CosmosTransformer(CosmosTransformerConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("cosmos/transformer"), tmp, model.param_shapes(), dtype="float32")
        params = place_resident(model, unflatten_dict(dict(tree), sep="/"))  # as the pipeline places it
        del tree

    j = lambda t: jax.numpy.asarray(t.numpy())
    ours_in = (j(inputs["hidden_states"]), j(inputs["timestep"].reshape(1, -1)), j(inputs["encoder_hidden_states"]),
               j(inputs["condition_mask"]), j(inputs["padding_mask"]))
    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, *ours_in).compile()
    compile_s = time.perf_counter() - start

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs, return_dict=False)[0]

    timings = interleaved({"diffusers (eager)": run_reference, "vidax (jit, warm)": lambda: compiled(params, *ours_in)},
                          repeats=REPEATS, flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax (jit, warm)"]), timings.outputs["diffusers (eager)"].numpy()
    tokens = ((FRAMES - 1) // 4 + 1) * (HEIGHT // 16) * (WIDTH // 16)
    print_table(f"Cosmos-Predict2.5-2B DiT shapes, {CONFIG['num_layers']} blocks, {FRAMES}f {HEIGHT}x{WIDTH} ({tokens} "
                f"video + {TEXT_LEN} text tokens), fp32, {torch.get_num_threads()} torch threads, "
                f"{jax.device_count()} XLA device(s)", timings, reference="diffusers (eager)",
                note=f"vidax compile {compile_s:.1f} s; max |diff| {np.abs(ours - theirs).max():.2e} "
                     f"(outputs up to {np.abs(theirs).max():.2f})")


if __name__ == "__main__":
    main()
