"""Test-wide settings. Runs before any test module imports jax.

Every test process sees 8 fake CPU devices, so sharded runs can be compared with one device, and
matmuls run at highest precision so fp32 parity with the PyTorch references is meaningful.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VIDAX_NO_COMPILE_CACHE", "1")

import pytest  # noqa: E402


def pytest_configure(config):
    try:
        import jax
    except ImportError:  # the translator's isolation tests run without jax
        return
    jax.config.update("jax_default_matmul_precision", "highest")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)
