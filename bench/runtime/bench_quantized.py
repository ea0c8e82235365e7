"""`--weights-dtype`: a DiT projection with its kernel in bf16 against the same kernel kept 8-bit (int8, fp8
e4m3) with per-output-channel scales and widened inside the product, as `vidax.zoo.compute.layers.Dense` runs it.

Wan2.1-14B's layer shapes (width 5120, FFN 13824) at 1560 tokens (480x832, 21 frames), computing in bf16;
then the Wan DiT's whole forward at Wan2.1-14B's widths with `VIDAX_BENCH_LAYERS` blocks (default 1) over
one latent frame of 480x832 (1560 tokens) and 512 text tokens, its block kernels bf16 / int8 / fp8 as
`--weights-dtype` places them (`vidax.zoo.weights.quantize.device_weights`).
Each contender is one compiled `Dense` apply; they run interleaved (bench/protocol.py). On CPU the
widening is extra work per call, so no speed target here: the figure is what it costs. The table also
prints each contender's weight bytes and its output's distance from the bf16 one. Last, what the 8-bit
weights do to a picture: the trained embedded `wan-tiny` (`VIDAX_BENCH_QUALITY_STEPS`, default 30) with
`--weights-dtype int8` and `fp8`, and its DiT as a Q8_0 GGUF file (`--transformer`), each run's PSNR and
SSIM against the exact run (fp32 weights, same seed; bench/quality.py, as the step-cache bench compares
its caches).

    .venv/bin/python -m bench quantized
    VIDAX_BENCH_SMOKE=1 VIDAX_BENCH_QUALITY_STEPS=2 ...   # small shapes: checks that the benchmark runs, no figures
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.protocol import announce_load, interleaved, print_table
from bench.quality import PROMPT as QUALITY_PROMPT
from bench.quality import STEPS as QUALITY_STEPS
from bench.quality import psnr, set_quality, ssim, tiny_folder, tiny_run, tiny_set

SMOKE = os.environ.get("VIDAX_BENCH_SMOKE") == "1"
SHAPES = ((64, 64, 96),) if SMOKE else ((1560, 5120, 5120), (1560, 5120, 13824), (1560, 13824, 5120))
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "1" if SMOKE else "3"))


def _contenders(rows: int, k: int, n: int):
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    from vidax.zoo.compute.layers import Dense
    from vidax.zoo.weights.quantize import quantize_kernel

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((rows, k), dtype=np.float32), jnp.bfloat16)
    kernel = (rng.standard_normal((1, k, n), dtype=np.float32) * 0.02)
    bias = jnp.zeros((n,), jnp.bfloat16)
    dense = Dense(n, dtype=jnp.bfloat16)
    apply = jax.jit(lambda params, x: dense.apply({"params": params}, x))
    params = {"bf16": {"kernel": jnp.asarray(kernel[0].astype(ml_dtypes.bfloat16)), "bias": bias}}
    for choice in ("int8", "fp8"):
        q, scale = quantize_kernel(kernel, choice)
        params[choice] = {"kernel": jnp.asarray(q[0]), "kernel_scale": jnp.asarray(scale[0]), "bias": bias}
    return {name: (lambda p=p: apply(p, x)) for name, p in params.items()}, params


# Wan2.1-14B's DiT widths (SMOKE: tiny) and the forward's input sizes: latent frames, latent height, width, text
DIT = (dict(num_attention_heads=2, attention_head_dim=16, ffn_dim=64, text_dim=32, freq_dim=32), (1, 8, 8), 8) if SMOKE \
    else (dict(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, text_dim=4096, freq_dim=256), (1, 60, 104), 512)
LAYERS = int(os.environ.get("VIDAX_BENCH_LAYERS", "1"))


def _dit_contenders():
    """The Wan DiT forward with its block kernels bf16, int8 and fp8 (random weights, placed once each)."""
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np
    from flax import traverse_util

    from vidax.zoo.parts.dit import place_resident
    from vidax.zoo.weights.quantize import device_weights
    from bench.families import pieces

    WanTransformer, WanTransformerConfig = pieces("wan", "WanTransformer", "WanTransformerConfig")

    widths, (frames, height, width), text_len = DIT
    config = dict(patch_size=[1, 2, 2], in_channels=16, out_channels=16, num_layers=LAYERS, cross_attn_norm=True,
                  qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024, **widths)
    model = WanTransformer(WanTransformerConfig.from_hf_config(config), dtype=jnp.bfloat16)
    init = jax.jit(model.init_params)(jax.random.key(0))
    tree = {p: np.asarray(a).astype(ml_dtypes.bfloat16) if p.endswith("kernel") else np.asarray(a)
            for p, a in traverse_util.flatten_dict(init, sep="/").items()}
    del init
    rng = np.random.default_rng(0)
    inputs = (jnp.asarray(rng.standard_normal((1, 16, frames, height, width), dtype=np.float32)), jnp.asarray([700.0]),
              jnp.asarray(rng.standard_normal((1, text_len, widths["text_dim"]), dtype=np.float32)), None)
    forward = jax.jit(lambda params, *x: model(params, *x))
    contenders, sizes = {}, {}
    for choice in ("bf16", "int8", "fp8"):
        placed = tree if choice == "bf16" else device_weights(tree, ("blocks",), choice)
        sizes[choice] = sum(a.nbytes for p, a in placed.items() if p.startswith("blocks/"))
        params = place_resident(model, traverse_util.unflatten_dict(placed, sep="/"))
        contenders[choice] = lambda params=params: forward(params, *inputs)
    return contenders, sizes


def dit() -> None:
    import numpy as np

    contenders, sizes = _dit_contenders()
    timings = interleaved(contenders, REPEATS)
    reference = np.asarray(timings.outputs["bf16"], np.float32)
    notes = [f"{name}: blocks {sizes[name] / 2**20:.1f} MiB, output "
             f"{np.linalg.norm(np.asarray(timings.outputs[name], np.float32) - reference) / np.linalg.norm(reference):.4f}"
             f" from bf16" for name in contenders]
    widths, (frames, height, width), text_len = DIT
    title = (f"Wan DiT forward, {LAYERS} block(s) at {widths['num_attention_heads'] * widths['attention_head_dim']} "
             f"wide, {frames * height * width // 4} tokens, {text_len} text tokens, bf16 compute")
    print_table(title, timings, reference="bf16", note="; ".join(notes))


def q8_0_gguf(path: Path) -> Path | None:
    """wan-tiny's DiT as a GGUF file: the blocks' weight matrices in ggml's Q8_0 (32 values share an fp16
    scale), every other tensor F32, diffusers key names (None where the `gguf` package, a test extra, is
    missing)."""
    try:
        import gguf
    except ImportError:
        return None
    import numpy as np
    from safetensors.numpy import load_file

    writer = gguf.GGUFWriter(path, "wan")
    for key, value in load_file(tiny_folder() / "transformer" / "diffusion_pytorch_model.safetensors").items():
        value = value.astype(np.float32)
        kind = "Q8_0" if key.startswith("blocks.") and value.ndim == 2 and value.shape[-1] % 32 == 0 else "F32"
        qtype = gguf.GGMLQuantizationType[kind]
        writer.add_tensor(key, gguf.quants.quantize(value, qtype) if kind == "Q8_0" else value, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quality() -> None:
    """PSNR and SSIM of wan-tiny's frames with 8-bit block weights (`--weights-dtype int8/fp8`, and a Q8_0
    GGUF through `--transformer`) against the exact run's (fp32 weights)."""
    with tempfile.TemporaryDirectory() as tmp:
        exact, _ = tiny_run(Path(tmp) / "exact.npy")
        runs = {"int8": {"weights_dtype": "int8"}, "fp8": {"weights_dtype": "fp8"}}
        gguf_file = q8_0_gguf(Path(tmp) / "transformer-Q8_0.gguf")
        if gguf_file is not None:
            runs["GGUF Q8_0"] = {"transformer": str(gguf_file)}
        print(f"wan-tiny, {QUALITY_STEPS} steps, {QUALITY_PROMPT!r}: 8-bit DiT weights vs the exact run (fp32 weights)")
        print(f"{'weights':<10} {'PSNR dB':>8} {'SSIM':>7}")  # identical frames would print inf dB
        for name, options in runs.items():
            frames, _ = tiny_run(Path(tmp) / f"{name.replace(' ', '_')}.npy", **options)
            print(f"{name:<10} {psnr(frames, exact):8.2f} {ssim(frames, exact):7.4f}")
        if gguf_file is None:
            print("GGUF Q8_0: not run (the gguf package, from the test extra, is not installed)")


def set_quality_table() -> None:
    """Over wan-tiny's held-out prompts: 8-bit block weights' clips against the exact run's, the Fréchet distance
    of their VAE features and VBench's temporal flickering (bench.quality.set_quality); the exact model at
    seed 1 against seed 0 as the yardstick."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        exact = tiny_set(folder, "exact")
        runs = {"seed 1": {"seed": 1}, "int8": {"weights_dtype": "int8"}, "fp8": {"weights_dtype": "fp8"}}
        gguf_file = q8_0_gguf(folder / "transformer-Q8_0.gguf")
        if gguf_file is not None:
            runs["GGUF Q8_0"] = {"transformer": str(gguf_file)}
        print(f"wan-tiny, {len(exact)} held-out prompts at seed 0: 8-bit DiT weights vs the exact run (fp32 weights)")
        print(f"{'weights':<10} {'Frechet (VAE)':>14} {'flickering':>11} {'exact':>9}")
        for name, options in runs.items():
            row = set_quality(tiny_set(folder, name.replace(" ", "_"), **options), exact)
            print(f"{name:<10} {row['frechet_vae']:14.4f} {row['flickering']:11.4f} {row['exact_flickering']:9.4f}")


def main() -> None:
    import jax
    import numpy as np

    announce_load("bench quantized")
    dit()
    for rows, k, n in SHAPES:
        contenders, params = _contenders(rows, k, n)
        timings = interleaved(contenders, REPEATS)
        reference = np.asarray(timings.outputs["bf16"], np.float32)
        notes = []
        for name, tree in params.items():
            weight = sum(leaf.nbytes for leaf in jax.tree.leaves(tree))
            out = np.asarray(timings.outputs[name], np.float32)
            distance = float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
            notes.append(f"{name}: {weight / 2**20:.1f} MiB of weights, output {distance:.4f} from bf16")
        print_table(f"Dense {rows} x {k} x {n}, bf16 compute", timings, reference="bf16", note="; ".join(notes))
    quality()
