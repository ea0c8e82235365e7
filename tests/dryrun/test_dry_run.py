"""`vidax.zoo.plan.dry_run`: stages compiled at their native size on abstract weights, XLA's figures beside the planner's.

Each family's DiT step is compiled at a reduced depth (2 blocks) that keeps the native sequence length, so what
the planner models per block (activations, attention tiles, the scanned layer's weights) is measured at real
size while the compile stays short; the planner's job is cut to the same depth. The layout is the one the
planner picks for the full model (default dtype) on 4 devices of 30.75 GiB (the seeds' TPU v4 chip) and on 8 of
80 GiB; the full depth is in `python -m bench dry_run` and the full table (`bench.bench_dry_run --table`). Weights are fp32 here: XLA's CPU backend runs bf16 dots in fp32
with fp32 copies of weights and activations, which accelerators do not (docs/DRY_RUN.md), so a bf16 compile on
CPU would measure the CPU's conversions rather than the model.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest

from vidax.zoo.plan.dry_run import compile_stage, dit_params, dry_run, per_device_bytes, stages_of, wan_vae_decode_units
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute.planner import GIB, Layout, dit_weight_bytes, plan, predict
from vidax.zoo.registry import make_pipeline

DEPTH = 2
TOLERANCE = 0.10
DEVICES, CHIP = 4, 30.75
# one model per family the dry run builds, at its native size; and the frames of a shorter video (fewer tokens)
MODELS = {"wan2.1-t2v-1.3b": 41, "cogvideox1.5-5b": 41, "hunyuanvideo-1.5-480p-t2v": 61, "cosmos3-nano": 45,
          "ltx-video-13b": 81, "cosmos-predict2.5-2b": 45, "hunyuanvideo": 65,
          "wan2.1-t2v-14b": 41,
          # offload under dp=2 sp=2 at 4 x 30.75 GiB: the compiled chunk with both streams (video, audio) split as
          # the embed leaves them (the audio was left whole and the hidden state not donated: XLA's figure was 1.7
          # times the planner's). At 2 blocks one chunk holds them all: no next chunk beside it
          "ltx-2": 65}


def _dit(model: str, frames: int | None = None, devices: int = DEVICES, chip: float = CHIP):
    options = GenerateOptions(model=model, prompt="", dtype="float32", frames=frames)
    family = make_pipeline(model, options)
    native = GenerateOptions(model=model, prompt="")  # the layout a default (bf16) run gets
    _, chosen = plan(make_pipeline(model, native).memory_job(native), devices, int(chip * GIB))
    (step,) = dry_run(family, options, chosen[0], devices, int(chip * GIB), depth=DEPTH, stages=("dit",)).stages
    return chosen[0], step, family.memory_job(options).tokens


@pytest.mark.parametrize("model", list(MODELS))
def test_dit_step_within_ten_percent_of_xla_and_linear_in_the_sequence(model):
    """Per model, three compiles in one test (so that parallel workers do not each compile them): the native
    length at the layout the planner picks for 4 x 30.75 GiB and for 8 x 80 GiB (more sequence or tensor
    parallel: each model's differs), the planner within 10% of XLA at both; and a shorter video at the first
    layout: attention never materialises S x S, so r times the tokens make at most ~r times the temporaries
    (r^2 if quadratic)."""
    native, eight = _dit(model), _dit(model, devices=8, chip=80)
    assert native[0] != eight[0], model
    for layout, step, _ in (native, eight):
        assert layout.devices > 1  # a sharded layout is what is being checked
        assert step.temp > 0 and step.flops > 0
        assert abs(step.planned - step.total) <= TOLERANCE * step.total, (model, layout.describe(),
                                                                            step.planned / 2**20, step.total / 2**20)
    (_, long, long_tokens), (_, short, short_tokens) = native, _dit(model, MODELS[model])
    ratio = long_tokens / short_tokens
    assert ratio > 1.4, (model, long_tokens, short_tokens)
    assert long.temp / short.temp < 1.25 * ratio, (model, ratio, short.temp / 2**20, long.temp / 2**20)


def test_hunyuan_video_i2v_dit_step_within_ten_percent_of_xla():
    """Image-to-video (token_replace): the step reads the first frame's latent from its condition, which the
    dry run's abstract condition left out (the registry table's run failed on it at both sizes)."""
    layout, step, _ = _dit("hunyuanvideo-i2v")
    assert abs(step.planned - step.total) <= TOLERANCE * step.total, (layout.describe(), step.planned / 2**20,
                                                                        step.total / 2**20)


def test_offloaded_dit_chunk_within_ten_percent_of_the_planner():
    """Wan2.1 14B at 720p with its blocks streamed one at a time under sp=4 (the seeds ran it with offload on
    4 x 30.75 GiB): the compiled chunk plus the embed/head weights and the next chunk, against the planner's
    offload figure."""
    model = "wan2.1-t2v-14b"
    options = GenerateOptions(model=model, prompt="", dtype="float32")
    layout = Layout(sp=4, offload_chunk=1)
    (chunk,) = dry_run(make_pipeline(model, options), options, layout, DEVICES, int(CHIP * GIB), depth=4,
                       stages=("dit",)).stages
    assert chunk.stage == "dit chunk (offload 1)" and chunk.alias > 0  # the hidden state is donated
    assert abs(chunk.planned - chunk.total) <= TOLERANCE * chunk.total, (chunk.planned / 2**20, chunk.total / 2**20)


# (model, height, width): the Wan2.1 VAE at 480p and 720p (Wan2.1 1.3B and 14B native), the Wan2.2 VAE at 704p
VAE_SIZES = (("wan2.1-t2v-1.3b", 480, 832), ("wan2.1-t2v-1.3b", 704, 1280), ("cosmos3-nano", 704, 1280))


@pytest.fixture(scope="module")
def vae_units():
    """XLA's figures for the decode's peak unit (the last stage of a steady chunk: one latent frame after the first,
    with its causal cache, the rest of the VAE and the frames so far beside it) and the planner's VAE figure, per
    size."""
    out = {}
    for model, height, width in VAE_SIZES:
        options = GenerateOptions(model=model, prompt="", height=height, width=width)
        family = make_pipeline(model, options)
        s = family.resolve_settings(options)
        config = family.model.vae if model.startswith("wan") else family.vae_config
        name, fn, args, donate, static, beside, _xla_only = wan_vae_decode_units(config, family.latent_shape(s))[-1]
        step = compile_stage(name, fn, args, donate=donate, static=static)
        step = dataclasses.replace(step, argument=step.argument + beside)
        out[(model, height, width)] = step, predict(family.memory_job(options), Layout()).vae
    return out


@pytest.mark.parametrize("size", VAE_SIZES, ids=lambda s: f"{s[0]}-{s[1]}p")
def test_wan_vae_decode_planner_within_ten_percent_of_xla(vae_units, size):
    step, planned = vae_units[size]
    assert abs(planned - step.total) <= TOLERANCE * step.total, (size, planned / 2**20, step.total / 2**20)


def test_wan_vae_decode_temp_memory_is_linear_in_pixels(vae_units):
    """The VAE's frame attention (over one latent frame at its smallest scale) stays far from S x S at these sizes:
    2.26 times the pixels, at most ~2.26 times the temporaries."""
    small, large = vae_units[VAE_SIZES[0]][0].temp, vae_units[VAE_SIZES[1]][0].temp
    ratio = (704 * 1280) / (480 * 832)
    assert large / small < 1.25 * ratio, (small / 2**20, large / 2**20)


def test_a_family_without_stages_is_refused_in_one_line(monkeypatch):
    from vidax.zoo.plan import dry_run as module

    monkeypatch.delitem(module.FAMILY_STAGES, "ltx2")  # every registry family has an entry now
    options = GenerateOptions(model="ltx-2", prompt="")
    with pytest.raises(PipelineError, match="--dry-run does not build the ltx2 family's stages yet"):
        dry_run(make_pipeline(options.model, options), options, Layout(), 1, GIB)


def test_an_odd_branch_batch_is_not_split_over_the_data_axis():
    """CFG + STG's three rows: `cfg_batch` splits a batch over dp=2 only when it divides it (LTX-Video's dry run:
    XLA's figure is the same at dp=2 as at dp=1), so the planner counts every row on every device and offers no
    dp=2 layout for it."""
    from vidax.zoo.compute.planner import DiTSizes, Job, candidate_layouts

    job = Job(DiTSizes(depth=4, dim=256, ffn_dim=1024, heads=8, block_params=10, other_params=10), tokens=4096, batch=3)
    assert predict(job, Layout(dp=2)).activations == predict(job, Layout()).activations
    assert all(layout.dp == 1 for layout in candidate_layouts(4, 8, 4, batch=3))
    even = dataclasses.replace(job, batch=4)
    assert predict(even, Layout(dp=2)).activations < predict(even, Layout()).activations


def test_ltx2_dit_step_resident_within_ten_percent_of_xla():
    """LTX-2 (video and audio streams, four guidance rows) resident at the layout the planner picks for 4 x 80 GiB
    (at 4 x 30.75 GiB it picks offload: in `MODELS`)."""
    model = "ltx-2"
    options = GenerateOptions(model=model, prompt="", dtype="float32")
    native = GenerateOptions(model=model, prompt="")
    _, chosen = plan(make_pipeline(model, native).memory_job(native), DEVICES, 80 * GIB)
    layout = chosen[0]
    assert layout.offload_chunk is None and layout.devices > 1, layout.describe()
    (step,) = dry_run(make_pipeline(model, options), options, layout, DEVICES, 80 * GIB, depth=DEPTH,
                      stages=("dit",)).stages
    assert abs(step.planned - step.total) <= TOLERANCE * step.total, (layout.describe(), step.planned / 2**20,
                                                                        step.total / 2**20)


@pytest.mark.parametrize("model", ["hunyuanvideo", "wan2.1-t2v-14b"])
def test_tensor_parallel_partial_sums_within_ten_percent_of_xla(model):
    """tp=4 at the native size: each row-parallel projection leaves a whole `[batch, tokens, dim]` partial sum
    whose all-reduction's output sits beside it. HunyuanVideo 1.0 (720p, 129 frames): the single blocks' five
    partial products are all-reduced together, the outputs beside the inputs (the planner counted one set: 0.78 of
    XLA's figure). Wan2.1-14B (720p): attention out, cross-attention out and MLP out each leave two whole units
    however many ways TP splits the rest (the planner counted the split MLP, 1.35 units: 0.87 of XLA's figure)."""
    options = GenerateOptions(model=model, prompt="", dtype="float32")
    (step,) = dry_run(make_pipeline(model, options), options, Layout(tp=4), DEVICES, int(CHIP * GIB), depth=DEPTH,
                      stages=("dit",)).stages
    assert abs(step.planned - step.total) <= TOLERANCE * step.total, (step.planned / 2**20, step.total / 2**20)


def test_the_planner_offers_no_sequence_split_the_heads_do_not_allow():
    """CogVideoX-2B's 30 heads on 8 x 80 GiB: the planner chose sp=4, which Ulysses cannot split 30 heads over (the
    full-depth dry run bench failed there with the mesh's error); every layout it offers now builds its mesh."""
    from vidax.zoo.compute.mesh import check_heads
    from vidax.zoo.compute.planner import candidate_layouts

    options = GenerateOptions(model="cogvideox-2b", prompt="")
    job = make_pipeline(options.model, options).memory_job(options)
    _, chosen = plan(job, 8, 80 * GIB)
    check_heads(job.dit.heads, chosen[0].tp, chosen[0].sp)
    for layout in candidate_layouts(8, 30, 30):
        check_heads(30, layout.tp, layout.sp)


@pytest.mark.parametrize("model", list(MODELS))
def test_planned_dit_weights_are_the_placed_shards(model):
    """Under TP each device holds a shard of what the rules split and the whole of the rest: the adaLN modulation
    linears stay whole (a third of a HunyuanVideo-1.5 block, 29% of HunyuanVideo's, 14% of CogVideoX's), and the
    rules split some parameters outside the blocks (HunyuanVideo's token refiner). The planner counted every block
    split and everything else whole: at 8 x 80 GiB, fp32, full depth, its DiT step was 10-22% under XLA's figure
    for those families at tp=2. Its weight figure is now the bytes of the placed shards (full depth, abstract)."""
    options = GenerateOptions(model=model, prompt="", dtype="float32")
    family = make_pipeline(model, options)
    dit = stages_of(family).dit(family, family.resolve_settings(options), None, jnp.float32)
    job = family.memory_job(options)
    for tp in (2, 4):
        placed = per_device_bytes(dit_params(dit, jnp.float32, make_mesh(tp=tp), family.transformer_rules))
        planned = dit_weight_bytes(job, Layout(tp=tp))
        assert abs(planned - placed) <= 0.005 * placed, (tp, planned / 2**20, placed / 2**20)
