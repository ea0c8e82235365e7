"""What each family compiles beside its DiT step under `--dry-run`: its VAE decode units and its text encoder,
as abstract arrays on one device (`vidax.zoo.plan.dry_run.FAMILY_STAGES` names them per family).

A VAE decode is a host loop over compiled units; each `DecodeUnit` carries the bytes the device holds beside it
while it runs (the VAE's weights it is not passed, outputs of earlier units not yet handed to the host), exact
from shapes. A text encoder is `(fn, abstract args, static[, bytes of other towers held beside it])`, or None
when the tower's config is not at hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding


# --- abstract arrays ----------------------------------------------------------------------------


def abstract(tree: Any, shardings: Any = None, dtype: Any = None) -> Any:
    """ShapeDtypeStructs of `tree`'s leaves (arrays or structs), with `shardings` (a tree or one sharding)."""
    leaves, treedef = jax.tree.flatten(tree)
    if shardings is None or isinstance(shardings, jax.sharding.Sharding):
        shards = [shardings] * len(leaves)
    else:
        shards = treedef.flatten_up_to(shardings)
    return treedef.unflatten([
        jax.ShapeDtypeStruct(leaf.shape, _dtype_of(leaf, dtype), sharding=sharding)
        for leaf, sharding in zip(leaves, shards)])


def _dtype_of(leaf: Any, dtype: Any) -> Any:
    """`dtype` for float leaves (the weights' dtype), the leaf's own otherwise."""
    if dtype is not None and jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.dtype(dtype)
    return leaf.dtype


def per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of an abstract tree (its shard of each leaf)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * leaf.dtype.itemsize
    return int(total)


def wan_vae_decode_units(config: Any, latent_shape: tuple[int, ...], device: Any = None) -> list[tuple]:
    """The Wan VAE's compiled decode units as `WanVAE.decode` runs them: each stage of the decoder
    (`wan_vae.decode_stages`) for the first latent frame, then for each next one with its part of the causal cache
    (donated): `[(name, fn, args, donate, static, beside, xla_only)]`, `beside` the bytes the device holds while the unit runs
    besides its arguments (the rest of the VAE's weights, the other units' caches, the frames decoded so far)."""
    from vidax.zoo.parts.wan_vae import WanVAE, _stage, decode_stages, stage_params

    vae = WanVAE(config)
    device = SingleDeviceSharding(device or jax.devices()[0])
    params = abstract(jax.eval_shape(lambda: vae.init_params(jax.random.key(0))), device)
    _, z, frames, h, w = latent_shape
    stages = decode_stages(config)
    units, caches = [], []
    x = jax.ShapeDtypeStruct((1, 1, h, w, z), jnp.float32, sharding=device)
    for stage in stages:  # the first chunk: no cache in; the cache each unit leaves
        part = stage_params(stage, params)
        units.append((stage, True, part, None, x))
        x, cache = jax.eval_shape(lambda p, v, st=stage: _stage(st, True, p, None, v), part, x)
        caches.append(abstract(cache, device))
        x = abstract(x, device)
    first_frames = x
    x = jax.ShapeDtypeStruct((1, 1, h, w, z), jnp.float32, sharding=device)
    for u, stage in enumerate(stages):
        part = stage_params(stage, params)
        units.append((stage, False, part, caches[u], x))
        x, _ = jax.eval_shape(lambda p, c, v, st=stage: _stage(st, False, p, c, v), part, caches[u], x)
        x = abstract(x, device)
    weights, all_caches = per_device_bytes(params), per_device_bytes(caches)
    # the frames decoded before the last chunk, held until they are joined
    earlier = per_device_bytes(first_frames) + per_device_bytes(x) * max(frames - 2, 0)
    out = []
    for index, (stage, first, part, cache, inputs) in enumerate(units):
        name = f"vae decode ({'first frame' if first else 'next frames'}, unit {index % len(stages) + 1})"
        others = weights - per_device_bytes(part) + all_caches - (0 if first else per_device_bytes(cache))
        if first:  # the caches of the units before this one exist already
            others = weights - per_device_bytes(part) + per_device_bytes(caches[:index])
        out.append((name, _stage, (stage, first, part, cache, inputs), () if first else (3,), (0, 1),
                    others + (0 if first else earlier), True))
    return out


class DecodeUnit(NamedTuple):
    """One compiled unit of a VAE decode: `fn(*args)` (abstract args; `static` positions hashable), the
    arguments it donates, and the bytes the device holds beside it while it runs (`beside`: the VAE's
    weights it is not passed, outputs of earlier units not yet handed to the host), exact from shapes."""

    name: str
    fn: Callable
    args: tuple
    donate: tuple[int, ...] = ()
    static: tuple[int, ...] = ()
    beside: int = 0
    xla_only: bool = False  # no Pallas kernel: compiled with `runtime.xla_only_options()`, as its caller does


def tile_unit(name: str, fn: Callable, head: tuple, plan: Any, batch: int, channels: int, params: Any,
              extra: tuple, device: Any, xla_only: bool = False) -> DecodeUnit:
    """A `vae_tiling` tile body, `fn(*head, plan.body, params, z, start, counts, *extra)` over the padded
    channels-last latents `z` (`head`: its leading static arguments). Beside it: the previous tile's output,
    which the host is blending while this one runs (`TilePlan.run` dispatches one tile ahead)."""
    z = jax.ShapeDtypeStruct((batch, *plan.padded, channels), jnp.float32, sharding=device)
    ints = jax.ShapeDtypeStruct((3,), jnp.int32, sharding=device)
    args = (*head, plan.body, params, z, ints, ints, *extra)
    static = tuple(range(len(head) + 1))
    out = jax.eval_shape(lambda *a: fn(*head, plan.body, *a), *args[len(static):])
    return DecodeUnit(name, fn, args, static=static, beside=per_device_bytes(out), xla_only=xla_only)


def wan_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[tuple]:
    return wan_vae_decode_units(family.model.vae, family.latent_shape(s), device)


def wan_text(family: Any, s: Any, dtype: Any, device: Any):
    from vidax.zoo.parts.encoders.t5 import T5EncoderModel
    from vidax.zoo.wan.family import UMT5_XXL
    from vidax.zoo.wan.text import MAX_SEQUENCE_LENGTH, _encode

    model = T5EncoderModel(family.model.text_encoder or UMT5_XXL, dtype=jnp.float32)
    device = SingleDeviceSharding(device)
    ids = jax.ShapeDtypeStruct((2 if s.guided else 1, MAX_SEQUENCE_LENGTH), jnp.int32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))
    return _encode.__wrapped__, (model, abstract(params, device, dtype), ids, ids), (0,)


def _t5_stage(config: Any, fn: Callable, rows: int, tokens: int, dtype: Any, device: Any, *, mask: bool):
    """A T5 encoder's forward over `rows` prompts of `tokens` (fp32 activations over `dtype` weights):
    `fn(model, params, ids[, mask])`, the model static."""
    from vidax.zoo.parts.encoders.t5 import T5EncoderModel

    model = T5EncoderModel(config, dtype=jnp.float32)
    device = SingleDeviceSharding(device)
    ids = jax.ShapeDtypeStruct((rows, tokens), jnp.int32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))
    return fn, (model, abstract(params, device, dtype), ids, *((ids,) if mask else ())), (0,)


def cogvideox_text(family: Any, s: Any, dtype: Any, device: Any):
    """T5-XXL over `max_sequence_length` tokens, unmasked (prompt and negative prompt)."""
    if family.t5_config is None:
        return None
    return _t5_stage(family.t5_config, _cogvideox_t5, 2 if s.guided else 1, s.max_sequence_length, dtype, device,
                     mask=False)


def _cogvideox_t5(model: Any, params: Any, ids: Any) -> Any:
    return model.apply(params, ids, None).last_hidden_state


def ltx_text(family: Any, s: Any, dtype: Any, device: Any):
    """T5-XXL over the family's prompt length, masked as the layouts that mask it (the mask costs nothing)."""
    from vidax.zoo.parts.encoders.t5 import T5Config
    from vidax.zoo.ltx_video.family import TEXT

    found = family._t5_json()
    if not found:
        return None
    rows = 2 if family.needs_negative(s) else 1
    tokens = s.max_sequence_length or TEXT[family.reference(s)][0]
    return _t5_stage(T5Config.from_hf_config(found), _ltx_t5, rows, tokens, dtype, device, mask=True)


def _ltx_t5(model: Any, params: Any, ids: Any, mask: Any) -> Any:
    return model.apply(params, ids, mask).last_hidden_state


def hunyuan_text(family: Any, s: Any, dtype: Any, device: Any):
    """HunyuanVideo 1.0 text-to-video: Llama's `hidden_states[-3]` over the template and the prompt (the planner's
    towers, counted resident together: CLIP-L's weights beside it); image-to-video: Llava's (`_hunyuan_llava`)."""
    from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
    from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
    from vidax.zoo.hunyuan_video import text as hv_text

    llm = family.read_config("text_encoder", *family._configs("text_encoder"))
    clip = family.read_config("text_encoder_2", *family._configs("text_encoder_2"))
    if llm is None or clip is None:
        return None
    if family.i2v:
        return _hunyuan_llava(family, s, llm, clip, dtype, device)
    model = DecoderTextModel(DecoderConfig.from_hf_config(llm.get("text_config", llm)))
    device = SingleDeviceSharding(device)
    rows = 2 if s.guided else 1
    ids = jax.ShapeDtypeStruct((rows, s.max_sequence_length + hv_text.T2V_TEMPLATE.crop_start), jnp.int32,
                               sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))["params"]
    short = jnp.zeros((1, 8), jnp.int32)
    towers = jax.eval_shape(lambda: CLIPTextModel(CLIPTextConfig.from_hf_config(clip)).init(jax.random.key(0), short))
    args = (model, abstract(params, device, dtype), -(hv_text.SKIP_LAYERS + 1), ids, ids)
    return hv_text._hidden_state.__wrapped__, args, (0, 2), per_device_bytes(abstract(towers, device, dtype))


def _hunyuan_llava(family: Any, s: Any, llm: dict, clip: dict, dtype: Any, device: Any):
    """HunyuanVideo 1.0 image-to-video: Llava's `hidden_states[-3]` over the template with the image's placeholder
    tokens expanded (one row per prompt; the negative prompt's with a black image), its vision tower run on the
    image at its own size; CLIP-L's weights beside it."""
    from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
    from vidax.zoo.parts.encoders.llava import LlavaConfig, LlavaTextEncoder
    from vidax.zoo.hunyuan_video import text as hv_text

    config = LlavaConfig.from_hf_config(llm)
    model = LlavaTextEncoder(config)
    device = SingleDeviceSharding(device)
    rows, size = (2 if s.guided else 1), config.vision.image_size
    patches = (size // config.vision.patch_size) ** 2
    tokens = s.max_sequence_length + hv_text.I2V_TEMPLATE.crop_start + patches - 1  # `<image>` expanded
    ids = jax.ShapeDtypeStruct((rows, tokens), jnp.int32, sharding=device)
    pixels = jax.ShapeDtypeStruct((rows, 3, size, size), jnp.float32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i, p: model.init(jax.random.key(0), i, i, p), ids, pixels))["params"]
    short = jnp.zeros((1, 8), jnp.int32)
    towers = jax.eval_shape(lambda: CLIPTextModel(CLIPTextConfig.from_hf_config(clip)).init(jax.random.key(0), short))
    args = (model, abstract(params, device, dtype), -(hv_text.SKIP_LAYERS + 1), ids, ids, pixels)
    return hv_text._hidden_state.__wrapped__, args, (0, 2), per_device_bytes(abstract(towers, device, dtype))


def cosmos_text(family: Any, s: Any, dtype: Any, device: Any):
    """Cosmos-Predict2.5: Reason1 (Qwen2.5-VL-7B's language tower) over one prompt of `max_sequence_length`
    tokens (each prompt is encoded alone), every layer's hidden state standardised and concatenated."""
    from vidax.zoo.cosmos.family import _reason1
    from vidax.zoo.parts.encoders.decoder import DecoderTextModel
    from vidax.zoo.errors import PipelineError

    try:
        config = family.text_config
    except PipelineError:  # no config at hand
        return None
    model = DecoderTextModel(config)
    device = SingleDeviceSharding(device)
    ids = jax.ShapeDtypeStruct((1, s.max_sequence_length), jnp.int32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))["params"]
    return _reason1.__wrapped__, (model, {"params": abstract(params, device, dtype)}, ids), (0,)


def hunyuan15_text(family: Any, s: Any, dtype: Any, device: Any):
    """HunyuanVideo-1.5: Qwen2.5-VL's `hidden_states[-3]` over the system template and one prompt (each prompt is
    encoded alone), ByT5's weights beside it (both towers are loaded together)."""
    from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
    from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
    from vidax.zoo.hunyuan_video15 import text as hv_text

    qwen = family.read_config("text_encoder", "text_encoder/config.json", "text_encoder/llm/config.json")
    byt5 = family.read_config("text_encoder_2", "text_encoder_2/config.json", "tokenizer_2/config.json",
                              "text_encoder/byt5-small/config.json")
    if qwen is None or byt5 is None:
        return None
    model = DecoderTextModel(DecoderConfig.from_hf_config(qwen))
    device = SingleDeviceSharding(device)
    ids = jax.ShapeDtypeStruct((1, hv_text.MLLM_MAX_LENGTH + hv_text.TEMPLATE_CROP), jnp.int32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))["params"]
    short = jnp.zeros((1, 8), jnp.int32)
    glyphs = jax.eval_shape(lambda: T5EncoderModel(T5Config.from_hf_config(byt5)).init(jax.random.key(0), short, short))
    args = (model, abstract(params, device, dtype), ids, ids)
    return hv_text._run_decoder.__wrapped__, args, (0,), per_device_bytes(abstract(glyphs, device, dtype))


def ltx2_text(family: Any, s: Any, dtype: Any, device: Any):
    """LTX-2: the Gemma tower over the prompt rows (left-padded to `max_sequence_length`), every hidden state
    stacked, in the weights' dtype (as the run computes it); the connectors run after it, alone."""
    from vidax.zoo.parts.encoders.gemma import GemmaTextModel
    from vidax.zoo.ltx2.family import _text_features

    cfg = family.model.text_encoder
    if cfg is None:  # a gated config not at hand
        return None
    model = GemmaTextModel(cfg, dtype=jnp.dtype(dtype))
    device = SingleDeviceSharding(device)
    ids = jax.ShapeDtypeStruct((2 if s.guided else 1, s.max_sequence_length), jnp.int32, sharding=device)
    params = nn.unbox(jax.eval_shape(lambda i: model.init(jax.random.key(0), i, i), ids))["params"]
    return _text_features.__wrapped__, (model, abstract(params, device, dtype), ids, ids), (0,)


def _vae_weights(vae: Any, dtype: Any, device: Any) -> Any:
    return abstract(jax.eval_shape(lambda: vae.init_params(jax.random.key(0))), device, dtype)


def _with_unpassed(units: list[DecodeUnit], weights: Any, passed: Any) -> list[DecodeUnit]:
    """Each unit with the VAE's weights it is not passed (the loaded tree stays on the device) beside it."""
    rest = per_device_bytes(weights) - per_device_bytes(passed)
    return [unit._replace(beside=unit.beside + rest) for unit in units]


def ltx_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[DecodeUnit]:
    """LTX-Video: the last pass's latents decoded whole, or one padded tile (`--vae-tiling`, and by default
    when the whole call would not fit the device: the family's `_tiles` rule)."""
    from vidax.zoo.ltx_video import vae as module
    from vidax.zoo.parts.vae_tiling import TilePlan, tiles_for

    cfg, device = family.vae_config, SingleDeviceSharding(device)
    vae, pad, last = module.LTXVideoVAE(cfg), family.padding(s), family._passes(s)[-1]
    latents = (1, *vae.latent_shape(pad.frames, last.height, last.width))
    weights = _vae_weights(vae, dtype, device)
    frames, height, width = pad.frames, latents[3] * cfg.spatial_ratio, latents[4] * cfg.spatial_ratio
    tiles = tiles_for(s.vae_tiling, module.decode_peak_bytes(cfg, frames, height, width)
                      + per_device_bytes(weights))
    plan = None if tiles is None else TilePlan(latents[2:], tiles, cfg.spatial_ratio, cfg.temporal_ratio)
    temb = jax.ShapeDtypeStruct((1,), jnp.float32, sharding=device) if cfg.timestep_conditioning else None
    grid = latents[3:] if plan is None or plan.single else plan.body[1:]
    noise = tuple(jax.ShapeDtypeStruct(shape, jnp.float32, sharding=device)
                  for shape in module.decoder_noise_shapes(cfg, *grid)) if any(module.decoder_noise_counts(cfg)) else ()
    if plan is None or plan.single:
        z = jax.ShapeDtypeStruct(latents, jnp.float32, sharding=device)
        units = [DecodeUnit("vae decode", module._decode.__wrapped__, (vae, weights["decoder"], z, temb, noise),
                            static=(0,), xla_only=True)]
    else:
        units = [tile_unit("vae decode (tile)", module._decode_tile.__wrapped__, (vae,), plan, 1,
                           cfg.latent_channels, weights["decoder"], (temb, noise), device, xla_only=True)]
    return _with_unpassed(units, weights, weights["decoder"])


def ltx2_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[DecodeUnit]:
    """LTX-2's video VAE (fp32, as the run loads it): one padded tile (its default), or the whole latents
    (`--no-vae-tiling`)."""
    from vidax.zoo.ltx2.decoding import vae as module
    from vidax.zoo.ltx2.family import _decode_tiles, _vae_decode
    from vidax.zoo.parts.vae_tiling import TilePlan

    cfg, device = family.model.vae, SingleDeviceSharding(device)
    vae, latents = module.LTX2VideoVAE(cfg), family.latent_shape(s)
    weights = _vae_weights(vae, jnp.float32, device)
    tiles, causal = _decode_tiles(s), bool(cfg.decoder_causal)
    plan = None if tiles is None else TilePlan(tuple(latents[2:]), tiles, cfg.spatial_ratio, cfg.temporal_ratio)
    temb = jax.ShapeDtypeStruct((1,), jnp.float32, sharding=device) if cfg.timestep_conditioning else None
    if plan is None or plan.single:
        z = jax.ShapeDtypeStruct(latents, jnp.float32, sharding=device)
        return [DecodeUnit("vae decode", _vae_decode.__wrapped__, (cfg, weights, z, temb), static=(0,), xla_only=True)]
    return [tile_unit("vae decode (tile)", module._decode_tile.__wrapped__, (cfg, causal), plan, 1, latents[1],
                      weights, (temb,), device, xla_only=True)]


def cogvideox_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[DecodeUnit]:
    """CogVideoX (fp32, as the run converts it): the first frame batch of the first tile (no cache yet), then
    each next batch with the causal cache (donated), on a tile (`--vae-tiling`, its default) or the whole
    frame. Beside the steady unit: every decoded batch of every tile, which the device holds until the
    tiles are blended (the peak is at the last batch)."""
    from vidax.zoo.cogvideox.vae import DECODE_BATCH_FRAMES, CogVideoXVAE, Tiling, _run, frame_batches

    cfg, device = family.vae_config, SingleDeviceSharding(device)
    vae = CogVideoXVAE(cfg)
    weights = _vae_weights(vae, jnp.float32, device)
    _, c, frames, h, w = family.latent_shape(s)
    frames -= family.frame_plan(s).drop
    tile = (h, w)
    if s.vae_tiling:
        tiling, ratio = Tiling.default(cfg), cfg.spatial_compression
        tile = (int(tiling.sample_height / ratio), int(tiling.sample_width / ratio))
        stride = (int(tile[0] * (1 - tiling.overlap_height)), int(tile[1] * (1 - tiling.overlap_width)))
        tiles = [(min(tile[0], h - i), min(tile[1], w - j)) for i in range(0, h, stride[0]) for j in range(0, w, stride[1])]
    if not s.vae_tiling or (w <= tile[1] and h <= tile[0]):
        tile, tiles = (h, w), [(h, w)]
    batches = frame_batches(frames, DECODE_BATCH_FRAMES)
    batch = lambda n: jax.ShapeDtypeStruct((1, n, *tile, c), jnp.float32, sharding=device)  # noqa: E731
    first_args = (vae.module, "decode_batch", weights, None, batch(batches[0][1] - batches[0][0]), True)
    out, cache = jax.eval_shape(lambda p, x: _run(vae.module, "decode_batch", p, None, x, True), weights, first_args[4])
    steady_args = (vae.module, "decode_batch", weights, abstract(cache, device), batch(DECODE_BATCH_FRAMES), False)
    steady, _ = jax.eval_shape(lambda p, k, x: _run(vae.module, "decode_batch", p, k, x, False), *steady_args[2:5])
    pixels_per_latent = out.shape[2] * out.shape[3] / math.prod(tile)
    video_frames = out.shape[1] + (len(batches) - 1) * steady.shape[1]
    held = sum(video_frames * th * tw * pixels_per_latent * out.shape[4] * 4 for th, tw in tiles)
    static = (0, 1, 5)
    return [DecodeUnit("vae decode (first batch)", _run, first_args, static=static, xla_only=True),
            DecodeUnit("vae decode (next batches)", _run, steady_args, (3,), static,
                       int(held - per_device_bytes(steady)), xla_only=True)]


def stage_units(stages: Any, params: Any, x: Any, device: Any, held: int, weights: Any) -> list[DecodeUnit]:
    """A stage-by-stage decode (`vae_layers.run_stages`: each stage one compiled unit) on one tile `x`: a unit
    per stage, each with the VAE's other weights and `held` bytes of earlier tiles' outputs beside it."""
    from vidax.zoo.parts.vae_layers import _apply_stage, _stage_params, holds_attention

    units = []
    for key, module in stages:
        part = _stage_params(params, key)
        name = key if isinstance(key, str) else "+".join(key)
        units.append(DecodeUnit(f"vae decode ({name})", _apply_stage, (module, part, x), static=(0,),
                                beside=held + per_device_bytes(weights) - per_device_bytes(part),
                                xla_only=not holds_attention(module)))
        x = abstract(jax.eval_shape(lambda p, v: _apply_stage(module, p, v), part, x), device)
    return units


def _tile_starts(size: int, tile: int, stride: int) -> list[int]:
    return [min(tile, size - i) for i in range(0, size, stride)]


def hunyuan15_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[DecodeUnit]:
    """HunyuanVideo-1.5 (fp32, always tiled as its pipeline decodes): each decoder stage on the first spatial
    tile, every frame; beside: the VAE's other weights and every earlier tile's output (held until blending)."""
    from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE

    cfg, device = family.vae_config, SingleDeviceSharding(device)
    vae = HunyuanVideo15VAE(cfg)
    weights = _vae_weights(vae, jnp.float32, device)
    _, c, frames, h, w = family.latent_shape(s)
    tile, ratio = cfg.tile_latent_min_size, cfg.spatial_compression_ratio
    stride = int(tile * (1 - cfg.tile_overlap_factor))
    if max(h, w) <= tile:
        rows, cols = [h], [w]
    else:
        rows, cols = _tile_starts(h, tile, stride), _tile_starts(w, tile, stride)
    out_frames = (frames - 1) * cfg.temporal_compression_ratio + 1
    tiles = [r * q * ratio**2 * out_frames * cfg.out_channels * 4 for r in rows for q in cols]
    x = jax.ShapeDtypeStruct((1, frames, rows[0], cols[0], c), jnp.float32, sharding=device)
    return stage_units(vae.decoder, weights["decoder"], x, device, sum(tiles[:-1]), weights)


def hunyuan_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[DecodeUnit]:
    """HunyuanVideo 1.0: each decoder stage on the first spatial tile (`--vae-tiling`, its default) of a
    temporal window (5 latent frames, always used past 4); beside: the VAE's other weights, the earlier
    windows' blended outputs and this window's earlier tiles (the last window's last tile: all held)."""
    from vidax.zoo.hunyuan_video.vae import HunyuanVideoVAE

    cfg, device = family.vae_config, SingleDeviceSharding(device)
    vae = HunyuanVideoVAE(cfg)
    weights = _vae_weights(vae, dtype, device)
    _, c, frames, h, w = family.latent_shape(s)
    window = min(frames, cfg.tile_latent_min_num_frames + 1)
    windows = len(range(0, frames, cfg.tile_latent_stride_num_frames)) if frames > cfg.tile_latent_min_num_frames else 1
    tile, ratio = cfg.tile_latent_min_size, cfg.spatial_compression_ratio
    if s.vae_tiling and max(h, w) > tile:
        rows, cols = _tile_starts(h, tile, cfg.tile_latent_stride), _tile_starts(w, tile, cfg.tile_latent_stride)
    else:
        rows, cols = [h], [w]
    pixel = lambda n: ((n - 1) * cfg.temporal_compression_ratio + 1) * ratio**2 * cfg.out_channels * 4  # noqa: E731
    tiles = [r * q * pixel(window) for r in rows for q in cols]
    held = (windows - 1) * h * w * pixel(window) + sum(tiles[:-1])
    x = jax.ShapeDtypeStruct((1, window, rows[0], cols[0], c), jnp.float32, sharding=device)
    return stage_units(vae.decoder, weights["decoder"], x, device, int(held), weights)


def cosmos_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[tuple]:
    return wan_vae_decode_units(family.vae_config, family.latent_shape(s), device)


def no_vae(family: Any, s: Any, dtype: Any, device: Any) -> list[tuple]:
    return []
