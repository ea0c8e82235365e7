"""The VAE's ceiling for the semantic test: encode and decode every held-out clip (ground truth, at each
offset across the motion) and read it back with the test's detector.

    .venv/bin/python -m wan_tiny_recipe.checks.check_vae [folder]   # default: wan_tiny_recipe/out/vae

A combination the detector misreads after the round trip cannot pass however good the DiT is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, setup_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "embedded"))
from detector import detect  # noqa: E402  (the test's own detector, not a copy)


def main(folder: Path) -> None:
    torch = setup_torch(0)
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(folder).eval()
    _, held_out = data.split()
    right = 0
    for combo in held_out:
        for across in data.ACROSS:
            clip = data.render(combo, across)
            video = torch.from_numpy(np.ascontiguousarray(clip.transpose(3, 0, 1, 2)[None])) * 2 - 1
            with torch.no_grad():
                decoded = vae.decode(vae.encode(video).latent_dist.mean).sample
            seen = detect(((decoded[0].permute(1, 2, 3, 0).numpy() + 1) / 2).clip(0, 1))
            ok = (seen.colour, seen.background, seen.direction) == (combo.colour, combo.background, combo.direction)
            right += ok
            if not ok:
                print(f"{combo} at {across}: seen {seen.colour} {seen.direction} on {seen.background}")
    print(f"{right}/{len(held_out) * len(data.ACROSS)} held-out clips read right after the VAE round trip")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else RUN / "vae")
