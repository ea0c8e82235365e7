"""TPU attention: JAX's Pallas splash and flash kernels and vidax's own (`pallas_exp2`), padded to their blocks
and masked.

The kernels want heads-major inputs and sequence lengths that are multiples of their blocks. We
pad queries and keys to the block multiple only (never to a fixed 128 when a block is larger, and
blocks are capped at the padded length, so cross attention to a few hundred text tokens runs as
one KV block). Keys are masked only when something is masked:

- no `kv_mask` and no padded key: no mask at all (splash's `FullMask`, no segment ids);
- no `kv_mask`, padded keys: a static "key index < length" mask that splash evaluates inside the
  kernel for the one partial KV block and skips wholly padded blocks;
- a `kv_mask` (text padding, Ulysses padding): segment ids (a masked key is segment 0, every
  query segment 1), which the kernel compares per block.

Splash applies no softmax scale, so q is scaled first (in q's dtype, as MaxDiffusion and JAX's
own examples do). A row with no allowed key comes out of either kernel as an average of values,
so such rows are zeroed after. Under a mesh this runs inside `shard_map` (`zoo/compute/attention.py`):
Pallas kernels sit outside GSPMD.

The "exp2" kernels (`pallas_exp2`: keys on the sublanes, base-2 exponentials, "exp2_bounded" with a fixed
softmax bound where that is safe) take the batch folded into the heads and mask in-kernel as splash does. They
are forward kernels: differentiated, a call runs splash's forward and backward (`GRADIENT_CHOICE`) instead.

Block sizes come from `vidax.zoo.compute.kernels.tpu_blocks` (a table per chip, measured choices, an
environment override); `TpuAttention` names one choice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

from vidax.zoo.compute.kernels import pallas_exp2

LANES = 128
KERNELS = ("splash", "flash", "exp2", "exp2_bounded")
EXP2_KERNELS = ("exp2", "exp2_bounded")


@dataclasses.dataclass(frozen=True)
class TpuAttention:
    """One TPU attention choice: the kernel and its blocks (queries, keys per fetch, keys per step)."""

    kernel: str = "splash"
    block_q: int = 1024
    block_kv: int = 2048
    block_kv_compute: int = 1024

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"TPU attention kernel {self.kernel!r}: have {', '.join(KERNELS)}")
        for name in ("block_q", "block_kv", "block_kv_compute"):
            if getattr(self, name) <= 0 or getattr(self, name) % LANES:
                raise ValueError(f"TPU attention {name}={getattr(self, name)}: a positive multiple of {LANES}")
        if self.block_kv % self.block_kv_compute:
            raise ValueError(f"TPU attention block_kv={self.block_kv} is not a multiple of "
                             f"block_kv_compute={self.block_kv_compute}")

    def label(self) -> str:
        return f"{self.kernel}:{self.block_q},{self.block_kv},{self.block_kv_compute}"

    def fitted(self, sq: int, skv: int) -> TpuAttention:
        """Blocks no larger than the (lane-rounded) sequences: short keys become one KV block."""
        bq = min(self.block_q, _round_up(sq, LANES))
        bkv = min(self.block_kv, _round_up(skv, LANES))
        bkv_compute = min(self.block_kv_compute, bkv)
        while bkv % bkv_compute:
            bkv_compute -= LANES
        return dataclasses.replace(self, block_q=bq, block_kv=bkv, block_kv_compute=bkv_compute)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_to(x, axis: int, size: int):
    if x.shape[axis] == size:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad)


def effective_choice(choice: TpuAttention, dtype, sq: int, skv: int) -> TpuAttention:
    """The blocks a call of these lengths and dtype runs: fp32 capped, then fitted to the sequences."""
    if jnp.dtype(dtype).itemsize > 2:  # fp32 tiles take twice the VMEM: 1024 x 2048 failed to compile on v5e
        choice = dataclasses.replace(choice, block_q=min(choice.block_q, 512), block_kv=min(choice.block_kv, 1024),
                                     block_kv_compute=min(choice.block_kv_compute, 512))
        if choice.kernel == "exp2_bounded":  # a fixed bound puts exponents near 100 through fp32's 24 bits: the
            choice = dataclasses.replace(choice, kernel="exp2")  # parity runs keep the running maximum
    return choice.fitted(sq, skv)


def padded_lengths(choice: TpuAttention, sq: int, skv: int) -> tuple[int, int]:
    """Query and key lengths padded to the (effective) choice's blocks."""
    return _round_up(sq, choice.block_q), _round_up(skv, choice.block_kv)


def tpu_attention(q, k, v, kv_mask, scale: float, choice: TpuAttention, *, interpret: bool = False):
    """Attention for `[B, S, H, D]` inputs with one TPU kernel choice; `interpret=True` runs it on CPU."""
    choice = effective_choice(choice, q.dtype, q.shape[1], k.shape[1])
    if choice.kernel in EXP2_KERNELS:
        return _with_splash_gradients(functools.partial(_exp2, scale=scale, choice=choice, interpret=interpret),
                                      q, k, v, kv_mask, scale, interpret)
    with _kernel_precision(q.dtype):
        if choice.kernel == "splash":
            out = _splash(q, k, v, kv_mask, scale, choice, interpret)
        else:
            with pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext():
                out = _flash(q, k, v, kv_mask, scale, choice)
    if kv_mask is not None:
        out = jnp.where(kv_mask.astype(bool).any(axis=1)[:, None, None, None], out, 0)
    return out.astype(q.dtype)


def _kernel_precision(dtype):
    """bf16 / fp16 operands trace the kernel at the default matmul precision: the MXU multiplies them
    exactly with an fp32 sum either way, and on the chip every bf16 kernel call failed while the
    precision in effect was "highest" (the test suite's setting), while fp32 ones ran. fp32 operands
    keep the precision in effect (`--dtype float32` asks for "highest")."""
    if jnp.dtype(dtype).itemsize <= 2:
        return jax.default_matmul_precision("default")
    return contextlib.nullcontext()


def _heads_major(x, length: int, d_pad: int):  # [B, S, H, D] -> [B, H, S_pad, D_pad]
    return _pad_to(_pad_to(x, 1, length), 3, d_pad).transpose(0, 2, 1, 3)


def _head_dim(d: int) -> int:
    """Head dims of 64 and multiples of 128 run as they are; others are zero-padded to 128 lanes
    (zero columns change no logit: the scale is applied before)."""
    return d if d % LANES == 0 or d == 64 else _round_up(d, LANES)


def _splash(q, k, v, kv_mask, scale, choice: TpuAttention, interpret: bool):
    b, sq, h, d = q.shape
    skv = k.shape[1]
    sq_pad, skv_pad, d_pad = _round_up(sq, choice.block_q), _round_up(skv, choice.block_kv), _head_dim(d)
    qh = _heads_major(q * jnp.asarray(scale, q.dtype), sq_pad, d_pad)
    kh, vh = _heads_major(k, skv_pad, d_pad), _heads_major(v, skv_pad, d_pad)
    # static key length for the in-kernel mask only when nothing else masks the keys
    valid = skv if kv_mask is None and skv_pad > skv else None
    kernel = _splash_kernel(h, sq_pad, skv_pad, valid, choice, interpret)
    if kv_mask is None:
        out = jax.vmap(kernel)(qh, kh, vh)
    else:
        segments = splash.SegmentIds(q=jnp.ones((b, sq_pad), jnp.int32),
                                     kv=_pad_to(kv_mask.astype(jnp.int32), 1, skv_pad))
        out = jax.vmap(kernel)(qh, kh, vh, segment_ids=segments)
    return out.transpose(0, 2, 1, 3)[:, :sq, :, :d]  # [B, Sq, H, D]


def tpu_attention_heads_major(qh, kh, vh, scale: float, choice: TpuAttention, sq: int, skv: int, *,
                              interpret: bool = False):
    """Attention over inputs already heads-major and padded: q `[B, H, Sq_pad, D]`, k/v `[B, H, Skv_pad, D]`
    (`padded_lengths` of an `effective_choice`), of which the first `sq` / `skv` rows are real (the keys past
    `skv` are masked by the kernel); returns `[B, H, Sq_pad, D]` (rows past `sq` are padding). No transpose, pad
    or slice here: the projections write this layout (`vidax.zoo.compute.kernels.heads_major`). The head dim
    must be one the kernels take as it is (64 or a multiple of 128)."""
    b, h, sq_pad, d = qh.shape
    skv_pad = kh.shape[2]
    if (sq_pad, skv_pad) != padded_lengths(choice, sq, skv) or _head_dim(d) != d:
        raise ValueError(f"heads-major attention: q{qh.shape} k{kh.shape} do not fit {choice.label()} "
                         f"for lengths {sq}, {skv}")
    if choice.kernel in EXP2_KERNELS:
        return _exp2_heads_major(qh, kh, vh, scale, choice, sq, skv, interpret)
    with _kernel_precision(qh.dtype):
        if choice.kernel == "splash":
            kernel = splash_kernel_for(choice, h, sq, skv, interpret)
            out = jax.vmap(kernel)(qh * jnp.asarray(scale, qh.dtype), kh, vh)
        else:
            with pltpu.force_tpu_interpret_mode() if interpret else contextlib.nullcontext():
                segments = None
                if skv_pad > skv:
                    valid = jnp.broadcast_to(jnp.arange(skv_pad) < skv, (b, skv_pad)).astype(jnp.int32)
                    segments = fa.SegmentIds(q=jnp.ones((b, sq_pad), jnp.int32), kv=valid)
                out = fa.flash_attention(qh, kh, vh, segment_ids=segments, sm_scale=scale,
                                         block_sizes=flash_block_sizes(choice))
    return out.astype(qh.dtype)


def splash_kernel_for(choice: TpuAttention, heads: int, sq: int, skv: int, interpret: bool):
    """The splash kernel `tpu_attention_heads_major` runs for these lengths (built once per shape)."""
    sq_pad, skv_pad = padded_lengths(choice, sq, skv)
    valid = skv if skv_pad > skv else None
    return _splash_kernel(heads, sq_pad, skv_pad, valid, choice, interpret)


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, sq: int, skv: int, valid: int | None, choice: TpuAttention, interpret: bool):
    """The kernel object for one shape (its block map is built on the host once per shape)."""
    mask = masks.FullMask((sq, skv)) if valid is None else KeyPrefixMask((sq, skv), valid)
    blocks = splash.BlockSizes(
        block_q=choice.block_q, block_kv=choice.block_kv, block_kv_compute=choice.block_kv_compute,
        # the same blocks for the backward pass (LoRA training differentiates through attention)
        block_q_dkv=choice.block_q, block_kv_dkv=choice.block_kv, block_kv_dkv_compute=choice.block_kv_compute,
        use_fused_bwd_kernel=True)
    with jax.ensure_compile_time_eval():  # called while a model is traced: concrete arrays, not tracers
        kernel = splash.make_splash_mha(masks.MultiHeadMask([mask] * heads), block_sizes=blocks, head_shards=1,
                                        q_seq_shards=1, interpret=interpret)
    # its block map as host arrays, so that each program embeds them as literals: device arrays kept here
    # would be captured as constants of each program that traces it (and an ahead-of-time compiled
    # program was called without them)
    return splash.SplashAttentionKernel(*(None if info is None else jax.tree.map(np.asarray, info) for info in
                                          (kernel.fwd_mask_info, kernel.dq_mask_info, kernel.dkv_mask_info)),
                                        **kernel.kwargs)


class KeyPrefixMask(masks._ComputableMask):
    """Keys below `valid` attend, the padded tail does not. Splash computes it inside the kernel, so
    only the one partial KV block pays for the compare and wholly padded blocks are skipped."""

    def __init__(self, shape: tuple[int, int], valid: int):
        self.valid = int(valid)
        super().__init__(shape, functools.partial(_below, valid=self.valid))

    def __eq__(self, other):
        return type(other) is type(self) and other.shape == self.shape and other.valid == self.valid

    def __hash__(self):
        return hash((type(self).__name__, self.shape, self.valid))


def _below(q_ids, kv_ids, *, valid: int):
    del q_ids
    return kv_ids < valid


def flash_block_sizes(choice: TpuAttention) -> fa.BlockSizes:
    """The flash kernel's blocks, the backward pass's too: without them its VJP refuses to run ("not all backward
    blocks are specified"), which stopped LoRA training on the chip wherever flash was the faster kernel (the
    Wan cross-attention's 512 text keys)."""
    bq, bkv, bkv_compute = choice.block_q, choice.block_kv, choice.block_kv_compute
    return fa.BlockSizes(block_q=bq, block_k_major=bkv, block_k=bkv_compute, block_b=1,
                         block_q_major_dkv=bq, block_k_major_dkv=bkv, block_k_dkv=bkv_compute, block_q_dkv=bq,
                         block_k_major_dq=bkv, block_k_dq=bkv_compute, block_q_dq=bq)


def _flash(q, k, v, kv_mask, scale, choice: TpuAttention):
    """JAX's older flash kernel (segment ids for any mask; head dim padded to 128 lanes)."""
    b, sq, _, d = q.shape
    skv = k.shape[1]
    bq, bkv = choice.block_q, choice.block_kv
    sq_pad, skv_pad, d_pad = _round_up(sq, bq), _round_up(skv, bkv), _round_up(d, LANES)
    segments = None
    if kv_mask is not None or skv_pad > skv:
        mask = jnp.ones((b, skv), bool) if kv_mask is None else kv_mask.astype(bool)
        segments = fa.SegmentIds(q=jnp.ones((b, sq_pad), jnp.int32), kv=_pad_to(mask.astype(jnp.int32), 1, skv_pad))
    blocks = flash_block_sizes(choice)
    out = fa.flash_attention(_heads_major(q, sq_pad, d_pad), _heads_major(k, skv_pad, d_pad),
                             _heads_major(v, skv_pad, d_pad), segment_ids=segments, sm_scale=scale,
                             block_sizes=blocks)
    return out.transpose(0, 2, 1, 3)[:, :sq, :, :d]



# --- vidax's exp2 kernels ---------------------------------------------------------------------

# The splash blocks a differentiated exp2 call runs (forward and backward): v5e's at libtpu's default scoped VMEM,
# which every chip the table knows compiles; fitted to the lengths like any choice.
GRADIENT_CHOICE = TpuAttention("splash", 1024, 2048, 1024)


def _exp2_blocks(choice: TpuAttention) -> pallas_exp2.Exp2Blocks:
    inner = min(pallas_exp2.INNER_ROWS, choice.block_kv_compute)
    while choice.block_kv_compute % inner:  # both multiples of 128
        inner -= LANES
    return pallas_exp2.Exp2Blocks(choice.block_q, choice.block_kv, choice.block_kv_compute, inner)


def _exp2(q, k, v, kv_mask, *, scale: float, choice: TpuAttention, interpret: bool):
    """`[B, S, H, D]` in and out: heads folded into the batch, padded, the kernel, back."""
    b, sq, h, d = q.shape
    skv = k.shape[1]
    sq_pad, skv_pad, d_pad = _round_up(sq, choice.block_q), _round_up(skv, choice.block_kv), _head_dim(d)

    def rows(x, length):  # [B, S, H, D] -> [B*H, S_pad, D_pad]
        return _heads_major(x, length, d_pad).reshape(b * h, length, d_pad)

    q2 = rows(q * jnp.asarray(scale * pallas_exp2.LOG2E, q.dtype), sq_pad)
    mask = None if kv_mask is None else _pad_to(kv_mask.astype(bool), 1, skv_pad)
    with _kernel_precision(q.dtype):
        out = pallas_exp2.exp2_attention(q2, rows(k, skv_pad), rows(v, skv_pad), kv_len=skv,
                                         blocks=_exp2_blocks(choice), heads=h, kv_mask=mask,
                                         bounded=choice.kernel == "exp2_bounded", interpret=interpret)
    out = out.reshape(b, h, sq_pad, d_pad).transpose(0, 2, 1, 3)[:, :sq, :, :d]
    if kv_mask is not None:
        out = jnp.where(kv_mask.astype(bool).any(axis=1)[:, None, None, None], out, 0)
    return out.astype(q.dtype)


def _exp2_heads_major(qh, kh, vh, scale: float, choice: TpuAttention, sq: int, skv: int, interpret: bool):
    """`tpu_attention_heads_major` for the exp2 kernels: `[B, H, S_pad, D]` folded to `[B*H, S_pad, D]`."""
    b, h, sq_pad, d = qh.shape

    def forward(qh, kh, vh, _mask):
        fold = lambda x: x.reshape(b * h, x.shape[2], d)  # noqa: E731
        with _kernel_precision(qh.dtype):
            out = pallas_exp2.exp2_attention(
                fold(qh * jnp.asarray(scale * pallas_exp2.LOG2E, qh.dtype)), fold(kh), fold(vh), kv_len=skv,
                blocks=_exp2_blocks(choice), heads=h, bounded=choice.kernel == "exp2_bounded", interpret=interpret)
        return out.reshape(b, h, sq_pad, d)

    def splash_forward(qh, kh, vh, _mask):  # differentiated: splash at the same blocks (the padding fits them)
        return tpu_attention_heads_major(qh, kh, vh, scale, dataclasses.replace(choice, kernel="splash"), sq, skv,
                                         interpret=interpret)

    return _custom_gradients(forward, splash_forward, qh, kh, vh, None)


def _with_splash_gradients(forward, q, k, v, kv_mask, scale: float, interpret: bool):
    """`forward(q, k, v, kv_mask)` where nothing differentiates it; splash's forward and backward where something
    does (LoRA training), so gradients are exact whatever kernel inference runs."""
    splash = functools.partial(tpu_attention, scale=scale, choice=GRADIENT_CHOICE, interpret=interpret)
    return _custom_gradients(forward, lambda q, k, v, m: splash(q, k, v, m), q, k, v, kv_mask)


def _custom_gradients(forward, differentiable, q, k, v, kv_mask):
    @jax.custom_vjp
    def attend(q, k, v, kv_mask):
        return forward(q, k, v, kv_mask)

    def attend_forward(q, k, v, kv_mask):
        out, pullback = jax.vjp(lambda q, k, v: differentiable(q, k, v, kv_mask), q, k, v)
        return out, pullback

    def attend_backward(pullback, grad):
        return (*pullback(grad), None)

    attend.defvjp(attend_forward, attend_backward)
    return attend(q, k, v, kv_mask)
