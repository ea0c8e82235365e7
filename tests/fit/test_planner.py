"""The memory planner against XLA's own compiled memory analysis, and against the paper's table."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from vidax.zoo.parts.dit import forward
from vidax.zoo.compute.mesh import make_mesh
from vidax.zoo.compute import planner
from vidax.zoo.compute.planner import GIB, DiTSizes, Job, Layout, plan, predict
from vidax.zoo.compute.runtime import use_mesh

from .toy_dit import ToyDiT, block_shardings


def _sizes(model: ToyDiT, params) -> DiTSizes:
    count = lambda tree: int(sum(np.prod(a.shape) for a in jax.tree.leaves(tree)))  # noqa: E731
    others = {k: v for k, v in params.items() if k != "blocks"}
    return DiTSizes(model.depth, model.dim, 2 * model.dim, model.heads, count(params["blocks"]) // model.depth, count(others))


def _xla_bytes(model, params, x, t, in_shardings=None):
    fn = jax.jit(lambda p, x, t: forward(model, p, x, t), in_shardings=in_shardings)
    analysis = fn.lower(params, x, t).compile().memory_analysis()
    return analysis.argument_size_in_bytes + analysis.temp_size_in_bytes + analysis.output_size_in_bytes


def _abstract(model, batch, tokens):
    x = jax.ShapeDtypeStruct((batch, tokens, model.channels), jnp.float32)
    t = jax.ShapeDtypeStruct((batch, 16), jnp.float32)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape), jnp.zeros(t.shape)))
    return params, x, t


def _predicted(job: Job, layout: Layout, io_bytes: int) -> int:
    prediction = predict(job, layout)
    return prediction.weights + prediction.activations + io_bytes


# 20%: the planner counts buffers per layer kind; XLA's buffer assignment reuses and fuses some.
TOLERANCE = 0.20


@pytest.mark.parametrize(
    "dim, heads, depth, tokens, batch",
    [(256, 4, 2, 2048, 2), (256, 4, 4, 8192, 2), (512, 8, 2, 4096, 1), (1024, 4, 2, 2048, 2)],
)
def test_prediction_matches_xla_memory_analysis(dim, heads, depth, tokens, batch):
    model = ToyDiT(dim=dim, heads=heads, depth=depth, channels=16)
    params, x, t = _abstract(model, batch, tokens)
    job = Job(_sizes(model, params), tokens=tokens, text_tokens=0, batch=batch, weight_bytes=4, activation_bytes=4, residual_bytes=4)
    io = 2 * batch * tokens * model.channels * 4
    predicted, measured = _predicted(job, Layout(), io), _xla_bytes(model, params, x, t)
    assert abs(predicted - measured) <= TOLERANCE * measured, (predicted / 2**20, measured / 2**20)


@pytest.mark.parametrize("tp, sp", [(2, 1), (1, 4), (2, 2)])
def test_prediction_under_tensor_and_sequence_parallel_matches_xla(tp, sp):
    model = ToyDiT(dim=512, heads=8, depth=2, channels=16)
    params, x, t = _abstract(model, 2, 8192)
    mesh = make_mesh(dp=1, tp=tp, sp=sp, devices=jax.devices()[: tp * sp])
    replicated = NamedSharding(mesh, P())
    shardings = {k: jax.tree.map(lambda _: replicated, v) for k, v in params.items()}
    shardings["blocks"] = block_shardings(mesh, params["blocks"])
    with use_mesh(mesh):
        measured = _xla_bytes(model, params, x, t, in_shardings=(shardings, NamedSharding(mesh, P(None, "sequence")), replicated))
    job = Job(_sizes(model, params), tokens=8192, text_tokens=0, batch=2, weight_bytes=4, activation_bytes=4, residual_bytes=4)
    io = 2 * 2 * 8192 * model.channels * 4 // sp
    predicted = _predicted(job, Layout(tp=tp, sp=sp), io)
    assert abs(predicted - measured) <= TOLERANCE * measured, (predicted / 2**20, measured / 2**20)


def _wan14b_720p() -> Job:
    dim, ffn, heads, depth = 5120, 13824, 40, 40
    block = 8 * dim * dim + 2 * dim * ffn + 8 * dim
    return Job(
        DiTSizes(depth, dim, ffn, heads, block, 50_000_000, text_dim=dim),
        tokens=21 * 45 * 80,  # 81 frames, 720x1280: latent 21x90x160, patch 1x2x2
        text_encoder_params=5_700_000_000,
        vae_params=127_000_000,
        vae_peak_activation_bytes=8 * GIB,
    )


def test_wan14b_720p_on_four_v4_chips_needs_offload_or_sequence_parallel():
    """The paper ran Wan2.1-14B at 720p/81 frames on 4 x 30.75 GB with offload (or SP)."""
    rows, chosen = plan(_wan14b_720p(), devices=4, device_bytes=int(30.75 * GIB))
    fits = {layout for layout, _, ok in rows if ok}
    assert not any(l.sp == 1 and l.tp == 1 and l.offload_chunk is None for l in fits)
    assert any(l.offload_chunk is not None for l in fits) and any(l.sp > 1 for l in fits)
    assert chosen is not None and chosen[2]


def test_chunk_one_offload_keeps_two_blocks_resident():
    job = _wan14b_720p()
    resident = predict(job, Layout()).weights
    streamed = predict(job, Layout(offload_chunk=1)).weights
    block = job.dit.block_params * job.weight_bytes
    assert streamed == 2 * block + job.dit.other_params * job.weight_bytes
    assert resident == job.dit.depth * block + job.dit.other_params * job.weight_bytes


def test_on_a_cpu_offloaded_blocks_stay_in_the_same_memory():
    """On an accelerator offloading the 14B's blocks to the host makes one 30.75 GB device enough; where the host's
    CPU is the device (`host_is_device`), the offloaded blocks stay in that memory beside the step's peak, so no
    offload row fits what the resident one does not (HunyuanVideo's 25.6 GB DiT "offloaded" on a 24 GB CPU host was
    killed by the kernel; now the run stops before any work)."""
    job, room = _wan14b_720p(), int(30.75 * GIB)
    rows, chosen = plan(job, devices=1, device_bytes=room)
    assert chosen is not None and chosen[0].offload_chunk is not None
    rows, chosen = plan(job, devices=1, device_bytes=room, host_is_device=True)
    assert chosen is None and not any(ok for _, _, ok in rows)
    stage, need = planner.need(job, Layout(offload_chunk=1), predict(job, Layout(offload_chunk=1)), True)
    assert stage == "the DiT step" and need > room


def test_on_a_cpu_blocks_that_are_file_pages_need_room_for_two():
    """A CPU run of a converted folder places the DiT's blocks as the folder's own mapped pages (`Job.blocks_in_files`):
    the kernel reads a block in when it runs and drops it under pressure, so a DiT larger than the host's memory runs
    (Wan2.1-14B's 28.6 GB on a 24 GB host: docs/SYNTHETIC.md). The need counts two blocks of it, and the larger of the
    other stages; on an accelerator, where the blocks are copied to the device, nothing changes."""
    job = dataclasses.replace(_wan14b_720p(), blocks_in_files=True, vae_peak_activation_bytes=0)
    resident = predict(job, Layout())
    room = int(0.6 * resident.weights)  # less than the DiT's weights alone
    rows, chosen = plan(job, devices=1, device_bytes=room, host_is_device=True)
    assert chosen is not None and chosen[0] == Layout()
    paged = (job.dit.depth - 2) * job.dit.block_params * job.weight_bytes
    stage, need = planner.need(job, Layout(), resident, True)
    assert need == max(resident.denoise_peak - paged, resident.text_encoder, resident.vae)
    assert stage == ("the DiT step" if need == resident.denoise_peak - paged else "the text encoder")
    assert planner.need(job, Layout(), resident, False)[1] == resident.total  # an accelerator's device holds them
    assert planner.need(dataclasses.replace(job, blocks_in_files=False), Layout(), resident, True)[1] > room
