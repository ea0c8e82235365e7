"""LoRA parameters on a frozen stacked DiT, and the block runner that applies them.

A LoRA of one Dense layer is a pair `A [L, in, r]`, `B [L, r, out]` (one slice per block of the stack):
`A` is PEFT's `lora_A.weight` transposed, `B` its `lora_B.weight` transposed, so the layer's kernel
`[in, out]` becomes `W + (alpha / rank) * A @ B` (PEFT's `W + scale * B @ A` on torch's `[out, in]`).
The merge happens inside the scanned block body, one block at a time, so the merged kernels of one block
are the only extra weights alive; the zoo's model code runs unchanged on the merged tree.

Targets are named as PEFT names them (`LoraConfig.target_modules`): a block module matches a target when
its diffusers name (`attn1.to_out.0`, `ffn.net.0.proj`) equals it or ends with `.` + it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import flax
import jax
import jax.numpy as jnp

from vidax.translator import VidaxError
from vidax.zoo.compute.sharding import constrain

Lora = dict[str, dict[str, jax.Array]]  # {"attn1/to_q": {"A": [L, in, r], "B": [L, r, out]}}

# q/k/v/o of both attentions and the feed-forward's two projections (diffusers names, PEFT's matching)
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


def merged(layer: Any, lora: Lora, scale: float) -> Any:
    """One block's params with `scale * A @ B` added to each LoRA'd kernel (fp32; the Dense casts it)."""
    flat = dict(flax.traverse_util.flatten_dict(layer, sep="/"))
    for module, pair in lora.items():
        kernel = flat[f"{module}/kernel"]
        flat[f"{module}/kernel"] = kernel.astype(jnp.float32) + scale * (pair["A"] @ pair["B"])
    return flax.traverse_util.unflatten_dict(flat, sep="/")


def lora_blocks(scale: float, checkpoint: bool = True, carry_dtype: Any = None):
    """A `vidax.zoo.parts.dit.forward` block runner over `{"base": stacked blocks, "lora": Lora}`: the blocks run
    in one `lax.scan`, each with its LoRA merged, and with `checkpoint` each block's activations are
    recomputed in the backward pass (`jax.checkpoint` per block) instead of kept.

    `carry_dtype` (None: the hidden state's own) is the hidden state's dtype between blocks, which is what the
    backward pass keeps of each block: bf16 halves it (Wan2.1-1.3B at 480p, 81 frames: 5.62 GiB of fp32 block
    inputs, which with the frozen base put the step over a 15.75 GiB chip), and blocks still compute their
    residual adds in fp32 inside."""

    def run(block, stacked, hidden, ctx):
        def body(h, layer):
            base, lora = layer
            out = block.apply({"params": merged(base, lora, scale)}, h, ctx)
            return constrain(out.astype(h.dtype), HIDDEN_AXES), None

        body = jax.checkpoint(body) if checkpoint else body
        start = hidden.astype(carry_dtype or hidden.dtype)
        out, _ = jax.lax.scan(body, constrain(start, HIDDEN_AXES), (stacked["base"], stacked["lora"]))
        return out.astype(hidden.dtype)

    return run


def with_lora(params: Any, lora: Lora, group: str = "blocks") -> Any:
    """The model's params with its block stack paired with the LoRA, as `lora_blocks` reads them."""
    return {**params, group: {"base": params[group], "lora": lora}}
