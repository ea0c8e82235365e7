"""`--cache teacache` on every family's DiT beyond Wan and LTX-Video: HunyuanVideo 1.0 and 1.5, CogVideoX,
Cosmos-Predict2.5, Cosmos3 and LTX-2, each a one-block DiT (HunyuanVideo: one dual and one single block) of
the width its own tests use (random weights, random inputs; tests/quantized/test_weights_dtype_families.py
builds them) run for five steps of a moving timestep and latents through `StepCache`, as `denoise` runs it.

Each test computes, in numpy from the DiT's embedding and block 0's weights (not through the family's hook),
the modulated input the TeaCache reference reads for that model (CogVideoX: the time embedding; HunyuanVideo:
block 0's LayerNormed video under `norm1`'s shift and scale) or, without a published TeaCache, the analogous
input of the first block; takes the decisions by hand (relative L1 change, accumulated, warm-up and final step
run) per CFG branch where the reference pipeline calls the DiT per branch, once over the call where it batches
both; and builds each step's expected output: the blocks run, or each skipped row's block input plus its
branch's last residual of all blocks (video; LTX-2's audio too). vidax must log the same steps and changes and
make the same outputs.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from vidax.zoo.parts.block_split import forward_split
from vidax.zoo.parts.dit import place_resident
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.step_caches.methods import StepCache, config_from_options
from vidax.zoo.step_caches.rules import TeaCacheRule
from vidax.zoo.step_caches.tea import TeaCacheConfig

from tests.quantized.test_weights_dtype_families import DITS, _model, _named, _tree

STEPS = 5
TIMESTEPS = [999.0, 900.0, 760.0, 580.0, 300.0]
IDENTITY = TeaCacheRule((1.0, 0.0), 1, 1)  # the rescaled change is the change: thresholds pick the skips
ATOL = 1e-5
CHANGE_RTOL = 1e-4  # fp32 on the device against float64 here, changes down to 5e-4 (LTX-2)
# family -> (branches of a guided step as the family logs them, the block-stream fields a skip adds a residual to)
FAMILIES = {
    "cogvideox": (("cond_uncond",), ("video",)),  # CogVideoXPipeline batches both branches
    "hunyuan_video": (("cond",), ("video",)),  # guidance-distilled: one call per step
    "hunyuan_video15": (("cond", "uncond"), ("video",)),
    "cosmos": (("cond", "uncond"), (None,)),  # the hidden state is the video tokens themselves
    "cosmos3": (("cond", "uncond"), ("gen",)),
    "ltx2": (("cond_uncond",), ("video", "audio")),  # LTX2Pipeline batches the CFG pair; audio is an output too
}


def _inputs(model, batch: int, seed: int):
    """The model's smallest valid inputs for `batch` rows, all-zero float arrays replaced by N(0, 1)."""
    rng = np.random.default_rng(seed)

    def fill(leaf):
        if leaf is None or not jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating) or np.any(np.asarray(leaf)):
            return leaf
        return rng.standard_normal(np.shape(leaf)).astype(np.float32)

    return jax.tree.map(fill, model.dummy_inputs(batch), is_leaf=lambda x: x is None)


def _at(family: str, inputs: tuple, step: int) -> tuple:
    """`inputs` at step `step`: its timestep (every row) and the latents moved by `step` times a fixed
    random direction, as a denoising pass moves them."""
    t = TIMESTEPS[step]
    move = lambda latents: np.asarray(latents) + 0.5 * step * np.flip(latents, axis=0)  # noqa: E731
    if family == "ltx2":  # host arrays throughout: no small device programs to compile
        dit, rope = inputs
        full, sigma = np.full(dit.timestep.shape, t, np.float32), np.full(dit.sigma.shape, t / 1000, np.float32)
        return dit.replace(video=move(dit.video), audio=move(dit.audio), timestep=full, audio_timestep=full,
                           sigma=sigma, audio_sigma=sigma), rope
    at = dict(enumerate(inputs))
    latents, timestep = (2, 3) if family == "cosmos3" else (0, 1)
    at[latents], at[timestep] = move(at[latents]), np.full(at[timestep].shape, t, np.float32)
    return tuple(at[i] for i in range(len(inputs)))


# --- the modulated input, by hand ---------------------------------------------------------------


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _layer_norm(x, eps):
    x = np.asarray(x, np.float64)
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)


def _rms_norm(x, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps)


def _block0(tree: dict, name: str) -> np.ndarray:
    return np.asarray(tree[f"blocks/{name}"][0], np.float64)


def _hunyuan(model, tree, hidden, ctx):
    """TeaCache4HunyuanVideo: LayerNorm(video) * (1 + scale) + shift, from `norm1` of silu(temb)."""
    mod = _silu(np.asarray(ctx.temb, np.float64)) @ _block0(tree, "norm1/linear/kernel") + _block0(
        tree, "norm1/linear/bias")
    shift, scale = np.split(mod, 6, axis=-1)[:2]
    return _layer_norm(hidden.video, 1e-6) * (1 + scale[:, None]) + shift[:, None]


def _cosmos(model, tree, hidden, ctx):
    """Block 0's self-attention input: LayerNorm(hidden + position embedding) under its AdaLN-LoRA shift, scale."""
    d = model.cfg.inner_dim
    lora = _silu(np.asarray(ctx.emb, np.float64)) @ _block0(tree, "norm1/linear_1/kernel")
    mod = lora @ _block0(tree, "norm1/linear_2/kernel") + np.asarray(ctx.temb, np.float64)[..., :3 * d]
    shift, scale = mod[..., :d], mod[..., d:2 * d]  # one frame: [B, 1, D] broadcasts over the tokens
    residual = np.asarray(hidden, np.float64) + (0.0 if ctx.pos is None else np.asarray(ctx.pos, np.float64))
    return _layer_norm(residual, 1e-6) * (1 + scale) + shift


def _cosmos3(model, tree, hidden, ctx):
    """Layer 0's RMS-normed video stream (its attention input; Cosmos3 has no AdaLN)."""
    return _rms_norm(hidden.gen, model.cfg.rms_norm_eps) * _block0(tree, "input_layernorm_moe_gen/scale")


def _ltx2(model, tree, hidden, ctx):
    """Block 0's RMS-normed video stream under its table's shift and scale plus the time modulation."""
    values = _block0(tree, "scale_shift_table")[None, None] + np.asarray(ctx.temb, np.float64)
    return _rms_norm(hidden.video, model.cfg.norm_eps) * (1 + values[:, :, 1]) + values[:, :, 0]


MODULATED = {"cogvideox": ("temb", lambda model, tree, hidden, ctx: np.asarray(ctx.temb, np.float64)),
             "hunyuan_video": ("modulated", _hunyuan), "hunyuan_video15": ("modulated", _hunyuan),
             "cosmos": ("modulated", _cosmos), "cosmos3": ("modulated", _cosmos3), "ltx2": ("modulated", _ltx2)}


def _change(current, previous, per_row: bool) -> np.ndarray:
    axes = tuple(range(1, current.ndim)) if per_row else None
    change = np.abs(current - previous).mean(axis=axes) / np.abs(previous).mean(axis=axes)
    return np.reshape(change, (-1,))


def _decide(changes: np.ndarray, threshold: float) -> np.ndarray:
    """[steps, rows] decisions of the reference rule (first and last step run) on `changes` [steps, rows]."""
    decisions, accumulated = np.ones(changes.shape, bool), np.zeros(changes.shape[1])
    for step in range(1, STEPS - 1):
        accumulated = accumulated + changes[step]
        decisions[step] = accumulated >= threshold
        accumulated = np.where(decisions[step], 0.0, accumulated)
    return decisions


# --- the expected outputs ----------------------------------------------------------------------


def _expected_step(model, fields):
    """jit: (the DiT output with skipped rows' streams = block input + residual, the fresh residuals, the
    embedding's (hidden, ctx): what the modulated input is computed from by hand)."""

    def get(hidden, field):
        return hidden if field is None else getattr(hidden, field)

    def put(hidden, streams):
        return streams[None] if None in streams else hidden.replace(**streams)

    @jax.jit
    def step(params, inputs, computes, residuals):
        fresh = {}

        def blocks(h0, run_part):
            h_n = run_part(h0, "all")
            mixed = {}
            for field in fields:
                before, after = get(h0, field), get(h_n, field)
                fresh[field] = after - before
                keep = jnp.reshape(computes, (-1,) + (1,) * (after.ndim - 1))
                mixed[field] = jnp.where(keep, after, before + residuals[field])
            return put(h_n, mixed)

        return forward_split(model, params, *inputs, blocks=blocks), fresh, model.embed(params, *inputs)

    return step


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_run(request):
    """One family: (hand changes, hand decisions, vidax's log, vidax's outputs, expected outputs, full outputs)."""
    family = request.param
    branches, fields = FAMILIES[family]
    per_row = len(branches) > 1
    model = _model(family)
    # block kernels 10x a trained DiT's scale: residuals large enough that a skip visibly changes the output
    flat = {path: leaf * (10.0 if path.endswith("kernel") and "blocks/" in path else 1.0)
            for path, leaf in _tree(model).items()}
    params = place_resident(model, traverse_util.unflatten_dict(flat, sep="/"))
    batch = 1 if family == "hunyuan_video" else 2
    base = _inputs(model, batch, seed=2)
    steps = [_at(family, base, k) for k in range(STEPS)]
    name, by_hand = MODULATED[family]
    expected_step, ones = _expected_step(model, fields), np.ones((batch,), bool)
    shapes = jax.eval_shape(expected_step, params, steps[0], ones, {f: np.zeros((), np.float32) for f in fields})[1]
    zeros = {f: np.zeros(shape.shape, shape.dtype) for f, shape in shapes.items()}
    runs = [expected_step(params, inputs, ones, zeros) for inputs in steps]  # every step's blocks run
    modulated = [by_hand(model, flat, *embedded) for _, _, embedded in runs]
    changes = np.stack([np.full(batch if per_row else 1, np.nan)] +
                       [_change(m, before, per_row) for m, before in zip(modulated[1:], modulated)])
    threshold = float(changes[1, 0] + changes[2, 0] / 2)  # step 1 skips, step 2 runs (in the first row)
    decisions = _decide(changes, threshold)

    cache = StepCache(TeaCacheConfig(threshold, "by-hand", name, IDENTITY), branches, STEPS)
    denoiser = types.SimpleNamespace(dit=model, params=params, streamed=None)
    ours = [_host(cache.predict(denoiser, _call_dit, 0, k, None, None, inputs, None))
            for k, inputs in enumerate(steps)]
    log = cache.finish("denoise")

    expected, full, residuals = [], [_host(out) for out, _, _ in runs], zeros  # step 0 runs: zeros unread
    for k, inputs in enumerate(steps):
        rows = np.broadcast_to(decisions[k], (batch,))
        out, fresh, _ = expected_step(params, inputs, rows, residuals)
        residuals = {f: np.where(np.reshape(rows, (-1,) + (1,) * (fresh[f].ndim - 1)), fresh[f], residuals[f])
                     for f in fields}
        expected.append(_host(out))
    return branches, changes, decisions, log, ours, expected, full


def _host(out):
    return jax.tree.map(lambda leaf: np.asarray(leaf, np.float32), out)


def _call_dit(run, latents, timestep, cond, knobs):
    """The step's one DiT call on `cond`, the call's whole inputs (the test's stand-in for a family's predict)."""
    return run(*cond)


def test_decisions_changes_and_skipped_outputs(family_run):
    branches, changes, decisions, log, ours, expected, full = family_run
    assert decisions[1, 0] == False and decisions[2, 0] == True  # noqa: E712 (a skip, then a run)
    assert [entry["step"] for entry in log] == list(range(STEPS))
    for k, entry in enumerate(log):
        row = np.broadcast_to(decisions[k], (len(branches),))
        assert entry["full_dit"] == {b: bool(r) for b, r in zip(branches, row)}, k
        measured = [np.nan if entry["change"][b] is None else entry["change"][b] for b in branches]
        np.testing.assert_allclose(measured, np.broadcast_to(changes[k], (len(branches),)), rtol=CHANGE_RTOL,
                                   equal_nan=True)
    for k in range(STEPS):
        for ours_leaf, want, plain in zip(jax.tree.leaves(ours[k]), jax.tree.leaves(expected[k]),
                                          jax.tree.leaves(full[k])):
            np.testing.assert_allclose(ours_leaf, want, atol=ATOL, rtol=0)
        if not decisions[k].all():  # a skip made a different output from running the blocks
            gap = max(np.abs(w - p).max() for w, p in zip(jax.tree.leaves(expected[k]), jax.tree.leaves(full[k])))
            assert gap > 100 * ATOL, k


# family -> a registry model of it with no published set
UNPUBLISHED = {"hunyuan_video15": "hunyuanvideo-1.5-480p-t2v", "cosmos": "cosmos-predict2.5-2b",
               "cosmos3": "cosmos3-nano", "ltx2": "ltx-2"}


@pytest.mark.parametrize("model, family", [("cogvideox-2b", "cogvideox"), ("cogvideox-5b-i2v", "cogvideox"),
                                           ("cogvideox1.5-5b", "cogvideox"), ("hunyuanvideo", "hunyuan_video")])
def test_published_sets_read_what_the_family_declares(model, family):
    config = config_from_options(GenerateOptions(model=model, prompt="x", cache="teacache", cache_threshold=0.1))
    assert (config.rule.warmup_steps, config.rule.final_steps) == (1, 1)
    assert config.modulated in _named(f"vidax.zoo.{DITS[family][4]}").modulated_inputs


@pytest.mark.parametrize("family", list(UNPUBLISHED))
def test_without_a_published_set_one_line_then_another_set(family):
    model = UNPUBLISHED[family]
    with pytest.raises(PipelineError, match=f"no TeaCache coefficients for {model} .*--cache-coefficients picks"):
        config_from_options(GenerateOptions(model=model, prompt="x", cache="teacache", cache_threshold=0.1))
    config = config_from_options(GenerateOptions(model=model, prompt="x", cache="teacache", cache_threshold=0.1,
                                                 cache_coefficients="hunyuanvideo"))
    assert config.modulated in _named(f"vidax.zoo.{DITS[family][4]}").modulated_inputs


def test_ltx2_guidance_passes_apart_are_refused():
    """LTX2Pipeline calls the DiT apart for STG / modality isolation (their own statistics); vidax batches them."""
    cache = StepCache(TeaCacheConfig(0.1, "by-hand", "modulated", IDENTITY), ("cond_uncond", "uncond_stg"), STEPS)
    with pytest.raises(PipelineError, match="cond_uncond, uncond_stg; run without STG"):
        cache.predict(None, _call_dit, 0, 0, None, None, (), None)


def test_a_second_expert_starts_afresh_and_the_pass_ends_with_a_full_step(monkeypatch):
    """Wan2.2 A14B's expert switch (step 3 of 6): the low-noise expert's first step runs (no previous
    modulated input: a fresh state, its own accumulator and residual) and the pass's last step runs
    though the expert has taken only three. The device parts are stubbed: the rule and state alone."""
    from vidax.zoo.step_caches import tea as step_cache_tea

    def changes(predict, dit, name, per_row, params, previous, *args):  # change 0.01 after a first step
        return ((jnp.zeros((1,)), jnp.full((1,), 0.01 if previous else np.nan)),)

    monkeypatch.setattr(step_cache_tea, "_modulated_changes", changes)
    monkeypatch.setattr(step_cache_tea, "_tea_prediction", lambda *args: (jnp.zeros(()), (jnp.zeros(()),)))
    cache = StepCache(TeaCacheConfig(1.0, "by-hand", "e", IDENTITY), ("cond",), 6)
    denoiser = types.SimpleNamespace(dit=types.SimpleNamespace(block_groups=("blocks",)), params=None, streamed=None)
    for step, expert in enumerate([0, 0, 0, 1, 1, 1]):
        cache.predict(denoiser, _call_dit, expert, step, None, None, (), None)
    log = cache.finish("denoise")
    assert [entry["full_dit"]["cond"] for entry in log] == [True, False, False, True, False, True]
    assert [entry["change"]["cond"] is None for entry in log] == [True, False, False, True, False, False]
