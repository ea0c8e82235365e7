"""Compile once: scanned blocks trace one body at any depth; the persistent cache serves a rerun."""

import json
import os
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.zoo.parts.dit import scan_blocks
from vidax.zoo.compute.layers import Dense, LayerNorm
from vidax.zoo.compute.runtime import compile_step, configure_compile_cache, default_cache_dir

ROOT = Path(__file__).resolve().parents[2]


class CountingBlock(nn.Module):
    traces = []  # class-level: one entry per trace of the body

    @nn.compact
    def __call__(self, x, ctx):
        CountingBlock.traces.append(1)
        return x + Dense(x.shape[-1], ("mlp", "embed"))(jax.nn.gelu(LayerNorm()(x))) * ctx


def _stack(depth, dim=16):
    block = CountingBlock()
    x = jnp.zeros((1, 4, dim))
    one = nn.unbox(block.init(jax.random.key(0), x, 1.0)["params"])
    return block, jax.tree.map(lambda a: jnp.stack([a] * depth), one), x


@pytest.mark.parametrize("depth", [2, 40])
def test_scan_traces_one_block_body_whatever_the_depth(depth):
    block, stacked, x = _stack(depth)
    CountingBlock.traces.clear()
    lowered = jax.jit(lambda p, h: scan_blocks(block, p, h, 0.5)).lower(stacked, x)
    assert len(CountingBlock.traces) == 1
    assert lowered.as_text().count("dot_general") == 1  # one matmul in the program, not `depth`


def test_persistent_cache_serves_a_second_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VIDAX_NO_COMPILE_CACHE"}  # the default: on
    env.update(
        VIDAX_CACHE_DIR=str(tmp_path / "cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",  # cache even the tiny test programs
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
    )
    probe = [sys.executable, str(ROOT / "tests" / "runtime" / "cache_probe.py"), str(ROOT)]

    def run():
        done = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=240, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run()
    assert first["cache_dir"] == str(tmp_path / "cache")
    assert first["misses"] > 0 and first["hits"] == 0
    assert any((tmp_path / "cache").iterdir())
    second = run()
    assert second["misses"] == 0 and second["hits"] == first["misses"]  # nothing compiled again


def test_cache_dir_defaults_and_switch(tmp_path, monkeypatch):
    monkeypatch.delenv("VIDAX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "vidax" / "jax"
    monkeypatch.setenv("VIDAX_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert configure_compile_cache() is None  # VIDAX_NO_COMPILE_CACHE=1 from conftest
    assert jax.config.jax_enable_compilation_cache is False


def test_compile_step_donates_the_dead_input():
    step = compile_step(lambda latents, scale: latents * scale)
    latents = jnp.ones((4, 4))
    out = step(latents, 2.0)
    assert latents.is_deleted()  # its buffer now backs `out`
    np.testing.assert_array_equal(np.asarray(out), 2.0)


def test_vae_programs_on_a_tpu_compile_with_libtpu_default_vmem(monkeypatch):
    """The VAEs' units (no Pallas kernel) compile on a TPU with libtpu's own scoped VMEM limit, not the kernels'
    64 MiB; nowhere else do they name a TPU option (the CPU's compiler refuses one)."""
    from vidax.zoo.compute.kernels import tpu_vmem
    from vidax.zoo.compute.runtime import platform_override, xla_only_options

    monkeypatch.setenv("LIBTPU_INIT_ARGS", f"{tpu_vmem.VMEM_FLAG}={tpu_vmem.LARGE_VMEM_KIB}")
    assert xla_only_options() is None  # this host's CPU
    with platform_override("tpu", "TPU v5 lite", 1, 16 << 30):
        assert xla_only_options() == {"xla_tpu_scoped_vmem_limit_kib": str(tpu_vmem.LIBTPU_DEFAULT_VMEM_KIB)}
        monkeypatch.setenv("LIBTPU_INIT_ARGS", "")  # nothing raised the limit: nothing to lower
        assert xla_only_options() is None


def test_compile_step_compiles_with_the_options_its_platform_names():
    """`compile_step(options=...)` asks at each call and compiles a program per set of options (an XLA:CPU option
    stands in for the TPU's); with none it is the plain jit."""
    asked = []
    chosen: list[dict | None] = [None]
    step = compile_step(lambda x: x + 1, donate=(), options=lambda: asked.append(1) or chosen[0])
    np.testing.assert_array_equal(np.asarray(step(jnp.zeros(3))), 1.0)
    assert step.jitted._cache_size() == 1
    chosen[0] = {"xla_cpu_enable_fast_math": False}
    np.testing.assert_array_equal(np.asarray(step(jnp.zeros(3))), 1.0)
    assert len(asked) == 2 and step.jitted._cache_size() == 1  # the options' program is another jit's
    chosen[0] = {"xla_no_such_option_anywhere": "1"}
    with pytest.raises(Exception, match="xla_no_such_option_anywhere"):
        step(jnp.zeros(3))  # the options reach XLA
