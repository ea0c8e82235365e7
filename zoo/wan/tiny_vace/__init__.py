"""`wan-tiny-vace`: the embedded wan-tiny with VACE blocks trained to continue its clips (`--extend`).

This folder is a diffusers-layout `WanVACEPipeline` folder shipped in the package: `transformer/` is
wan-tiny's DiT (`vidax.zoo.wan.tiny`, its weights unchanged) inside a `WanVACETransformer3DModel` with two
VACE blocks (after main blocks 0 and 2) trained by `wan_tiny_recipe/vace/train_vace.py` in the repository on wan-tiny's
procedural clips, with the clip's first frames kept as `--extend` keeps them; `vae/`, `text_encoder/` and
`tokenizer/` are links to wan-tiny's own folders. The Wan VACE family loads it through the translator like any
VACE checkpoint:

    vidax-gen wan-tiny-vace --extend clip.npy --frames 9 --extend-overlap 5 \
        --prompt "a red circle moves right on a blue background"
"""

from __future__ import annotations

from pathlib import Path

from vidax.zoo.weights.source import WeightsSource

NAME = "wan-tiny-vace"
TRAINED = Path(__file__).parent


def source() -> WeightsSource:
    """The shipped folder as a weights source (diffusers layout: converted on load)."""
    return WeightsSource("folder", TRAINED)
