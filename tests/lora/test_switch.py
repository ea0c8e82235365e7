"""Applying and removing a LoRA on placed, sharded weights: merged leaves equal the host merge and keep their
sharding; removing restores the base arrays bit for bit."""

from __future__ import annotations

import diffusers
import jax
import numpy as np
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from tests.lora.formats import low_rank_factors, spec_fixtures_save, wan_modules, write_original
from tests.oracle import build_perturbed, state_of
from vidax.translator import convert
from vidax.translator.lora import resolve_adapter
from vidax.zoo.weights.lora_switch import apply, remove, touched_leaves
from vidax.zoo.compute.mesh import make_mesh

SPEC = "wan/transformer"
CONFIG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
              text_dim=24, freq_dim=12, ffn_dim=40, num_layers=2, cross_attn_norm=True)


def _placed(tree: dict, mesh) -> dict:
    """Kernels split over `tensor` on their last axis (as column-parallel layers are), the rest replicated."""
    def put(value):
        last = "tensor" if value.ndim >= 2 and value.shape[-1] % mesh.shape["tensor"] == 0 else None
        spec = PartitionSpec(*([None] * (value.ndim - 1)), last) if value.ndim else PartitionSpec()
        return jax.device_put(value, NamedSharding(mesh, spec))
    return traverse_util.unflatten_dict({p: put(np.asarray(v)) for p, v in tree.items()}, sep="/")


def test_apply_then_remove_restores_the_base_bit_for_bit(tmp_path):
    state = state_of(build_perturbed(diffusers.WanTransformer3DModel, CONFIG, 0))
    spec_fixtures_save(state, tmp_path)
    path = write_original(tmp_path / "l.safetensors", low_rank_factors(state, wan_modules(2)[:5], 4, 41), alpha=2.0)
    adapter = resolve_adapter(f"{path}=0.8")
    base = convert(SPEC, tmp_path / "official")  # the spec's policy: bf16 kernels, fp32 norms and tables
    merged = convert(SPEC, tmp_path / "official", loras=[adapter])
    mesh = make_mesh(1, 2, 1)
    params = _placed(base, mesh)
    leaves = touched_leaves(SPEC, tmp_path / "official", [adapter])
    assert sorted(leaves) == sorted(p for p in base if not np.array_equal(base[p], merged[p]))
    switched, applied = apply(params, leaves)
    flat_before = traverse_util.flatten_dict(params, sep="/")
    flat = traverse_util.flatten_dict(switched, sep="/")
    for p, value in flat.items():
        np.testing.assert_array_equal(np.asarray(value), merged[p])
        assert value.sharding == flat_before[p].sharding and value.dtype == flat_before[p].dtype
    restored = traverse_util.flatten_dict(remove(switched, applied), sep="/")
    for p, value in restored.items():
        assert value is flat_before[p]
        assert np.asarray(value).tobytes() == np.asarray(base[p]).tobytes()
