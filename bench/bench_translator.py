"""Weight translation of a Wan2.1-T2V-1.3B-shaped bf16 checkpoint (2.84 GB): vidax vs diffusers vs naive.

The checkpoint has the real diffusers key names and shapes, random bf16 values, and is generated
without torch once into .bench/ (git-ignored). Every contender runs in its own subprocess so that
wall time and peak RSS (ru_maxrss of that child) are its own:

- raw read: reading the file's bytes (the read floor; page cache warm after generation)
- raw write O_DIRECT + fsync: writing as many bytes to the output disk the way vidax-convert does
  (the write floor of any converter)
- vidax-convert: the CLI end to end (plan, transpose+cast, write safetensors shards + manifest, fsync),
  to the project disk and, where /dev/shm has room, to RAM (what it costs without the disk), each
  beside the raw write floor of its destination
- vidax convert() to memory: the library call materialising the whole host tree
- diffusers: WanTransformer3DModel.from_pretrained(torch_dtype=bfloat16)
- naive: safetensors.torch.load_file -> .float().numpy() -> transpose copies

CPU seconds (user + system of the child) are printed beside wall time: on a shared machine they
move much less with other people's load than wall time does. The contenders run interleaved,
VIDAX_BENCH_REPEATS rounds (default 3); each row reports its best wall time and the load average
is printed before and after.

Set VIDAX_BENCH_LAYERS (default 30) for a smaller checkpoint on a busy machine.

Measured 2026-11-29 ~09:20 UTC on this project's 2-core VM (ext4 disk, load avg 0.0-1.2), best of 3:
vidax-convert 1.61-1.93 s wall / 2.2 s CPU / 0.29 GB peak RSS (0.10 of the checkpoint), 0.38-0.46 of
diffusers' 4.2-4.3 s; O_DIRECT disk floor 1.53-1.80 s; raw read 0.26 s; naive 13.4-13.7 s, 8.8 GB.
The previous writer (buffered writes + fsync, one core), same bench and load: 2.84 s / 3.1 s CPU / 0.44 GB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DIM, FFN, TEXT, FREQ, IN, OUT, PATCH = 1536, 8960, 4096, 256, 16, 16, (1, 2, 2)


def wan_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    """diffusers WanTransformer3DModel key -> shape for the Wan2.1-T2V-1.3B config."""
    shapes = {"patch_embedding.weight": (DIM, IN, *PATCH), "patch_embedding.bias": (DIM,),
              "condition_embedder.time_embedder.linear_1.weight": (DIM, FREQ),
              "condition_embedder.time_embedder.linear_2.weight": (DIM, DIM),
              "condition_embedder.time_proj.weight": (6 * DIM, DIM),
              "condition_embedder.text_embedder.linear_1.weight": (DIM, TEXT),
              "condition_embedder.text_embedder.linear_2.weight": (DIM, DIM),
              "proj_out.weight": (OUT * 4, DIM), "proj_out.bias": (OUT * 4,), "scale_shift_table": (1, 2, DIM)}
    for name in ("time_embedder.linear_1", "time_embedder.linear_2", "time_proj", "text_embedder.linear_1", "text_embedder.linear_2"):
        shapes[f"condition_embedder.{name}.bias"] = (shapes[f"condition_embedder.{name}.weight"][0],)
    for i in range(layers):
        b = f"blocks.{i}"
        shapes[f"{b}.scale_shift_table"] = (1, 6, DIM)
        for attn in ("attn1", "attn2"):
            for proj in ("to_q", "to_k", "to_v", "to_out.0"):
                shapes[f"{b}.{attn}.{proj}.weight"] = (DIM, DIM)
                shapes[f"{b}.{attn}.{proj}.bias"] = (DIM,)
            shapes[f"{b}.{attn}.norm_q.weight"] = shapes[f"{b}.{attn}.norm_k.weight"] = (DIM,)
        shapes[f"{b}.norm2.weight"] = shapes[f"{b}.norm2.bias"] = (DIM,)
        shapes[f"{b}.ffn.net.0.proj.weight"], shapes[f"{b}.ffn.net.0.proj.bias"] = (FFN, DIM), (FFN,)
        shapes[f"{b}.ffn.net.2.weight"], shapes[f"{b}.ffn.net.2.bias"] = (DIM, FFN), (DIM,)
    return shapes


def config(layers: int) -> dict:
    return {"_class_name": "WanTransformer3DModel", "patch_size": list(PATCH), "num_attention_heads": 12,
            "attention_head_dim": 128, "in_channels": IN, "out_channels": OUT, "text_dim": TEXT, "freq_dim": FREQ,
            "ffn_dim": FFN, "num_layers": layers, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
            "eps": 1e-6, "image_dim": None, "added_kv_proj_dim": None, "rope_max_seq_len": 1024}


def make_checkpoint(layers: int) -> Path:
    """Write the synthetic checkpoint (diffusers repo layout) once; returns the model root."""
    import ml_dtypes

    from vidax.translator.formats.safetensors_io import header_bytes

    root = ROOT / ".bench" / f"wan2.1-t2v-1.3b-l{layers}"
    path = root / "transformer" / "diffusion_pytorch_model.safetensors"
    if path.exists():
        return root
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "config.json").write_text(json.dumps(config(layers)))
    shapes = wan_shapes(layers)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(header_bytes(((k, bf16, s) for k, s in shapes.items()), {"format": "pt"}))
        for shape in shapes.values():
            # bit patterns of bf16 values in about [-1, 1): cheap to draw, realistic magnitudes
            bits = rng.integers(0x3C00, 0x3F80, int(np.prod(shape)), dtype=np.uint16)
            bits |= (rng.integers(0, 2, bits.size, dtype=np.uint16) << 15)
            fh.write(bits)
    os.replace(tmp, path)
    return root


_RAW = """
import sys
buf = bytearray(64 << 20)
with open(sys.argv[1], 'rb', buffering=0) as fh:
    while fh.readinto(buf): pass
"""
_RAW_WRITE = """
import mmap, os, sys
buf = mmap.mmap(-1, 64 << 20)  # page-aligned, as O_DIRECT needs
left = int(sys.argv[2]) // 4096 * 4096
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, 'O_DIRECT', 0))
while left > 0:
    left -= os.write(fd, memoryview(buf)[:min(left, len(buf))])
os.fsync(fd)
os.close(fd)
os.remove(sys.argv[1])
"""
_DIFFUSERS = """
import sys, torch
from diffusers import WanTransformer3DModel
torch.set_num_threads(2)
WanTransformer3DModel.from_pretrained(sys.argv[1], subfolder='transformer', torch_dtype=torch.bfloat16)
"""
_NAIVE = """
import sys, numpy as np
from safetensors.torch import load_file
state = load_file(sys.argv[1])
out = {}
for k, t in state.items():
    a = t.float().numpy()
    out[k] = np.ascontiguousarray(a.T) if a.ndim == 2 else a
"""
_VIDAX_MEMORY = """
import sys
from vidax.translator import convert
tree = convert('wan/transformer', sys.argv[1])
"""


# A child's ru_maxrss starts at its parent's high-water mark (Linux records the old address space's at
# exec), so after a bench that grew this process every child would report this process's peak. The
# contender runs as the grandchild of a small launcher, whose own peak is small.
_LAUNCH = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=sys.stderr)
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps([status, usage.ru_utime + usage.ru_stime, usage.ru_maxrss]))
"""


def measure(argv: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds user+system, peak RSS bytes) of one contender process."""
    with tempfile.TemporaryFile() as log, tempfile.TemporaryFile() as out:  # files, not pipes
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *argv], stdout=out, stderr=log)
        proc.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        status, cpu, maxrss = json.loads(out.read().decode() or "[1, 0, 0]")
        if proc.returncode != 0 or status != 0:
            log.seek(0)
            raise RuntimeError(f"{argv[:3]} failed: {log.read().decode()[-2000:]}")
    return wall, cpu, maxrss * 1024


def main() -> None:
    layers = int(os.environ.get("VIDAX_BENCH_LAYERS", "30"))
    repeats = int(os.environ.get("VIDAX_BENCH_REPEATS", "3"))
    root = make_checkpoint(layers)
    file = root / "transformer" / "diffusion_pytorch_model.safetensors"
    size = file.stat().st_size
    out = ROOT / ".bench" / "out"
    py = sys.executable
    shm = Path("/dev/shm")
    rows = [("raw read (page cache warm)", [py, "-c", _RAW, str(file)]),
            ("raw write O_DIRECT + fsync (disk floor)", [py, "-c", _RAW_WRITE, str(out.parent / "raw-write.tmp"), str(size)]),
            ("vidax-convert end to end", None)]
    if shm.is_dir() and shutil.disk_usage(shm).free > 2 * size:
        rows += [("raw write to /dev/shm (RAM floor)", [py, "-c", _RAW_WRITE, str(shm / "vidax-raw-write.tmp"), str(size)]),
                 ("vidax-convert --out /dev/shm (no disk)", None)]
    rows += [("vidax convert() into memory", [py, "-c", _VIDAX_MEMORY, str(root)]),
             ("diffusers from_pretrained", [py, "-c", _DIFFUSERS, str(root)]),
             ("naive safetensors.torch->numpy->T", [py, "-c", _NAIVE, str(file)])]
    load_before = os.getloadavg()
    print(f"checkpoint: {file.relative_to(ROOT)} ({size / 1e9:.2f} GB bf16, {layers} layers), {os.cpu_count()} CPUs, "
          f"load avg {load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} (1/5/15 min) at start")
    # contenders interleaved round by round, so that a burst of someone else's load hits all alike;
    # each row shows its best (lowest wall) run, with that run's CPU seconds, and the highest peak RSS
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in rows}
    for _ in range(repeats):
        for name, argv in rows:
            target = shm / "vidax-bench-out" if "vidax-convert --out /dev/shm" in name else out
            if argv is None:
                shutil.rmtree(target, ignore_errors=True)
                argv = [py, "-m", "vidax.cli.convert", "wan2.1-t2v-1.3b", "--components", "transformer",
                        "--source", str(root), "--out", str(target)]
            runs[name].append(measure(argv))
            shutil.rmtree(target, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"best of {repeats} interleaved runs per contender, each in its own process")
    print(f"{'contender':42} {'wall s':>8} {'GB/s':>7} {'CPU s':>7} {'peak RSS GB':>12} {'RSS/ckpt':>9} {'all walls s':>18}")
    results = {}
    for name, _ in rows:
        wall, cpu, _ = min(runs[name])
        rss = max(r[2] for r in runs[name])
        results[name] = (wall, rss)
        walls = " ".join(f"{r[0]:.2f}" for r in runs[name])
        print(f"{name:42} {wall:8.2f} {size / wall / 1e9:7.2f} {cpu:7.2f} {rss / 1e9:12.2f} {rss / size:9.2f} {walls:>18}")
    print(f"load avg {load_after[0]:.1f} / {load_after[1]:.1f} / {load_after[2]:.1f} (1/5/15 min) at end")
    diffusers = results["diffusers from_pretrained"][0]
    for name in ("vidax-convert end to end", "vidax-convert --out /dev/shm (no disk)", "vidax convert() into memory"):
        if name in results:
            print(f"{name} / diffusers wall time: {results[name][0] / diffusers:.2f} (target <= 0.5)")
    rss = results["vidax-convert end to end"][1] / size
    print(f"vidax-convert peak RSS / checkpoint: {rss:.2f} (target < 0.25)")


if __name__ == "__main__":
    main()
