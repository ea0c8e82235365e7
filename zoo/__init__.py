"""vidax.zoo: Flax models, VAEs, encoders, sharding, attention kernels, samplers and pipelines.

Importing any part of it sets the process-wide runtime defaults first (`vidax.zoo.runtime`: the
persistent compile cache and XLA:CPU's matmul library), while jax's backends are not yet started.
"""

from vidax.zoo import runtime as _runtime  # noqa: F401  (the defaults are set on import)
