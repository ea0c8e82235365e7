"""Held-out counts of a DiT trained with `train_dit.py --oracle-text` (a diagnostic: the DiT reads one-hot
attribute rows, not the text encoder, so vidax's pipeline cannot run it). Samples as wan-tiny's native
settings do, in torch with diffusers' own scheduler and VAE: 20 UniPC flow steps at shift 5, guidance 2, the
initial noise from vidax's seeded host draw, then the semantic test's detector.

    TINY_RUN_DIR=... .venv/bin/python -m wan_tiny_recipe.checks.eval_oracle
"""

from __future__ import annotations

import json

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, setup_torch
from wan_tiny_recipe.checks.eval import score
from wan_tiny_recipe.export import SCHEDULER
from wan_tiny_recipe.train_dit import oracle_text

STEPS, GUIDANCE, SEED = 20, 2.0, 0
LATENT = (1, 8, 5, 8, 8)  # 17 frames of 64 x 64: Wan's VAE packs 4 frames and 8 x 8 pixels per latent


def main() -> None:
    torch = setup_torch(SEED)
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel

    dit = WanTransformer3DModel.from_pretrained(RUN / "dit" / "transformer").eval()
    vae = AutoencoderKLWan.from_pretrained(RUN / "vae").eval()
    stats = json.loads((RUN / "latent_stats.json").read_text())
    centre, spread = (torch.tensor(stats[k]).reshape(1, -1, 1, 1, 1) for k in ("mean", "std"))

    def generate(combo: data.Combo) -> np.ndarray:
        scheduler = UniPCMultistepScheduler.from_config({k: v for k, v in SCHEDULER.items() if k != "_class_name"})
        scheduler.set_timesteps(STEPS)
        latents = torch.from_numpy(np.random.default_rng(SEED).standard_normal(LATENT, dtype=np.float32))
        text = oracle_text(torch, [combo.caption(), ""])
        with torch.no_grad():
            for t in scheduler.timesteps:
                cond, uncond = dit(torch.cat([latents, latents]), t.expand(2), text, return_dict=False)[0].chunk(2)
                latents = scheduler.step(uncond + GUIDANCE * (cond - uncond), t, latents, return_dict=False)[0]
            video = vae.decode(latents * spread + centre, return_dict=False)[0]
        return ((video[0].permute(1, 2, 3, 0).numpy() + 1) / 2).clip(0, 1)

    score(generate)


if __name__ == "__main__":
    main()
