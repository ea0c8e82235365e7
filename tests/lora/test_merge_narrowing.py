"""The merge's bf16 fast path (`translator/lora.py`: a touched tensor that feeds bf16 leaves only is summed
and narrowed by the bits, block by block) gives exactly what the float32 merge cast by ml_dtypes gives."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from tests.lora.formats import low_rank_factors, spec_fixtures_save, wan_modules, write_peft
from vidax.translator import convert
from vidax.translator.lora import _narrowed, resolve_adapter

BF16 = np.dtype(ml_dtypes.bfloat16)


def _same_bits(ours: np.ndarray, expected: np.ndarray) -> bool:
    nan = np.isnan(ours.astype(np.float32)) & np.isnan(expected.astype(np.float32))
    return bool(((ours.view(np.uint16) == expected.view(np.uint16)) | nan).all())


def test_narrowing_rounds_as_ml_dtypes():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**32, 70_001, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every kind of bits
    values[np.isnan(values)] = 1.5  # NaNs send their block to ml_dtypes: checked apart below
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x7F7F8000], np.uint32)  # halfway: to the even neighbour
    values[:4] = values[40_000:40_004] = ties.view(np.float32)
    values[4:9] = [np.inf, -np.inf, -0.0, 1e-42, 3.4e38]
    specials = np.array([np.nan, 1.0, 0x7F800001, 0xFFC00001], np.float32)
    specials[2:] = np.array([0x7F800001, 0xFFC00001], np.uint32).view(np.float32)  # NaNs whose payload rounds to inf
    addend = rng.standard_normal(values.shape).astype(BF16)
    with np.errstate(invalid="ignore", over="ignore"):
        assert _same_bits(_narrowed(values.copy()), values.astype(BF16))
        assert _same_bits(_narrowed(values.copy(), addend), (values + addend.astype(np.float32)).astype(BF16))
        assert _same_bits(_narrowed(specials.copy()), specials.astype(BF16))


def test_a_bf16_checkpoint_merges_as_the_float32_merge_cast(tmp_path):
    """A bf16 Wan checkpoint with a PEFT LoRA at the spec's dtype policy: every leaf equals the float32 merge
    (`dtype="float32"`) cast to that leaf's dtype, bit for bit."""
    from tests.lora.test_wan_merge import CONFIG
    from tests.oracle import build_perturbed, state_of

    import diffusers

    model = build_perturbed(diffusers.WanTransformer3DModel, CONFIG, 0)
    state = {k: v.to(torch.bfloat16) for k, v in state_of(model).items()}
    spec_fixtures_save(state, tmp_path)
    lora = write_peft(tmp_path / "peft.safetensors", low_rank_factors(state, wan_modules(2), 4, 5))
    adapter = resolve_adapter(f"{lora}=0.7")
    ours = convert("wan/transformer", tmp_path / "diffusers", loras=[adapter])
    wide = convert("wan/transformer", tmp_path / "diffusers", loras=[adapter], dtype="float32")
    plain = convert("wan/transformer", tmp_path / "diffusers")
    narrowed = [p for p in ours if ours[p].dtype == BF16 and not np.array_equal(ours[p], plain[p])]
    assert len(narrowed) >= 10  # the LoRA'd kernels took the bf16 path
    for path in ours:
        expected = wide[path].astype(ours[path].dtype)
        same = _same_bits(ours[path], expected) if ours[path].dtype == BF16 else np.array_equal(ours[path], expected)
        assert same, path
