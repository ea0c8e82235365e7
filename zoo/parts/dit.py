"""The contract every family's diffusion transformer follows, and the block runner.

A family transformer is split into three parts so that the runtime, not the family, decides how
the repeated blocks run (scanned resident weights, streamed offload chunks, tensor/sequence
parallel):

    hidden, ctx = model.embed(params, *inputs)        # patchify, time/text embeddings, RoPE tables
    for group in model.block_groups:                  # usually one: ("blocks", block)
        hidden = run_blocks(group.block, params[group.name], hidden, ctx)
        hidden = model.between_groups(group.name, hidden, ctx)
    out = model.head(params, hidden, ctx)             # final norm/modulation, unpatchify

`params[group]` holds every block of a group stacked on a leading layer axis (the spec's `stack`
op writes them that way); `group.block` is a single-block linen module whose params are one slice
of that stack. `place_resident` may hand the blocks over as a tuple of per-layer trees instead (one
device on CPU, where a scanned block reads its weights through a per-layer copy); `scan_blocks`
then loops. `ctx` is any pytree the blocks need besides the hidden state (timestep modulation,
text tokens, RoPE tables, masks); it is broadcast to every block. Families with two block kinds
(HunyuanVideo 1.0: dual-stream then single-stream) declare two groups.

`StackedTransformer` is the base a family DiT subclasses: it sets `embedder`, `block_groups` (or
`block`), `head_module`, the top-level module names `embed_modules` / `head_modules`, and
`dummy_inputs()`; the base derives `init_params`, `param_shapes` and `logical_specs` from them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol

import flax
import flax.linen as nn
import jax
from vidax.zoo.compute.runtime import platform, shapes_only
from vidax.zoo.compute.shape_memo import remembered
from vidax.zoo.compute.transfer import to_devices

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class BlockGroup:
    """One run of identical blocks: `params[name]` is their stack."""

    name: str
    block: nn.Module


class StackedDiT(Protocol):
    """`block` (one block kind), or `block_groups` and `between_groups` (several, run in order)."""

    def embed(self, params: Params, *inputs: Any) -> tuple[Any, Any]: ...

    def head(self, params: Params, hidden: Any, ctx: Any) -> jax.Array: ...


def scan_blocks(block: nn.Module, stacked: Params | tuple[Params, ...], hidden: jax.Array, ctx: Any) -> jax.Array:
    """Run `block` once per slice of `stacked` (leading axis = layer) with `lax.scan`, or once per
    tree of a tuple of per-layer trees (`place_resident` on CPU) with an unrolled loop.

    The scan compiles one block body whatever the depth; the loop compiles every block
    (`python -m bench compile`, tiny DiT at 40 layers: 0.66 s scanned, 4.5 s looped). Under a mesh
    (`runtime.use_mesh`) the hidden state `[B, S, D]` is kept split as ("batch", "seq", "act_embed")
    between blocks.
    """
    if isinstance(stacked, tuple):
        for layer_params in stacked:
            hidden = _constrain_hidden(block.apply({"params": layer_params}, hidden, ctx))
        return hidden
    if jax.tree.leaves(stacked)[0].shape[0] == 1:  # one layer (a CPU run's unit, `offload.place_layers`): no
        # scan, whose body would copy the layer's weights out of the stack first; the squeeze is a view
        one = jax.tree.map(lambda leaf: leaf.reshape(leaf.shape[1:]), stacked)
        return _constrain_hidden(block.apply({"params": one}, _constrain_hidden(hidden), ctx))

    def body(h, layer_params):
        return _constrain_hidden(block.apply({"params": layer_params}, h, ctx)), None

    hidden, _ = jax.lax.scan(body, _constrain_hidden(hidden), stacked)
    return hidden


def per_layer(model: StackedDiT, params: Params) -> Params:
    """`params` with each block group's stack split into a tuple of per-layer trees (views of a host
    tree's arrays: no copy until they are placed)."""
    split = dict(params)
    for group in block_groups(model):
        stack = params[group.name]
        depth = len(jax.tree.leaves(stack)[0])
        split[group.name] = tuple(jax.tree.map(lambda leaf, i=i: leaf[i], stack) for i in range(depth))
    return split


def place_resident(model: StackedDiT, params: Params) -> Params:
    """A whole DiT on the default device with one `device_put`. On CPU each block's weights get their
    own buffers: XLA's CPU dots cannot read a slice of the layer stack in place, so a scan copies
    every layer's weights on every call (Cosmos3-Nano, 2 layers at 244 tokens: 1.85 s scanned, 1.04 s
    per layer; `python -m bench cosmos3_dit`). Accelerators keep the stack (one compiled block body)."""
    if platform() == "cpu":
        params = per_layer(model, params)
    return to_devices(params)


def _constrain_hidden(hidden: Any) -> Any:
    """Token-major hidden states are sequence-split under sequence parallel (no-op without a mesh).

    The hidden state may also be a pytree (HunyuanVideo's dual stream); its blocks place it themselves.
    """
    if not isinstance(hidden, jax.Array) or hidden.ndim != 3:
        return hidden
    from vidax.zoo.compute.sharding import constrain  # sharding imports the runtime; keep dit.py light

    return constrain(hidden, ("batch", "seq", "act_embed"))


def block_groups(model: StackedDiT) -> tuple[BlockGroup, ...]:
    """The model's block groups; a DiT with one block kind may declare only `block`."""
    groups = getattr(model, "block_groups", None)
    return tuple(groups) if groups else (BlockGroup("blocks", model.block),)


def forward(model: StackedDiT, params: Params, *inputs: Any, run_blocks=scan_blocks) -> jax.Array:
    """Whole-model forward pass; `run_blocks(block, stacked, hidden, ctx)` is swapped for the
    offload runner when streaming."""
    hidden, ctx = model.embed(params, *inputs)
    for group in block_groups(model):
        hidden = run_blocks(group.block, params[group.name], hidden, ctx)
        if hasattr(model, "between_groups"):
            hidden = model.between_groups(group.name, hidden, ctx)
    return model.head(params, hidden, ctx)


def param_shapes(init_params: Callable[[jax.Array], Params]) -> dict[str, tuple[int, ...]]:
    """Flat `{"a/b/kernel": shape}` of a model's full tree from an abstract run of its `init_params`
    (nothing allocated): the translator's expected tree and the memory planner's sizes.

    Kept per process for a model whose config (`cfg` or `config`, a frozen dataclass) says what it is: a
    full-size VAE traces for seconds, and many registry models share one (every HunyuanVideo-1.5 variant,
    every Wan2.1), which `--plan` and the dry run size again and again."""
    owner = getattr(init_params, "__self__", None)
    config = getattr(owner, "cfg", getattr(owner, "config", None))
    key = (type(owner), init_params.__name__, config)
    try:
        cached = _SHAPES_BY_CONFIG.get(key) if config is not None else None
    except TypeError:  # an unhashable config: traced each time
        config = None
        cached = None
    if cached is None:
        def trace() -> dict[str, list[int]]:
            with shapes_only():
                tree = jax.eval_shape(lambda: init_params(jax.random.key(0)))
            return {path: list(leaf.shape) for path, leaf in flax.traverse_util.flatten_dict(tree, sep="/").items()}

        named = (f"{type(owner).__module__}.{type(owner).__qualname__}", init_params.__name__, config)
        shapes = remembered("param-shapes", named, trace) if config is not None else trace()
        cached = {path: tuple(shape) for path, shape in shapes.items()}
        if config is not None:
            _SHAPES_BY_CONFIG[key] = cached
    return dict(cached)


_SHAPES_BY_CONFIG: dict[tuple, dict[str, tuple[int, ...]]] = {}


_MEMORY_SIZES: dict[tuple, Any] = {}
_ABSTRACT_PARTS: dict[Any, tuple] = {}


class StackedTransformer:
    """Base of the family DiTs (the `StackedDiT` shape plus everything derived from its parts).

    A subclass sets in `__init__`: `self.cfg`, `self.embedder` (its params are the top-level
    modules named in `embed_modules`), `self.block` or `self.block_groups`, `self.head_module` (its
    params: `head_modules`); and defines `embed`, `head`, `head_inputs` and `dummy_inputs`.
    Instances are static arguments of jitted functions: equal configs compare equal.
    """

    embed_modules: tuple[str, ...] = ()
    head_modules: tuple[str, ...] = ()
    embedder: nn.Module
    head_module: nn.Module
    block: nn.Module

    @property
    def block_groups(self) -> tuple[BlockGroup, ...]:
        return (BlockGroup("blocks", self.block),)

    def num_blocks(self, group: str) -> int:
        """Depth of a block group (the config's layer count)."""
        return self.cfg.num_layers

    def _key(self) -> tuple:
        return (type(self), self.cfg, *(jax.numpy.dtype(d).name for d in self._dtypes()))

    def _dtypes(self) -> tuple:
        return tuple(getattr(self, name) for name in ("dtype", "residual_dtype") if hasattr(self, name))

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, StackedTransformer) and self._key() == other._key()

    # --- the parts ---------------------------------------------------------------------------

    @staticmethod
    def subtree(params: Params, names: tuple[str, ...]) -> Params:
        """The top-level modules `names` of a full tree (those present)."""
        return {name: params[name] for name in names if name in params}

    def between_groups(self, name: str, hidden: Any, ctx: Any) -> Any:
        """What happens to the hidden state after block group `name` (default: nothing)."""
        return hidden

    def head_inputs(self, hidden: Any, ctx: Any) -> tuple:
        """The arguments `head_module` is called with (for `init`)."""
        raise NotImplementedError

    def dummy_inputs(self, batch: int = 1) -> tuple:
        """Smallest valid `embed` inputs (one patch per axis) for `init` / `eval_shape`."""
        raise NotImplementedError

    def __call__(self, params: Params, *inputs: Any, run_blocks=scan_blocks) -> jax.Array:
        return forward(self, params, *inputs, run_blocks=run_blocks)

    # --- derived -----------------------------------------------------------------------------

    def _group_inputs(self, params: Params, inputs: tuple):
        """`([(hidden, ctx) entering each block group], (hidden, ctx) entering the head)`."""
        hidden, ctx = self.embed(params, *inputs)
        entering = []
        for group in self.block_groups:
            entering.append((hidden, ctx))
            hidden = self.between_groups(group.name, hidden, ctx)
        return entering, (hidden, ctx)

    def init_params(self, rng: jax.Array) -> Params:
        """Random parameters of the full tree (blocks stacked), for shapes, benchmarks and tests."""
        inputs = self.dummy_inputs()
        k_embed, k_blocks, k_head = jax.random.split(rng, 3)
        params = dict(nn.unbox(self.embedder.init(k_embed, *inputs)["params"]))
        entering, last = self._group_inputs(params, inputs)
        groups = self.block_groups
        for group, (hidden, ctx), key in zip(groups, entering, jax.random.split(k_blocks, len(groups))):
            keys = jax.random.split(key, self.num_blocks(group.name))
            init = lambda k, b=group.block, h=hidden, c=ctx: nn.unbox(b.init(k, h, c)["params"])  # noqa: E731
            params[group.name] = jax.vmap(init)(keys)
        params.update(nn.unbox(self.head_module.init(k_head, *self.head_inputs(*last))["params"]))
        return params

    def _abstract_parts(self) -> tuple[Params, dict[str, Params], Params]:
        """One abstract init of the embedder, one block of each group and the head (boxed: each leaf's shape and
        logical names), which `param_shapes` and `logical_specs` both read. Kept per config: a full-size model
        traces for seconds, and the planner, the translator and the dry run each ask."""
        if self not in _ABSTRACT_PARTS:
            with shapes_only():  # traced, never run: a shape question starts no backend
                inputs = jax.eval_shape(self.dummy_inputs)
                key = jax.eval_shape(lambda: jax.random.key(0))
                embed = jax.eval_shape(self.embedder.init, key, *inputs)["params"]
                entering, last = jax.eval_shape(self._group_inputs, nn.unbox(embed), inputs)
                blocks = {group.name: jax.eval_shape(group.block.init, key, hidden, ctx)["params"]
                          for group, (hidden, ctx) in zip(self.block_groups, entering)}
                head = jax.eval_shape(self.head_module.init, key, *self.head_inputs(*last))["params"]
            _ABSTRACT_PARTS[self] = (embed, blocks, head)
        return _ABSTRACT_PARTS[self]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Flat `{"a/b/kernel": shape}` of the full tree (what `init_params` makes, blocks stacked): the
        translator's expected tree. Kept on disk beside the compile cache too (`compute.shape_memo`)."""
        def traced() -> dict[str, list[int]]:
            embed, blocks, head = self._abstract_parts()
            tree = {**nn.unbox(embed), **nn.unbox(head)}
            for name, block in blocks.items():
                depth = self.num_blocks(name)
                tree[name] = jax.tree.map(lambda leaf, d=depth: jax.ShapeDtypeStruct((d, *leaf.shape), leaf.dtype),
                                          nn.unbox(block))
            tree = jax.tree.map(lambda leaf: leaf, tree)  # jax's key order, as `init_params`'s tree comes out
            return {path: list(leaf.shape) for path, leaf in flax.traverse_util.flatten_dict(tree, sep="/").items()}

        cls, *rest = self._key()
        shapes = remembered("dit-param-shapes", (f"{cls.__module__}.{cls.__qualname__}", *rest), traced)
        return {path: tuple(shape) for path, shape in shapes.items()}

    def tensor_whole_paths(self) -> frozenset[str]:
        """Flat paths of the params tensor parallel keeps whole on every device: their logical spec names no
        axis the DiT rules map to the tensor axis (an adaLN modulation's `[dim, 6 x dim]` kernel)."""
        from vidax.zoo.compute.mesh import TENSOR
        from vidax.zoo.compute.sharding import TRANSFORMER_RULES

        split = {name for name, axis in TRANSFORMER_RULES if axis == TENSOR}
        specs = flax.traverse_util.flatten_dict(self.logical_specs(), sep="/")
        return frozenset(path for path, spec in specs.items() if not split & set(spec or ()))

    def memory_sizes(self, **widths: Any) -> Any:
        """The planner's `DiTSizes` of this transformer (`planner.dit_sizes` over its param shapes, block groups
        and TP-whole params; `widths`: dim, ffn_dim, heads, text_dim). Kept per config and widths: tracing a
        full-size init takes seconds, and `--plan` and the dry run ask for the same sizes again."""
        from vidax.zoo.compute.planner import DiTSizes, dit_sizes

        key = (self, tuple(sorted(widths.items())))
        if key not in _MEMORY_SIZES:
            def sizes() -> dict:
                groups = tuple(group.name for group in self.block_groups)
                return dataclasses.asdict(dit_sizes(self.param_shapes(), groups=groups,
                                                    whole_under_tp=self.tensor_whole_paths(), **widths))

            cls, *rest = self._key()
            named = (f"{cls.__module__}.{cls.__qualname__}", *rest, key[1])
            _MEMORY_SIZES[key] = DiTSizes(**remembered("dit-sizes", named, sizes))  # on disk too: `shape_memo`
        return _MEMORY_SIZES[key]

    def logical_specs(self) -> Params:
        """Logical PartitionSpecs of the full tree (block groups with their leading "layers" axis)."""
        from vidax.zoo.compute.sharding import stack_specs

        embed, blocks, head = self._abstract_parts()
        specs = dict(nn.get_partition_spec(embed))
        specs.update({name: stack_specs(block) for name, block in blocks.items()})
        specs.update(nn.get_partition_spec(head))
        return specs
