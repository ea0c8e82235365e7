"""Stage 1: the tiny Wan VAE (diffusers `AutoencoderKLWan`) as an autoencoder of rendered clips.

    nice -n 19 .venv/bin/python -m wan_tiny_recipe.train_vae --steps 500

Two phases. First single frames (cheap: the causal VAE's first-frame path only), from an init where
every causal conv looks at the current frame only and the time convs copy one frame: the model is
then a per-frame autoencoder that keeps one frame in four (each latent frame decodes to four copies).
Then clips of 9 frames (the first frame alone, then two 4-frame chunks) teach the decoder's time
convs to interpolate; the encoder stays as the first phase left it (a latent frame encodes one frame). The loss weights the shape's pixels up: they are a few percent of a frame. Resumes from
the last checkpoint in the run folder.
"""

from __future__ import annotations

import argparse

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, LossLog, clip_batch, setup_torch
from wan_tiny_recipe.models import make_vae

SEED = 1
FRAMES = 9  # video phase
SHAPE_WEIGHT = 10.0
LATENT_NOISE = 0.05
MEAN_WEIGHT = 1e-4
PCA_FRAMES = 64
COLOURS = list(data.PALETTE)
SHAPE_COVER = 0.3  # a latent pixel's shape colour is a target where the shape covers this share of it


def make_framewise(torch, vae) -> None:
    """Causal 3D convs see only the current frame; time convs copy the newest frame (both halves when upsampling)."""
    with torch.no_grad():
        for name, module in vae.named_modules():
            weight = getattr(module, "weight", None)
            if weight is None or weight.ndim != 5 or weight.shape[2] == 1:
                continue
            if name.endswith("time_conv"):
                out, inp = weight.shape[:2]
                weight.zero_()
                weight[torch.arange(out), torch.arange(out) % inp, 2] = 1.0
                module.bias.zero_()
            else:
                weight[:, :, :-1] = 0


def pca_head(torch, vae, frames: np.ndarray) -> None:
    """The encoder's last conv as the projection onto its input features' top principal components.

    Trained by reconstruction alone, the head kept the red-yellow-white axis and merged the dark
    colours (green, blue and black landed within 0.3 of each other, against 5-14 between the others),
    though the features entering the head still tell them apart. Projecting those features (centre
    tap, per pixel) on their top z_dim principal components keeps the most of what varies; the
    decoder then learns from these latents while the encoder stays fixed.
    """
    features = {}
    hook = vae.encoder.conv_out.register_forward_hook(lambda m, i, o: features.update(x=i[0]))
    with torch.no_grad():
        vae.encode(torch.from_numpy(frames))
    hook.remove()
    x = features["x"].permute(0, 2, 3, 4, 1).reshape(-1, features["x"].shape[1]).double()
    centre = x.mean(0)
    _, _, vectors = torch.linalg.svd(x - centre, full_matrices=False)
    components = vectors[: vae.config.z_dim].float()  # [z, C]
    z = vae.config.z_dim
    conv, quant = vae.encoder.conv_out, vae.quant_conv
    with torch.no_grad():  # means: the components; log-variances: -8 (unused: stage 2 takes the means)
        conv.weight.zero_()
        conv.weight[:z, :, -1, 1, 1] = components
        conv.bias[:z] = -(components @ centre.float())
        conv.bias[z:] = -8.0
        quant.weight.copy_(torch.eye(2 * z).reshape(quant.weight.shape))  # quant_conv mixes the two halves
        quant.bias.zero_()


def colour_targets(torch, combos, mask, factor: int = 8):
    """Per latent pixel: the background's colour index `[B, h, w]` and the shape's (-100, ignored, where
    the shape covers less than `SHAPE_COVER` of the pixel), from the batch's combinations and pixel mask."""
    pooled = torch.nn.functional.avg_pool2d(mask[:, 0, :1], factor)[:, 0]  # [B, h, w], the first frame
    background = torch.tensor([COLOURS.index(c.background) for c in combos])[:, None, None].expand_as(pooled)
    colour = torch.tensor([COLOURS.index(c.colour) for c in combos])[:, None, None].expand_as(pooled)
    return background, torch.where(pooled >= SHAPE_COVER, colour, torch.full_like(colour, -100))


def colour_loss(torch, probe, latents, targets):
    """Cross-entropy of a linear probe reading both colours off each latent pixel: it keeps the six
    colours linearly apart in the latent on every background (reconstruction alone merged the dark ones)."""
    pixels = latents[:, :, 0].permute(0, 2, 3, 1)  # [B, h, w, z]
    logits = probe(pixels)  # [B, h, w, 12]: background's six, then the shape's six
    ce = torch.nn.functional.cross_entropy
    return ce(logits[..., :6].reshape(-1, 6), targets[0].reshape(-1)) + \
        ce(logits[..., 6:].reshape(-1, 6), targets[1].reshape(-1), ignore_index=-100)


def fix_log_variance(torch, vae, log_variance: float = -8.0) -> None:
    """The posterior's log-variance as a constant (-8: std 0.02). Training uses the means alone (see
    `vae_loss`), so the log-variance half of the head never trains and stays at its init, a std of
    several latent units; stage 2 samples latents from the posterior, so it must be small."""
    z = vae.config.z_dim
    with torch.no_grad():  # quant_conv (1x1) mixes the head's two halves: its log-variance rows go constant
        vae.quant_conv.weight[z:] = 0.0
        vae.quant_conv.bias[z:] = log_variance


def vae_loss(torch, vae, video, mask, train_encoder: bool, probe=None, targets=None, probe_weight: float = 0.0):
    with torch.set_grad_enabled(train_encoder):
        posterior = vae.encode(video).latent_dist
    # the mean plus small fixed noise: sampling at the initial std (1) drowns the mean, and the KL's
    # pull on the log-variance is far too slow for a few hundred steps; the noise keeps the decoder
    # tolerant of a DiT's small errors, and a weak L2 keeps the means' scale in check
    latents = posterior.mean + LATENT_NOISE * torch.randn_like(posterior.mean)
    decoded = vae.decode(latents).sample
    weight = 1 + (SHAPE_WEIGHT - 1) * mask
    reconstruction = (weight * (decoded - video) ** 2).mean()
    loss = reconstruction + MEAN_WEIGHT * (posterior.mean ** 2).mean()
    if probe_weight and train_encoder:
        loss = loss + probe_weight * colour_loss(torch, probe, latents, targets)
    return loss, reconstruction


def main(image_steps: int, video_start: int, steps: int, stop: int | None, batch: int, image_batch: int, crop: int,
         lr: float, checkpoint_every: int, probe_weight: float = 0.0, pca: bool = True) -> None:
    torch = setup_torch(SEED)
    folder = RUN / "vae"
    resume = (folder / "config.json").is_file()
    vae = type(make_vae()).from_pretrained(folder) if resume else make_vae()
    if not resume:
        make_framewise(torch, vae)
    probe = torch.nn.Linear(vae.config.z_dim, 12)  # not shipped: only its gradient shapes the encoder
    if resume and (folder / "probe.pt").is_file():
        probe.load_state_dict(torch.load(folder / "probe.pt"))
    start = int((folder / "step.txt").read_text()) if resume else 0
    optimizer = torch.optim.AdamW(list(vae.parameters()) + list(probe.parameters()), lr=lr, weight_decay=0.0)
    schedule = lambda s: lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s / steps, 1.0))))
    log = LossLog(RUN / "vae_loss.jsonl", resume)
    train, _ = data.split()
    if resume:
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    for step in range(start, min(steps, stop or steps)):
        rng = np.random.default_rng([SEED, step])  # per step: a resumed run draws what an unbroken one does
        if step == image_steps:  # the encoder is final from here on: stage 2 may start from this copy
            if pca:
                pca_head(torch, vae, clip_batch(rng, train, PCA_FRAMES, 1)[0])
            else:
                fix_log_variance(torch, vae)
            vae.save_pretrained(RUN / "vae_encoder")
        combos = []
        video, mask = clip_batch(rng, train, image_batch, 1, crop, combos) if step < video_start else clip_batch(rng, train, batch, FRAMES)
        video, mask = torch.from_numpy(video), torch.from_numpy(mask)
        for group in optimizer.param_groups:
            group["lr"] = float(schedule(step))
        targets = colour_targets(torch, combos, mask) if probe_weight and step < image_steps else None
        loss, reconstruction = vae_loss(torch, vae, video, mask, step < image_steps, probe, targets, probe_weight)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        optimizer.step()
        log.add(step, frames=1 if step < video_start else FRAMES, loss=loss.item(), reconstruction=reconstruction.item())
        if (step + 1) % checkpoint_every == 0 or step + 1 in (steps, stop):
            vae.save_pretrained(folder)
            torch.save(optimizer.state_dict(), folder / "optimizer.pt")
            torch.save(probe.state_dict(), folder / "probe.pt")
            (folder / "step.txt").write_text(str(step + 1))
            print(f"vae step {step + 1}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-steps", type=int, default=400)
    parser.add_argument("--video-start", type=int, default=400, help="first step on clips (single frames before)")
    parser.add_argument("--steps", type=int, default=500, help="all steps, the image phase's included")
    parser.add_argument("--stop", type=int, default=None, help="end this run at this step (a later run resumes)")
    parser.add_argument("--image-batch", type=int, default=16)
    parser.add_argument("--crop", type=int, default=64, help="image phase: square windows of this size (cheaper steps)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--probe-weight", type=float, default=0.0,
                        help="weight of the linear colour probe's cross-entropy on the latents (encoder phase)")
    parser.add_argument("--no-pca", action="store_true", help="keep the trained encoder head at --image-steps (no PCA head)")
    args = parser.parse_args()
    main(args.image_steps, args.video_start, args.steps, args.stop, args.batch, args.image_batch, args.crop, args.lr,
         args.checkpoint_every, args.probe_weight, not args.no_pca)
