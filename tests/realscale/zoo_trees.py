"""The zoo module's own tree for a registry config: `{path: shape}` from `jax.eval_shape` of the model each
family builds from that config (nothing is allocated), one builder per conversion spec. The builders are the
library's (`vidax.zoo.plan.spec_shapes`, which `vidax-convert --synthetic` writes folders of): this module names them
for the real-scale tests."""

from __future__ import annotations

from vidax.zoo.plan.spec_shapes import SPEC_SHAPES, Shapes, module_shapes  # noqa: F401

ZOO_TREES = SPEC_SHAPES
