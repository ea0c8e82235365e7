"""Merging a rank-32 LoRA into a Wan2.1-T2V-1.3B-shaped bf16 checkpoint: vidax vs plain conversion vs diffusers.

The checkpoint is bench_translator's (real diffusers key names and shapes, random bf16, generated once into
.bench/); the LoRA is a rank-32 diffusers-format file over every block's attention and FFN linears (bf16,
alpha 32 in its metadata), generated once beside it. Each contender runs in its own process (wall time, CPU
seconds, peak RSS of that process, as bench_translator measures them):

- vidax-convert (no LoRA): the plain conversion, the reference for the merge's cost
- vidax-convert --lora: the same with the LoRA merged on the host in float32, tensor by tensor
- vidax convert(loras=...) into memory
- diffusers: from_pretrained(bf16) + load_lora_weights + fuse_lora + unload_lora_weights

Targets (issue #29): merge <= 1.2x the plain conversion's wall time and <= 0.5x diffusers'. Set
VIDAX_BENCH_LAYERS (default 30) and VIDAX_BENCH_REPEATS (default 3) for a smaller or shorter run.

The merge path measured here: each touched tensor's low-rank product (float32 BLAS, the scale on the small
factor) is the output array; the base is added into it and, where every leaf it feeds is bf16, the sum is
narrowed to bf16 by the bits in cache-sized blocks, so the executor copies raw bits as for an untouched tensor.
Figures from the project's shared, loaded 2-core VM are not recorded here: run it on a quiet machine.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from bench.bench_translator import DIM, FFN, ROOT, make_checkpoint, measure

RANK = 32
LINEARS = {"attn1.to_q": (DIM, DIM), "attn1.to_k": (DIM, DIM), "attn1.to_v": (DIM, DIM), "attn1.to_out.0": (DIM, DIM),
           "attn2.to_q": (DIM, DIM), "attn2.to_k": (DIM, DIM), "attn2.to_v": (DIM, DIM), "attn2.to_out.0": (DIM, DIM),
           "ffn.net.0.proj": (FFN, DIM), "ffn.net.2": (DIM, FFN)}


def make_lora(layers: int) -> Path:
    """A rank-32 diffusers-format LoRA over every block linear (bf16), written once."""
    import ml_dtypes

    from vidax.translator.formats.safetensors_io import header_bytes

    path = ROOT / ".bench" / f"wan2.1-t2v-1.3b-l{layers}-lora-r{RANK}.safetensors"
    if path.exists():
        return path
    shapes = {}
    for i in range(layers):
        for module, (rows, cols) in LINEARS.items():
            shapes[f"transformer.blocks.{i}.{module}.lora_A.weight"] = (RANK, cols)
            shapes[f"transformer.blocks.{i}.{module}.lora_B.weight"] = (rows, RANK)
    config = {"transformer.r": RANK, "transformer.lora_alpha": RANK,
              "transformer.target_modules": sorted({m for m in LINEARS})}
    metadata = {"format": "pt", "lora_adapter_metadata": json.dumps(config)}
    rng = np.random.default_rng(1)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(header_bytes(((k, np.dtype(ml_dtypes.bfloat16), s) for k, s in shapes.items()), metadata))
        for shape in shapes.values():
            fh.write((rng.standard_normal(shape, dtype=np.float32) * 0.01).astype(ml_dtypes.bfloat16).tobytes())
    os.replace(tmp, path)
    return path


_VIDAX_MEMORY = """
import sys
from vidax.translator import convert
from vidax.translator.lora import resolve_adapter
tree = convert('wan/transformer', sys.argv[1], loras=[resolve_adapter(sys.argv[2])])
"""
_DIFFUSERS = """
import sys, torch
from diffusers import WanPipeline, WanTransformer3DModel
torch.set_num_threads(2)
dit = WanTransformer3DModel.from_pretrained(sys.argv[1], subfolder='transformer', torch_dtype=torch.bfloat16)
pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None, transformer=dit)
pipe.load_lora_weights(sys.argv[2], adapter_name='x')
pipe.fuse_lora(components=['transformer'])
pipe.unload_lora_weights()
"""


def main() -> None:
    layers = int(os.environ.get("VIDAX_BENCH_LAYERS", "30"))
    repeats = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))
    root, lora = make_checkpoint(layers), make_lora(layers)
    size = (root / "transformer" / "diffusion_pytorch_model.safetensors").stat().st_size
    out, py = ROOT / ".bench" / "out-lora", sys.executable
    convert_cli = [py, "-m", "vidax.cli.convert", "wan2.1-t2v-1.3b", "--components", "transformer", "--source", str(root),
                   "--out", str(out)]
    rows = [("vidax-convert (no LoRA)", convert_cli), ("vidax-convert --lora (rank 32)", [*convert_cli, "--lora", str(lora)]),
            ("vidax convert(loras=...) into memory", [py, "-c", _VIDAX_MEMORY, str(root), str(lora)]),
            ("diffusers load_lora_weights + fuse_lora", [py, "-c", _DIFFUSERS, str(root), str(lora)])]
    load = os.getloadavg()
    print(f"checkpoint {size / 1e9:.2f} GB bf16 ({layers} layers), LoRA {lora.stat().st_size / 1e6:.0f} MB rank {RANK}; "
          f"load avg {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at start")
    runs: dict[str, list] = {name: [] for name, _ in rows}
    for _ in range(repeats):  # interleaved, so that someone else's burst of load hits all alike
        for name, argv in rows:
            shutil.rmtree(out, ignore_errors=True)
            runs[name].append(measure(argv))
    shutil.rmtree(out, ignore_errors=True)
    print(f"{'contender':42} {'wall s':>8} {'CPU s':>7} {'peak RSS GB':>12}")
    best = {}
    for name, _ in rows:
        wall, cpu, _ = min(runs[name])
        best[name] = wall
        print(f"{name:42} {wall:8.2f} {cpu:7.2f} {max(r[2] for r in runs[name]) / 1e9:12.2f}")
    load = os.getloadavg()
    print(f"load avg {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at end")
    merged = best["vidax-convert --lora (rank 32)"]
    print(f"merge / plain conversion: {merged / best['vidax-convert (no LoRA)']:.2f} (target <= 1.2); "
          f"merge / diffusers: {merged / best['diffusers load_lora_weights + fuse_lora']:.2f} (target <= 0.5)")


if __name__ == "__main__":
    main()
