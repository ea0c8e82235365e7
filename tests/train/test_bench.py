"""`vidax.train.bench`'s step setup: the registry model's bf16 DiT and LoRA inputs, drawable or shapes alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from vidax.train.bench import step_setup
from vidax.train.objective import train_step


def test_step_setup_gives_the_bf16_base_and_a_runnable_step():
    setup = step_setup("wan-tiny", 64, 64, 17, rank=4, text=16)
    assert setup.latent == (1, 8, 5, 8, 8) and setup.objective.carry_dtype == "bfloat16"
    shapes = jax.eval_shape(setup.inputs)  # what an ahead-of-time compile for a chip reads
    assert {leaf.dtype for leaf in jax.tree.leaves(shapes[0]["blocks"])} == {jnp.dtype(jnp.bfloat16)}
    base, lora, opt_state, latents, text = jax.jit(setup.inputs)()
    _, _, loss = train_step(setup.model, setup.objective, setup.adamw, base, lora, opt_state, latents, text,
                            jax.random.key(4))
    assert jnp.isfinite(loss)
