"""A TPU flash-attention kernel with keys on the sublanes, base-2 exponentials and, where it is safe, a fixed
softmax bound: the forward vidax runs past JAX's splash kernel.

What it does differently from splash (`jax.experimental.pallas.ops.tpu.splash_attention`), each a published
TPU idea (MaxDiffusion's custom splash kernel among others), written here for vidax's layouts and masks:

- **keys-major scores**: a step computes `s^T = k q^T`, `[keys, queries]`, so the softmax statistics of a query
  are a reduction over sublanes (elementwise across vector registers) instead of across lanes, and the output
  accumulates as `o^T = v^T p^T`, `[head_dim, queries]`: a head dim of 64 fills whole registers there (splash
  keeps `[queries, 128 lanes]` for it, half of them padding);
- **base-2 exponentials**: q arrives multiplied by `scale * log2(e)`, so a logit needs one `exp2`, no multiply;
- **a fixed softmax bound** (`bounded=True`): instead of a running maximum per key block (a reduction and a
  rescale of the accumulator each step), each query subtracts a bound `m_i` fixed before the kernel runs
  (`fixed_bounds`), which removes both. It is used only for the (batch, head) pairs where it cannot lose
  precision; the others keep the running maximum, chosen per head inside the kernel;
- **masks as vidax needs them**: keys past the real length (padding to the block) are masked by their index in
  the last key block only; a key mask (text padding, Ulysses padding) comes as one column per key block,
  and a per-block map (scalar-prefetched) runs the mask only in blocks that mix allowed and masked keys and
  skips blocks with no allowed key.

Inputs are heads-major with the batch folded into the heads, `[B*H, S, D]`, q and k/v padded to their blocks.
The output comes back `[B*H, Sq_pad, D]`. A query row with no allowed key gives zeros (the caller's mask
decides; the kernel never divides by zero).

Forward only: a program that differentiates through attention runs splash's forward and backward instead
(`pallas_tpu.tpu_attention` wraps this kernel in a `custom_vjp` whose rules are splash's), so LoRA training
gets exact gradients whichever kernel inference uses.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LOG2E = math.log2(math.e)
NEG = -0.7 * float(jnp.finfo(jnp.float32).max)  # a masked logit: exp2 of it less any finite bound is 0
SUBLANES = 8
# The fixed bound's shift: the exponents are `t - m <= RECENTER`, so one term is at most 2^88 and a sum over
# 2^20 keys of values up to 2^20 stays below fp32's 2^128.
RECENTER = 88.0
# Kept precision with the fixed bound: every key whose weight is at least 2^-(log2(keys) + KEPT_BITS) of the
# largest survives fp32's flush of values below 2^-126, so what is flushed sums to under 2^-KEPT_BITS of it.
KEPT_BITS = 10
BLOCK_FULL, BLOCK_MIXED, BLOCK_EMPTY = 0, 1, 2
INNER_ROWS = 512  # keys per exponential pass (`Exp2Blocks.block_kv_inner`)


@dataclasses.dataclass(frozen=True)
class Exp2Blocks:
    """Queries per block, keys per fetched block, keys per product, keys per exponential pass."""

    block_q: int
    block_kv: int
    block_kv_compute: int
    block_kv_inner: int = INNER_ROWS


def safe_bound(kv_len: int) -> float:
    """The largest `ceil(|q'| * max|k - mean k|)` for which the fixed bound keeps `KEPT_BITS` of precision over
    `kv_len` keys: with the keys centred, a query's largest logit is >= 0, so its term is >= 2^(RECENTER - m)
    and a key `r` binary orders below it is >= 2^(RECENTER - m - r); that stays above 2^-126 for
    r <= log2(kv_len) + KEPT_BITS while m <= RECENTER + 126 - log2(kv_len) - KEPT_BITS."""
    return RECENTER + 126.0 - math.ceil(math.log2(max(kv_len, 2))) - KEPT_BITS


def fixed_bounds(q2, k, kv_mask, kv_len: int, heads: int):
    """Per-query bounds and per-(batch, head) eligibility for `bounded=True`.

    Args:
      q2: queries already times `scale * log2(e)`, `[B*H, Sq, D]`.
      k: keys `[B*H, Skv_pad, D]` (rows past `kv_len` are padding).
      kv_mask: `[B, Skv_pad]` bool or None.
      kv_len: the real key length.
      heads: H (to map a row of q2 to its batch's mask).
    Returns:
      `(bounds [B*H, 1, Sq] f32, eligible [B*H] int32)`: `bounds_i = q2_i . mean_k + ceil(|q2_i| K) - RECENTER`
      with `K = max_j |k_j - mean_k|` over the allowed keys; eligible where `max_i ceil(|q2_i| K)` is within
      `safe_bound(kv_len)`. Centring the keys changes no softmax (it shifts a query's logits by a constant) and
      makes a query's largest logit >= 0, which is what keeps its term above fp32's flush to zero.
    """
    bh, skv_pad, _ = k.shape
    allowed = jnp.arange(skv_pad) < kv_len  # [Skv_pad]
    allowed = jnp.broadcast_to(allowed, (bh // heads, skv_pad))
    if kv_mask is not None:
        allowed = allowed & kv_mask.astype(bool)
    allowed = jnp.repeat(allowed, heads, axis=0)[..., None]  # [B*H, Skv_pad, 1]
    k32 = k.astype(jnp.float32)
    count = jnp.maximum(allowed.sum(axis=1), 1)  # [B*H, 1]
    mean = jnp.where(allowed, k32, 0.0).sum(axis=1) / count  # [B*H, D]
    spread = jnp.sqrt(jnp.where(allowed, jnp.square(k32 - mean[:, None]), 0.0).sum(axis=-1)).max(axis=1)  # [B*H]
    q32 = q2.astype(jnp.float32)
    norms = jnp.sqrt(jnp.square(q32).sum(axis=-1))  # [B*H, Sq]
    ceiling = jnp.ceil(norms * spread[:, None])
    shift = jnp.einsum("bsd,bd->bs", q32, mean, precision=lax.Precision.HIGHEST)
    eligible = (ceiling.max(axis=1) <= safe_bound(kv_len)).astype(jnp.int32)
    return (shift + ceiling - RECENTER)[:, None, :], eligible


def block_kinds(kv_mask, kv_len: int, block_kv: int, chunk: int, skv_pad: int):
    """`[B, n_kv_blocks * (1 + chunks per block)]` int32: per key block its kind, then its chunks' (`chunk` keys each):
    BLOCK_FULL (no mask work), BLOCK_MIXED, BLOCK_EMPTY (skipped: a block or chunk of text padding)."""
    b = kv_mask.shape[0]
    allowed = jnp.pad(kv_mask.astype(bool), ((0, 0), (0, skv_pad - kv_mask.shape[1])))
    allowed = allowed & (jnp.arange(skv_pad) < kv_len)

    def kinds(groups):  # [B, n, size] -> [B, n]
        return jnp.where(groups.all(-1), BLOCK_FULL, jnp.where(groups.any(-1), BLOCK_MIXED, BLOCK_EMPTY))

    n_kv, chunks = skv_pad // block_kv, block_kv // chunk
    per_block = kinds(allowed.reshape(b, n_kv, block_kv))[..., None]
    per_chunk = kinds(allowed.reshape(b, n_kv * chunks, chunk)).reshape(b, n_kv, chunks)
    return jnp.concatenate([per_block, per_chunk], axis=-1).reshape(b, -1).astype(jnp.int32)


def exp2_attention(q2, k, v, *, kv_len: int, blocks: Exp2Blocks, heads: int, kv_mask=None, bounded: bool = False,
                   interpret: bool = False):
    """Softmax attention of pre-scaled queries: `softmax_2(q2 k^T) v` with `softmax_2(t)_j = 2^t_j / sum 2^t`.

    Args:
      q2: `[B*H, Sq_pad, D]`, queries times `scale * log2(e)`, Sq_pad a multiple of `blocks.block_q`.
      k, v: `[B*H, Skv_pad, D]`, Skv_pad a multiple of `blocks.block_kv`; rows from `kv_len` on are masked.
      kv_len: the real key length.
      blocks: the tiling.
      heads: H (the batch's mask row of a q2 row is `row // heads`).
      kv_mask: `[B, Skv_pad]` bool (True = attend) or None.
      bounded: subtract a fixed per-query bound where that is safe (`fixed_bounds`), the running max elsewhere.
      interpret: run in Pallas' interpreter (CPU tests).
    Returns:
      `[B*H, Sq_pad, D]` in q2's dtype.
    """
    bh, sq_pad, d = q2.shape
    skv_pad = k.shape[1]
    bq, bkv = blocks.block_q, blocks.block_kv
    if sq_pad % bq or skv_pad % bkv or bkv % blocks.block_kv_compute or blocks.block_kv_compute % blocks.block_kv_inner:
        raise ValueError(f"exp2 attention: lengths {sq_pad}, {skv_pad} and blocks {blocks} do not tile")
    n_kv = skv_pad // bkv
    masked = kv_mask is not None
    kinds = (block_kinds(kv_mask, kv_len, bkv, blocks.block_kv_compute, skv_pad) if masked
             else jnp.zeros((1, 1), jnp.int32))
    if bounded:
        bounds, eligible = fixed_bounds(q2, k, kv_mask, kv_len, heads)
    else:
        bounds, eligible = None, jnp.zeros((1,), jnp.int32)

    in_specs = [pl.BlockSpec((None, bq, d), lambda h, i, j, *_: (h, i, 0)),
                pl.BlockSpec((None, bkv, d), lambda h, i, j, *_: (h, j, 0)),
                pl.BlockSpec((None, bkv, d), lambda h, i, j, *_: (h, j, 0))]
    args = [q2, k, v]
    if masked:  # one column per key: [B, Skv_pad, 1]
        in_specs.append(pl.BlockSpec((None, bkv, 1), lambda h, i, j, *_: (lax.div(h, heads), j, 0)))
        args.append(kv_mask.astype(jnp.int32)[..., None])
    if bounded:
        in_specs.append(pl.BlockSpec((None, 1, bq), lambda h, i, j, *_: (h, 0, i)))
        args.append(bounds)
    kernel = functools.partial(_kernel, blocks=blocks, n_kv=n_kv, kv_len=kv_len, heads=heads, masked=masked,
                               bounded=bounded, ragged=skv_pad > kv_len)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(bh, sq_pad // bq, n_kv), in_specs=in_specs,
        out_specs=pl.BlockSpec((None, bq, d), lambda h, i, j, *_: (h, i, 0)),
        scratch_shapes=[pltpu.VMEM((SUBLANES, bq), jnp.float32), pltpu.VMEM((SUBLANES, bq), jnp.float32),
                        pltpu.VMEM((d, bq), jnp.float32)])
    return pl.pallas_call(
        kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct((bh, sq_pad, d), q2.dtype),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
        interpret=interpret,
    )(kinds, eligible, *args)


def _kernel(kinds_ref, eligible_ref, q_ref, k_ref, v_ref, *refs, blocks: Exp2Blocks, n_kv: int, kv_len: int,
            heads: int, masked: bool, bounded: bool, ragged: bool):
    refs = list(refs)
    mask_ref = refs.pop(0) if masked else None
    bound_ref = refs.pop(0) if bounded else None
    o_ref, m_ref, l_ref, acc_ref = refs
    h, j = pl.program_id(0), pl.program_id(2)
    bkv, step, inner = blocks.block_kv, blocks.block_kv_compute, blocks.block_kv_inner
    fixed = (eligible_ref[h] == 1) if bounded else None

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)
        l_ref[...] = jnp.zeros_like(l_ref)
        if bounded:
            start = jnp.broadcast_to(bound_ref[...], m_ref.shape)
            m_ref[...] = jnp.where(fixed, start, jnp.full_like(m_ref, NEG))
        else:
            m_ref[...] = jnp.full_like(m_ref, NEG)

    def fold(c, with_mask: bool, with_fixed: bool):
        """Fold keys `c * step ...` of this block (`c` static or traced) into m, l and the accumulator
        (`with_fixed`: m stays)."""
        q = q_ref[...]
        m, l, acc = m_ref[0:1, :], l_ref[0:1, :], acc_ref[...]
        start = c * step if isinstance(c, int) else pl.multiple_of(c * step, step)
        s = lax.dot_general(k_ref[pl.ds(start, step), :], q, (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32)  # [step, bq]
        for r in range(0, step, inner):
            t = s[r:r + inner]
            if with_mask:
                t = jnp.where(_allowed(mask_ref, j, start + r, inner, bkv, kv_len, masked), t, NEG)
            if with_fixed:
                p = jnp.exp2(t - m)
            else:
                m_next = jnp.maximum(m, t.max(axis=0, keepdims=True))
                alpha = jnp.exp2(m - m_next)
                p = jnp.exp2(t - m_next)
                l, acc, m = alpha * l, alpha * acc, m_next
            l = l + p.sum(axis=0, keepdims=True)
            acc = acc + lax.dot_general(v_ref[pl.ds(start + r, inner), :], p.astype(v_ref.dtype),
                                        (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)  # [D, bq]
        if not with_fixed:
            m_ref[...] = jnp.broadcast_to(m, m_ref.shape)
        l_ref[...] = jnp.broadcast_to(l, l_ref.shape)
        acc_ref[...] = acc

    last = j == n_kv - 1
    chunks = bkv // step
    tail = kv_len - (n_kv - 1) * bkv  # real keys in the last block

    def kind_of(c=None):  # the block's kind (`block_kinds`), or its chunk c's
        return kinds_ref[lax.div(h, heads), j * (1 + chunks) + (0 if c is None else 1 + c)]

    def fast(with_fixed: bool):
        """The unrolled body. Without a key mask every chunk is unmasked except, in the last block, the one chunk
        the real keys end in (masked there) and those past it (skipped there); with one, a mixed block masks
        every chunk and skips those of padding alone."""
        if masked:
            kind = kind_of()

            @pl.when(kind == BLOCK_FULL)
            def _full():
                for c in range(chunks):
                    fold(c, False, with_fixed)

            @pl.when(kind == BLOCK_MIXED)
            def _mixed():
                for c in range(chunks):
                    pl.when(kind_of(c) != BLOCK_EMPTY)(functools.partial(fold, c, True, with_fixed))
            return
        for c in range(chunks):
            if not ragged or (c + 1) * step <= tail:
                fold(c, False, with_fixed)
                continue
            pl.when(jnp.logical_not(last))(functools.partial(fold, c, False, with_fixed))
            if c * step < tail:
                pl.when(last)(functools.partial(fold, c, True, with_fixed))

    def rolled():
        """The running maximum for the heads the fixed bound does not fit: one chunk's code in a loop, every chunk
        masked (the rare path keeps the compile small)."""
        def chunk(c, carry):
            present = kind_of(c) != BLOCK_EMPTY if masked else j * bkv + c * step < kv_len
            pl.when(present)(lambda: fold(c, True, False))
            return carry

        def loop():
            lax.fori_loop(0, chunks, chunk, 0)

        if masked:
            pl.when(kind_of() != BLOCK_EMPTY)(loop)
        else:
            loop()

    if bounded:
        pl.when(fixed)(lambda: fast(True))
        pl.when(jnp.logical_not(fixed))(rolled)
    else:
        fast(False)

    @pl.when(last)
    def _end():
        l = l_ref[0:1, :]
        inverse = jnp.where(l > 0, 1.0 / jnp.where(l > 0, l, 1.0), 0.0)
        o_ref[...] = (acc_ref[...] * inverse).T.astype(o_ref.dtype)


def _allowed(mask_ref, j, offset: int, rows: int, bkv: int, kv_len: int, masked: bool):
    """`[rows, 1]` bool: the keys of rows `offset...` of key block `j` that may be attended."""
    index = j * bkv + offset + lax.broadcasted_iota(jnp.int32, (rows, 1), 0)
    allowed = index < kv_len
    if masked:
        allowed = allowed & (mask_ref[pl.ds(offset, rows), :] > 0)
    return allowed
