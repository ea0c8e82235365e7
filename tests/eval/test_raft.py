"""RAFT (VBench's dynamic degree) against VBench's own RAFT on tiny perturbed weights at its real widths, through
`raft-things.pth` as it ships (`module.` keys) and the real spec: the encoders, one refinement (with the
correlation lookup) and the convex upsampling within 1e-5; the whole flow; and the dynamic degree of a clip
against `vbench.dynamic_degree.DynamicDegree` on the same MP4."""

from __future__ import annotations

import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
import tiny  # noqa: E402
from oracle import to_np, unflatten  # noqa: E402
from standins import installed  # noqa: E402

from vidax.eval import EvalOptions, evaluate
from vidax.eval.networks import raft
from vidax.translator import convert
from vidax.zoo.video_io import write_frames


def _nhwc(x: torch.Tensor) -> np.ndarray:
    return x.numpy().transpose(0, 2, 3, 1)


def _close(got, want: torch.Tensor, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got), _nhwc(want), atol=atol, rtol=1e-5)


def _close_to_scale(got, want: torch.Tensor):
    """Within 1e-5 of the output's scale: RAFT's encoders are 13 convolutions deep with instance or batch norms
    between them and end in values of several units, whose last bits differ by ~1e-5 between two correct
    summation orders (torch's and XLA's); the flow is in pixels."""
    _close(got, want, atol=1e-5 * float(want.abs().max()))


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    model = tiny.tiny_raft(seed=0)
    folder = tmp_path_factory.mktemp("raft")
    tiny.save_raft(model, folder)
    shapes = nn.unbox(jax.eval_shape(lambda: raft.RAFT(iters=1).init(
        jax.random.key(0), jnp.zeros((1, 128, 128, 3)), jnp.zeros((1, 128, 128, 3))))["params"])
    from flax.traverse_util import flatten_dict

    tree = convert("eval/raft", folder / "raft-things.pth", expected={k: v.shape for k, v in flatten_dict(shapes, sep="/").items()})
    return model, unflatten(tree), folder


def _frames(seed: int, shape=(1, 3, 128, 136)) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 255


def test_encoders_refinement_and_upsampling(nets):
    model, params, _ = nets
    image = _frames(1)
    x = 2 * (image / 255) - 1
    run = lambda module, p, *a: jax.jit(lambda p, *a: module.apply({"params": p}, *a))(p, *a)  # noqa: E731
    with torch.no_grad():
        fmap, cmap = model.fnet(x), model.cnet(x)
    _close_to_scale(run(raft.BasicEncoder(256, "instance"), params["fnet"], _nhwc(x)), fmap)
    _close_to_scale(run(raft.BasicEncoder(256, "batch"), params["cnet"], _nhwc(x)), cmap)
    # one refinement at a displaced match: the lookup of every level, the motion encoder, the GRU, the heads
    from vbench.third_party.RAFT.core.corr import CorrBlock

    fmap2 = model.fnet(2 * (_frames(2) / 255) - 1).detach()
    gen = torch.Generator().manual_seed(3)
    net, inp = torch.tanh(torch.randn(1, 128, 16, 17, generator=gen)), torch.relu(torch.randn(1, 128, 16, 17, generator=gen))
    ys, xs = torch.meshgrid(torch.arange(16.0), torch.arange(17.0), indexing="ij")
    coords0 = torch.stack([xs, ys])[None]
    coords1 = coords0 + torch.randn(1, 2, 16, 17, generator=gen) * 3
    with torch.no_grad():
        corr = CorrBlock(fmap.detach(), fmap2, radius=4)(coords1)
        want_net, want_mask, want_delta = model.update_block(net, inp, corr, coords1 - coords0)
    pyramid = raft.correlation_pyramid(_nhwc(fmap.detach()), _nhwc(fmap2))
    carry = (_nhwc(net), _nhwc(coords1), np.zeros((1, 16, 17, 576), np.float32))
    (got_net, got_coords, got_mask), _ = run(raft.UpdateBlock(), params["update_block"], carry, _nhwc(inp), pyramid, _nhwc(coords0))
    _close(got_net, want_net)
    _close(got_mask, want_mask)
    _close(np.asarray(got_coords) - _nhwc(coords1), want_delta)
    with torch.no_grad():
        want_up = model.upsample_flow(want_delta, want_mask)
    _close(jax.jit(raft.upsample_flow)(_nhwc(want_delta), _nhwc(want_mask)), want_up)


def test_whole_flow(nets):
    """Three refinements end to end (the metric runs VBench's 20: below); the flow is in pixels, ~10^2 with random
    weights."""
    model, params, _ = nets
    a, b = _frames(4), torch.roll(_frames(4), 5, dims=3)
    with torch.no_grad():
        _, want = model(a, b, iters=3, test_mode=True)
    got = jax.jit(lambda p, x, y: raft.RAFT(iters=3).apply({"params": p}, x, y))(params, _nhwc(a), _nhwc(b))
    _close_to_scale(got, want)


def test_dynamic_degree_is_vbenchs(nets, tmp_path):
    """vbench's `DynamicDegree.infer` (cv2's frames, its padding, 20 refinements, its score and decision) on an
    MP4, against `evaluate`: the same decision and, from the feature cache, each pair's score."""
    from vidax.eval.clips import find_clips
    from vidax.eval.features import FeatureCache, _file_digest, settings_of

    model, _, folder = nets
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, (128, 144, 3))
    frames = np.stack([np.roll(base, 4 * t, axis=1) for t in range(3)]).astype(np.float32)  # 3 frames: 1 move needed
    write_frames(tmp_path / "clips" / "moving.mp4", frames, fps=8)
    with installed():
        from vbench.dynamic_degree import DynamicDegree
    reference = object.__new__(DynamicDegree)  # its __init__ loads weights by path with torch.load
    reference.model, reference.device = model, "cpu"
    seen = {}
    check = reference.check_move
    reference.check_move = lambda scores: seen.setdefault("scores", list(scores)) is not None and check(scores)
    with torch.no_grad():
        moved = reference.infer(str(tmp_path / "clips" / "moving.mp4"))
    got = evaluate(EvalOptions(generated=tmp_path / "clips", metrics=("dynamic_degree",), weights=folder,
                               cache=tmp_path / "cache", dp=2))
    assert got.per_clip["dynamic_degree"]["moving"] == float(moved)
    clip = find_clips(tmp_path / "clips")[0]
    cached = FeatureCache(tmp_path / "cache").get(FeatureCache.key(
        clip=clip.digest(), network=_file_digest(folder / "raft-things.pth"), interval=1, **settings_of("raft")))
    np.testing.assert_allclose(cached, seen["scores"], rtol=1e-5)


def test_a_clips_pairs_go_through_raft_together_within_the_correlation_budget():
    """One dispatch per clip where the correlation volumes fit (an accelerator idles at one pair per call); one
    pair per call at 720p, where a single pair's volume is 0.8 GiB."""
    from vidax.eval.api import raft_pairs_per_call

    assert raft_pairs_per_call(256, 256, 15, 16) == 15
    assert raft_pairs_per_call(256, 256, 40, 16) == 16
    assert raft_pairs_per_call(480, 832, 15, 16) == 6  # 60 x 104 cells: 156 MB a pair
    assert raft_pairs_per_call(720, 1280, 15, 16) == 1
    assert raft_pairs_per_call(256, 256, 0, 16) == 1
