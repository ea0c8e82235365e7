"""The attention entry point every family calls; it picks the kernel and handles sequence parallel.

    attention(q, k, v, *, kv_mask=None, scale=None) -> [B, Sq, H, D]
    joint_attention(q, k, v, q_txt, k_txt, v_txt, *, txt_mask=None, scale=None) -> (video, text)

q `[B, Sq, H, D]`, k/v `[B, Skv, H, D]`, kv_mask `[B, Skv]` bool (True = attend). Query rows with
no key to attend return zeros, never NaN.

Kernels (`zoo/compute/kernels/`), chosen per call: short attention (Sq·Skv ≤ PLAIN_MAX_LOGITS, e.g. cross
attention to a few hundred text tokens at low resolution) runs plain softmax; otherwise TPU runs
JAX's Pallas splash (or flash) kernel or vidax's exp2 kernels (`kernels/pallas_exp2.py`) at the choice
`kernels/tpu_blocks.py` makes for the chip and shape, GPU runs cuDNN flash where dtype/shape allow (prefix masks
as lengths), and everything else the blockwise online-softmax kernel. No path materialises S×S above the threshold.

Under a mesh (`vidax.zoo.compute.runtime.use_mesh`, i.e. jax's mesh context) the kernel runs inside
`shard_map`, batch on "data", heads on "tensor" (Megatron: q/k/v come out of column-parallel
projections), and with "sequence" > 1 DeepSpeed-Ulysses: q/k/v arrive split on the sequence,
one all-to-all regroups them into full sequences of H/(tp·sp) heads, attention runs locally, and a
second all-to-all restores the sequence split. A sequence that sp does not divide is padded and the
padding masked. Cross attention (Sq ≠ Skv) keeps its queries sequence-split and attends to the
whole (replicated) keys, with no all-to-all.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
from vidax.zoo.compute.kernels.blockwise import blockwise_attention
from vidax.zoo.compute.kernels.cudnn import cudnn_attention, cudnn_supports
from vidax.zoo.compute.kernels.neighborhood import neighborhood_attention  # noqa: F401  (local 3-D windows: LTX-2.5's decoder)
from vidax.zoo.compute.kernels import tpu_blocks
from vidax.zoo.compute.runtime import device_kind, platform
from vidax.zoo.compute.kernels.pallas_tpu import TpuAttention, tpu_attention
from vidax.zoo.compute.kernels.plain import plain_attention
from vidax.zoo.compute.mesh import DATA, SEQUENCE, TENSOR, axis_size, check_heads
from vidax.zoo.compute.runtime import active_mesh

PLAIN_MAX_LOGITS = 1 << 20  # Sq·Skv per (batch, head): 4 MiB of fp32 logits
# "pallas": the TPU kernel and blocks `tpu_blocks.choose` picks; "splash"/"flash"/"exp2"/"exp2_bounded": that
# kernel at the chip's built-in blocks; the `_interpret` forms run the same kernels in Pallas' interpreter (on CPU,
# in tests).
_TPU_KERNELS = ("pallas", "splash", "flash", "exp2", "exp2_bounded")
_TPU_NAMES = _TPU_KERNELS + tuple(f"{name}_interpret" for name in _TPU_KERNELS)
IMPLEMENTATIONS = ("plain", "blockwise", "cudnn") + _TPU_NAMES


def attention(q, k, v, *, kv_mask=None, scale=None, implementation: str | None = None):
    """Softmax attention over `[B, S, H, D]` tensors, on one device or the active mesh.

    Args:
      q: queries `[B, Sq, H, D]`.
      k: keys `[B, Skv, H, D]`.
      v: values `[B, Skv, H, D]`.
      kv_mask: `[B, Skv]` bool, True where a key may be attended.
      scale: logit scale, default `D ** -0.5`.
      implementation: force one kernel (one of IMPLEMENTATIONS); default chooses per backend.
    """
    _check_inputs(q, k, v, kv_mask, implementation)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    kernel = partial(local_attention, scale=scale, implementation=implementation)
    mesh = active_mesh()
    if mesh is None or mesh.size == 1:
        return kernel(q, k, v, kv_mask)
    if q.shape[1] == k.shape[1]:
        return _ulysses(kernel, mesh, q, k, v, kv_mask)
    return _query_split(kernel, mesh, q, k, v, kv_mask)


def joint_attention(q, k, v, q_txt, k_txt, v_txt, *, txt_mask=None, scale=None, implementation: str | None = None):
    """Attention over video tokens and text tokens sharing one sequence (HunyuanVideo-style).

    Args:
      q, k, v: video `[B, S, H, D]` (sequence-split under sequence parallel).
      q_txt, k_txt, v_txt: text `[B, T, H, D]` (replicated over the sequence axis).
      txt_mask: `[B, T]` bool, True for real text tokens.
      scale: logit scale, default `D ** -0.5`.
      implementation: as for `attention`.
    Returns:
      `(out_video [B, S, H, D], out_text [B, T, H, D])`.
    """
    _check_inputs(q, k, v, None, implementation)
    _check_inputs(q_txt, k_txt, v_txt, txt_mask, implementation)
    if q.shape[0] != q_txt.shape[0] or q.shape[2:] != q_txt.shape[2:]:
        raise ValueError(f"video and text attention shapes disagree: q{q.shape} q_txt{q_txt.shape}")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    kernel = partial(local_attention, scale=scale, implementation=implementation)
    mesh = active_mesh()
    if mesh is None or mesh.size == 1:
        return _joint_local(kernel, q, k, v, q_txt, k_txt, v_txt, None, txt_mask)
    return _joint_ulysses(kernel, mesh, q, k, v, q_txt, k_txt, v_txt, txt_mask)


# --- one device ------------------------------------------------------------------------------


def _check_inputs(q, k, v, kv_mask, implementation):
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"attention takes [B, S, H, D] tensors, got q{q.shape} k{k.shape} v{v.shape}")
    if k.shape != v.shape or (q.shape[0], q.shape[2], q.shape[3]) != (k.shape[0], k.shape[2], k.shape[3]):
        raise ValueError(f"attention shapes disagree: q{q.shape} k{k.shape} v{v.shape}")
    if kv_mask is not None and tuple(kv_mask.shape) != (k.shape[0], k.shape[1]):
        raise ValueError(f"kv_mask must be [B, Skv] = {(k.shape[0], k.shape[1])}, got {tuple(kv_mask.shape)}")
    if implementation is not None and implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attention implementation {implementation!r}; have {', '.join(IMPLEMENTATIONS)}")


def choose_kernel(q, k, kv_mask) -> str:
    """The kernel the entry point uses for these (per-device) inputs on this backend."""
    if q.shape[1] * k.shape[1] <= PLAIN_MAX_LOGITS:
        return "plain"
    backend = platform()  # the targeted chip's under `--target`
    if backend == "tpu":
        return "pallas"
    if backend in ("gpu", "cuda", "rocm") and cudnn_supports(q):
        return "cudnn"
    return "blockwise"


def local_attention(q, k, v, kv_mask=None, *, scale, implementation=None):
    """This device's kernel alone, no mesh handling (for callers already inside `shard_map`)."""
    name = implementation or choose_kernel(q, k, kv_mask)
    if name == "plain":
        return plain_attention(q, k, v, kv_mask, scale)
    if name in _TPU_NAMES:
        return tpu_attention(q, k, v, kv_mask, scale, _tpu_choice(name, q, k, kv_mask),
                             interpret=name.endswith("_interpret"))
    if name == "cudnn":
        return cudnn_attention(q, k, v, kv_mask, scale)
    return blockwise_attention(q, k, v, kv_mask, scale)



# Tests set this to "splash_interpret" / "flash_interpret" / "exp2_interpret" to run the heads-major path on CPU.
HEADS_MAJOR_IMPLEMENTATION: str | None = None


def heads_major_choice(batch: int, sq: int, skv: int, heads: int, head_dim: int, dtype
                       ) -> tuple[TpuAttention, bool] | None:
    """`(blocks, interpret)` when attention of these shapes runs a TPU kernel on one device, where q/k/v are
    best made heads-major and padded by their projections (`kernels/heads_major.py`); None where the
    entry point's `[B, S, H, D]` form serves (CPU, GPU, short attention, under a mesh of several devices).
    The blocks are the effective ones (fp32 capped, fitted): pad q to `padded_lengths(...)[0]` and k/v to
    `[1]`."""
    from vidax.zoo.compute.kernels.pallas_tpu import effective_choice

    mesh = active_mesh()
    if mesh is not None and mesh.size > 1:
        return None
    q = jax.ShapeDtypeStruct((batch, sq, heads, head_dim), dtype)
    k = jax.ShapeDtypeStruct((batch, skv, heads, head_dim), dtype)
    name = HEADS_MAJOR_IMPLEMENTATION or choose_kernel(q, k, None)
    if name not in _TPU_NAMES or not (head_dim == 64 or head_dim % 128 == 0):
        return None
    if HEADS_MAJOR_IMPLEMENTATION is None and not _heads_major_wanted(batch, sq, heads * head_dim, dtype):
        return None
    choice = effective_choice(_tpu_choice(name, q, k, None), dtype, sq, skv)
    interpret = name.endswith("_interpret")
    if choice.kernel == "splash":  # its host-side block map now, not inside a scan over rows (a tracer there)
        from vidax.zoo.compute.kernels.pallas_tpu import splash_kernel_for

        splash_kernel_for(choice, heads, sq, skv, interpret)
    return choice, interpret


HEADS_MAJOR_ENV = "VIDAX_HEADS_MAJOR"  # "1": wherever a TPU kernel runs on one device; "0": never; unset: by memory


def _heads_major_wanted(batch: int, tokens: int, width: int, dtype) -> bool:
    """Heads-major only where the `[B, S, H, D]` program's attention copies would crowd the device
    (`planner.heads_major_needed`: Wan2.1-14B at 720p on a v5e, not at 480p; Wan's self-attention is the one
    caller).
    The speed of the `[B, S, H, D]` program is the one measured on the chip (splash at 80% of peak, the
    Wan2.1-14B block within 0.92x of MaxDiffusion's); the heads-major program's memory was measured by XLA's
    TPU compiler (the Wan 720p 2-block program: 16.36 -> 13.00 GiB of temporaries), its speed not yet."""
    import os

    from vidax.zoo.compute import planner

    forced = os.environ.get(HEADS_MAJOR_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    _, device_bytes = planner.device_memory_bytes()
    return planner.heads_major_needed(batch, tokens, width, jnp.dtype(dtype).itemsize, device_bytes)


def _tpu_choice(name: str, q, k, kv_mask) -> TpuAttention:
    kernel = name.removesuffix("_interpret")
    if kernel == "pallas":
        if name.endswith("_interpret"):  # no chip to time on: the built-in blocks
            return tpu_blocks.FALLBACK
        return tpu_blocks.choose(q, k, kv_mask)
    built_in = tpu_blocks.FALLBACK if name.endswith("_interpret") else tpu_blocks.default_for(device_kind())
    return dataclasses.replace(built_in, kernel=kernel)


def _joint_local(kernel, q, k, v, q_txt, k_txt, v_txt, video_mask, txt_mask):
    """Video and text tokens in one attention; the order of keys does not change softmax."""
    s = q.shape[1]
    kv_mask = None
    if video_mask is not None or txt_mask is not None:
        video_mask = jnp.ones(q.shape[:2], bool) if video_mask is None else video_mask
        txt_mask = jnp.ones(q_txt.shape[:2], bool) if txt_mask is None else txt_mask.astype(bool)
        kv_mask = jnp.concatenate([video_mask, txt_mask], axis=1)
    out = kernel(
        jnp.concatenate([q, q_txt], 1), jnp.concatenate([k, k_txt], 1), jnp.concatenate([v, v_txt], 1), kv_mask
    )
    return out[:, :s], out[:, s:]


# --- under a mesh ----------------------------------------------------------------------------


def _degrees(mesh, batch: int):
    dp, tp, sp = (axis_size(mesh, a) for a in (DATA, TENSOR, SEQUENCE))
    batch_axis = DATA if dp > 1 and batch % dp == 0 else None
    return batch_axis, tp, sp


def _pad_sequence(x, multiple: int):
    extra = -x.shape[1] % multiple
    if not extra:
        return x
    pad = [(0, 0)] * x.ndim
    pad[1] = (0, extra)
    return jnp.pad(x, pad)


def _sequence_mask(kv_mask, batch: int, length: int, padded: int):
    """The caller's mask (or all-True) extended with False over the padding; None if not needed."""
    if kv_mask is None and padded == length:
        return None
    mask = jnp.ones((batch, length), bool) if kv_mask is None else kv_mask.astype(bool)
    return jnp.pad(mask, ((0, 0), (0, padded - length)), constant_values=False)


def _to_heads(x):  # [B, S/sp, h, D] -> [B, S, h/sp, D]
    return jax.lax.all_to_all(x, SEQUENCE, split_axis=2, concat_axis=1, tiled=True)


def _to_sequence(x):  # [B, S, h/sp, D] -> [B, S/sp, h, D]
    return jax.lax.all_to_all(x, SEQUENCE, split_axis=1, concat_axis=2, tiled=True)


def _ulysses(kernel, mesh, q, k, v, kv_mask):
    """Self attention: sequence-split in, all-to-all to heads, local kernel, all-to-all back."""
    b, s, h, _ = q.shape
    batch_axis, tp, sp = _degrees(mesh, b)
    check_heads(h, tp, sp)
    padded = s + (-s % sp)
    q, k, v = (_pad_sequence(x, sp) for x in (q, k, v))
    mask = _sequence_mask(kv_mask, b, s, padded)
    seq_axis = SEQUENCE if sp > 1 else None
    qkv_spec = P(batch_axis, seq_axis, TENSOR if tp > 1 else None, None)
    mask_spec = P(batch_axis, seq_axis)

    def local(q, k, v, *mask):
        if sp > 1:
            q, k, v = _to_heads(q), _to_heads(k), _to_heads(v)
            mask = tuple(jax.lax.all_gather(m, SEQUENCE, axis=1, tiled=True) for m in mask)
        out = kernel(q, k, v, mask[0] if mask else None)
        return _to_sequence(out) if sp > 1 else out

    args = (q, k, v) if mask is None else (q, k, v, mask)
    specs = (qkv_spec,) * 3 + ((mask_spec,) if mask is not None else ())
    out = jax.shard_map(local, in_specs=specs, out_specs=qkv_spec, check_vma=False)(*args)
    return out[:, :s]


def _query_split(kernel, mesh, q, k, v, kv_mask):
    """Cross attention: queries stay sequence-split, keys/values are whole on every device."""
    b, s, h, _ = q.shape
    batch_axis, tp, sp = _degrees(mesh, b)
    check_heads(h, tp)
    q = _pad_sequence(q, sp)
    head_axis = TENSOR if tp > 1 else None
    q_spec = P(batch_axis, SEQUENCE if sp > 1 else None, head_axis, None)
    kv_spec = P(batch_axis, None, head_axis, None)

    def local(q, k, v, *mask):
        return kernel(q, k, v, mask[0] if mask else None)

    args = (q, k, v) if kv_mask is None else (q, k, v, kv_mask.astype(bool))
    specs = (q_spec, kv_spec, kv_spec) + (() if kv_mask is None else (P(batch_axis, None),))
    out = jax.shard_map(local, in_specs=specs, out_specs=q_spec, check_vma=False)(*args)
    return out[:, :s]


def _joint_ulysses(kernel, mesh, q, k, v, q_txt, k_txt, v_txt, txt_mask):
    """Ulysses with text: video heads come from the all-to-all, text heads from the local slice."""
    b, s, h, _ = q.shape
    batch_axis, tp, sp = _degrees(mesh, b)
    check_heads(h, tp, sp)
    padded = s + (-s % sp)
    q, k, v = (_pad_sequence(x, sp) for x in (q, k, v))
    video_mask = jnp.broadcast_to(jnp.arange(padded) < s, (b, padded))
    txt_mask = jnp.ones(q_txt.shape[:2], bool) if txt_mask is None else txt_mask.astype(bool)
    head_axis = TENSOR if tp > 1 else None
    video_spec = P(batch_axis, SEQUENCE if sp > 1 else None, head_axis, None)
    text_spec = P(batch_axis, None, head_axis, None)

    def local(q, k, v, q_txt, k_txt, v_txt, video_mask, txt_mask):
        if sp > 1:
            q, k, v = _to_heads(q), _to_heads(k), _to_heads(v)
            video_mask = jax.lax.all_gather(video_mask, SEQUENCE, axis=1, tiled=True)
            group = q.shape[2]  # this device's heads within its tensor shard
            start = jax.lax.axis_index(SEQUENCE) * group
            q_txt, k_txt, v_txt = (jax.lax.dynamic_slice_in_dim(t, start, group, axis=2) for t in (q_txt, k_txt, v_txt))
        out, out_txt = _joint_local(kernel, q, k, v, q_txt, k_txt, v_txt, video_mask, txt_mask)
        if sp > 1:
            out = _to_sequence(out)
            out_txt = jax.lax.all_gather(out_txt, SEQUENCE, axis=2, tiled=True)
        return out, out_txt

    specs = (video_spec,) * 3 + (text_spec,) * 3 + (P(batch_axis, video_spec[1]), P(batch_axis, None))
    out, out_txt = jax.shard_map(local, in_specs=specs, out_specs=(video_spec, text_spec), check_vma=False)(
        q, k, v, q_txt, k_txt, v_txt, video_mask, txt_mask
    )
    return out[:, :s], out_txt
