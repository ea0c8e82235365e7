"""CogVideoX DiT forward on CPU: vidax (jit) vs diffusers eager, real 5B layer shapes, 2 blocks.

The released CogVideoX-5b transformer config (48 heads x 64 = 3072 wide, FF 12288, 3D RoPE from the
pipeline's own `_prepare_rotary_positional_embeddings`, 226 T5 tokens) with `num_layers=2`, at 1.0's
native 480x720 (60 x 90 latents). The native 49 frames (13 latent frames, 17550 video tokens) take
~16 TFLOP per forward, many minutes on two CPU cores, so the default is 5 frames (2 latent frames:
2700 video + 226 text tokens); `VIDAX_BENCH_COGVIDEOX_FRAMES=49` runs the native length. One batch
(no CFG), fp32 on both sides (highest matmul precision for jax, torch's fp32 default), the same thread
count; weights go through the real spec from a saved diffusers checkpoint; max |diff| beside the times.

    .venv/bin/python -m bench cogvideox_dit
"""

from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

from bench.protocol import interleaved, print_table, reference_flops

FRAMES = int(os.environ.get("VIDAX_BENCH_COGVIDEOX_FRAMES", "5"))
HEIGHT, WIDTH, TEXT_LEN = 480, 720, 226
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "2"))
CONFIG_5B = dict(num_attention_heads=48, attention_head_dim=64, in_channels=16, out_channels=16, time_embed_dim=512,
                 text_embed_dim=4096, num_layers=2, sample_width=90, sample_height=60, sample_frames=49, patch_size=2,
                 max_text_seq_length=226, use_rotary_positional_embeddings=True)


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from diffusers import CogVideoXTransformer3DModel
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec

    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    CogVideoXTransformer, CogVideoXTransformerConfig = pieces("cogvideox", "CogVideoXTransformer",
                                                              "CogVideoXTransformerConfig")

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.manual_seed(0)
    ref = CogVideoXTransformer3DModel(**CONFIG_5B).eval()
    model = CogVideoXTransformer(CogVideoXTransformerConfig.from_hf_config(dict(ref.config)))
    with tempfile.TemporaryDirectory() as tmp:
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, Path(tmp) / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("cogvideox/transformer"), tmp, model.param_shapes(), dtype="float32")
        params = place_resident(model, unflatten_dict(dict(tree), sep="/"))  # as the pipeline places it
    del tree

    latent_frames, h, w = (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(1, latent_frames, 16, h, w, generator=g)
    text = torch.randn(1, TEXT_LEN, 4096, generator=g)
    timestep = torch.tensor([700])
    stand_in = types.SimpleNamespace(vae_scale_factor_spatial=8, transformer=ref)
    rope = CogVideoXPipeline._prepare_rotary_positional_embeddings(stand_in, HEIGHT, WIDTH, latent_frames, "cpu")
    ours_in = (jnp.asarray(latents.numpy().transpose(0, 2, 1, 3, 4)), jnp.asarray(timestep.numpy().astype(np.float32)),
               jnp.asarray(text.numpy()))
    forward = jax.jit(model.__call__)

    def run_reference():
        with torch.inference_mode():
            return ref(hidden_states=latents, encoder_hidden_states=text, timestep=timestep, image_rotary_emb=rope,
                       return_dict=False)[0]

    timings = interleaved({"diffusers (eager)": run_reference, "vidax (jit)": lambda: forward(params, *ours_in)},
                          repeats=REPEATS, flops=reference_flops(run_reference))
    ours = np.asarray(timings.outputs["vidax (jit)"]).transpose(0, 2, 1, 3, 4)
    err = float(np.abs(ours - timings.outputs["diffusers (eager)"].numpy()).max())
    tokens = latent_frames * (h // 2) * (w // 2)
    print_table(f"CogVideoX-5B DiT, 2 blocks, {FRAMES}f {HEIGHT}x{WIDTH} ({tokens} video + {TEXT_LEN} text tokens), "
                f"fp32, {torch.get_num_threads()} torch threads", timings, reference="diffusers (eager)",
                note=f"max |diff| {err:.2e}")


if __name__ == "__main__":
    main()
