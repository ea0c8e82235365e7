"""vidax-eval's feature extraction against the PyTorch references, interleaved, on CPU: clips per second.

For each network a metric reads, the same uint8 clips go through (a) vidax: the preprocessing as matrices and
the Flax network, jitted, weights converted through the spec from the reference's own state dict; (b) the
PyTorch reference as the metric packages run it: torch's interpolate (vbench's clip_transform / dino_transform,
cd-fvd's preprocess_i3d) and the `clip` package's CLIP ViT-B/32, transformers' ViTModel at DINO ViT-B/16's
sizes, cd-fvd's InceptionI3d, under torch.no_grad. Real sizes, random weights (no download), fp32 both.

    .venv/bin/python -m bench eval                 # 2 clips of 16 frames at 256 x 256 per network
    VIDAX_BENCH_CLIPS=4 VIDAX_BENCH_FRAMES=16 VIDAX_BENCH_SIZE=256 .venv/bin/python -m bench eval
    VIDAX_BENCH_NETWORKS=i3d,dino .venv/bin/python -m bench eval

The load average is printed at the start and with each table; on this project's shared 2-core VM figures are
only quotable when the tables say quiet.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.protocol import announce_load, interleaved, print_table  # noqa: E402


def _clip_package_model():
    """The `clip` package's model module, loaded from its file: its package __init__ imports torchvision,
    which does not import beside this torch (`model.py` itself needs only torch)."""
    spec = importlib.util.find_spec("clip")
    path = Path(next(iter(spec.submodule_search_locations))) / "model.py"
    module_spec = importlib.util.spec_from_file_location("clip_package_model", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _torch_side(name: str):
    """(model, preprocess uint8 [N, H, W, 3] -> torch input, forward) of the reference."""
    import torch
    import torch.nn.functional as F

    def resized(frames, size, mode, crop):
        x = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
        h, w = x.shape[-2:]
        short, long = min(h, w), max(h, w)
        out = (size, int(size * long / short)) if h <= w else (int(size * long / short), size)
        x = F.interpolate(x, size=out, mode=mode, align_corners=False, antialias=False)
        if crop:
            top, left = int(round((x.shape[-2] - size) / 2)), int(round((x.shape[-1] - size) / 2))
            x = x[..., top:top + size, left:left + size]
        return x / 255.0

    if name == "clip_b32":
        model = _clip_package_model().CLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12).float().eval()
        mean, std = torch.tensor([0.48145466, 0.4578275, 0.40821073]), torch.tensor([0.26862954, 0.26130258, 0.27577711])
        prep = lambda f: (resized(f, 224, "bicubic", True) - mean[:, None, None]) / std[:, None, None]  # noqa: E731
        return model, prep, model.encode_image
    if name == "dino":
        from transformers import ViTConfig, ViTModel

        model = ViTModel(ViTConfig(layer_norm_eps=1e-6, qkv_bias=True), add_pooling_layer=False).eval()
        mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
        prep = lambda f: (resized(f, 224, "bilinear", False) - mean[:, None, None]) / std[:, None, None]  # noqa: E731
        return model, prep, lambda x: model(pixel_values=x).last_hidden_state[:, 0]
    from cdfvd.third_party.i3d.pytorch_i3d import InceptionI3d
    from cdfvd.third_party.i3d.utils import preprocess_i3d

    model = InceptionI3d(400, in_channels=3).eval()
    return model, lambda f: preprocess_i3d(f[None]), model


def _dino_hub_names(state: dict) -> dict:
    """transformers ViTModel keys -> DINO's (the file torch.hub's dino_vitb16 loads)."""
    import torch

    out = {"cls_token": state["embeddings.cls_token"], "pos_embed": state["embeddings.position_embeddings"]}
    for p in ("weight", "bias"):
        out[f"patch_embed.proj.{p}"] = state[f"embeddings.patch_embeddings.projection.{p}"]
        out[f"norm.{p}"] = state[f"layernorm.{p}"]
        for i in range(12):
            a = f"layers.{i}."
            out[f"blocks.{i}.attn.qkv.{p}"] = torch.cat([state[f"{a}attention.{n}_proj.{p}"] for n in "qkv"])
            out[f"blocks.{i}.attn.proj.{p}"] = state[f"{a}attention.o_proj.{p}"]
            out[f"blocks.{i}.norm1.{p}"], out[f"blocks.{i}.norm2.{p}"] = state[f"{a}layernorm_before.{p}"], state[f"{a}layernorm_after.{p}"]
            out[f"blocks.{i}.mlp.fc1.{p}"], out[f"blocks.{i}.mlp.fc2.{p}"] = state[f"{a}mlp.fc1.{p}"], state[f"{a}mlp.fc2.{p}"]
    return out


FILES = {"clip_b32": "ViT-B-32.pt", "dino": "dino_vitbase16_pretrain.pth", "i3d": "i3d_pretrained_400.pt"}
KINDS = {"clip_b32": "clip_image", "dino": "dino", "i3d": "i3d"}


def _vidax_side(name: str, model, folder: Path):
    import torch

    from vidax.eval.features import Runner, forward_of, load_network, mesh_for

    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save(_dino_hub_names(state) if name == "dino" else state, folder / FILES[name])
    network = load_network(name, folder)
    return Runner(forward_of(KINDS[name], network), network.params, mesh_for(1), batch=1 if name == "i3d" else 16)


def main() -> None:
    import torch

    clips = int(os.environ.get("VIDAX_BENCH_CLIPS", 2))
    frames = int(os.environ.get("VIDAX_BENCH_FRAMES", 16))
    size = int(os.environ.get("VIDAX_BENCH_SIZE", 256))
    names = os.environ.get("VIDAX_BENCH_NETWORKS", "clip_b32,dino,i3d").split(",")
    announce_load("bench eval")
    rng = np.random.default_rng(0)
    videos = rng.integers(0, 256, (clips, frames, size, size, 3), dtype=np.uint8)
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            model, prep, forward = _torch_side(name)
            runner = _vidax_side(name, model, Path(tmp))
            if name == "i3d":
                ours = lambda: runner(videos)  # noqa: E731
                theirs = lambda: [forward(prep(v)) for v in videos]  # noqa: E731
            else:
                ours = lambda: [runner(v) for v in videos]  # noqa: E731
                theirs = lambda: [forward(prep(v)) for v in videos]  # noqa: E731
            timings = interleaved({f"vidax {name}": ours, f"torch {name}": theirs}, repeats=2)
            print_table(f"{name}: {clips} clips of {frames} frames at {size}x{size} per call", timings,
                        reference=f"torch {name}")
            for contender, t in timings.results.items():
                print(f"  {contender}: {clips / t.best:.2f} clips/s ({clips * frames / t.best:.1f} frames/s)")


if __name__ == "__main__":
    main()
