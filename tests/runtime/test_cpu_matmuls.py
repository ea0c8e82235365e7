"""XLA:CPU's matmul library: importing vidax.zoo hands lone matmuls to Eigen and keeps YNNPACK for
reductions, unless the user chose otherwise or the backends already run (`configure_cpu_matmuls`).

Each case runs in a fresh interpreter: XLA reads `XLA_FLAGS` once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, sys
import jax, jax.numpy as jnp
if sys.argv[1] == "backend-first":
    jax.numpy.zeros(1).block_until_ready()
import vidax.zoo
from vidax.zoo.runtime import configure_cpu_matmuls

x = jnp.ones((64, 64))
matmul = jax.jit(lambda a, b: a @ b).lower(x, x).compile().as_text()
row_max = jax.jit(lambda a: jnp.max(a, axis=-1)).lower(x).compile().as_text()
print(json.dumps(dict(flags=os.environ.get("XLA_FLAGS", ""), again=configure_cpu_matmuls(),
                      matmul_in_ynnpack="__ynn_fusion" in matmul, max_in_ynnpack="__ynn_fusion" in row_max)))
"""
FLAG = "--xla_cpu_experimental_ynn_fusion_type"


def _probe(order: str = "vidax-first", **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "VIDAX_XLA_CPU_DEFAULTS")}
    done = subprocess.run([sys.executable, "-c", PROBE, order], env={**base, **env, "JAX_PLATFORMS": "cpu"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_vidax_zoo_moves_lone_matmuls_off_ynnpack():
    seen = _probe(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert seen["flags"] == f"--xla_force_host_platform_device_count=2 {FLAG}=LIBRARY_FUSION_TYPE_REDUCE"
    assert not seen["matmul_in_ynnpack"] and seen["max_in_ynnpack"]
    assert seen["again"] is False  # once the backend runs, a second call changes nothing


@pytest.mark.parametrize("env", [dict(VIDAX_XLA_CPU_DEFAULTS="1"),
                                 dict(XLA_FLAGS=f"{FLAG}=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT")],
                         ids=["opt-out", "user-flag-wins"])
def test_xla_default_is_kept_when_asked(env):
    seen = _probe(**env)
    assert seen["flags"] == env.get("XLA_FLAGS", "")
    assert seen["matmul_in_ynnpack"]  # jaxlib's own default: every matmul in YNNPACK


def test_a_backend_started_before_the_import_is_left_alone():
    seen = _probe("backend-first")
    assert seen["flags"] == "" and seen["matmul_in_ynnpack"]
