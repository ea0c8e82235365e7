"""The forms of one matrix product that `vidax.zoo.compute.layers.project` chooses between on CPU and
`vidax.zoo.compute.cpu_tuning` times: one call, balanced row blocks run one after another, an fp32 result.
Below both, so that the tuner measures the layers' own code without importing the layers."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from vidax.zoo.compute.kernels.blockwise import balanced_blocks


CPU_ROW_BLOCK = 1024  # the most rows one CPU matmul call takes when row blocks are chosen (vidax.zoo.compute.cpu_tuning)


def product(x: jax.Array, kernel: jax.Array, bias: jax.Array | None, *, fp32_result: bool) -> jax.Array:
    """`x @ kernel (+ bias)`; with `fp32_result`, the product is asked for in fp32 (XLA's CPU then runs
    bf16 operands on its bf16 kernel), the bias added in fp32 and the sum cast back to `x`'s dtype."""
    if not fp32_result:
        y = jnp.dot(x, kernel)
        return y if bias is None else y + bias
    y = jnp.dot(x, kernel, preferred_element_type=jnp.float32)
    y = y if bias is None else y + bias.astype(jnp.float32)
    return y.astype(x.dtype)


def in_row_blocks(x: jax.Array, kernel: jax.Array, bias: jax.Array | None = None, *, block: int,
                  activate: Callable[[jax.Array], jax.Array] = lambda v: v, fp32_result: bool = False) -> jax.Array:
    """`project`'s product as balanced blocks of at most `block` rows run one after another."""
    rows = math.prod(x.shape[:-1])
    count, size = balanced_blocks(rows, block)
    flat = x.reshape(rows, x.shape[-1])

    def one_block(first):
        return product(activate(jax.lax.dynamic_slice_in_dim(flat, first, size)), kernel, bias,
                        fp32_result=fp32_result)

    def write_block(i, out):  # the last block ends at the last row (overlapping its neighbour: same values)
        first = jnp.minimum(i * size, rows - size)
        return jax.lax.dynamic_update_slice_in_dim(out, one_block(first), first, axis=0)

    # The output starts as the first block padded with zeros, not as a buffer of zeros: XLA makes that
    # one for every projection at the start of the program and keeps them all alive.
    out = jnp.pad(one_block(0), ((0, rows - size), (0, 0)))
    out = jax.lax.fori_loop(1, count, write_block, out)
    return out.reshape(*x.shape[:-1], kernel.shape[-1])
