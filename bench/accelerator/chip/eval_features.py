"""vidax-eval's networks on an accelerator: clips per second of each metric's feature extraction at the real
networks' sizes (CLIP ViT-B/32 and ViT-L/14 image towers, DINO ViT-B/16, I3D, RAFT with 20 refinements), vidax alone (torch is not
on the chip's host). Weights random (N(0, 0.02), drawn on the device: the Kinetics / OpenAI / DINO files
cannot be downloaded there); the preprocessing and forwards are `vidax.eval.features`' own, fp32 at
"highest" matmul precision as the metrics run (`--precision default` for the backend's own), split over
every device on the data axis.

    python -m bench.accelerator.chip.eval_features --out eval.json [--clips 16 --frames 16 --size 256]
    python -m bench.accelerator.chip.eval_features --networks i3d --clips 1 --frames 9 --size 64   # a CPU check

Each network: one call compiles (timed apart), then `--repeats` timed calls over all clips; the JSON and a
table give compile seconds, the best call, clips/s and frames/s, and the device.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

CLIP_SIZES = {"clip_b32": dict(width=768, layers=12, patch=32, embed=512),
              "clip_l14": dict(width=1024, layers=24, patch=14, embed=768)}


def _random(shapes, seed: int):
    """N(0, 0.02) leaves on the device, norm scales near 1 (as the synthetic folders draw them)."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree_util.tree_flatten(shapes)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    draw = jax.jit(lambda k, shape: jax.random.normal(k, shape, jnp.float32) * 0.02, static_argnums=1)
    return jax.tree_util.tree_unflatten(tree, [draw(k, tuple(s.shape)) for k, s in zip(keys, leaves)])


def network(name: str):
    """(kind, a `vidax.eval.features.Network` at the real size with random weights)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    from flax.traverse_util import flatten_dict

    from vidax.eval.features import Network
    from vidax.eval.networks import dino, i3d, raft
    from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection
    from vidax.zoo.parts.encoders.vision import VisionConfig

    shapes = lambda module, x: nn.unbox(jax.eval_shape(lambda: module.init(jax.random.key(0), x))["params"])  # noqa: E731
    if name in CLIP_SIZES:
        c = CLIP_SIZES[name]
        config = VisionConfig(hidden_size=c["width"], intermediate_size=4 * c["width"], num_hidden_layers=c["layers"],
                              num_attention_heads=c["width"] // 64, image_size=224, patch_size=c["patch"],
                              projection_dim=c["embed"])
        params = {"visual": shapes(CLIPVisionModelWithProjection(config), jnp.zeros((1, 3, 224, 224)))}
        kind = "clip_image"
    elif name == "dino":
        config = VisionConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                              image_size=224, patch_size=16, hidden_act="gelu", layer_norm_eps=1e-6, pre_norm=False,
                              patch_bias=True)
        params, kind = shapes(dino.DinoViT(config), jnp.zeros((1, 3, 224, 224))), "dino"
    elif name == "raft":
        frame = jnp.zeros((1, 128, 128, 3))
        params = nn.unbox(jax.eval_shape(lambda: raft.RAFT(iters=1).init(jax.random.key(0), frame, frame))["params"])
        kind = "raft"
    else:
        params, kind = shapes(i3d.InceptionI3d(), jnp.zeros((1, 16, 224, 224, 3))), "i3d"
    tree = flatten_dict(params, sep="/")
    return kind, Network(name, tree, _random(params, 0), digest="random")


def measure(name: str, clips: int, frames: int, size: int, repeats: int, batch: int) -> dict:
    import jax

    from vidax.eval.api import raft_pairs_per_call
    from vidax.eval.features import Runner, forward_of, mesh_for

    kind, net = network(name)
    per_call = {"i3d": jax.device_count(), "raft": raft_pairs_per_call(size, size, frames - 1, batch)}.get(kind, batch)
    runner = Runner(forward_of(kind, net), net.params, mesh_for(None), batch=per_call)
    videos = np.random.default_rng(0).integers(0, 256, (clips, frames, size, size, 3), dtype=np.uint8)
    if kind == "i3d":
        run = lambda: runner(videos)  # noqa: E731
    elif kind == "raft":  # a clip's consecutive frame pairs, as dynamic degree reads them
        run = lambda: [runner(np.stack([v[:-1], v[1:]], axis=1)) for v in videos]  # noqa: E731
    else:
        run = lambda: [runner(v) for v in videos]  # noqa: E731
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    best = min(times)
    return {"network": name, "clips": clips, "frames": frames, "size": size, "first_call_s": first, "best_s": best,
            "clips_per_s": clips / best, "frames_per_s": clips * frames / best, "devices": jax.device_count(),
            "device": jax.devices()[0].device_kind}


def main(argv=None) -> None:
    import jax

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default="clip_b32,dino,i3d,raft,clip_l14")
    parser.add_argument("--clips", type=int, default=16)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="frames per device program (per-frame networks)")
    parser.add_argument("--precision", default="highest", choices=("highest", "default"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.precision == "highest":
        jax.config.update("jax_default_matmul_precision", "highest")
    rows = []
    for name in args.networks.split(","):
        rows.append(measure(name, args.clips, args.frames, args.size, args.repeats, args.batch) | {"precision": args.precision})
        r = rows[-1]
        print(f"{name:<9} {r['device']}: first call {r['first_call_s']:.1f} s, best {r['best_s']:.3f} s, "
              f"{r['clips_per_s']:.2f} clips/s, {r['frames_per_s']:.1f} frames/s "
              f"({r['clips']} clips x {r['frames']} frames at {r['size']}x{r['size']})", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
