"""`evaluate`: the library call behind `vidax-eval`.

    from vidax.eval import EvalOptions, evaluate
    result = evaluate(EvalOptions(generated="clips/", reference="real/", metrics=("fvd", "clip_score"),
                                  weights="eval-weights/", out="scores.json"))
    result.scores  # {"fvd": ..., "clip_score": ...}

Every clip (and, for CLIP score, its prompt), the metrics, the weights folder and `out` are checked before any
network runs, so a bad request fails at once; features come from the cache where they are there; the JSON
(`scores`, `per_clip`, `settings`) is written whole or not at all.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Callable

import numpy as np

from vidax.eval import dimensions, frechet
from vidax.eval.clips import Clip, clip_fps, find_clips, read_frames
from vidax.eval.errors import EvalError
from vidax.eval.features import (FeatureCache, Runner, default_cache_folder, forward_of, load_network, mesh_for,
                                 settings_of, weights_file)

# metric -> the networks it reads (VBench's choices: CLIP ViT-B/32 for background consistency, ViT-L/14 +
# LAION's head for aesthetic quality, DINO ViT-B/16 for subject consistency, RAFT for dynamic degree)
METRICS = {
    "fvd": ("i3d",),
    "clip_score": ("clip_b32",),
    "subject_consistency": ("dino",),
    "background_consistency": ("clip_b32",),
    "temporal_flickering": (),
    "aesthetic_quality": ("clip_l14", "aesthetic"),
    "dynamic_degree": ("raft",),
}
RAFT_MIN_SIDE = 128  # RAFT's coarsest correlation level is 1/64 of the frame: at least 2 pixels (torch divides by W - 1)
RAFT_CORRELATION_BYTES = 1 << 30  # the all-pairs correlation volumes one RAFT call may hold (fp32, 1/8 resolution)
DEFAULT_METRICS = ("clip_score", "subject_consistency", "background_consistency", "temporal_flickering", "aesthetic_quality",
                   "dynamic_degree")
FVD_MIN_FRAMES = 9  # I3D's head pools 2 of its 8x-subsampled time steps


def raft_pairs_per_call(height: int, width: int, pairs: int, most: int) -> int:
    """Frame pairs per RAFT program: a clip's pairs together (one dispatch a clip rather than one a pair; on the
    TPU v5e one pair a program did not finish the bench's 16 clips in its time box), as many as keep the correlation volumes `((H/8)(W/8))^2` fp32 within
    RAFT_CORRELATION_BYTES (one pair at 720p holds 0.8 GiB), at most `most` (`--batch`)."""
    cells = -(-height // 8) * -(-width // 8)
    fit = RAFT_CORRELATION_BYTES // (cells * cells * 4)
    return max(1, min(pairs, most, fit))


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """One evaluation.

    Args:
      generated: folder of clips (`.mp4` or `.npy`, prompts in same-name `.txt` or vidax-gen's sidecar JSON).
      reference: folder of real clips (FVD's other set).
      metrics: names from `METRICS`.
      weights: folder holding the networks' files under their published names (`NETWORKS`).
      out: the JSON to write (None: nothing written).
      clip_tokenizer: CLIP's tokenizer folder (transformers' `vocab.json` + `merges.txt`, or `tokenizer.json`)
        for CLIP score; default `<weights>/clip_tokenizer`.
      fvd_frames: the first N frames of each clip go to I3D (None: all; every clip of a set needs as many).
      covariance: FVD's covariance, "unbiased" (StyleGAN-V) or "biased" (cd-fvd).
      cache: the feature cache folder (None: the default one); `no_cache` computes everything afresh.
      dp: devices on the data axis (None: all).
      batch: frames (clips for I3D) per device program.
    """

    generated: str | os.PathLike
    reference: str | os.PathLike | None = None
    metrics: tuple[str, ...] = DEFAULT_METRICS
    weights: str | os.PathLike | None = None
    out: str | os.PathLike | None = None
    clip_tokenizer: str | os.PathLike | None = None
    fvd_frames: int | None = None
    covariance: str = "unbiased"
    cache: str | os.PathLike | None = None
    no_cache: bool = False
    dp: int | None = None
    batch: int = 16


@dataclasses.dataclass
class EvalResult:
    scores: dict[str, float]
    per_clip: dict[str, dict[str, float]]
    settings: dict

    def to_json(self) -> dict:
        return {"scores": self.scores, "per_clip": self.per_clip, "settings": self.settings}


Progress = Callable[[str, int, int], None]  # (what, done, total)


def check_options(options: EvalOptions) -> list[str]:
    """Every user error before any work; returns the metrics in order."""
    metrics = list(dict.fromkeys(options.metrics))
    for name in metrics:
        if name not in METRICS:
            raise EvalError(f"unknown metric {name!r} (known: {', '.join(METRICS)})")
    if not metrics:
        raise EvalError("no metrics asked for")
    if "fvd" in metrics and options.reference is None:
        raise EvalError("fvd needs --reference: a folder of real clips")
    if any(METRICS[m] for m in metrics) and options.weights is None:
        raise EvalError(f"{', '.join(m for m in metrics if METRICS[m])} need --weights: the folder of the networks' files")
    if options.covariance not in frechet.COVARIANCES:
        raise EvalError(f"covariance {options.covariance!r}: one of {', '.join(frechet.COVARIANCES)}")
    if options.fvd_frames is not None and options.fvd_frames < FVD_MIN_FRAMES:
        raise EvalError(f"fvd frames must be at least {FVD_MIN_FRAMES} (I3D's head), got {options.fvd_frames}")
    if options.batch < 1 or (options.dp is not None and options.dp < 1):
        raise EvalError("batch and dp must be positive")
    if options.out is not None:
        _check_out(Path(options.out))
    return metrics


def _check_out(path: Path) -> None:
    """`--out` must be a `.json` whose folder exists (or can be made) and takes a file, before any work."""
    import tempfile

    if path.suffix.lower() != ".json":
        raise EvalError(f"{path}: --out must end in .json")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise EvalError(f"{path}: {folder} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".vidax-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise EvalError(f"{path}: cannot write in {folder} ({err.strerror or err})") from None


def evaluate(options: EvalOptions, progress: Progress | None = None) -> EvalResult:
    """Score the clips of `options.generated` (and `options.reference` for FVD) with `options.metrics`."""
    metrics = check_options(options)
    progress = progress or (lambda what, done, total: None)
    clips = find_clips(options.generated)
    reference = find_clips(options.reference) if "fvd" in metrics else []
    if "clip_score" in metrics:
        missing = [c.name for c in clips if not c.prompt]
        if missing:
            raise EvalError(f"clip_score needs each clip's prompt (NAME.txt or vidax-gen's NAME.json): none for "
                            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    for network in dict.fromkeys(n for m in metrics for n in METRICS[m]):
        weights_file(network, options.weights)  # every file there before the first network loads
    cache = FeatureCache(None if options.no_cache else (options.cache or default_cache_folder()))
    context = _Context(options, cache, mesh_for(options.dp), progress)
    scores, per_clip = {}, {}
    for name in metrics:
        scores[name], per_clip[name] = _METRIC_FUNCTIONS[name](context, clips, reference)
    settings = {"generated": str(options.generated), "reference": None if options.reference is None else str(options.reference),
                "metrics": metrics, "clips": len(clips), "reference_clips": len(reference),
                "networks": {n: net.digest for n, net in context.networks.items()},
                "covariance": options.covariance, "fvd_frames": options.fvd_frames}
    result = EvalResult(scores, per_clip, settings)
    if options.out is not None:
        from vidax.translator.output import write_file

        Path(options.out).parent.mkdir(parents=True, exist_ok=True)
        write_file(options.out, json.dumps(result.to_json(), indent=1, allow_nan=False) + "\n")
    return result


@dataclasses.dataclass
class _Context:
    options: EvalOptions
    cache: FeatureCache
    mesh: object
    progress: Progress
    networks: dict = dataclasses.field(default_factory=dict)
    runners: dict = dataclasses.field(default_factory=dict)
    digests: dict = dataclasses.field(default_factory=dict)

    def digest(self, clip: Clip) -> str:
        """The clip's content hash, computed once per run (several metrics key their features by it)."""
        if clip.path not in self.digests:
            self.digests[clip.path] = clip.digest()
        return self.digests[clip.path]

    def network(self, name: str):
        if name not in self.networks:
            self.networks[name] = load_network(name, self.options.weights)
        return self.networks[name]

    def runner(self, kind: str, network_name: str, batch: int | None = None) -> Runner:
        batch = self.options.batch if batch is None else batch
        if (kind, network_name, batch) not in self.runners:
            net = self.network(network_name)
            self.runners[kind, network_name, batch] = Runner(forward_of(kind, net), net.params, self.mesh, batch)
        return self.runners[kind, network_name, batch]

    def frame_features(self, kind: str, network_name: str, clips: list[Clip], what: str) -> list[np.ndarray]:
        """Each clip's per-frame features (`[F, D]`), from the cache or computed."""
        net = self.network(network_name)
        out = []
        for done, clip in enumerate(clips):
            key = FeatureCache.key(clip=self.digest(clip), network=net.digest, **settings_of(kind))
            features = self.cache.get(key)
            if features is None:
                features = self.runner(kind, network_name)(read_frames(clip))
                self.cache.put(key, features)
            out.append(features)
            self.progress(what, done + 1, len(clips))
        return out


def _clip_score(ctx: _Context, clips, _reference):
    from vidax.eval.networks import clip as clip_net
    from vidax.zoo.parts.encoders.tokenizer import TokenizerError, load_tokenizer

    images = ctx.frame_features("clip_image", "clip_b32", clips, "clip_score")
    net = ctx.network("clip_b32")
    sizes = clip_net.clip_sizes(net.tree)
    folder = ctx.options.clip_tokenizer or Path(ctx.options.weights) / "clip_tokenizer"
    try:
        tokenizer = load_tokenizer(folder)
        ids = np.asarray(tokenizer([c.prompt for c in clips], max_length=sizes.text.max_position_embeddings,
                                   padding="max_length").input_ids, np.int32)
    except TokenizerError as err:
        raise EvalError(f"clip_score: CLIP's tokenizer ({err})") from None
    texts = np.asarray(clip_net.encode_text(sizes, net.params, ids))
    per_clip = {c.name: dimensions.clip_score(f, t) for c, f, t in zip(clips, images, texts)}
    return float(np.mean(list(per_clip.values()))), per_clip


def _consistency(kind: str, network: str, metric: str):
    def run(ctx: _Context, clips, _reference):
        features = ctx.frame_features(kind, network, clips, metric)
        per_clip, total, count = {}, 0.0, 0
        for clip, f in zip(clips, features):
            if len(f) < 2:
                raise EvalError(f"{clip.path}: {metric} needs at least 2 frames")
            per_clip[clip.name], clip_total, clip_count = dimensions.consistency(f)
            total, count = total + clip_total, count + clip_count
        return total / count, per_clip
    return run


def _temporal_flickering(ctx: _Context, clips, _reference):
    per_clip = {}
    for done, clip in enumerate(clips):
        frames = read_frames(clip)
        if len(frames) < 2:
            raise EvalError(f"{clip.path}: temporal_flickering needs at least 2 frames")
        per_clip[clip.name] = dimensions.temporal_flickering(frames)
        ctx.progress("temporal_flickering", done + 1, len(clips))
    return float(np.mean(list(per_clip.values()))), per_clip


def _aesthetic_quality(ctx: _Context, clips, _reference):
    from vidax.eval.networks.aesthetic import aesthetic_score

    features = ctx.frame_features("clip_image", "clip_l14", clips, "aesthetic_quality")
    head = ctx.network("aesthetic").params
    per_clip = {c.name: dimensions.aesthetic_quality(np.asarray(aesthetic_score(head, f))) for c, f in zip(clips, features)}
    return float(np.mean(list(per_clip.values()))), per_clip


def _fvd_features(ctx: _Context, clips: list[Clip], what: str) -> np.ndarray:
    """I3D logits per clip `[N, 400]`: cached ones read, the others run together, one clip per device per call."""
    net = ctx.network("i3d")
    frames = ctx.options.fvd_frames
    keys = [FeatureCache.key(clip=ctx.digest(c), network=net.digest, frames=frames, **settings_of("i3d")) for c in clips]
    out = [ctx.cache.get(k) for k in keys]
    todo: dict[tuple, list[int]] = {}
    videos = {}
    for i, clip in enumerate(clips):
        if out[i] is None:
            video = read_frames(clip)
            if len(video) < (frames or FVD_MIN_FRAMES):
                raise EvalError(f"{clip.path}: {len(video)} frames; fvd needs at least {frames or FVD_MIN_FRAMES}")
            videos[i] = video[:frames]
            todo.setdefault(videos[i].shape, []).append(i)
    done = len(clips) - len(videos)
    runner = ctx.runner("i3d", "i3d", batch=1)
    for shape, group in todo.items():
        for start in range(0, len(group), runner.batch):
            part = group[start:start + runner.batch]
            for i, logits in zip(part, runner(np.stack([videos.pop(i) for i in part]))):
                out[i] = logits
                ctx.cache.put(keys[i], logits)
            done += len(part)
            ctx.progress(what, done, len(clips))
    return np.stack(out)


def _fvd(ctx: _Context, clips, reference):
    generated = _fvd_features(ctx, clips, "fvd (generated)")
    real = _fvd_features(ctx, reference, "fvd (reference)")
    try:
        score = frechet.fvd(generated, real, ctx.options.covariance)
    except ValueError as err:
        raise EvalError(f"fvd: {err}") from None
    if not math.isfinite(score):
        raise EvalError("fvd: not finite (features with NaN or infinities)")
    return score, {}


def _dynamic_degree(ctx: _Context, clips, _reference):
    """Each clip's pair scores (cached), then VBench's decision; the dimension is the share of clips that move."""
    net = ctx.network("raft")
    per_clip = {}
    for done, clip in enumerate(clips):
        interval = dimensions.frame_interval(clip_fps(clip))
        frames = read_frames(clip)[::interval]
        h, w = frames.shape[1:3]
        if min(h, w) < RAFT_MIN_SIDE:
            raise EvalError(f"{clip.path}: dynamic_degree needs frames of at least {RAFT_MIN_SIDE} px a side (RAFT), got {h}x{w}")
        key = FeatureCache.key(clip=ctx.digest(clip), network=net.digest, interval=interval, **settings_of("raft"))
        scores = ctx.cache.get(key)
        if scores is None:
            pairs = np.stack([frames[:-1], frames[1:]], axis=1)  # [F - 1, 2, H, W, 3]
            batch = raft_pairs_per_call(h, w, len(pairs), ctx.options.batch)
            scores = ctx.runner("raft", "raft", batch=batch)(pairs) if len(pairs) else np.zeros((0,), np.float32)
            ctx.cache.put(key, scores)
        per_clip[clip.name] = float(dimensions.dynamic_degree(scores, h, w, len(frames)))
        ctx.progress("dynamic_degree", done + 1, len(clips))
    return float(np.mean(list(per_clip.values()))), per_clip


_METRIC_FUNCTIONS = {
    "fvd": _fvd,
    "clip_score": _clip_score,
    "subject_consistency": _consistency("dino", "dino", "subject_consistency"),
    "background_consistency": _consistency("clip_image", "clip_b32", "background_consistency"),
    "temporal_flickering": _temporal_flickering,
    "aesthetic_quality": _aesthetic_quality,
    "dynamic_degree": _dynamic_degree,
}
