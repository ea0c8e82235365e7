"""The metric networks against their PyTorch references on tiny perturbed weights, through the real specs and
files (fp32, highest matmul precision), per block and whole; and at real size by shape coverage."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
import tiny  # noqa: E402
from oracle import to_np, unflatten  # noqa: E402

from vidax.eval.networks import clip as clip_net
from vidax.eval.networks import dino as dino_net
from vidax.eval.networks import i3d as i3d_net
from vidax.eval.networks.aesthetic import aesthetic_score
from vidax.translator import convert
from vidax.zoo.parts.encoders.vision import VisionLayer

ATOL = 1e-5


def _run(module, params, *args):
    """One compiled program per call (op-by-op dispatch compiles every op)."""
    return jax.jit(lambda p, *a: module.apply({"params": p}, *a))(params, *args)


def _close(got, want, atol=ATOL):
    got, want = np.asarray(got), to_np(want) if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)


def _layer(tree: dict, prefix: str, index: int = 0) -> dict:
    return unflatten({k[len(prefix):]: v[index] for k, v in tree.items() if k.startswith(prefix)})


@pytest.fixture(scope="module")
def clip_model():
    return tiny.tiny_clip(seed=0)


@pytest.mark.parametrize("torchscript", [True, False], ids=["torchscript", "state-dict"])
def test_clip_towers_match_the_clip_package(clip_model, torchscript, tmp_path):
    tree = convert("eval/clip", tiny.save_clip(clip_model, tmp_path, torchscript))
    sizes, params = clip_net.clip_sizes(tree), unflatten(tree)
    pixels = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    ids = tiny.clip_tokens(3, clip_model.context_length, clip_model.vocab_size)
    with torch.no_grad():
        want_image, want_text = clip_model.encode_image(pixels), clip_model.encode_text(ids)
    _close(jax.jit(lambda p, x: clip_net.encode_image(sizes, p, x))(params, pixels.numpy()), want_image)
    _close(jax.jit(lambda p, x: clip_net.encode_text(sizes, p, x))(params, ids.numpy()), want_text)


def test_clip_vision_block(clip_model, tmp_path):
    tree = convert("eval/clip", tiny.save_clip(clip_model, tmp_path, torchscript=False))
    sizes = clip_net.clip_sizes(tree)
    x = torch.randn(2, 50, 128, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = clip_model.visual.transformer.resblocks[1](x.permute(1, 0, 2)).permute(1, 0, 2)
    params = _layer(tree, "visual/vision_model/encoder/layers/", 1)
    got, _ = _run(VisionLayer(sizes.vision), params, x.numpy())
    _close(got, want)


@pytest.fixture(scope="module")
def dino(tmp_path_factory):
    model = tiny.tiny_dino(seed=0)
    tree = convert("eval/dino", tiny.save_dino(model, tmp_path_factory.mktemp("dino")))
    return model, tree


def test_dino_matches_the_vit_on_square_frames(dino):
    model, tree = dino
    pixels = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(pixel_values=pixels).last_hidden_state[:, 0]
    _close(_run(dino_net.DinoViT(dino_net.dino_config(tree)), unflatten(tree), pixels.numpy()), want)


def test_dino_block(dino):
    model, tree = dino
    x = torch.randn(2, 197, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = model.encoder.layer[0](x) if hasattr(model, "encoder") else model.layers[0](x)
    want = want[0] if isinstance(want, tuple) else want
    got, _ = _run(VisionLayer(dino_net.dino_config(tree)), _layer(tree, "encoder/layers/"), x.numpy())
    _close(got, want)


@pytest.mark.parametrize("grid", [(14, 24), (9, 14), (20, 14)])
def test_dino_position_resize_is_dinos_bicubic_with_its_scale_factor(grid):
    """DINO's `interpolate_pos_encoding` calls F.interpolate(scale_factor=((h + 0.1) / g, (w + 0.1) / g), bicubic)."""
    table = torch.randn(1, 32, 14, 14, generator=torch.Generator().manual_seed(5))
    h, w = grid
    want = F.interpolate(table, scale_factor=((h + 0.1) / 14, (w + 0.1) / 14), mode="bicubic")
    rows, cols = dino_net.position_matrices(14, h, w)
    got = np.einsum("hH,wW,cHW->chw", rows, cols, table[0].numpy())
    _close(got, want[0])


@pytest.fixture(scope="module")
def i3d(tmp_path_factory):
    model = tiny.tiny_i3d(seed=0)
    tree = convert("eval/i3d", tiny.save_i3d(model, tmp_path_factory.mktemp("i3d")))
    return model, tree


def _channels_last(x: torch.Tensor) -> np.ndarray:
    return x.numpy().transpose(0, 2, 3, 4, 1)


def test_i3d_units_and_inception_module(i3d):
    model, tree = i3d
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(1, 3, 5, 17, 19, generator=gen)  # odd sizes: the same-padding's uneven halves
    with torch.no_grad():
        want = model.Conv3d_1a_7x7(x)
    got = _run(i3d_net.Unit3D(64, (7, 7, 7), (2, 2, 2)), _layer_tree(tree, "Conv3d_1a_7x7/"), _channels_last(x))
    _close(got, _channels_last(want))
    x = torch.rand(1, 192, 3, 6, 5, generator=gen)  # after a ReLU: non-negative, as the max pools see it
    with torch.no_grad():
        want = model.Mixed_3b(x)
    spec = dict(i3d_net.INCEPTION)["Mixed_3b"]
    got = _run(i3d_net.InceptionModule(spec), _layer_tree(tree, "Mixed_3b/"), _channels_last(x))
    _close(got, _channels_last(want))
    # the whole network's logits: tests/eval/test_metrics.py::test_fvd_through_i3d_is_cd_fvds (through evaluate)


def _layer_tree(tree: dict, prefix: str) -> dict:
    return unflatten({k[len(prefix):]: v for k, v in tree.items() if k.startswith(prefix)})


def test_aesthetic_head(tmp_path):
    head = tiny.tiny_aesthetic(32)
    tree = convert("eval/aesthetic", tiny.save_aesthetic(head, tmp_path))
    features = torch.randn(5, 32, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = head(F.normalize(features, dim=-1, p=2)).squeeze(-1)
    _close(jax.jit(aesthetic_score)(unflatten(tree), features.numpy()), want)
