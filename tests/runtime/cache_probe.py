"""Run the tiny DiT block stack once and print the persistent-cache events as JSON.

Started twice by test_compile.py in fresh processes that share one VIDAX_CACHE_DIR.
"""

import json
import sys

from jax import monitoring

events: list[str] = []
monitoring.register_event_listener(lambda name, **_: events.append(name))

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, sys.argv[1])  # the repository root, for tests.runtime.tiny_dit
from tests.runtime.tiny_dit import TinyConfig, TinyDiT  # noqa: E402
from vidax.zoo.compute import runtime  # noqa: E402,F401  (importing it switches the cache on)
from vidax.zoo.parts.dit import forward  # noqa: E402

model = TinyDiT(TinyConfig())
rng = np.random.default_rng(0)
inputs = (
    rng.normal(size=(1, 6, 4)).astype(np.float32),
    np.array([0.5], np.float32),
    rng.normal(size=(1, 3, 16)).astype(np.float32),
    np.ones((1, 3), bool),
)
jax.block_until_ready(jax.jit(lambda p, *a: forward(model, p, *a))(model.random_host_tree(), *inputs))
print(json.dumps({
    "hits": events.count("/jax/compilation_cache/cache_hits"),
    "misses": events.count("/jax/compilation_cache/cache_misses"),
    "cache_dir": jax.config.jax_compilation_cache_dir,
}))
