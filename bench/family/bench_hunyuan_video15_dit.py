"""HunyuanVideo-1.5 DiT forward on CPU: vidax vs diffusers eager, real layer shapes, 2 blocks.

The shipped config (hidden 2048 = 16 heads x 128, MLP 8192, refiner, ByT5 and image projections)
with `num_layers=2`, at 33 frames 240x416 (latent 9 x 15 x 26 = 3510 video tokens) and the
pipeline's text lengths: 1000 Qwen tokens (60 valid), 256 ByT5 (12 valid), 729 SigLIP tokens (I2V).
One batch (no CFG), fp32. Weights go through the real spec from a saved diffusers checkpoint.
Timed per `bench/protocol.py` (interleaved after one warm-up call each, best and median wall
seconds, CPU seconds, load average before and after); compile time on its own; both sides on the
same cores.

    .venv/bin/python -m bench hunyuan_video15_dit
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.protocol import interleaved, print_table, reference_flops

FRAMES, HEIGHT, WIDTH = 33, 240, 416
TEXT_LEN, TEXT_VALID, BYT5_LEN, BYT5_VALID, IMAGE_TOKENS = 1000, 60, 256, 12, 729
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))


def _inputs(torch, cfg):
    g = torch.Generator().manual_seed(0)
    latent_f, latent_h, latent_w = (FRAMES - 1) // 4 + 1, HEIGHT // 16, WIDTH // 16
    mask = torch.zeros(1, TEXT_LEN, dtype=torch.long)
    mask[:, :TEXT_VALID] = 1
    mask_2 = torch.zeros(1, BYT5_LEN, dtype=torch.long)
    mask_2[:, :BYT5_VALID] = 1
    return dict(
        hidden_states=torch.randn(1, cfg.in_channels, latent_f, latent_h, latent_w, generator=g),
        timestep=torch.tensor([700.0]),
        encoder_hidden_states=torch.randn(1, TEXT_LEN, cfg.text_embed_dim, generator=g),
        encoder_attention_mask=mask,
        encoder_hidden_states_2=torch.randn(1, BYT5_LEN, cfg.text_embed_2_dim, generator=g),
        encoder_attention_mask_2=mask_2,
        image_embeds=torch.randn(1, IMAGE_TOKENS, cfg.image_embed_dim, generator=g),
    )


def main() -> None:
    import jax
    import numpy as np
    import torch
    from diffusers import HunyuanVideo15Transformer3DModel
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from vidax.translator import convert, load_spec

    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    HunyuanVideo15Transformer, TransformerConfig = pieces("hunyuan_video15", "HunyuanVideo15Transformer",
                                                          "TransformerConfig")

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    torch.manual_seed(0)
    ref = HunyuanVideo15Transformer3DModel(num_layers=2).eval()
    model = HunyuanVideo15Transformer(TransformerConfig.from_hf_config(dict(ref.config)))
    inputs = _inputs(torch, ref.config)
    with tempfile.TemporaryDirectory() as tmp:
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, Path(tmp) / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("hunyuan_video15/transformer"), tmp, model.param_shapes())
        params = place_resident(model, unflatten_dict(dict(tree), sep="/"))  # as the pipeline places it
    del tree

    ours_in = [jax.numpy.asarray(v.numpy()) for v in inputs.values()]
    ours_in[3], ours_in[5] = ours_in[3].astype(bool), ours_in[5].astype(bool)
    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, *ours_in).compile()
    compile_s = time.perf_counter() - start

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs).sample

    timings = interleaved({"vidax": lambda: compiled(params, *ours_in),
                           "diffusers": run_reference}, repeats=REPEATS,
                          flops=reference_flops(run_reference))
    ours, theirs = np.asarray(timings.outputs["vidax"]), timings.outputs["diffusers"].numpy()
    err, scale = float(np.abs(ours - theirs).max()), float(np.abs(theirs).max())

    cpu_ratio = timings.results["vidax"].cpu_best / timings.results["diffusers"].cpu_best
    tokens = ((FRAMES - 1) // 4 + 1) * (HEIGHT // 16) * (WIDTH // 16)
    title = (f"HunyuanVideo-1.5 DiT (vidax: jit, warm; diffusers: eager), 2 blocks, {FRAMES}f {HEIGHT}x{WIDTH} "
             f"({tokens} video + {TEXT_LEN + BYT5_LEN + IMAGE_TOKENS} text tokens), fp32, "
             f"{torch.get_num_threads()} torch threads")
    print_table(title, timings, reference="diffusers",
                note=f"CPU s best {cpu_ratio:.2f}x; max |diff| {err:.2e} (outputs up to {scale:.2f}); "
                     f"vidax compile {compile_s:.1f} s")


if __name__ == "__main__":
    main()
