"""Stage 4: `wan-tiny-vace`, VACE blocks trained on the frozen wan-tiny DiT to continue a clip.

    nice -n 5 .venv/bin/python -m wan_tiny_recipe.vace.train_vace --steps 1500   # -> wan_tiny_recipe/out/vace/
    .venv/bin/python -m wan_tiny_recipe.vace.export_vace                       # -> zoo/wan/tiny_vace/

diffusers' `WanVACETransformer3DModel` at wan-tiny's sizes with VACE blocks after main blocks 0 and 2
(`VACE_LAYERS`) and `vace_in_channels` 2 x 8 + 64 = 80, as `WanVACEPipeline` builds its control latents
for an 8-channel VAE. The main blocks, patch embedding, time/text embedders and head are wan-tiny's
(`zoo/wan/tiny_model/transformer`), frozen; each VACE block starts as a copy of the main block it feeds
(as VACE's authors initialise theirs) with its output projection at zero, so step 0 is wan-tiny exactly;
only the VACE blocks and `vace_patch_embedding` train.

Data: `data.py`'s training combinations at random places (17-frame tracks of 2 px a frame); a sample is a
window of 9, 13 or 17 of a track's frames, its latents the frozen wan-tiny VAE's (per frame: latent k is the
encoding of frame 4k alone, `train_dit.encode_clips`), and the control latents `--extend` gives
`WanVACEPipeline` for it, built as `prepare_video_latents` and `prepare_masks` build them: the window's first
K frames (K from 1 to the window's length - 1) kept under a black mask, the rest grey (128) under a white one;
inactive = VAE(video x (1 - mask)), reactive = VAE(video x mask), both normalised, then the mask folded 8 x 8
into 64 channels and resampled to the latent frames nearest-exact. The kept frames are given as the VAE's
round trip (decoded, then encoded again), since what `--extend` continues is a decoded clip. One sample in ten
keeps nothing (K = 0: text to video through the VACE branch). Flow matching as train_dit.py (the shape's latent
pixels weighted `--shape-weight`, one caption in ten dropped for guidance).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, LossLog, setup_torch
from wan_tiny_recipe.models import TINY_MAX_TEXT, Z_DIM
from wan_tiny_recipe.text import build_tokenizer, compact_text, token_batch, use_compact_text
from wan_tiny_recipe.train_dit import DROP_CAPTION, shifted

SEED = 5
BASE = Path(__file__).resolve().parents[2] / "zoo" / "wan" / "tiny_model"  # the frozen wan-tiny
VACE_LAYERS = [0, 2]
VACE_IN = 2 * Z_DIM + 64  # inactive and reactive latents, the mask's 8 x 8 pixel offsets
WINDOWS = (9, 13, 17)  # frames per sample (4k + 1)
PLACEMENTS = 3  # random places per training combination
GREY = 128  # vace_inputs.GREY: the frames to generate
NO_CONTEXT = 0.1  # share of samples with nothing kept
SHAPE_WEIGHT = 3.0
SHIFT = 5.0
FOLDER = RUN / "vace"


def make_vace(torch):
    """wan-tiny's DiT inside a `WanVACETransformer3DModel`: main weights copied, VACE blocks copies of the main
    blocks they feed, output projections zero."""
    from diffusers import WanTransformer3DModel, WanVACETransformer3DModel

    base = WanTransformer3DModel.from_pretrained(BASE / "transformer")
    config = {k: v for k, v in base.config.items() if not k.startswith("_")}
    vace = WanVACETransformer3DModel(**config, vace_layers=VACE_LAYERS, vace_in_channels=VACE_IN)
    missing, unexpected = vace.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(("vace_blocks.", "vace_patch_embedding.")) for k in missing), missing
    with torch.no_grad():
        for block, layer in zip(vace.vace_blocks, VACE_LAYERS):
            source = base.blocks[layer].state_dict()
            own = block.state_dict()
            block.load_state_dict({k: source.get(k, v) for k, v in own.items()})
            block.proj_out.weight.zero_()
            block.proj_out.bias.zero_()
    return vace


def trainable(vace) -> list:
    vace.requires_grad_(False)
    vace.vace_blocks.requires_grad_(True)
    vace.vace_patch_embedding.requires_grad_(True)
    return [p for p in vace.parameters() if p.requires_grad]


def nearest_exact(size_in: int, size_out: int) -> np.ndarray:
    """torch's `nearest-exact` source indices (as `prepare_masks` resamples the mask's frames)."""
    scale = float(np.float32(size_in) / np.float32(size_out))
    return np.minimum(np.floor((np.arange(size_out) + 0.5) * scale).astype(np.int64), size_in - 1)


def encode_frames(torch, vae, frames: np.ndarray, batch: int = 64) -> np.ndarray:
    """Latent means `[N, C, 8, 8]` of single frames `[N, H, W, 3]` in [0, 1]."""
    out = []
    with torch.no_grad():
        for start in range(0, len(frames), batch):
            x = torch.from_numpy(np.ascontiguousarray(frames[start:start + batch].transpose(0, 3, 1, 2)))[:, :, None]
            out.append(vae.encode(x * 2 - 1).latent_dist.mean[:, :, 0].numpy())
    return np.concatenate(out)


def decode_latents(torch, vae, latents: np.ndarray, batch: int = 64) -> np.ndarray:
    """Frames `[N, H, W, 3]` in [0, 1], quantised to 8 bits as a saved clip is, of single latent frames."""
    out = []
    with torch.no_grad():
        for start in range(0, len(latents), batch):
            z = torch.from_numpy(latents[start:start + batch])[:, :, None]
            frames = ((vae.decode(z).sample[:, :, 0].clamp(-1, 1) + 1) / 2).numpy().transpose(0, 2, 3, 1)
            out.append(np.round(frames * 255) / 255)
    return np.concatenate(out).astype(np.float32)


def encode_dataset(torch) -> dict:
    """Per frame of every track: the latent mean, the round trip's latent and the shape's coverage of each
    latent pixel; plus the encodings of a zero frame (0 in [-1, 1]) and a grey (128) one. Cached in the run folder."""
    cache = RUN / "vace_latents.npz"
    if cache.is_file():
        return dict(np.load(cache))
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(BASE / "vae").eval()
    train, _ = data.split()
    captions, items = data.dataset(train, SEED, centred=False, placements=PLACEMENTS)
    clips = np.stack([data.render(*item) for item in items])  # [N, 17, H, W, 3]
    backgrounds = np.stack([np.asarray(data.PALETTE[c.background], np.float32) / 255 for c, *_ in items])
    shape = (np.abs(clips - backgrounds[:, None, None, None]).sum(-1) > 0.01).astype(np.float32)
    coverage = shape.reshape(*shape.shape[:2], 8, 8, 8, 8).mean(axis=(3, 5))  # [N, 17, 8, 8]
    flat = clips.reshape(-1, *clips.shape[2:])
    mean = encode_frames(torch, vae, flat)
    again = encode_frames(torch, vae, decode_latents(torch, vae, mean))
    # video x mask where the mask hides it: 0 in the VAE's [-1, 1] (0.5 here); the grey frames to generate: 128
    plain = np.stack([np.full((64, 64, 3), 0.5, np.float32), np.full((64, 64, 3), GREY / 255, np.float32)])
    zero, grey = encode_frames(torch, vae, plain)
    n = len(items)
    saved = dict(captions=np.asarray(captions), mean=mean.reshape(n, data.FRAMES, *mean.shape[1:]),
                 round_trip=again.reshape(n, data.FRAMES, *again.shape[1:]), coverage=coverage, zero=zero, grey=grey)
    np.savez(cache, **saved)
    return saved


def extension_sample(rng, saved: dict, stats, row: int):
    """(x0 `[C, F', 8, 8]`, control `[80, F', 8, 8]`, shape coverage `[1, F', 8, 8]`) of one window of track
    `row` under `--extend`'s source clip and mask, normalised as the pipeline normalises them."""
    frames = int(rng.choice(WINDOWS))
    latent_frames = (frames - 1) // 4 + 1
    start = int(rng.integers(0, data.FRAMES - frames + 1))
    kept = 0 if rng.uniform() < NO_CONTEXT else int(rng.integers(1, frames))
    at = start + 4 * np.arange(latent_frames)  # the video frames the per-frame encoder sees
    centre, spread = (s.reshape(-1, 1, 1, 1) for s in stats)
    norm = lambda z: (z - centre) / spread  # noqa: E731
    x0 = norm(saved["mean"][row, at].transpose(1, 0, 2, 3))
    keep = 4 * np.arange(latent_frames) < kept  # latent frame k's video frame 4k is a kept one
    context = saved["round_trip"][row, at]
    zero, grey = saved["zero"][None], saved["grey"][None]
    inactive = np.where(keep[:, None, None, None], context, zero).transpose(1, 0, 2, 3)
    reactive = np.where(keep[:, None, None, None], zero, grey).transpose(1, 0, 2, 3)
    generate = (nearest_exact(frames, latent_frames) >= kept).astype(np.float32)  # prepare_masks' frames
    mask = np.broadcast_to(generate[None, :, None, None], (64, latent_frames, 8, 8))
    control = np.concatenate([norm(inactive), norm(reactive), mask]).astype(np.float32)
    return x0.astype(np.float32), control, saved["coverage"][row, at][None]


def batch_of(torch, rng, saved, stats, batch: int):
    """A step's batch: one window length for the whole batch (drawn with the first sample), flow-matched."""
    rows = rng.integers(len(saved["mean"]), size=batch)
    samples = [extension_sample(rng, saved, stats, int(rows[0]))]
    frames = samples[0][0].shape[1]
    while len(samples) < batch:
        sample = extension_sample(rng, saved, stats, int(rows[len(samples)]))
        if sample[0].shape[1] == frames:
            samples.append(sample)
    x0, control, coverage = (np.stack(parts) for parts in zip(*samples))
    noise = rng.standard_normal(x0.shape)
    sigma = shifted(rng.uniform(size=batch), SHIFT)
    s = sigma.reshape(-1, 1, 1, 1, 1)
    as_torch = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32))  # noqa: E731
    return (rows, as_torch((1 - s) * x0 + s * noise), as_torch(sigma * 1000), as_torch(noise - x0),
            as_torch(control), as_torch(coverage))


def main(steps: int, batch: int, lr: float, checkpoint_every: int, stop: int | None = None) -> None:
    torch = setup_torch(SEED)
    from diffusers import WanVACETransformer3DModel
    from transformers import UMT5EncoderModel

    saved = encode_dataset(torch)
    captions = [str(c) for c in saved["captions"]]
    vae_config = json.loads((BASE / "vae" / "config.json").read_text())
    stats = (np.asarray(vae_config["latents_mean"], np.float32), np.asarray(vae_config["latents_std"], np.float32))
    tok = build_tokenizer()
    encoder = UMT5EncoderModel.from_pretrained(BASE / "text_encoder").eval().requires_grad_(False)
    resume = (FOLDER / "step.txt").is_file()
    vace = WanVACETransformer3DModel.from_pretrained(FOLDER / "transformer") if resume else make_vace(torch)
    params = trainable(vace)
    cross_attention = use_compact_text(vace)
    for block in vace.vace_blocks:
        block.attn2.processor = cross_attention()
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    if resume:
        optimizer.load_state_dict(torch.load(FOLDER / "optimizer.pt", weights_only=False))
    start = int((FOLDER / "step.txt").read_text()) if resume else 0
    schedule = lambda s: lr * min(1.0, (s + 1) / 50) * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0))))  # noqa: E731
    log = LossLog(RUN / "vace_loss.jsonl", resume)
    for step in range(start, min(steps, stop or steps)):
        rng = np.random.default_rng([SEED, step])  # per step: a resumed run draws what an unbroken one does
        rows, noisy, timestep, target, control, coverage = batch_of(torch, rng, saved, stats, batch)
        prompts = ["" if rng.uniform() < DROP_CAPTION else captions[r] for r in rows]
        with torch.no_grad():
            text, cross_attention.bias = compact_text(torch, encoder, *token_batch(tok, prompts), TINY_MAX_TEXT)
        for group in optimizer.param_groups:
            group["lr"] = float(schedule(step))
        predicted = vace(noisy, timestep, text, control_hidden_states=control, return_dict=False)[0]
        weight = 1 + (SHAPE_WEIGHT - 1) * coverage
        loss = (weight * (predicted - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        log.add(step, loss=loss.item(), frames=int(noisy.shape[2]))
        if (step + 1) % checkpoint_every == 0 or step + 1 in (steps, stop):
            vace.save_pretrained(FOLDER / "transformer")
            torch.save(optimizer.state_dict(), FOLDER / "optimizer.pt")
            (FOLDER / "step.txt").write_text(str(step + 1))
            print(f"vace step {step + 1}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--stop", type=int, default=None, help="end this run at this step (a later run resumes)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    args = parser.parse_args()
    main(args.steps, args.batch, args.lr, args.checkpoint_every, args.stop)
