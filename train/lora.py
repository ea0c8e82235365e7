"""LoRA parameters on a frozen stacked DiT, and the block runner that applies them.

A LoRA of one linear layer is a pair `A [L, in, r]`, `B [L, r, out]` (one slice per block of the stack): `A` is
PEFT's `lora_A.weight` transposed, `B` its `lora_B.weight` transposed. As PEFT's `LoraLayer` computes it, the
layer's output becomes `x @ W + b + scale * (x @ A) @ B` (scale = alpha / rank): the frozen kernel is never
changed, so its gradient `x^T dy` (as many FLOPs as the layer's forward) is never formed, a bf16 or 8-bit base
keeps its own values, and a small update to a big weight is not rounded away in the base's dtype.

The branch is added around the zoo's own layers without touching them: while a block runs, a Flax method
interceptor (`nn.intercept_methods`) adds it to the output of each targeted `Dense` (and of the TPU's
heads-major `HeadsDense` / `HeadsOut`, which declare the same params), found by its path in the block.

Targets are named as PEFT names them (`LoraConfig.target_modules`): a block module matches a target when
its diffusers name (`attn1.to_out.0`, `ffn.net.0.proj`) equals it or ends with `.` + it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from vidax.translator import VidaxError
from vidax.zoo.compute.kernels.heads_major import HeadsDense, HeadsOut
from vidax.zoo.compute.layers import Dense
from vidax.zoo.compute.sharding import constrain

Lora = dict[str, dict[str, jax.Array]]  # {"attn1/to_q": {"A": [L, in, r], "B": [L, r, out]}}

# q/k/v/o of both attentions and the feed-forward's two projections (Wan's diffusers names, PEFT's matching)
DEFAULT_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2")
HIDDEN_AXES = ("batch", "seq", "act_embed")


class LoraConfigError(VidaxError, ValueError):
    """A LoRA request that does not fit the model (a target that names no layer, a rank below 1)."""


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """Rank, alpha (None: alpha = rank) and the PEFT-style target names."""

    rank: int = 16
    alpha: float | None = None
    targets: tuple[str, ...] = DEFAULT_TARGETS

    def __post_init__(self):
        if self.rank < 1:
            raise LoraConfigError(f"--rank must be at least 1, got {self.rank}")
        if self.alpha is not None and not (math.isfinite(self.alpha) and self.alpha > 0):
            raise LoraConfigError(f"--alpha must be a positive number, got {self.alpha}")
        if not self.targets:
            raise LoraConfigError("--targets names no module")

    @property
    def lora_alpha(self) -> float:
        return float(self.rank if self.alpha is None else self.alpha)

    @property
    def scale(self) -> float:
        return self.lora_alpha / self.rank


def diffusers_name(path: str) -> str:
    """`attn1/to_out_0` -> `attn1.to_out.0` (CONTRIBUTING.md's naming, inverted)."""
    return ".".join(re.sub(r"_(\d+)$", r".\1", part) for part in path.split("/"))


def dense_layers(blocks: Any) -> dict[str, tuple[int, int]]:
    """`{module path: (in, out)}` of every Dense layer in a stacked block tree (kernels `[L, in, out]`)."""
    flat = flax.traverse_util.flatten_dict(blocks, sep="/")
    return {path[: -len("/kernel")]: tuple(leaf.shape[1:]) for path, leaf in flat.items()
            if path.endswith("/kernel") and len(leaf.shape) == 3}


def matches(module: str, target: str) -> bool:
    name = diffusers_name(module)
    return name == target or name.endswith("." + target)


def targeted(blocks: Any, targets: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """The Dense layers `targets` name, sorted by path; every target must name at least one."""
    layers = dense_layers(blocks)
    unmatched = [t for t in targets if not any(matches(m, t) for m in layers)]
    if unmatched:
        names = ", ".join(sorted(diffusers_name(m) for m in layers))
        raise LoraConfigError(f"--targets {', '.join(unmatched)} name no layer of the blocks (they have: {names})")
    return {m: layers[m] for m in sorted(layers) if any(matches(m, t) for t in targets)}


def init_lora(key: jax.Array, blocks: Any, config: LoraConfig) -> Lora:
    """Fresh fp32 LoRA params: A as PEFT initialises `lora_A` (kaiming-uniform with a = sqrt(5), i.e.
    U(-1/sqrt(in), 1/sqrt(in))), B zero, so training starts from the base model."""
    depth = len(jax.tree.leaves(blocks)[0])
    layers = targeted(blocks, config.targets)
    lora = {}
    for (module, (fan_in, fan_out)), k in zip(layers.items(), jax.random.split(key, len(layers))):
        bound = 1.0 / math.sqrt(fan_in)
        lora[module] = {"A": jax.random.uniform(k, (depth, fan_in, config.rank), jnp.float32, -bound, bound),
                        "B": jnp.zeros((depth, config.rank, fan_out), jnp.float32)}
    return lora


# --- the branch beside each targeted layer ---------------------------------------------------------


def low_rank(x: jax.Array, pair: dict[str, jax.Array], scale: float, dtype) -> jax.Array:
    """`scale * (x @ A) @ B` over the last axis, in the layer's compute dtype (fp32 accumulation)."""
    a, b = pair["A"].astype(dtype), pair["B"].astype(dtype)
    down = jnp.einsum("...i,ir->...r", x.astype(dtype), a, preferred_element_type=jnp.float32).astype(dtype)
    return (jnp.einsum("...r,ro->...o", down, b, preferred_element_type=jnp.float32) * scale).astype(dtype)


def _branch(module: nn.Module, x: jax.Array, y: jax.Array, pair, scale: float) -> jax.Array:
    """The LoRA term of `module`'s output `y` for its input `x`, in `y`'s layout."""
    if isinstance(module, HeadsDense):  # [B, S, in] -> [B, H, S, Dh]
        delta = low_rank(x, pair, scale, y.dtype)
        return delta.reshape(*delta.shape[:-1], y.shape[1], y.shape[-1]).transpose(0, 2, 1, 3)
    if isinstance(module, HeadsOut):  # [B, H, S, Dh] -> [B, S, out]
        b, h, s, d = x.shape
        return low_rank(x.transpose(0, 2, 1, 3).reshape(b, s, h * d), pair, scale, y.dtype)
    if module.input_activation is not None:  # an MLP's second projection reads the activated hidden state
        x = module.input_activation(x)
    return low_rank(x, pair, scale, y.dtype)


def branch_interceptor(layer_lora: dict[str, dict[str, jax.Array]], scale: float) -> Callable:
    """A Flax method interceptor adding `layer_lora[path]`'s branch to each targeted layer's output
    (`path`: the layer's module path in the block, `attn1/to_q`)."""

    def intercept(call, args, kwargs, context):
        module = context.module
        out = call(*args, **kwargs)
        if context.method_name != "__call__" or not isinstance(module, (Dense, HeadsDense, HeadsOut)):
            return out
        pair = layer_lora.get("/".join(module.scope.path))
        return out if pair is None else out + _branch(module, args[0], out, pair, scale)

    return intercept


def _carry(hidden: Any, dtype) -> Any:
    """The hidden state (an array or a pytree of streams) with its floating leaves in `dtype`."""
    if dtype is None:
        return hidden
    return jax.tree.map(lambda h: h.astype(dtype) if jnp.issubdtype(h.dtype, jnp.floating) else h, hidden)


def _constrain(hidden: Any) -> Any:
    """A token-major `[B, S, D]` hidden state split as the DiT runner splits it (pytrees place themselves)."""
    return constrain(hidden, HIDDEN_AXES) if isinstance(hidden, jax.Array) and hidden.ndim == 3 else hidden


BLOCK_INPUT = "block_input"  # the name `objective.REMAT`'s "offload" policy moves to host memory


def lora_blocks(scale: float, checkpoint: bool = True, carry_dtype: Any = None, policy: Callable | None = None,
                on_device: Any = None):
    """A `vidax.zoo.parts.dit.forward` block runner over `{"base": stacked blocks, "lora": Lora}`: the blocks run
    in one `lax.scan`, each with its LoRA branches, and with `checkpoint` each block's activations are
    recomputed in the backward pass (`jax.checkpoint` per block, saving what `policy` names) instead of kept.

    `carry_dtype` (None: the hidden state's own) is the hidden state's dtype between blocks, which is what the
    backward pass keeps of each block: bf16 halves it (Wan2.1-1.3B at 480p, 81 frames: 5.62 GiB of fp32 block
    inputs, which with the frozen base put the step over a 15.75 GiB chip), and blocks still compute their
    residual adds in fp32 inside.

    `on_device` (a sharding of device memory): the base blocks live in host memory and each block's weights are
    brought to the device inside the checkpointed body, so the backward pass brings them again instead of keeping
    them (a base larger than the chip: Wan2.1-14B)."""

    def run(block, stacked, hidden, ctx):
        kinds = jax.tree.map(lambda h: h.dtype, hidden)

        def body(h, layer):
            base, lora = layer
            if on_device is not None:
                base = jax.device_put(base, on_device)
            h = jax.tree.map(lambda x: checkpoint_name(x, BLOCK_INPUT), h)
            with nn.intercept_methods(branch_interceptor(lora, scale)):
                out = block.apply({"params": base}, h, ctx)
            return _constrain(jax.tree.map(lambda o, k: o.astype(k.dtype), out, h))

        body = jax.checkpoint(body, policy=policy) if checkpoint else body
        out, _ = jax.lax.scan(lambda h, layer: (body(h, layer), None), _constrain(_carry(hidden, carry_dtype)),
                              (stacked["base"], stacked["lora"]))
        return jax.tree.map(lambda o, k: o.astype(k), out, kinds)

    return run


def with_lora(params: Any, lora: Lora, group: str = "blocks") -> Any:
    """The model's params with its block stack paired with the LoRA, as `lora_blocks` reads them."""
    return {**params, group: {"base": params[group], "lora": lora}}
