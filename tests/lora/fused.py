"""diffusers' own LoRA merge as the oracle of every family's merge test, and the comparison they share.

`diffusers_fused` loads LoRA files into a diffusers pipeline holding only the reference transformer,
fuses them at their strengths and converts the fused weights with vidax's spec, so the expected tree
has exactly the paths and layout vidax's merged conversion produces.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from tests.oracle import save_state, state_of
from vidax.translator import convert

# both sides add the same fp32 products in another order (|w| < 1, deltas < 2): differences ~1e-7
WEIGHT_ATOL = 1e-6


def diffusers_fused(pipeline_cls, model, root: Path, spec: str, loras: dict[str, tuple[Path, float]],
                    **components) -> dict:
    """diffusers' merged weights for `loras` ({adapter name: (file, strength)}), as `spec` converts them;
    `components` fill pipeline parts the LoRA loader reads (the rest are None)."""
    parts = {name: None for name in pipeline_cls._get_signature_keys(pipeline_cls)[0]}
    pipe = pipeline_cls(**{**parts, **components, "transformer": copy.deepcopy(model)})
    for name, (path, _) in loras.items():
        pipe.load_lora_weights(str(path), adapter_name=name)
    pipe.set_adapters(list(loras), [strength for _, strength in loras.values()])
    pipe.fuse_lora(components=["transformer"])
    pipe.unload_lora_weights()
    return convert(spec, save_state(state_of(pipe.transformer), root / "fused" / "transformer").parent,
                   dtype="float32")


def assert_merged_close(ours: dict, expected: dict, base: dict) -> list[str]:
    """Same paths, every weight within WEIGHT_ATOL of diffusers' merge, and some weight moved (else the
    comparison could not fail); returns the moved paths."""
    assert ours.keys() == expected.keys()
    moved = [p for p in expected if not np.array_equal(expected[p], base[p])]
    assert moved, "the LoRA changed nothing: the test could not fail"
    for path in expected:
        np.testing.assert_allclose(ours[path], expected[path], atol=WEIGHT_ATOL, rtol=0, err_msg=path)
    return moved
