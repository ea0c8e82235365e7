"""Each encoder under its rules table on a (data 2, tensor 4) mesh of fake CPU devices equals one device.

SigLIP shares CLIP's ViT code and rules table.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import traverse_util
from jax.sharding import NamedSharding, PartitionSpec

from vidax.zoo.compute import sharding
from vidax.zoo.parts.encoders import clip, decoder, t5
from vidax.zoo.compute.mesh import make_mesh

IDS = np.random.default_rng(0).integers(3, 64, size=(2, 8)).astype(np.int32)
MASK = np.array([[1] * 5 + [0] * 3, [1] * 8], np.int32)
PIXELS = np.random.default_rng(1).normal(size=(2, 3, 28, 28)).astype(np.float32)
VISION = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, image_size=28,
              patch_size=14)

CASES = {
    "umt5": (lambda: t5.T5EncoderModel(t5.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                                                    num_heads=4, feed_forward_proj="gated-gelu",
                                                    per_layer_position_bias=True)), t5.SHARDING_RULES, (IDS, MASK)),
    "qwen2": (lambda: decoder.DecoderTextModel(decoder.DecoderConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, qkv_bias=True)), decoder.SHARDING_RULES, (IDS, MASK)),
    "clip": (lambda: clip.CLIPVisionModelWithProjection(clip.clip_vision_config({**VISION, "projection_dim": 16})),
             clip.SHARDING_RULES, (PIXELS,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sharded_equals_single_device(name):
    build, rules, inputs = CASES[name]
    model = build()
    params = jax.tree.map(np.asarray, model.init(jax.random.key(0), *inputs)["params"])
    params = jax.tree.map(lambda x: x.value if hasattr(x, "value") else x, params,
                          is_leaf=lambda x: hasattr(x, "value"))
    expected = model.apply({"params": params}, *inputs)

    mesh = make_mesh(dp=2, tp=4)
    host_tree = traverse_util.flatten_dict(params, sep="/")
    placed = sharding.place(host_tree, sharding.logical_specs(model, *inputs), rules, mesh)
    assert any(len(leaf.sharding.device_set) > 1 and not leaf.sharding.is_fully_replicated
               for leaf in jax.tree.leaves(placed)), "nothing was split over the tensor axis"
    batch = NamedSharding(mesh, PartitionSpec("data"))
    got = jax.jit(model.apply)({"params": placed}, *(jax.device_put(x, batch) for x in inputs))
    for ours, ref in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=1e-5, rtol=1e-5)
