"""Mesh construction, rules tables, placement of host trees, and Megatron's bias-once rule."""

import mmap
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.runtime.tiny_dit import TinyConfig, TinyDiT
from vidax.zoo.compute.layers import Dense
from vidax.zoo.compute.mesh import MESH_AXES, MeshError, make_mesh
from vidax.zoo.compute.runtime import use_mesh
from vidax.zoo.compute.sharding import (
    TRANSFORMER_RULES,
    ShardingError,
    _is_mapped,
    check_rules,
    logical_specs,
    mesh_shardings,
    place,
)


def test_make_mesh_shapes_and_errors():
    mesh = make_mesh(dp=2, tp=2, sp=2)
    assert mesh.axis_names == MESH_AXES and dict(mesh.shape) == {"data": 2, "tensor": 2, "sequence": 2}
    assert make_mesh(tp=4).devices.size == 4  # a product smaller than the device count is fine
    with pytest.raises(MeshError, match=r"dp\*tp\*sp = 2\*4\*2 = 16 devices needed, but only 8"):
        make_mesh(2, 4, 2)
    with pytest.raises(MeshError, match="tp must be a positive integer"):
        make_mesh(tp=0)


def test_rules_tables_name_each_axis_once():
    check_rules(TRANSFORMER_RULES)
    with pytest.raises(ShardingError, match="names heads more than once"):
        check_rules((("heads", "tensor"), ("heads", None)))
    with pytest.raises(ShardingError, match="mesh axes are"):
        check_rules((("heads", "model"),))


@pytest.fixture(scope="module")
def tiny():
    model = TinyDiT(TinyConfig())
    return model, model.specs(), model.random_host_tree()


def test_stacked_block_specs_carry_the_layers_axis(tiny):
    _, specs, _ = tiny
    assert specs["blocks"]["attn1"]["to_q"]["kernel"] == P("layers", "embed", "heads")
    assert specs["blocks"]["attn1"]["to_out_0"]["kernel"] == P("layers", "heads", "embed")
    assert specs["blocks"]["ffn_net_2"]["bias"] == P("layers", "embed")
    assert specs["embed"]["patch_embedding"]["kernel"] == P("conv_in", "embed")


def test_place_puts_each_shard_where_the_rules_say(tiny):
    model, specs, host = tiny
    mesh = make_mesh(tp=4, sp=2)
    flat = {"/".join(path): leaf for path, leaf in _flatten(host)}  # the translator's flat form
    placed = place(flat, specs, TRANSFORMER_RULES, mesh)
    column = placed["blocks"]["attn1"]["to_q"]["kernel"]  # [layers, embed, heads]
    row = placed["blocks"]["attn1"]["to_out_0"]["kernel"]  # [layers, heads, embed]
    assert {s.data.shape for s in column.addressable_shards} == {(2, 32, 8)}
    assert {s.data.shape for s in row.addressable_shards} == {(2, 8, 32)}
    np.testing.assert_array_equal(np.asarray(row), host["blocks"]["attn1"]["to_out_0"]["kernel"])


def test_place_accepts_abstract_boxed_params():
    dense = Dense(8, ("embed", "mlp"))
    boxed = jax.eval_shape(lambda: dense.init(jax.random.key(0), jnp.zeros((1, 4))))["params"]
    host = {"kernel": np.ones((4, 8), np.float32), "bias": np.ones((8,), np.float32)}
    placed = place(host, boxed, TRANSFORMER_RULES, make_mesh(tp=2))
    assert placed["kernel"].sharding.spec == P(None, "tensor")


def test_place_reports_every_fault_at_once(tiny):
    _, specs, host = tiny
    broken = jax.tree.map(lambda a: a, host)
    del broken["head"]["proj_out"]["bias"]
    broken["head"]["extra"] = np.zeros(3, np.float32)
    broken["blocks"]["attn1"]["to_q"]["kernel"] = np.zeros((2, 32, 30), np.float32)
    with pytest.raises(ShardingError) as err:
        place(broken, specs, TRANSFORMER_RULES, make_mesh(tp=4))
    message = str(err.value)
    assert "missing from the host tree: head/proj_out/bias" in message
    assert "not in the model: head/extra" in message
    assert "blocks/attn1/to_q/kernel: dimension 30 cannot be split 4 ways" in message


class RecordingArray:
    """A lazily read host array (like an mmapped tensor) that logs every slice read from it."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.reads = array, array.shape, array.dtype, []

    def __getitem__(self, index):
        piece = self.array[index]
        self.reads.append(piece.shape)
        return piece


def test_lazy_placement_never_reads_a_full_tensor_parallel_weight(tiny):
    _, specs, host = tiny
    tp = 4
    lazy = jax.tree.map(RecordingArray, host)
    placed = place(lazy, specs, TRANSFORMER_RULES, make_mesh(tp=tp, sp=2))
    for name in ("to_q", "to_k", "to_v", "to_out_0"):
        kernel = lazy["blocks"]["attn1"][name]["kernel"]
        split_axis = 1 if name == "to_out_0" else 2
        assert kernel.reads, "placement did not go through per-device reads"
        # every read is one device's slice: a tp-th of the split axis, never the whole weight
        assert {shape[split_axis] for shape in kernel.reads} == {kernel.shape[split_axis] // tp}
        np.testing.assert_array_equal(np.asarray(placed["blocks"]["attn1"][name]["kernel"]), kernel.array)
    mlp_in = lazy["blocks"]["ffn_net_0_proj"]["kernel"]
    assert all(shape != mlp_in.shape for shape in mlp_in.reads)


@pytest.mark.parametrize("reader", ["memmap", "frombuffer"])
def test_mmapped_trees_are_placed_slice_by_slice(tmp_path, reader):
    path = tmp_path / "w.bin"
    data = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    data.tofile(path)
    if reader == "memmap":
        mapped = np.memmap(path, np.float32, "r", shape=(4, 8))[:]
    else:  # the translator's safetensors reader: frombuffer over an mmap
        with open(path, "rb") as fh:
            view = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        mapped = np.frombuffer(view, np.float32, 32, 0).reshape(4, 8)
    assert _is_mapped(mapped)
    placed = place({"kernel": mapped}, {"kernel": P("embed", "mlp")}, TRANSFORMER_RULES, make_mesh(tp=2))
    np.testing.assert_array_equal(np.asarray(placed["kernel"]), data)
    assert {s.data.shape for s in placed["kernel"].addressable_shards} == {(4, 4)}
    assert not _is_mapped(data)


class ColumnRow(nn.Module):
    """Megatron MLP: column-parallel in, row-parallel out (whose bias must be added once)."""

    @nn.compact
    def __call__(self, x):
        h = jax.nn.gelu(Dense(64, ("embed", "mlp"), name="up")(x))
        return Dense(16, ("mlp", "embed"), name="down")(h)


@pytest.mark.parametrize("tp", [2, 4])
def test_row_parallel_bias_is_added_once(tp):
    module = ColumnRow()
    x = np.random.default_rng(0).normal(size=(2, 6, 16)).astype(np.float32)
    specs = logical_specs(module, jax.ShapeDtypeStruct(x.shape, jnp.float32))
    rng = np.random.default_rng(1)
    shapes = jax.eval_shape(lambda: nn.unbox(module.init(jax.random.key(0), x))["params"])
    host = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(np.float32), shapes)
    host["down"]["bias"] = np.full((16,), 10.0, np.float32)  # tp extra copies would show as +10·(tp-1)
    expected = module.apply({"params": host}, x)
    mesh = make_mesh(tp=tp)
    with use_mesh(mesh, TRANSFORMER_RULES):
        params = place(host, specs, TRANSFORMER_RULES, mesh)
        assert params["down"]["kernel"].sharding.spec == P("tensor", None)
        out = jax.jit(lambda p, x: module.apply({"params": p}, x))(params, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), atol=1e-5, rtol=1e-5)


def test_mesh_shardings_from_specs(tiny):
    _, specs, _ = tiny
    shardings = mesh_shardings(specs, TRANSFORMER_RULES, make_mesh(dp=2, tp=2))
    assert shardings["blocks"]["ffn_net_0_proj"]["kernel"].spec == P(None, None, "tensor")
    assert all(axis is None for axis in shardings["blocks"]["scale_shift_table"].spec)  # replicated


def _flatten(tree, prefix=()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flatten(value, prefix + (key,))
        else:
            yield prefix + (key,), value
