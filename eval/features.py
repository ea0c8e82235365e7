"""Features per clip: the networks loaded through the translator, preprocessing as the references do it,
batched runs sharded over the devices' `data` axis, and a cache keyed by content.

A feature is computed once per (clip bytes, network weights, settings): `FeatureCache` keeps each as a
`.npy` named by the SHA-256 of that key, written whole or not at all, so a rerun over the same clips (or a
second metric reading the same network, as background consistency and CLIP score share CLIP ViT-B/32)
reads instead of computing. Frames go through the networks in fixed-size batches (padded), split over the
mesh's `data` axis (`vidax.zoo.compute.mesh.make_mesh(dp=...)`), weights replicated: one compiled program
per frame size.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from vidax.eval import resize
from vidax.eval.errors import EvalError
from vidax.eval.networks import aesthetic, clip, dino, i3d, raft
from vidax.zoo.compute.mesh import DATA, make_mesh

I3D_SIZE = 224  # cd-fvd's TARGET_RESOLUTION
VBENCH_SIZE = 224  # clip_transform(224), dino_transform(224)


@dataclasses.dataclass(frozen=True)
class NetworkFile:
    """Where a network's weights lie in the weights folder and what it is, for messages."""

    spec: str
    files: tuple[str, ...]
    what: str


NETWORKS = {
    "i3d": NetworkFile("eval/i3d", ("i3d_pretrained_400.pt", "*i3d*.pt", "*i3d*.pth"),
                       "I3D Kinetics-400 (cd-fvd / TATS' i3d_pretrained_400.pt)"),
    "clip_b32": NetworkFile("eval/clip", ("ViT-B-32.pt", "*ViT-B-32*.pt", "*ViT-B-32*.bin"), "CLIP ViT-B/32 (OpenAI's ViT-B-32.pt)"),
    "clip_l14": NetworkFile("eval/clip", ("ViT-L-14.pt", "*ViT-L-14*.pt", "*ViT-L-14*.bin"), "CLIP ViT-L/14 (OpenAI's ViT-L-14.pt)"),
    "dino": NetworkFile("eval/dino", ("dino_vitbase16_pretrain.pth", "*dino*.pth"), "DINO ViT-B/16 (dino_vitbase16_pretrain.pth)"),
    "raft": NetworkFile("eval/raft", ("raft-things.pth", "*raft*.pth"), "RAFT (raft-things.pth)"),
    "aesthetic": NetworkFile("eval/aesthetic", ("sa_0_4_vit_l_14_linear.pth", "*aesthetic*.pth"),
                             "LAION's aesthetic head (sa_0_4_vit_l_14_linear.pth)"),
}


@dataclasses.dataclass(frozen=True)
class Network:
    """A network's converted weights (nested, host) and the SHA-256 of its file."""

    name: str
    tree: dict
    params: dict
    digest: str


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            sha.update(block)
    return sha.hexdigest()


def weights_file(name: str, folder: str | os.PathLike) -> Path:
    """The first file in `folder` that one of the network's globs names; a one-line error naming what is missing."""
    entry, root = NETWORKS[name], Path(folder)
    for pattern in entry.files:
        hits = sorted(root.glob(pattern))
        if hits:
            return hits[0]
    raise EvalError(f"{root}: no weights for {entry.what} (looked for {', '.join(entry.files)})")


def load_network(name: str, folder: str | os.PathLike) -> Network:
    """Convert a network's file through its spec (strict accounting, fp32) into a host tree."""
    from flax.traverse_util import unflatten_dict

    from vidax.translator import TranslatorError, convert

    path = weights_file(name, folder)
    try:
        tree = dict(convert(NETWORKS[name].spec, path))
    except TranslatorError as err:
        raise EvalError(f"{NETWORKS[name].what}: {err}") from None
    return Network(name, tree, unflatten_dict(tree, sep="/"), _file_digest(path))


# ----------------------------------------------------------------------------- preprocessing, as the references


def clip_pixels(frames, size: int):
    """vbench `clip_transform(size)`: shorter side to `size` (bicubic, no antialias), centre crop, /255, CLIP
    statistics: uint8 `[N, H, W, 3]` -> `[N, 3, size, size]`."""
    h, w = frames.shape[1:3]
    oh, ow = resize.shorter_side_size(h, w, size)
    rows, cols = resize.resize_matrices(h, w, oh, ow, "bicubic", crop=size)
    x = resize.apply_resize(frames.astype(jnp.float32), rows, cols) / 255.0
    return resize.normalise(x, clip.MEAN, clip.STD).transpose(0, 3, 1, 2)


def dino_pixels(frames, size: int = VBENCH_SIZE):
    """vbench `dino_transform(size)`: shorter side to `size` (bilinear, no antialias, no crop), /255, ImageNet
    statistics: uint8 `[N, H, W, 3]` -> `[N, 3, h, w]`."""
    h, w = frames.shape[1:3]
    rows, cols = resize.resize_matrices(h, w, *resize.shorter_side_size(h, w, size), "bilinear")
    x = resize.apply_resize(frames.astype(jnp.float32), rows, cols) / 255.0
    return resize.normalise(x, dino.MEAN, dino.STD).transpose(0, 3, 1, 2)


def i3d_input(videos, size: int = I3D_SIZE):
    """cd-fvd `preprocess_i3d`: every frame to size x size (bilinear), scaled to [-1, 1]: uint8 `[B, T, H, W, 3]`."""
    h, w = videos.shape[2:4]
    rows, cols = resize.resize_matrices(h, w, size, size, "bilinear")
    return 2.0 * resize.apply_resize(videos.astype(jnp.float32), rows, cols) / 255.0 - 1.0


# ----------------------------------------------------------------------------- the forwards, per item


def clip_image_features(network: Network, frames):
    sizes = clip.clip_sizes(network.tree)
    return clip.encode_image(sizes, network.params, clip_pixels(frames, sizes.image_size))


def dino_features(network: Network, frames):
    return dino.DinoViT(dino.dino_config(network.tree)).apply({"params": network.params}, dino_pixels(frames))


def i3d_logits(network: Network, videos):
    return i3d.InceptionI3d().apply({"params": network.params}, i3d_input(videos))


def padded_to_8(frames):
    """RAFT's `InputPadder` (sintel mode): edge-replicate to multiples of 8, the odd pixel at the end: `[..., H, W, 3]`."""
    h, w = frames.shape[-3:-1]
    ph, pw = -h % 8, -w % 8
    pads = [(0, 0)] * (frames.ndim - 3) + [(ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)]
    return jnp.pad(frames, pads, mode="edge")


def raft_pair_scores(network: Network, pairs):
    """VBench's dynamic-degree score of each frame pair `[N, 2, H, W, 3]` uint8: RAFT's flow (20 refinements) on
    the padded frames, the mean of its largest 5% magnitudes (`DynamicDegree.get_score`)."""
    x = padded_to_8(pairs.astype(jnp.float32))
    flow = raft.RAFT(iters=20).apply({"params": network.params}, x[:, 0], x[:, 1])
    magnitude = jnp.sqrt(jnp.sum(flow**2, axis=-1)).reshape(flow.shape[0], -1)
    top = max(1, int(magnitude.shape[1] * 0.05))
    return jax.lax.top_k(magnitude, top)[0].mean(axis=1)


def aesthetic_scores(network: Network, features):
    return aesthetic.aesthetic_score(network.params, features)


# ----------------------------------------------------------------------------- batched, sharded runs


class Runner:
    """`run(items [N, ...]) -> [N, ...]` through `forward(params, batch)` in batches of `batch` items, each split
    over the mesh's `data` axis; the weights placed once, replicated. The last batch is padded (with its last
    item) only to a multiple of the devices: at most two programs per item shape, little work thrown away."""

    def __init__(self, forward: Callable, params, mesh: jax.sharding.Mesh, batch: int):
        self.dp = dp = mesh.shape[DATA]
        self.batch = max(dp, -(-batch // dp) * dp)
        self.items = NamedSharding(mesh, P(DATA))
        self.params = jax.device_put(params, NamedSharding(mesh, P()))
        self.forward = jax.jit(forward, out_shardings=self.items)

    def __call__(self, items: np.ndarray) -> np.ndarray:
        out = []
        for start in range(0, len(items), self.batch):
            chunk = items[start:start + self.batch]
            pad = -len(chunk) % self.dp
            if pad:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], pad, axis=0)])
            result = self.forward(self.params, jax.device_put(chunk, self.items))
            out.append(np.asarray(jax.device_get(result))[:len(chunk) - pad])
        return np.concatenate(out)


def mesh_for(dp: int | None) -> jax.sharding.Mesh:
    """A mesh of `dp` devices on the data axis (all of them by default)."""
    return make_mesh(dp=dp or len(jax.devices()))


def forward_of(kind: str, network: Network) -> Callable:
    """The per-item forward of a feature kind, over the network's params (a pure function of (params, batch))."""
    functions = {"clip_image": clip_image_features, "dino": dino_features, "i3d": i3d_logits, "raft": raft_pair_scores}
    apply = functions[kind]
    return lambda params, batch: apply(dataclasses.replace(network, params=params), batch)


# ----------------------------------------------------------------------------- the cache


class FeatureCache:
    """Features on disk by content key; `folder=None` keeps nothing."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = None if folder is None else Path(folder)

    @staticmethod
    def key(**parts) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> np.ndarray | None:
        if self.folder is None:
            return None
        path = self.folder / f"{key}.npy"
        try:
            return np.load(path, allow_pickle=False) if path.is_file() else None
        except (OSError, ValueError):  # a damaged entry is recomputed (and rewritten whole)
            return None

    def put(self, key: str, value: np.ndarray) -> None:
        if self.folder is None:
            return
        from vidax.translator.output import write_file

        self.folder.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(value), allow_pickle=False)
        write_file(self.folder / f"{key}.npy", buffer.getvalue())


def default_cache_folder() -> Path:
    """`$VIDAX_CACHE_DIR/eval-features`, else `~/.cache/vidax/eval-features`."""
    if os.environ.get("VIDAX_CACHE_DIR"):
        return Path(os.environ["VIDAX_CACHE_DIR"]).expanduser() / "eval-features"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "vidax" / "eval-features"


@functools.lru_cache(maxsize=None)
def settings_of(kind: str) -> dict:
    """What a feature kind's values depend on besides the clip and the weights (bumped when preprocessing changes)."""
    return {"kind": kind, "preprocess": {"clip_image": f"vbench clip_transform({VBENCH_SIZE})",
                                         "dino": f"vbench dino_transform({VBENCH_SIZE})",
                                         "i3d": f"cd-fvd preprocess_i3d({I3D_SIZE})",
                                         "raft": "vbench DynamicDegree.get_score, 20 iterations"}[kind], "version": 1}
