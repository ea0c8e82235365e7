"""Real size without weights: every stage of a registry model compiled on abstract arrays.

`dry_run(family, options, devices, device_bytes)` builds the stages a generation runs from the
registry's configs alone — the text encoder, the DiT step under the mesh (and layout) the run would
use, the VAE decode unit — with `jax.ShapeDtypeStruct` weights carrying the shardings placement would
give them, lowers and compiles each (`jax.jit(...).lower(...).compile()`), and reports per stage what
XLA's buffer assignment says one device holds (arguments, outputs, temporaries), the memory planner's
prediction beside it, the compile time and the FLOPs XLA counts. Nothing is downloaded, no weight is
allocated: compiling is all it does.

What each family contributes is data in `FAMILY_STAGES` (how to build its DiT at a given depth, the
condition its predictor reads, its VAE decode unit, its text encoder). A family without an entry is
refused with one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from vidax.zoo.plan import dry_run_cache
from vidax.zoo.compute.runtime import encoder_runs_layer_by_layer, platform, runs_layer_by_layer, xla_only_options
from vidax.zoo.plan.dry_run_units import (  # noqa: F401 (re-exported: the tests and the bench use them from here)
    DecodeUnit,
    abstract,
    cogvideox_text,
    cogvideox_vae,
    cosmos_text,
    cosmos_vae,
    hunyuan15_text,
    hunyuan15_vae,
    hunyuan_text,
    hunyuan_vae,
    ltx2_text,
    ltx2_vae,
    ltx_text,
    ltx_vae,
    per_device_bytes,
    stage_units,
    tile_unit,
    wan_text,
    wan_vae,
    wan_vae_decode_units,
)
from vidax.zoo.errors import PipelineError


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """One compiled stage: XLA's bytes per device, the planner's prediction, compile time, FLOPs."""

    stage: str
    argument: int
    output: int
    temp: int
    alias: int  # outputs that reuse a donated argument's buffer (counted once)
    planned: int | None
    compile_seconds: float
    flops: float | None
    loaded: bool = False  # the executable came serialized from an earlier process (`dry_run_cache`): no compile

    @property
    def total(self) -> int:
        return self.argument + self.output + self.temp - self.alias

    @property
    def ratio(self) -> float | None:
        return None if self.planned is None or not self.total else self.planned / self.total

    @property
    def kind(self) -> str:
        """The stage this unit belongs to: "text encoder", "dit" or "vae decode" (a stage may run as several
        compiled units: its peak is the largest)."""
        return next((k for k in ("text encoder", "vae decode") if self.stage.startswith(k)), "dit")


@dataclasses.dataclass(frozen=True)
class DryRun:
    """The stages of one dry run, the layout they were compiled for, and the devices' memory."""

    model: str
    size: str
    layout: Any  # planner.Layout
    devices: int
    device_bytes: int
    stages: tuple[StageMemory, ...]

    @property
    def fits(self) -> bool:
        return all(stage.total <= self.device_bytes for stage in self.stages)

    def peak(self, kind: str) -> StageMemory:
        """The largest compiled unit of a stage ("text encoder", "dit", "vae decode"): what the planner's
        figure for that stage predicts."""
        return max((s for s in self.stages if s.kind == kind), key=lambda s: s.total)


def compile_stage(stage: str, fn: Callable, args: tuple, *, planned: int | None = None,
                  donate: tuple[int, ...] = (), static: tuple[int, ...] = (), keep_unused: bool = False,
                  compiler_options: dict[str, str] | None = None) -> StageMemory:
    """Lower and compile `fn(*args)` (abstract args) and read XLA's memory and cost analyses.

    `keep_unused`: count arguments the computation does not read (jit drops them by default; a VAE
    decode passed the whole loaded tree still holds its encoder's weights on the device)."""
    start = time.perf_counter()
    key = dry_run_cache.stage_key(stage, args, donate=donate, static=static, keep_unused=keep_unused,
                                  options=compiler_options)
    compiled = dry_run_cache.load(key)  # a serialized executable of this very stage: no tracing, no lowering
    loaded = compiled is not None
    if loaded:
        figures = dry_run_cache.Figures.of(compiled)
    else:
        jitted = jax.jit(fn, donate_argnums=donate, static_argnums=static, keep_unused=keep_unused,
                         compiler_options=compiler_options)
        lowered = jitted.lower(*args)
        book_key = dry_run_cache.book_key(lowered, compiler_options)
        figures = dry_run_cache.figures_of(book_key)  # this very program compiled before (a `FigureBook`)
        if figures is None:
            compiled = lowered.compile()
            dry_run_cache.store(key, compiled)
            figures = dry_run_cache.Figures.of(compiled)
            dry_run_cache.remember(book_key, figures)
    seconds = time.perf_counter() - start
    return StageMemory(stage, figures.argument, figures.output, figures.temp, figures.alias, planned, seconds,
                       figures.flops, loaded)


# --- the DiT step -------------------------------------------------------------------------------


def dit_params(dit: Any, dtype: Any, mesh: Any, rules: Any, device: Any = None, *, stacked: bool = False) -> Any:
    """The DiT's parameters as abstract arrays, sharded as `sharding.place_model` would place them
    (one device: each layer its own tree on CPU, as `dit.place_resident` does)."""
    from vidax.zoo.parts.dit import block_groups
    from vidax.zoo.compute.sharding import mesh_shardings

    shapes = jax.eval_shape(lambda: dit.init_params(jax.random.key(0)))
    if mesh is not None:
        return abstract(shapes, mesh_shardings(dit.logical_specs(), rules, mesh), dtype)
    device = device or jax.devices()[0]
    params = abstract(shapes, SingleDeviceSharding(device), dtype)
    if device.platform != "cpu" or stacked:
        return params
    for group in block_groups(dit):
        stack = params[group.name]
        depth = jax.tree.leaves(stack)[0].shape[0]
        layer = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype, sharding=s.sharding), stack)
        params[group.name] = (layer,) * depth
    return params


def dit_step(predict: Callable, dit: Any) -> Callable:
    """One sampling step's prediction with the whole DiT resident (what `denoise` compiles per step)."""
    from vidax.zoo.parts.dit import forward

    def step(params, latents, timestep, cond, knobs):
        return predict(partial(forward, dit, params), latents, timestep, cond, knobs)

    return step


def replicated(mesh: Any, device: Any = None) -> jax.sharding.Sharding:
    """How `denoise` places the latents and the condition: whole on every device of the mesh."""
    if mesh is None:
        return SingleDeviceSharding(device or jax.devices()[0])
    return NamedSharding(mesh, PartitionSpec())


def step_args(family: Any, s: Any, dit: Any, dtype: Any, mesh: Any, cond: Any, device: Any = None, *,
              stacked: bool = False) -> tuple[Callable, tuple]:
    """The family's predictor for step 0 and the step's abstract arguments `(params, latents, t, cond, knobs)`."""
    inputs = replicated(mesh, device)
    latents = jax.ShapeDtypeStruct(family.latent_shape(s), jnp.float32, sharding=inputs)
    timestep = jax.ShapeDtypeStruct((), jnp.float32, sharding=inputs)
    params = dit_params(dit, dtype, mesh if mesh is not None else None, family.transformer_rules, device,
                        stacked=stacked)
    step = stages_of(family).step
    if step is not None:  # a family whose passes build their own predictor (LTX-Video)
        predict, shape, knobs = step(family, s, dit)
        latents = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=inputs)
        return predict, (params, latents, timestep, abstract(cond, inputs), abstract(knobs, inputs))
    knobs = abstract(family.step_knobs(s, family.stepper(s, latents.shape), 0, 0), inputs)
    return family.predictor(s, 0, dit, 0), (params, latents, timestep, abstract(cond, inputs), knobs)


def _on(mesh: Any, rules: Any):
    from vidax.zoo.compute.runtime import use_mesh

    return contextlib.nullcontext() if mesh is None else use_mesh(mesh, rules)


def compile_dit_step(family: Any, s: Any, dit: Any, dtype: Any, mesh: Any, cond: Any,
                     planned: int | None, device: Any = None) -> StageMemory:
    """The DiT step of `family` at settings `s` on `mesh` (None: on `device`, default the first)."""
    predict, args = step_args(family, s, dit, dtype, mesh, cond, device)
    with _on(mesh, family.transformer_rules):
        return compile_stage("dit step", dit_step(predict, dit), args, planned=planned)


def compile_offloaded_dit(family: Any, s: Any, dit: Any, dtype: Any, mesh: Any, cond: Any, chunk: int,
                          planned: int | None, device: Any = None, *, layered: bool = False) -> StageMemory:
    """`--offload-chunk`: the compiled chunk of `chunk` blocks (`offload.StreamedDiT`'s unit, hidden state
    donated), plus what stays on the device beside it: the embed and head weights and the next chunk, whose
    transfer is issued before this chunk's compute (at a cut depth, the blocks left after this chunk, at most a
    chunk: the planner's `min(depth, 2 x chunk)`). The hidden state and context are the embed's, traced, with the
    shardings the embed gives them under a mesh (every stream of a multi-stream DiT split as between blocks).

    `layered`: a CPU run's DiT (`offload.place_layers`): one block per program, every block's weights resident
    beside it."""
    from vidax.zoo.parts.dit import block_groups, forward, scan_blocks

    rules = family.transformer_rules
    predict, (params, *rest) = step_args(family, s, dit, dtype, mesh, cond, device, stacked=True)
    entering = []

    def capture(weights, *inputs):  # the DiT's inputs as the predictor builds them (CFG batch and all)
        entering.append(dit.embed(weights, *inputs))
        return forward(dit, weights, *inputs)

    def embedded(weights, *a):
        predict(partial(capture, weights), *a)
        return entering[0]

    with _on(mesh, rules):
        if mesh is None:
            hidden, ctx = abstract(jax.eval_shape(embedded, params, *rest), replicated(mesh, device))
        else:  # every stream split as the embed leaves it (the blocks' `constrain`: video and audio alike)
            hidden, ctx = embedded_as_placed(embedded, params, rest)
    group = block_groups(dit)[0]  # the first group's chunks (one group in the families the dry run builds)
    blocks = jax.tree.map(lambda x: jax.ShapeDtypeStruct((min(chunk, x.shape[0]), *x.shape[1:]), x.dtype,
                                                         sharding=x.sharding), params[group.name])
    unit = lambda b, h, c: scan_blocks(group.block, b, h, c)  # noqa: E731
    name = "dit step (one block)" if layered else f"dit chunk (offload {chunk})"
    with _on(mesh, rules):
        report = compile_stage(name, unit, (blocks, hidden, ctx), planned=planned, donate=(1,))
    if layered:  # every weight on the device, the compiled block's counted in its arguments
        return dataclasses.replace(report, argument=report.argument + per_device_bytes(params)
                                   - per_device_bytes(blocks))
    resident = {k: v for k, v in params.items() if k not in {g.name for g in block_groups(dit)}}
    depth = jax.tree.leaves(params[group.name])[0].shape[0]
    compiled = min(chunk, depth)
    following = min(chunk, depth - compiled)  # the next chunk's blocks (none when one chunk holds every block)
    beside = per_device_bytes(resident) + per_device_bytes(blocks) * following // compiled  # embed/head, next chunk
    return dataclasses.replace(report, argument=report.argument + beside)


def embedded_as_placed(embedded: Callable, params: Any, rest: list) -> Any:
    """The embed's outputs (hidden state, context) as abstract arrays with the shardings XLA gives them: the
    step compiled up to the embed (the rest of the forward is dead code there)."""
    compiled = jax.jit(embedded).lower(params, *rest).compile()
    shapes = jax.eval_shape(embedded, params, *rest)
    return jax.tree.map(lambda leaf, sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding),
                        shapes, compiled.output_shardings)


def compile_text_encoder(fn: Callable, args: tuple, static: tuple, beside: int, planned: int | None,
                         device: Any) -> list[StageMemory]:
    """The text encoder as it runs: a large one on CPU, or one of fp32 weights on an accelerator, as a host loop
    over one compiled layer per stack (`encoders.by_layer`), each unit a row whose arguments count every weight
    of the towers (they stay on the device while the loop runs); else one program."""
    from vidax.zoo.parts.encoders.common import recording_layer_units

    def whole() -> list[StageMemory]:
        report = compile_stage("text encoder", fn, args, planned=planned, static=static)
        return [dataclasses.replace(report, argument=report.argument + beside)]

    if not encoder_runs_layer_by_layer([a for i, a in enumerate(args) if i not in static]):  # as `by_layer` does
        return whole()
    dynamic = [i for i in range(len(args)) if i not in static]

    def traced(*values):  # the static arguments in their places, the others traced
        merged = list(args)
        for i, value in zip(dynamic, values):
            merged[i] = value
        return fn(*merged)

    with recording_layer_units() as units:
        jax.eval_shape(traced, *(args[i] for i in dynamic))
    if not units:  # an encoder whose layers are not a stack runs as one program on the CPU too
        return whole()
    weights = per_device_bytes([a for i, a in enumerate(args) if i not in static]) + beside  # every layer resident
    reports = []
    for index, unit in enumerate(units):
        on_device = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(
            device)), unit.args)
        name = "text encoder (layer)" if len(units) == 1 else f"text encoder (layer of stack {index + 1})"
        report = compile_stage(name, unit.fn, on_device, planned=planned)
        layer = per_device_bytes(on_device[0])
        inputs = report.argument - layer  # the carry and what every layer reads
        reports.append(dataclasses.replace(report, argument=weights + inputs))
    return reports


def _weight_bytes(dit: Any, dtype: Any) -> int:
    """The DiT's weights in `dtype` (what the run places)."""
    import math

    shapes = jax.eval_shape(lambda: dit.init_params(jax.random.key(0)))
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes)) * jnp.dtype(dtype).itemsize


def compile_decode_unit(unit: Any, planned: int | None) -> StageMemory:
    """A VAE decode unit compiled; what the device holds beside it counted with its arguments."""
    report = compile_stage(unit.name, unit.fn, unit.args, planned=planned, donate=unit.donate, static=unit.static,
                           keep_unused=True, compiler_options=xla_only_options() if unit.xla_only else None)
    return dataclasses.replace(report, argument=report.argument + unit.beside)


# --- families -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FamilyStages:
    """What a family gives the dry run, each a function of `(family, s, ...)`:

    dit: `(family, s, depth, dtype) -> DiT module` (depth None: the config's).
    cond: `(family, s, batch) -> the predictor's condition` as ShapeDtypeStructs.
    vae_decode: `(family, s, dtype, device) -> [DecodeUnit]` (or `(name, fn, args, donate, static)` tuples),
      the decode's compiled units.
    text_encoder: `(family, s, dtype, device) -> (fn, abstract args, static[, bytes held beside it])` (None: no
      config at hand), or None.
    step: `(family, s, dit) -> (predictor, latents shape, knobs)` for a family whose predictor is not
      `family.predictor` over `family.latent_shape` (None: those).
    """

    dit: Callable
    cond: Callable
    vae_decode: Callable
    text_encoder: Callable | None = None
    step: Callable | None = None


def _wan_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.wan.transformer import WanTransformer

    if hasattr(family, "dry_run_dit"):  # Wan VACE builds its own (vidax.zoo.wan.vace_family)
        return family.dry_run_dit(s, depth, dtype)

    return WanTransformer(_depth(family.model.transformer, depth), dtype=jnp.dtype(dtype))


def _wan_cond(family: Any, s: Any, batch: int) -> Any:
    from vidax.zoo.wan.family import WanCondition
    from vidax.zoo.wan.text import MAX_SEQUENCE_LENGTH

    if hasattr(family, "dry_run_cond"):  # Wan VACE's condition (vidax.zoo.wan.vace_family)
        return family.dry_run_cond(s, batch)
    m = family.model
    f32 = jnp.float32
    text = jax.ShapeDtypeStruct((batch, MAX_SEQUENCE_LENGTH, m.transformer.text_dim), f32)
    image = None
    if m.image_encoder is not None:
        rows = 2 if m.first_last_frame else 1
        image = jax.ShapeDtypeStruct((rows, 257, m.image_encoder.hidden_size), f32)
    _, z, frames, h, w = family.latent_shape(s)
    latents = first = None
    if m.concat_condition:
        latents = jax.ShapeDtypeStruct((1, 4 + z, frames, h, w), f32)
    return WanCondition(text, image, latents, first)


def _depth(cfg: Any, depth: int | None, field: str = "num_layers") -> Any:
    return cfg if depth is None else dataclasses.replace(cfg, **{field: depth})


def _cogvideox_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.cogvideox.transformer import CogVideoXTransformer

    return CogVideoXTransformer(_depth(family.dit_config, depth), dtype=jnp.dtype(dtype), residual_dtype=jnp.float32)


def _cogvideox_cond(family: Any, s: Any, batch: int) -> Any:
    from vidax.zoo.cogvideox.family import CogVideoXCondition

    text = jax.ShapeDtypeStruct((batch, s.max_sequence_length, family.dit_config.text_embed_dim), jnp.float32)
    image = jax.ShapeDtypeStruct(family.latent_shape(s), jnp.float32) if family.i2v else None
    return CogVideoXCondition(text, image)


def _hunyuan15_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer

    return HunyuanVideo15Transformer(_depth(family.dit_config, depth), jnp.dtype(dtype).name)


def _hunyuan15_cond(family: Any, s: Any, batch: int) -> Any:
    """Text-to-video's condition (the predictor makes the zero image condition itself); I2V's image part."""
    from vidax.zoo.hunyuan_video15.family import IMAGE_TOKENS, Condition, ImageCondition
    from vidax.zoo.hunyuan_video15.text import BYT5_MAX_LENGTH, MLLM_MAX_LENGTH, TextFeatures

    cfg, f32 = family.dit_config, jnp.float32
    text = TextFeatures(jax.ShapeDtypeStruct((batch, MLLM_MAX_LENGTH, cfg.text_embed_dim), f32),
                        jax.ShapeDtypeStruct((batch, MLLM_MAX_LENGTH), jnp.bool_),
                        jax.ShapeDtypeStruct((batch, BYT5_MAX_LENGTH, cfg.text_embed_2_dim), f32),
                        jax.ShapeDtypeStruct((batch, BYT5_MAX_LENGTH), jnp.bool_))
    image = None
    if family.i2v:
        _, c, *grid = family.latent_shape(s)
        image = ImageCondition(jax.ShapeDtypeStruct((1, cfg.in_channels - c, *grid), f32),
                               jax.ShapeDtypeStruct((1, IMAGE_TOKENS, cfg.image_embed_dim), f32))
    return Condition(text, image)


def _cosmos3_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.cosmos3.transformer import Cosmos3Transformer

    return Cosmos3Transformer(_depth(family.dit_config, depth, "num_hidden_layers"), dtype=jnp.dtype(dtype))


def _cosmos3_cond(family: Any, s: Any, batch: int) -> Any:
    """The planned prompt length (`--plan`'s) joined with the video tokens; text-to-video."""
    from vidax.zoo.cosmos3.family import PLANNED_PROMPT_TOKENS, Cosmos3Condition

    cfg = family.dit_config
    prompt, video = PLANNED_PROMPT_TOKENS, math.prod(family.grid(s))
    rope = jax.ShapeDtypeStruct((batch, prompt + video, cfg.head_dim), jnp.float32)
    return Cosmos3Condition(jax.ShapeDtypeStruct((batch, prompt), jnp.int32),
                            jax.ShapeDtypeStruct((batch, prompt), jnp.bool_), rope, rope,
                            jax.ShapeDtypeStruct((batch, family.latent_shape(s)[2]), jnp.float32), None)


def _cosmos_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.cosmos.transformer import CosmosTransformer

    return CosmosTransformer(_depth(family.dit_config, depth), dtype=jnp.dtype(dtype))


def _cosmos_cond(family: Any, s: Any, batch: int) -> Any:
    """Text-to-world: the conditioning latents are zeros of the latents' shape, no frame marked."""
    from vidax.zoo.cosmos.family import CosmosCondition

    shape, f32 = family.latent_shape(s), jnp.float32
    text = jax.ShapeDtypeStruct((batch, s.max_sequence_length, family.dit_config.text_in_dim), f32)
    latents = jax.ShapeDtypeStruct(shape, f32)
    return CosmosCondition(text, latents, jax.ShapeDtypeStruct((1, 1, shape[2], 1, 1), f32), latents)


def _hunyuan_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    """HunyuanVideo 1.0: `depth` cuts both block groups (dual-stream, then single-stream)."""
    from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer

    cfg = _depth(_depth(family.dit_config, depth), depth, "num_single_layers")
    return HunyuanVideoTransformer(cfg, jnp.dtype(dtype).name)


def _hunyuan_cond(family: Any, s: Any, batch: int) -> Any:
    """The prompt's tokens as the planner counts them (`hunyuan_video.family.text_tokens`); image-to-video
    (token_replace) adds the first frame's latent, which replaces latent frame 0 at every step."""
    from vidax.zoo.hunyuan_video.family import Condition, text_tokens

    cfg, f32 = family.dit_config, jnp.float32
    tokens = text_tokens(s, family.i2v)
    image = None
    if family.i2v:
        channels, _, height, width = family.latent_shape(s)[1:]
        image = jax.ShapeDtypeStruct((1, channels, 1, height, width), f32)
    return Condition(jax.ShapeDtypeStruct((batch, tokens, cfg.text_embed_dim), f32),
                     jax.ShapeDtypeStruct((batch, tokens), jnp.bool_),
                     jax.ShapeDtypeStruct((batch, cfg.pooled_projection_dim), f32), image)


def _ltx_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    from vidax.zoo.ltx_video.transformer import LTXVideoTransformer

    return LTXVideoTransformer(_depth(family.dit_config, depth), dtype=jnp.dtype(dtype))


def _ltx_first_pass(family: Any, s: Any) -> tuple[Any, list]:
    """The largest pass (the planner's tokens) and the step guides of every pass, the step with the most
    branch rows (CFG, and STG with blocks to skip: the planner's batch, the widest of any pass) first."""
    passes = family._passes(s)
    largest = max(passes, key=lambda p: p.height * p.width)
    guides = [guide for p in passes for guide in family._guides(s, p)]
    rows = lambda g: (g.guidance > 1.0) + (g.stg > 0.0 and bool(g.skip))  # noqa: E731
    return largest, sorted(guides, key=rows, reverse=True)


def _ltx_tokens(family: Any, s: Any) -> int:
    largest, _ = _ltx_first_pass(family, s)
    return math.prod(family._grid(family.padding(s).frames, largest.height, largest.width))


def _ltx_cond(family: Any, s: Any, batch: int) -> Any:
    """Text-to-video at the largest pass: the prompt rows (and the negative prompt's under CFG), RoPE tables."""
    from vidax.zoo.ltx_video.family import TEXT
    from vidax.zoo.ltx_video.predict import LTXCondition

    cfg, f32 = family.dit_config, jnp.float32
    _, guides = _ltx_first_pass(family, s)
    rows = 2 if guides[0].guidance > 1.0 else 1
    text_tokens = s.max_sequence_length or TEXT[family.reference(s)][0]
    rope = jax.ShapeDtypeStruct((1, _ltx_tokens(family, s), cfg.inner_dim), f32)
    return LTXCondition(jax.ShapeDtypeStruct((rows, text_tokens, cfg.caption_channels), f32),
                        jax.ShapeDtypeStruct((rows, text_tokens), jnp.bool_), rope, rope, None, None)


def _ltx_step(family: Any, s: Any, dit: Any) -> tuple[Any, tuple, dict]:
    """The widest step's branch set of the largest pass (CFG, STG rows as its guides say), packed tokens."""
    from types import SimpleNamespace

    _, guides = _ltx_first_pass(family, s)
    plan = SimpleNamespace(guides=tuple(guides), reference=family.reference(s), noisy=False)
    knobs = {"scale": jnp.float32(0), "stg": jnp.float32(0), "rescale": jnp.float32(0)}
    predict = family.pass_predictor(plan, 0, dit, 0)
    if predict.stg_row:  # the blocks STG skips, among those a cut depth keeps (the row's cost is the same)
        depth = dit.cfg.num_layers
        predict = dataclasses.replace(predict, skip=tuple(b for b in predict.skip if b < depth) or (0,))
    return predict, (1, _ltx_tokens(family, s), family.dit_config.in_channels), knobs


def _ltx2_dit(family: Any, s: Any, depth: int | None, dtype: Any) -> Any:
    """As `build_dit` builds it (STG's perturbation honoured)."""
    from vidax.zoo.ltx2.transformer import LTX2Transformer

    cfg = dataclasses.replace(_depth(family.model.transformer, depth), perturbed_attn=True)
    return LTX2Transformer(cfg, use_cross_timestep=s.use_cross_timestep, dtype=jnp.dtype(dtype))


def _ltx2_cond(family: Any, s: Any, batch: int) -> Any:
    """Text-to-video: the connectors' outputs for the prompt (and negative prompt) rows, the host-built RoPE."""
    from vidax.zoo.ltx2.family import Condition
    from vidax.zoo.ltx2.rope import default_dit_rope_shapes

    cfg, f32 = family.model.transformer, jnp.float32
    width = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
    rows, tokens = 2 if s.guided else 1, s.max_sequence_length
    _, _, f, h, w = family.latent_shape(s)
    rope = default_dit_rope_shapes(cfg, f, h, w, family.audio_shape(s)[2], fps=s.conditioning_fps)
    return Condition(jax.ShapeDtypeStruct((rows, tokens, width[0]), f32),
                     jax.ShapeDtypeStruct((rows, tokens, width[1]), f32),
                     jax.ShapeDtypeStruct((rows, tokens), jnp.bool_), rope)


def _ltx2_step(family: Any, s: Any, dit: Any) -> tuple[Any, tuple, dict]:
    """The sampler's state: packed video and audio tokens joined (`initial_latents`)."""
    video, audio = family.latent_shape(s), family.audio_shape(s)
    state = (1, math.prod(video[1:]) + math.prod(audio[1:]))
    predict = family.predictor(s, 0, dit, 0)
    depth = dit.cfg.num_layers  # STG's blocks among those a cut depth keeps (the perturbed row costs the same)
    predict = dataclasses.replace(predict, stg_blocks=tuple(b for b in predict.stg_blocks if b < depth) or (0,))
    return predict, state, family.step_knobs(s, family.stepper(s, state), 0, 0)


FAMILY_STAGES: dict[str, FamilyStages] = {
    "wan": FamilyStages(_wan_dit, _wan_cond, wan_vae, wan_text),
    "cogvideox": FamilyStages(_cogvideox_dit, _cogvideox_cond, cogvideox_vae, cogvideox_text),
    "hunyuan_video15": FamilyStages(_hunyuan15_dit, _hunyuan15_cond, hunyuan15_vae, hunyuan15_text),
    "cosmos3": FamilyStages(_cosmos3_dit, _cosmos3_cond, cosmos_vae),
    "cosmos": FamilyStages(_cosmos_dit, _cosmos_cond, cosmos_vae, cosmos_text),
    "hunyuan_video": FamilyStages(_hunyuan_dit, _hunyuan_cond, hunyuan_vae, hunyuan_text),
    "ltx_video": FamilyStages(_ltx_dit, _ltx_cond, ltx_vae, ltx_text, step=_ltx_step),
    "ltx2": FamilyStages(_ltx2_dit, _ltx2_cond, ltx2_vae, ltx2_text, step=_ltx2_step),
}


def stages_of(family: Any) -> FamilyStages:
    stages = FAMILY_STAGES.get(family.entry.family)
    if stages is None:
        have = ", ".join(sorted(FAMILY_STAGES))
        raise PipelineError(f"{family.name}: --dry-run does not build the {family.entry.family} family's stages yet "
                            f"(it does: {have})")
    return stages


# --- the planner at the compiled depth ----------------------------------------------------------


def job_at_depth(job: Any, dit: Any, depth: int | None) -> Any:
    """The planner's job with the DiT's sizes read off the (cut) module that is compiled."""
    if depth is None:
        return job
    d = job.dit
    sizes = dit.memory_sizes(dim=d.dim, ffn_dim=d.ffn_dim, heads=d.heads, text_dim=d.text_dim)
    return dataclasses.replace(job, dit=dataclasses.replace(sizes, partial_sums=d.partial_sums))


def planned_dit_bytes(job: Any, layout: Any) -> int:
    """The planner's per-device figure for one DiT step: resident weights plus one block's activations."""
    from vidax.zoo.compute.planner import predict

    prediction = predict(job, layout)
    return prediction.weights + prediction.activations


def planned_vae_bytes(job: Any) -> int:
    from vidax.zoo.compute.planner import predict, Layout

    return predict(job, Layout()).vae


def weight_dtype(options: Any) -> Any:
    """The DiT's weights dtype the run uses: float32 when asked, else bf16 (the specs' default)."""
    return jnp.float32 if options.dtype == "float32" else jnp.bfloat16


# --- the whole model ----------------------------------------------------------------------------


def dry_devices(count: int) -> list:
    """`count` devices to compile for: the default backend's when it has that many, else the host's (fake
    CPU devices: `XLA_FLAGS=--xla_force_host_platform_device_count=N` before jax starts; `vidax-gen --dry-run
    --devices N` sets it)."""
    for backend in (None, "cpu"):
        found = jax.devices(backend)
        if len(found) >= count:
            return found[:count]
    raise PipelineError(f"--dry-run for {count} devices: this process has {jax.device_count()} "
                        f"{jax.default_backend()} device(s) and {len(jax.devices('cpu'))} host device(s); "
                        f"`vidax-gen MODEL --dry-run --devices {count}` starts with that many host devices")


def dry_run(family: Any, options: Any, layout: Any, devices: int, device_bytes: int, *,
            depth: int | None = None, stages: tuple[str, ...] = ("text", "dit", "vae"),
            targeted: list | None = None) -> DryRun:
    """Compile every stage of `family` for `options` under `layout` (a `planner.Layout`) on `devices`
    devices of `device_bytes` each (the DiT's mesh spans `layout.devices` of them; encoders and the VAE
    run on the first, as the pipelines run them).

    Args:
      depth: compile the DiT with this many blocks (tests: native sequence length, shallow model).
      stages: which of "text", "dit", "vae" to compile.
      targeted: abstract devices of chips this host does not have (`compute.target.compiling_for`), compiled
        for instead of the local backend's.
    """
    parts = stages_of(family)
    s = family.resolve_settings(options)
    context = repr((family.name, options, s, layout, devices, depth, platform(), targeted and targeted[0].device_kind))
    wanted = max(devices, layout.devices)
    if targeted and len(targeted) < wanted:
        raise PipelineError(f"the layout needs {wanted} devices; the target has {len(targeted)} (a larger topology: "
                            f"v5e:2x2 is 4 chips)")
    found = targeted[:wanted] if targeted else dry_devices(wanted)
    with dry_run_cache.run_context(context):
        stage_reports = _compile_stages(family, options, s, parts, layout, found, depth, stages)
    size = f"{s.width}x{s.height}, {s.frames} frames"
    return DryRun(family.name, size, layout, devices, device_bytes, stage_reports)


def _compile_stages(family: Any, options: Any, s: Any, parts: FamilyStages, layout: Any, found: list,
                    depth: int | None, stages: tuple[str, ...]) -> tuple[StageMemory, ...]:
    from vidax.zoo.compute.mesh import check_heads, make_mesh

    dtype = weight_dtype(options)
    dit = parts.dit(family, s, depth, dtype) if "dit" in stages else None
    job = job_at_depth(family.memory_job(options), dit, depth)
    first = found[0]
    reports = []
    text = None
    if "text" in stages and parts.text_encoder is not None:  # weights in the width the planner counts
        text_dtype = jnp.float32 if job.text_encoder_bytes == 4 else jnp.bfloat16
        text = parts.text_encoder(family, s, text_dtype, first)
    if text is not None:  # (fn, args, static[, bytes of other towers held beside it])
        fn, args, static, *beside = text
        planned = job.text_encoder_params * job.text_encoder_bytes
        reports.extend(compile_text_encoder(fn, args, static, sum(beside), planned, first))
    if "dit" in stages:
        check_heads(job.dit.heads, layout.tp, layout.sp)
        mesh = make_mesh(layout.dp, layout.tp, layout.sp, devices=found[: layout.devices])
        mesh = mesh if mesh.size > 1 else None
        cond = parts.cond(family, s, 2 if s.guided else 1)
        planned = planned_dit_bytes(job, layout)
        if layout.offload_chunk is None and mesh is None and runs_layer_by_layer(_weight_bytes(dit, dtype)):
            # one block per program, as `denoise.place_dit` runs a large DiT on a CPU
            reports.append(compile_offloaded_dit(family, s, dit, dtype, mesh, cond, 1, planned, first, layered=True))
        elif layout.offload_chunk is None:
            reports.append(compile_dit_step(family, s, dit, dtype, mesh, cond, planned, first))
        else:
            reports.append(compile_offloaded_dit(family, s, dit, dtype, mesh, cond, layout.offload_chunk, planned,
                                                 first))
    if "vae" in stages:
        for unit in parts.vae_decode(family, s, dtype, first):
            reports.append(compile_decode_unit(DecodeUnit(*unit), planned_vae_bytes(job)))
    return tuple(reports)
