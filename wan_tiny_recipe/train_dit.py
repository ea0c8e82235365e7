"""Stage 2: the tiny Wan DiT (diffusers `WanTransformer3DModel`) and its UMT5 encoder, jointly, by flow matching.

    nice -n 19 .venv/bin/python -m wan_tiny_recipe.train_dit --steps 1500

Every training clip (combination x offset across the motion) is encoded once by the stage-1 VAE;
the latents are normalised per channel with their own mean and std, which go into the VAE's config
(`latents_mean`, `latents_std`) as Wan's do. Flow matching as Wan samples it: x_t = (1 - s) x0 + s
noise, the DiT predicts noise - x0 at timestep 1000 s, s drawn uniformly then shifted by 3
(`--train-shift` changes it; run.sh trains at 6, wan-tiny samples at 5). One caption in ten is dropped to "" so classifier-free guidance has its branch.
"""

from __future__ import annotations

import argparse
import json
import re

import numpy as np

from pathlib import Path

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, LossLog, setup_torch
from wan_tiny_recipe.models import MAX_TEXT, make_dit, make_text_encoder
from wan_tiny_recipe.text import build_tokenizer, compact_text, token_batch, use_compact_text

SEED = 2
SHIFT = 3.0
DROP_CAPTION = 0.1


def encode_dataset(torch, vae_folder, centred: bool, placements: int = data.PLACEMENTS):
    """(captions, latent means, latent stds) of every training clip, cached in the run folder."""
    cache = RUN / "latents.npz"
    if cache.is_file():
        saved = np.load(cache)
        return list(saved["captions"]), saved["mean"], saved["std"]
    train, _ = data.split()
    captions, items = data.dataset(train, SEED, centred, placements)
    mean, std = encode_clips(torch, vae_folder, [data.render(*item) for item in items])
    np.savez(cache, captions=np.asarray(captions), mean=mean, std=std)
    return captions, mean, std


def encode_clips(torch, vae_folder, clips: list[np.ndarray], batch: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Latent means and stds `[N, C, 5, 8, 8]` of rendered clips.

    The stage-1 encoder is per-frame (its causal convs see the current frame, its time convs keep the
    newest): latent frame k is the encoding of frame 4k alone, so only those frames are encoded."""
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(vae_folder).eval()
    means, stds = [], []
    with torch.no_grad():
        for start in range(0, len(clips), batch):
            frames = np.stack([clip[::4] for clip in clips[start:start + batch]])  # [b, 5, H, W, 3]
            count, latent_frames = frames.shape[:2]
            singles = frames.reshape(count * latent_frames, 1, *frames.shape[2:]).transpose(0, 4, 1, 2, 3)
            posterior = vae.encode(torch.from_numpy(np.ascontiguousarray(singles)) * 2 - 1).latent_dist
            as_clips = lambda a: a.reshape(count, latent_frames, *a.shape[1:]).squeeze(3).transpose(0, 2, 1, 3, 4)
            means.append(as_clips(posterior.mean.numpy()))
            stds.append(as_clips(posterior.std.numpy()))
    return np.concatenate(means), np.concatenate(stds)


def shape_masks(centred: bool, placements: int = data.PLACEMENTS, frames_per_latent: int = 4, factor: int = 8) -> np.ndarray:
    """`[N, 1, F', 8, 8]`: the share of each latent pixel the shape covers, in the latent frames' own
    video frames (0, 4, 8, ...), for every training clip in `encode_dataset`'s order."""
    train, _ = data.split()
    _, items = data.dataset(train, SEED, centred, placements)
    masks = []
    for combo, across, start in items:
        clip = data.render(combo, across, start)[::frames_per_latent]
        background = np.asarray(data.PALETTE[combo.background], np.float32) / 255
        mask = (np.abs(clip - background).sum(-1) > 0.01).astype(np.float32)
        pooled = mask.reshape(mask.shape[0], data.SIZE // factor, factor, data.SIZE // factor, factor).mean(axis=(2, 4))
        masks.append(pooled[None])
    return np.stack(masks)


def channel_stats(mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of the latents (what Wan's VAE config calls latents_mean / latents_std)."""
    return mean.mean(axis=(0, 2, 3, 4)), mean.std(axis=(0, 2, 3, 4))


def shifted(u, shift: float):
    """Uniform draws mapped to noise levels as a flow sampler's shift spaces its steps."""
    return shift * u / (1 + (shift - 1) * u)


def flow_batch(torch, rng, latents_mean, latents_std, stats, batch: int, shift: float = SHIFT):
    rows = rng.integers(len(latents_mean), size=batch)
    centre, spread = (s.reshape(1, -1, 1, 1, 1) for s in stats)
    x0 = (latents_mean[rows] + latents_std[rows] * rng.standard_normal(latents_mean[rows].shape) - centre) / spread
    noise = rng.standard_normal(x0.shape)
    u = rng.uniform(size=batch)
    sigma = shifted(u, shift)
    s = sigma.reshape(-1, 1, 1, 1, 1)
    as_torch = lambda a: torch.from_numpy(np.asarray(a, np.float32))
    return rows, as_torch((1 - s) * x0 + s * noise), as_torch(sigma * 1000), as_torch(noise - x0)


def oracle_text(torch, prompts: list[str]):
    """`[B, 4, 32]` text features that are the caption's attributes themselves, for a diagnostic run
    (`--oracle-text`): one row per attribute (shape colour, shape, direction, background), each a one-hot
    in its own block of the 32 columns, so no attribute's features overlap another's; "" gives zeros."""
    columns = [list(data.PALETTE), list(data.SHAPES), list(data.DIRECTIONS), list(data.PALETTE)]
    offsets = np.cumsum([0] + [len(c) for c in columns])
    features = np.zeros((len(prompts), 4, 32), np.float32)
    for row, prompt in enumerate(prompts):
        if not prompt:
            continue
        words = re.findall(r"[a-z]+", prompt)
        colour, background = words[words.index(next(w for w in words if w in data.SHAPES)) - 1], words[-2]
        values = (colour, next(w for w in words if w in data.SHAPES), next(w for w in words if w in data.DIRECTIONS), background)
        for field, value in enumerate(values):
            features[row, field, offsets[field] + columns[field].index(value)] = 4.0
    return torch.from_numpy(features)


OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}


def reversal_pairs(centred: bool, placements: int = data.PLACEMENTS) -> np.ndarray:
    """The training rows (in `encode_dataset`'s order) whose time-reversed clip is also a training clip: the
    same scene moving the opposite way. A held-out combination's reversal is never drawn, so the held-out
    scenes stay unseen with their captions."""
    train, _ = data.split()
    allowed = set(train)
    _, items = data.dataset(train, SEED, centred, placements)
    return np.asarray([i for i, (combo, *_) in enumerate(items)
                       if data.Combo(combo.colour, combo.shape, OPPOSITE[combo.direction], combo.background) in allowed])


def reversed_caption(caption: str) -> str:
    """The caption with its direction word swapped for the opposite one (every template has exactly one)."""
    words = re.split(r"(\W+)", caption)
    return "".join(OPPOSITE.get(w, w) for w in words)


def paired_flow_batch(torch, rng, latents_mean, latents_std, stats, batch: int, pairs: np.ndarray,
                      shift: float = SHIFT):
    """`flow_batch` as `batch // 2` clips and their time reversals, each pair under the same noise and
    timestep. The encoder is per frame, so reversing the latent frames is the reversed clip's latent exactly.
    Within a pair only the direction word and the signal's time order differ: the pair's loss can only fall
    by reading the direction word, a gradient the unpaired batches spread thin."""
    half = batch // 2
    rows = pairs[rng.integers(len(pairs), size=half)]
    centre, spread = (s.reshape(1, -1, 1, 1, 1) for s in stats)
    x0 = (latents_mean[rows] + latents_std[rows] * rng.standard_normal(latents_mean[rows].shape) - centre) / spread
    x0 = np.concatenate([x0, x0[:, :, ::-1]])
    noise = rng.standard_normal(x0[:half].shape)
    noise = np.concatenate([noise, noise])
    u = rng.uniform(size=half)
    sigma = np.tile(shifted(u, shift), 2)
    s = sigma.reshape(-1, 1, 1, 1, 1)
    as_torch = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32))
    return rows, as_torch((1 - s) * x0 + s * noise), as_torch(sigma * 1000), as_torch(noise - x0)


def decay_groups(*models) -> list[dict]:
    """Weight decay on matrices only: decay on the norms' scales would pull cross-attention's back
    under the padding rows' weight (see wan_tiny_recipe.models.make_dit)."""
    named = [(n, p) for m in models for n, p in m.named_parameters()]
    return [{"params": [p for n, p in named if p.ndim >= 2 and "norm" not in n], "weight_decay": 0.01},
            {"params": [p for n, p in named if p.ndim < 2 or "norm" in n], "weight_decay": 0.0}]


def main(steps: int, stop: int | None, batch: int, lr: float, shape_weight: float, checkpoint_every: int,
         patch: int, centred: bool, cross_norm_init: float, placements: int = data.PLACEMENTS,
         frozen_text: bool = False, max_text: int = MAX_TEXT, init: str | None = None,
         paired_reversal: bool = False, sizes: dict | None = None, oracle: bool = False,
         motion_weight: float = 0.0, self_norm_init: float = 1.0, shift: float = SHIFT) -> None:
    torch = setup_torch(SEED)
    tok = build_tokenizer(RUN / "tokenizer")
    captions, latents_mean, latents_std = encode_dataset(torch, RUN / "vae_encoder", centred, placements)
    stats = channel_stats(latents_mean)
    masks = shape_masks(centred, placements) if shape_weight != 1 else np.zeros((len(latents_mean), 1) + latents_mean.shape[2:], np.float32)
    pairs = reversal_pairs(centred, placements) if paired_reversal else None
    (RUN / "latent_stats.json").write_text(json.dumps({"mean": stats[0].tolist(), "std": stats[1].tolist()}))
    folder = RUN / "dit"
    resume = (folder / "step.txt").is_file()
    start_from = folder / "transformer" if resume else init and Path(init) / "transformer"  # --init: fresh optimizer
    dit = type(make_dit()).from_pretrained(start_from) if start_from else make_dit(patch, cross_norm_init, self_norm_init, **(sizes or {}))
    encoder_folder = folder / "text_encoder" if resume else RUN / "text_encoder"  # stage 0's when frozen
    encoder = type(make_text_encoder(8)).from_pretrained(encoder_folder) if resume or frozen_text \
        else make_text_encoder(tok.get_vocab_size())
    encoder.requires_grad_(not frozen_text)
    start = int((folder / "step.txt").read_text()) if resume else 0
    cross_attention = use_compact_text(dit)  # exact, and a fraction of the padded cost
    trained = [dit] if frozen_text else [dit, encoder]
    params = [p for m in trained for p in m.parameters()]
    groups = decay_groups(*trained) if cross_norm_init != 1 else [{"params": params, "weight_decay": 0.01}]
    optimizer = torch.optim.AdamW(groups, lr=lr)
    if resume:
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    schedule = lambda s: lr * min(1.0, (s + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0))))
    log = LossLog(RUN / "dit_loss.jsonl", resume)
    for step in range(start, min(steps, stop or steps)):
        rng = np.random.default_rng([SEED, step])  # per step: a resumed run draws what an unbroken one does
        if paired_reversal:
            rows, noisy, timestep, target = paired_flow_batch(torch, rng, latents_mean, latents_std, stats, batch, pairs, shift)
            kept = [str(captions[r]) for r in rows]
            kept = ["" if rng.uniform() < DROP_CAPTION else c for c in kept]  # a dropped pair drops both captions
            prompts = kept + [reversed_caption(c) for c in kept]
            weight_masks = np.concatenate([masks[rows], masks[rows][:, :, ::-1]])
        else:
            rows, noisy, timestep, target = flow_batch(torch, rng, latents_mean, latents_std, stats, batch, shift)
            prompts = ["" if rng.uniform() < DROP_CAPTION else str(captions[r]) for r in rows]
            weight_masks = masks[rows]
        if oracle:
            text, cross_attention.bias = oracle_text(torch, prompts), None
        else:
            with torch.set_grad_enabled(not frozen_text):
                text, cross_attention.bias = compact_text(torch, encoder, *token_batch(tok, prompts), max_text)
        for group in optimizer.param_groups:
            group["lr"] = float(schedule(step))
        predicted = dit(noisy, timestep, text, return_dict=False)[0]
        weight = 1 + (shape_weight - 1) * torch.from_numpy(np.ascontiguousarray(weight_masks))  # the shape's pixels count more
        error = predicted - target
        loss = (weight * error ** 2).mean()
        if motion_weight:  # same minimiser (a weighted MSE); errors that change between latent frames count more
            loss = loss + motion_weight * ((error[:, :, 1:] - error[:, :, :-1]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        log.add(step, loss=loss.item())
        if (step + 1) % checkpoint_every == 0 or step + 1 in (steps, stop):
            dit.save_pretrained(folder / "transformer")
            encoder.save_pretrained(folder / "text_encoder")
            torch.save(optimizer.state_dict(), folder / "optimizer.pt")
            (folder / "step.txt").write_text(str(step + 1))
            print(f"dit step {step + 1}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--stop", type=int, default=None, help="end this run at this step (a later run resumes)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--shape-weight", type=float, default=1.0, help="loss weight of the shape's latent pixels")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--patch", type=int, default=2, help="the DiT's spatial patch size (1: one token per latent pixel)")
    parser.add_argument("--random-places", action="store_true",
                        help="clips placed at random in the frame (default: the travel centred, at 3 offsets across it)")
    parser.add_argument("--cross-norm-init", type=float, default=1.0,
                        help="cross-attention's query/key norm scales at init; != 1 also exempts norms and biases from weight decay")
    parser.add_argument("--placements", type=int, default=data.PLACEMENTS, help="with --random-places: clips per combination")
    parser.add_argument("--frozen-text", action="store_true",
                        help="the stage-0 text encoder (wan_tiny_recipe/out/text_encoder, pretrain_text.py), frozen")
    parser.add_argument("--max-text", type=int, default=MAX_TEXT,
                        help="text features padded to this many tokens (the model's max_sequence_length setting)")
    parser.add_argument("--init", default=None,
                        help="start the DiT from this diffusers folder's transformer/ (a fresh optimizer and schedule)")
    parser.add_argument("--paired-reversal", action="store_true",
                        help="each batch as clips and their time reversals under the same noise, the direction word swapped")
    parser.add_argument("--layers", type=int, default=None, help="the DiT's depth (default: wan_tiny_recipe.models.DIT's)")
    parser.add_argument("--heads", type=int, default=None, help="its attention heads")
    parser.add_argument("--head-dim", type=int, default=None, help="its width per head")
    parser.add_argument("--ffn", type=int, default=None, help="its MLP width")
    parser.add_argument("--oracle-text", action="store_true",
                        help="diagnostic: the DiT reads one-hot attribute rows instead of the text encoder (wan_tiny_recipe.checks.eval_oracle)")
    parser.add_argument("--self-norm-init", type=float, default=1.0,
                        help="self-attention's query/key norm scales at init (sharper relative lookups)")
    parser.add_argument("--train-shift", type=float, default=SHIFT,
                        help="the shift of the training noise levels (above 3: more steps at the high noise where a track is chosen)")
    parser.add_argument("--motion-weight", type=float, default=0.0,
                        help="extra loss weight of the error's change between latent frames (where a wrong direction shows)")
    parser.add_argument("--step-px", type=float, default=data.STEP, help="pixels the shape moves per frame")
    parser.add_argument("--edge-margin", type=float, default=data.EDGE_MARGIN,
                        help="with --random-places: how far inside the frame the shape's centre stays")
    args = parser.parse_args()
    data.STEP, data.EDGE_MARGIN = args.step_px, args.edge_margin
    fields = {"num_layers": args.layers, "num_attention_heads": args.heads, "attention_head_dim": args.head_dim,
              "ffn_dim": args.ffn}
    main(args.steps, args.stop, args.batch, args.lr, args.shape_weight, args.checkpoint_every, args.patch,
         not args.random_places, args.cross_norm_init, args.placements, args.frozen_text, args.max_text,
         args.init, args.paired_reversal, {k: v for k, v in fields.items() if v is not None}, args.oracle_text,
         args.motion_weight, args.self_norm_init, args.train_shift)
