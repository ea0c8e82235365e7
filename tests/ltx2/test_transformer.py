"""LTX-2 DiT against diffusers `LTX2VideoTransformer3DModel`, through the real spec.

Three tiny perturbed references (LTX-2.0-, 2.3- and 2.5-shaped configs, see ltx2_spec_fixtures),
saved in the diffusers folder layout and converted with `conversion_specs/ltx2/transformer.toml`.
Compared per stage (RoPE tables, block 0, end to end) in fp32, and with the guidance passes
(STG, modality isolation) and the I2V per-token timestep as data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.translator import convert, load_spec
from vidax.zoo.ltx2.config import TransformerConfig
from vidax.zoo.ltx2.rope import audio_coords, dit_rope_tables, video_coords
from vidax.zoo.ltx2.transformer import DiTInputs, LTX2Transformer, Streams

from tests.oracle import unflatten

from .references.ltx2_spec_fixtures import TINY_DIT, dit_reference, save_diffusers

ATOL = 2e-5  # fp32 through ~20 matmuls and 12 softmaxes; observed max error ~2e-6
GRID, AUDIO_LEN, TEXT_LEN, FPS = (3, 2, 4), 7, 5, 24.0


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """`build(variant)` -> (reference, our model, params), each variant built once per module."""
    cache = {}

    def get(variant: str):
        if variant not in cache:
            ref = dit_reference(variant)
            root = tmp_path_factory.mktemp(f"ltx2_dit_{variant}")
            save_diffusers(ref, root / "transformer")
            model = LTX2Transformer(TransformerConfig.from_hf_config(dict(ref.config)))
            tree = convert(load_spec("ltx2/transformer"), root, model.param_shapes(), dtype="float32")
            cache[variant] = (ref, model, unflatten(tree))
        return cache[variant]

    return get


@pytest.fixture(params=sorted(TINY_DIT))
def setup(request, build):
    return build(request.param)


def make_inputs(cfg: TransformerConfig, batch: int = 2, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    s = int(np.prod(GRID))
    text_w = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
    mask = torch.ones(batch, TEXT_LEN, dtype=torch.long)
    mask[0, 3:] = 0  # one padded prompt
    return dict(
        hidden_states=torch.randn(batch, s, cfg.in_channels, generator=g),
        audio_hidden_states=torch.randn(batch, AUDIO_LEN, cfg.audio_in_channels, generator=g),
        encoder_hidden_states=torch.randn(batch, TEXT_LEN, text_w[0], generator=g),
        audio_encoder_hidden_states=torch.randn(batch, TEXT_LEN, text_w[1], generator=g),
        timestep=torch.linspace(900.0, 100.0, batch),
        encoder_attention_mask=mask,
    )


def coords(ref, batch: int):
    return (ref.rope.prepare_video_coords(batch, *GRID, "cpu", fps=FPS),
            ref.audio_rope.prepare_audio_coords(batch, AUDIO_LEN, "cpu"))


def run_reference(ref, inputs: dict, **kwargs):
    vc, ac = coords(ref, inputs["hidden_states"].shape[0])
    kwargs.setdefault("sigma", inputs["timestep"] if inputs["timestep"].ndim == 1 else None)
    with torch.no_grad():
        video, audio = ref(**inputs, audio_encoder_attention_mask=inputs["encoder_attention_mask"], video_coords=vc,
                           audio_coords=ac, return_dict=False, **kwargs)
    return video.numpy(), audio.numpy()


def our_inputs(cfg, inputs: dict, **kwargs) -> DiTInputs:
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    return DiTInputs.make(
        j(inputs["hidden_states"]), j(inputs["audio_hidden_states"]), j(inputs["encoder_hidden_states"]),
        j(inputs["audio_encoder_hidden_states"]), j(inputs["timestep"]), num_layers=cfg.num_layers,
        text_mask=j(inputs["encoder_attention_mask"]), **kwargs)


def tables(cfg):
    return dit_rope_tables(cfg, video_coords(*GRID, fps=FPS), audio_coords(AUDIO_LEN))


def test_rope_tables_equal_diffusers(setup):
    ref, model, _ = setup
    cfg = model.cfg
    vc, ac = coords(ref, 1)
    np.testing.assert_array_equal(video_coords(*GRID, fps=FPS), vc[0].numpy())
    np.testing.assert_array_equal(audio_coords(AUDIO_LEN), ac[0].numpy())
    ours = tables(cfg)
    theirs = (ref.rope(vc), ref.audio_rope(ac), ref.cross_attn_rope(vc[:, 0:1]), ref.cross_attn_audio_rope(ac[:, 0:1]))
    for mine, (cos, sin) in zip((ours.video, ours.audio, ours.cross_video, ours.cross_audio), theirs):
        cos, sin = cos[0].numpy(), sin[0].numpy()
        if cfg.rope_type == "split":  # diffusers: [heads, S, r]; ours: [S, heads, r]
            cos, sin = cos.transpose(1, 0, 2), sin.transpose(1, 0, 2)
        np.testing.assert_allclose(np.asarray(mine[0]), cos, atol=1e-6)  # cos/sin of equal fp32 angles
        np.testing.assert_allclose(np.asarray(mine[1]), sin, atol=1e-6)


def test_rope_shapes_without_the_tables(setup):
    """What the planner and the dry run read instead of computing the tables: the same shapes and dtypes,
    at the test's size, a larger grid and one token."""
    from vidax.zoo.ltx2.rope import default_dit_rope_shapes, default_dit_rope_tables

    cfg = setup[1].cfg
    for frames, height, width, audio in ((16, 16, 24, 126), (*GRID, AUDIO_LEN), (1, 1, 1, 1)):
        full = jax.eval_shape(lambda: default_dit_rope_tables(cfg, frames, height, width, audio, fps=FPS))
        shapes = default_dit_rope_shapes(cfg, frames, height, width, audio, fps=FPS)
        assert jax.tree.structure(full) == jax.tree.structure(shapes)
        assert [(a.shape, a.dtype) for a in jax.tree.leaves(full)] == [(a.shape, a.dtype) for a in jax.tree.leaves(shapes)]


def test_end_to_end_with_guidance_rows(setup):
    """One batch of five rows, one compiled call: rows 0-1 two samples (one padded prompt, different
    timesteps); rows 2-4 one sample plain, with STG at block 1, and with the modalities isolated.
    Each row equals its own diffusers call."""
    ref, model, params = setup
    cfg = model.cfg
    pair, single = make_inputs(cfg), make_inputs(cfg, batch=1, seed=1)
    batched = {k: torch.cat([pair[k]] + [single[k]] * 3) for k in pair}
    stg = np.ones((5, cfg.num_layers), np.float32)
    stg[3, 1] = 0.0
    cross = jnp.asarray([1.0, 1.0, 1.0, 1.0, 0.0])
    video, audio = jax.jit(model.__call__)(params, our_inputs(cfg, batched, stg_keep=jnp.asarray(stg),
                                                                 cross_keep=cross), tables(cfg))
    expected = [run_reference(ref, pair, use_cross_timestep=True), run_reference(ref, single),
                run_reference(ref, single, spatio_temporal_guidance_blocks=[1]),
                run_reference(ref, single, isolate_modalities=True)]
    rows = [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 5)]
    for row, (want_video, want_audio) in zip(rows, expected):
        np.testing.assert_allclose(np.asarray(video[row]), want_video, atol=ATOL, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(audio[row]), want_audio, atol=ATOL, rtol=1e-5)
    # the STG and isolated rows really differ from the plain one (the hooks are live)
    assert np.abs(np.asarray(video[3] - video[2])).max() > 1e-3
    assert np.abs(np.asarray(audio[4] - audio[2])).max() > 1e-3


def test_block_zero(build):
    """One block on diffusers' own block-0 inputs (the LTX-2.3 shape: gates and prompt AdaLN)."""
    ref, model, params = build("2.3")
    inputs = make_inputs(model.cfg)
    seen = {}
    block = ref.transformer_blocks[0]
    pre = block.register_forward_pre_hook(lambda m, a, kw: seen.__setitem__("in", kw), with_kwargs=True)
    post = block.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out))
    try:
        run_reference(ref, inputs)
    finally:
        pre.remove(), post.remove()
    kw = seen["in"]
    streams = Streams(jnp.asarray(kw["hidden_states"].numpy()), jnp.asarray(kw["audio_hidden_states"].numpy()),
                      jnp.zeros((), jnp.int32))

    @jax.jit
    def block_zero(params, inputs, streams):
        _, ctx = model.embed(params, inputs, tables(model.cfg))
        return model.block.apply({"params": jax.tree.map(lambda a: a[0], params["blocks"])}, streams, ctx), ctx.temb

    out, temb = block_zero(params, our_inputs(model.cfg, inputs), streams)
    np.testing.assert_allclose(np.asarray(out.video), seen["out"][0].numpy(), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out.audio), seen["out"][1].numpy(), atol=ATOL, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(temb).reshape(kw["temb"].shape), kw["temb"].numpy(), atol=1e-6)


def test_per_token_timestep_and_keyframes(build):
    """I2V on the LTX-2.5 shape: the first latent frame's tokens at t=0 (and marked as keyframe
    slots), audio and sigma at the step's t."""
    ref, model, params = build("2.5")
    cfg = model.cfg
    inputs = make_inputs(cfg)
    t = inputs["timestep"]
    frame0 = torch.zeros(int(np.prod(GRID)))
    frame0[: GRID[1] * GRID[2]] = 1.0
    per_token = dict(inputs, timestep=t[:, None] * (1 - frame0)[None])
    marks = frame0[None, :, None].repeat(2, 1, 1)
    want = run_reference(ref, per_token, audio_timestep=t, sigma=t, use_cross_timestep=True,
                         video_keyframes_mask=marks)
    j = lambda x: jnp.asarray(x.numpy())  # noqa: E731
    ours = our_inputs(cfg, per_token, audio_timestep=j(t), sigma=j(t), keyframes=j(marks))
    got = jax.jit(model.__call__)(params, ours, tables(cfg))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, atol=ATOL, rtol=1e-5)


def test_legacy_cross_timestep(build):
    """LTX-2.0's `use_cross_timestep=False`: the cross-modal modulation reads the own timestep."""
    ref, model, params = build("2.0")
    inputs = make_inputs(model.cfg)
    legacy = LTX2Transformer(model.cfg, use_cross_timestep=False)
    want = run_reference(ref, inputs, audio_timestep=inputs["timestep"] * 0.5, use_cross_timestep=False)
    ours = our_inputs(model.cfg, inputs, audio_timestep=jnp.asarray(inputs["timestep"].numpy() * 0.5))
    got = jax.jit(legacy.__call__)(params, ours, tables(model.cfg))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, atol=ATOL, rtol=1e-5)


def test_bad_inputs_fail_with_one_message(build):
    _, model, params = build("2.0")
    cfg = model.cfg
    inputs = our_inputs(cfg, make_inputs(cfg))
    with pytest.raises(ValueError, match="video tokens must be"):
        model.embed(params, inputs.replace(video=inputs.video[..., :-1]), tables(cfg))
    with pytest.raises(ValueError, match="RoPE tables"):
        model.embed(params, inputs, dit_rope_tables(cfg, video_coords(1, 2, 2, fps=FPS), audio_coords(AUDIO_LEN)))
    with pytest.raises(ValueError, match="stg_keep"):
        model.embed(params, inputs.replace(stg_keep=inputs.stg_keep[:, :1]), tables(cfg))


def test_bf16_activations_stay_near_fp32(build):
    """bf16 activations with the fp32 residual streams (the accelerator setting) trace, and land near fp32."""
    from vidax.zoo.compute.runtime import BF16

    _, model, params = build("2.5")
    fast = LTX2Transformer.with_precision(model.cfg, BF16)
    inputs = our_inputs(model.cfg, make_inputs(model.cfg))
    want = jax.jit(model.__call__)(params, inputs, tables(model.cfg))
    got = jax.jit(fast.__call__)(jax.tree.map(lambda a: a.astype(jnp.bfloat16), params), inputs, tables(model.cfg))
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float32), np.asarray(w)
        assert np.isfinite(g).all()
        assert np.abs(g - w).max() < 0.05 * np.abs(w).max()  # bf16 matmul inputs: ~3 significant digits
