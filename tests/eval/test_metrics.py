"""The metrics equal their references' on the same clips and weights: VBench's dimensions as the `vbench`
package computes them (its frame reading, resizes and normalisation), FVD as cd-fvd computes it (its I3D
preprocessing and covariance) and as StyleGAN-V's formula does, CLIP score as torchmetrics defines it.

Everything runs through `vidax.eval.evaluate` on MP4 and `.npy` clips, with the tiny networks written as
their published files in one weights folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent / "references"))
import tiny  # noqa: E402
from standins import oracles  # noqa: E402

from vidax.eval import EvalOptions, evaluate
from vidax.eval.frechet import fvd
from vidax.zoo.video_io import write_frames

VBENCH_ATOL = 1e-4  # the bar for each dimension
PROMPTS = ["red", "a blue sky"]


def _clip_frames(seed: int, frames: int, height: int, width: int) -> np.ndarray:
    """A moving stripe pattern over pixel noise: sharp edges and texture, so that resizing's taps and the
    normalisation show in the features, and frames that differ enough for consistencies well below 1."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    video = [np.stack([((x + 3 * t + seed) // 4) % 2, ((y - 2 * t) // 3) % 2, ((x + y + t) // 5) % 2], -1) * 0.6
             for t in range(frames)]
    return np.clip(np.stack(video) + rng.uniform(0, 0.4, (frames, height, width, 3)), 0, 1).astype(np.float32)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    weights = root / "weights"
    vocab = tiny.clip_tokenizer_folder(weights / "clip_tokenizer")
    b32 = tiny.tiny_clip(seed=0, vocab_size=vocab)
    l14 = tiny.tiny_clip(seed=1, vocab_size=vocab, embed_dim=24)
    tiny.save_clip(b32, weights, torchscript=True)
    torch.save(tiny.state_of(l14), weights / "ViT-L-14.pt")
    head = tiny.tiny_aesthetic(24, seed=2)
    tiny.save_aesthetic(head, weights)
    dino = tiny.tiny_dino(seed=3)
    tiny.save_dino(dino, weights)
    clips = root / "clips"
    for i, prompt in enumerate(PROMPTS):  # square clips: VBench's DINO runs them at 224 x 224
        write_frames(clips / f"clip{i}.mp4", _clip_frames(i, 5, 64, 64), fps=8)
        (clips / f"clip{i}.txt").write_text(prompt)
    return dict(root=root, weights=weights, clips=clips, b32=b32, l14=l14, head=head, dino=dino)


@pytest.fixture(scope="module")
def scores(world):
    options = EvalOptions(generated=world["clips"], weights=world["weights"], no_cache=True, dp=2, batch=4,
                          metrics=("subject_consistency", "background_consistency", "temporal_flickering",
                                   "aesthetic_quality", "clip_score"))
    return evaluate(options)


def _videos(world) -> list[str]:
    return sorted(str(p) for p in world["clips"].glob("*.mp4"))


def _check(result, metric: str, overall: float, per_video: list[dict]):
    assert abs(result.scores[metric] - overall) < VBENCH_ATOL, (result.scores[metric], overall)
    got = [result.per_clip[metric][Path(v["video_path"]).stem] for v in per_video]
    np.testing.assert_allclose(got, [v["video_results"] for v in per_video], atol=VBENCH_ATOL, rtol=0)


def test_subject_consistency_is_vbenchs(world, scores):
    vit = world["dino"]
    overall, per_video = oracles().subject.subject_consistency(
        lambda x: vit(pixel_values=x).last_hidden_state[:, 0], _videos(world), "cpu", False)
    _check(scores, "subject_consistency", overall, per_video)


def test_background_consistency_is_vbenchs(world, scores):
    overall, per_video = oracles().background.background_consistency(world["b32"], None, _videos(world), "cpu", False)
    _check(scores, "background_consistency", overall, per_video)


def test_aesthetic_quality_is_vbenchs(world, scores):
    overall, per_video = oracles().aesthetic.laion_aesthetic(world["head"], world["l14"], _videos(world), "cpu")
    _check(scores, "aesthetic_quality", overall, per_video)


def test_temporal_flickering_is_vbenchs(world, scores):
    overall, per_video = oracles().flicker.temporal_flickering(_videos(world))
    _check(scores, "temporal_flickering", overall, per_video)


def test_clip_score_is_torchmetrics_definition_on_vbenchs_frames(world, scores):
    """100 * max(0, cos(image, text)) per frame (torchmetrics' CLIPScore), averaged over the clip; the frames
    as VBench's clip_transform(224) makes them, the text through transformers' CLIPTokenizer."""
    from transformers import CLIPTokenizer

    o, model = oracles(), world["b32"]
    tokenizer = CLIPTokenizer(str(world["weights"] / "clip_tokenizer/vocab.json"),
                              str(world["weights"] / "clip_tokenizer/merges.txt"))
    want = {}
    for video in _videos(world):
        prompt = Path(video).with_suffix(".txt").read_text()
        ids = torch.zeros(1, model.context_length, dtype=torch.long)
        encoded = tokenizer(prompt)["input_ids"]
        ids[0, :len(encoded)] = torch.tensor(encoded)
        with torch.no_grad():
            image = F.normalize(model.encode_image(o.utils.clip_transform(224)(o.utils.load_video(video))), dim=-1)
            text = F.normalize(model.encode_text(ids), dim=-1)
        want[Path(video).stem] = float(torch.clamp(100 * image @ text[0], min=0).mean())
    assert scores.per_clip["clip_score"] == pytest.approx(want, abs=VBENCH_ATOL)
    assert scores.scores["clip_score"] == pytest.approx(np.mean(list(want.values())), abs=VBENCH_ATOL)


def _stylegan_v_fvd(generated: np.ndarray, real: np.ndarray) -> float:
    """StyleGAN-V's `compute_fvd` (src/metrics/frechet_video_distance.py): np.cov statistics, scipy's sqrtm."""
    mu_gen, sigma_gen = generated.mean(axis=0), np.cov(generated, rowvar=False)
    mu_real, sigma_real = real.mean(axis=0), np.cov(real, rowvar=False)
    s, _ = scipy.linalg.sqrtm(np.dot(sigma_gen, sigma_real), disp=False)
    return float(np.real(np.square(mu_gen - mu_real).sum() + np.trace(sigma_gen + sigma_real - s * 2)))


@pytest.mark.parametrize("n", [6, 40])
def test_frechet_distance_is_cd_fvds_and_stylegan_vs(n):
    from cdfvd.utils.metric_utils import FeatureStats

    rng = np.random.default_rng(n)
    generated = rng.normal(0.3, 1.0, (n, 16)).astype(np.float32)
    real = (rng.normal(0, 1.2, (n + 3, 16)) @ rng.normal(0, 0.5, (16, 16))).astype(np.float32)
    stats = []
    for features in (generated, real):
        s = FeatureStats(capture_mean_cov=True)
        s.append(features)
        stats.append(s)
    want = oracles().cdfvd.cdfvd.compute_fvd_from_stats(None, *stats)  # self is unused when both stats are given
    assert fvd(generated, real, "biased") == pytest.approx(want, rel=1e-3)
    assert fvd(generated, real, "unbiased") == pytest.approx(_stylegan_v_fvd(generated, real), rel=1e-3)


def test_fvd_through_i3d_is_cd_fvds(tmp_path):
    """cd-fvd's `compute_fvd` on uint8 videos (its bilinear resize to 224, [-1, 1], its I3D, biased covariance)
    against `evaluate` on the same clips written as `.npy` frames; and each clip's I3D logits (what `evaluate`
    cached) against cd-fvd's network on its preprocessing, within 1e-5: the whole network's parity."""
    from vidax.eval.clips import find_clips
    from vidax.eval.features import FeatureCache, _file_digest, settings_of

    model = tiny.tiny_i3d(seed=4)
    weights = tmp_path / "weights"
    tiny.save_i3d(model, weights)
    sets = {}
    # I3D's forwards are the cost: 3 clips. Each at its own brightness, so that their features differ by about as much
    # as they measure: the FVD is then not a small difference of near-equal logits, where fp32 rounding in either
    # network (1e-7 of the logits) is 1e-3 of the result (measured on an AMD EPYC: 6.3308e-08 against 6.3244e-08)
    brightness = {"generated": (0.25, 1.0), "reference": (0.6,)}
    for name, seed, count in (("generated", 10, 2), ("reference", 20, 1)):
        videos = np.stack([_clip_frames(seed + i, 9, 24, 32) * brightness[name][i] for i in range(count)])
        for i, video in enumerate(videos):
            write_frames(tmp_path / name / f"{i}.npy", video, fps=8)
        sets[name] = np.round(videos * 255).astype(np.uint8)
    got = evaluate(EvalOptions(generated=tmp_path / "generated", reference=tmp_path / "reference", metrics=("fvd",),
                               weights=weights, covariance="biased", cache=tmp_path / "cache", dp=2))
    o = oracles()
    reference = object.__new__(o.cdfvd.cdfvd)  # its __init__ downloads weights: set what compute_fvd reads
    reference.model, reference.feature_fn, reference.device, reference.model_dtype = model, o.cdfvd.get_i3d_logits, "cpu", torch.float32
    reference.real_stats, reference.fake_stats = (o.cdfvd.FeatureStats(capture_mean_cov=True, capture_all=True)
                                                  for _ in range(2))
    want = reference.compute_fvd(sets["reference"], sets["generated"])
    assert got.scores["fvd"] == pytest.approx(want, rel=1e-3)
    cache, network = FeatureCache(tmp_path / "cache"), _file_digest(weights / "i3d_pretrained_400.pt")
    for clip, logits in zip(find_clips(tmp_path / "generated"), reference.fake_stats.get_all()):
        cached = cache.get(FeatureCache.key(clip=clip.digest(), network=network, frames=None, **settings_of("i3d")))
        np.testing.assert_allclose(cached, logits, atol=1e-5, rtol=1e-5)
