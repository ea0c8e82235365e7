"""Memory planner: predicted bytes per device for a (model, resolution, frames, mesh, offload) choice.

The prediction is arithmetic over the sizes that drive memory — parameter counts, the token
count, widths — so it runs in microseconds for every candidate layout, and a test checks it
against XLA's own compiled memory analysis on models small enough to compile here.

Stages run one after another (text encode, denoise, decode); with `release_stages` a finished
stage's weights leave the device before the next stage starts, so the peak is the largest stage
rather than their sum.
"""

from __future__ import annotations

import dataclasses
import math

from vidax.zoo.compute.kernels.blockwise import BLOCK_KV, BLOCK_Q

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class DiTSizes:
    """What a family's transformer config contributes to memory (see each family's `dit_sizes`)."""

    depth: int
    dim: int
    ffn_dim: int
    heads: int
    block_params: int  # parameters in one block (the largest kind's, with several block groups)
    other_params: int  # embeddings, head, everything outside the blocks
    text_dim: int = 0  # width of the text tokens the blocks cross-attend to (0 = joint or none)
    total_block_params: int | None = None  # every block of every group (None: depth x block_params)
    mlp_inputs: int = 1  # [dim, ffn] matrices of one block (gated MLPs: 2; a second pathway doubles it)
    mlp_outputs: int = 1  # [ffn, dim] matrices of one block
    # [batch, tokens, dim] products of one block summed into one output (a block whose attention and MLP run side
    # by side into one output projection kept as row blocks: HunyuanVideo 1.0's single blocks, 5). XLA runs the
    # independent products before their sum, so all are live at once, whole under tp > 1 too, where its
    # all-reduce combiner joins their all-reductions into one whose outputs sit beside its inputs (twice as many)
    partial_sums: int = 0
    # parameters of every block that TP leaves whole on each device: their logical spec names no axis the rules
    # split over "tensor" (the adaLN modulation linears of HunyuanVideo, CogVideoX and Cosmos-Predict2.5, a third
    # of a HunyuanVideo-1.5 block; counted as split, the DiT step at tp=2 was 10-22% under XLA's figure)
    whole_block_params: int = 0
    # parameters outside the blocks that TP does split (HunyuanVideo's token refiner: attention and MLP)
    split_other_params: int = 0
    # [batch, tokens, dim] activations every block step holds besides its own, carried from block to block: split
    # with the rows (dp) and tokens (sp), whole under TP. Wan VACE: its hints (one per VACE layer, activation dtype),
    # made by the VACE blocks and read by the main blocks, and the video stream (residual dtype) beside the control
    # stream while the VACE blocks run
    carried_activations: int = 0
    carried_streams: int = 0

    @property
    def all_blocks(self) -> int:
        return self.total_block_params if self.total_block_params is not None else self.depth * self.block_params


_PARAM_COUNTS: dict[tuple, int] = {}


def abstract_param_count(module, *example_inputs) -> int:
    """Parameters of a linen module, from `jax.eval_shape` of its init (nothing is allocated).

    Tracing a multi-billion-parameter encoder's init takes seconds, and many models share one (every Wan
    the same UMT5, every HunyuanVideo-1.5 variant the same Qwen2.5-VL and ByT5), so the count is kept per
    process, keyed by the module's class and fields (its repr) and the inputs' shapes and dtypes, and on disk
    beside the compile cache (`compute.shape_memo`)."""
    import jax

    from vidax.zoo.compute.shape_memo import remembered

    key = (type(module), repr(module), tuple((tuple(x.shape), str(x.dtype)) for x in example_inputs))
    if key not in _PARAM_COUNTS:
        def count() -> int:
            shapes = jax.eval_shape(module.init, jax.random.key(0), *example_inputs)
            return int(sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes)))

        named = (f"{type(module).__module__}.{type(module).__qualname__}", *key[1:])
        _PARAM_COUNTS[key] = remembered("param-count", named, count)
    return _PARAM_COUNTS[key]


def dit_sizes(param_shapes: dict[str, tuple[int, ...]], *, dim: int, ffn_dim: int, heads: int, text_dim: int = 0,
              groups: tuple[str, ...] = ("blocks",), whole_under_tp: frozenset[str] | None = None) -> DiTSizes:
    """DiTSizes from a model's flat param shapes (`{"blocks/...": (L, ...), ...}`, zoo/parts/dit.py layout).

    `groups` are the stacked block groups (HunyuanVideo 1.0: `blocks`, `single_blocks`): depth counts
    the blocks of all of them, and `block_params` is the largest group's block (what an offload chunk
    of that group holds, so the prediction does not undercount). `whole_under_tp`: the paths TP keeps whole,
    in the blocks and outside them (`StackedTransformer.tensor_whole_paths`; None: every block param split, every
    other whole). `StackedTransformer.memory_sizes` passes all of these.
    """
    count = lambda shapes: sum(math.prod(shape) for shape in shapes)  # noqa: E731
    depth, largest, total, stacked = 0, 0, 0, set()
    for group in groups:
        paths = [path for path in param_shapes if path.startswith(f"{group}/")]
        if not paths:
            raise ValueError(f"no stacked block parameters (paths under {group}/)")
        layers = param_shapes[paths[0]][0]
        group_params = count(param_shapes[p] for p in paths)
        depth += layers
        total += group_params
        largest = max(largest, group_params // layers)
        stacked.update(paths)
    others = [shape for path, shape in param_shapes.items() if path not in stacked]
    block = [param_shapes[path][1:] for path in stacked]
    inputs, outputs = block.count((dim, ffn_dim)), block.count((ffn_dim, dim))
    if whole_under_tp is None:
        whole, split_others = 0, 0
    else:
        whole = count(param_shapes[path] for path in stacked & whole_under_tp)
        split_others = count(shape for path, shape in param_shapes.items() if path not in stacked | whole_under_tp)
    return DiTSizes(depth, dim, ffn_dim, heads, largest, count(others), text_dim, total, max(inputs, 1),
                    max(outputs, 1), whole_block_params=whole, split_other_params=split_others)


@dataclasses.dataclass(frozen=True)
class Job:
    """One generation: the model's sizes, the token counts, and the dtypes it runs with."""

    dit: DiTSizes
    tokens: int  # video tokens per sample
    text_tokens: int = 512
    batch: int = 2  # 2 with classifier-free guidance
    weight_bytes: int = 2
    activation_bytes: int = 2
    residual_bytes: int = 4  # Wan keeps an fp32 residual stream
    text_encoder_params: int = 0
    text_encoder_bytes: int = 2
    vae_params: int = 0
    vae_weight_bytes: int | None = None  # None: weight_bytes (a VAE kept in fp32 under bf16 DiT weights: 4)
    vae_peak_activation_bytes: int = 0  # the decoder's largest per-chunk working set
    blockwise_attention: bool = True  # the CPU / fallback kernel; False for cuDNN or Pallas flash
    q_block: int = BLOCK_Q  # the blockwise kernel's tile
    kv_block: int = BLOCK_KV
    block_weight_bytes: float | None = None  # bytes per block parameter when it differs (--weights-dtype int8/fp8)
    step_input_bytes: int = 0  # inputs every device holds whole besides the latents (LTX-Video's RoPE tables)
    attention_input_copies: int = 0  # the blockwise kernel's copies of q, k, v (BLOCKWISE_LAYOUT_COPIES: Wan)
    # the DiT's blocks are the folder's file pages, mapped in place (a CPU run, layer by layer, of a converted folder
    # in its own dtypes: `layouts.blocks_stay_in_files`): the kernel reads a block's pages in when the block runs
    # and may drop them again under pressure, so on a CPU host they need no room beyond the blocks being run
    blocks_in_files: bool = False
    # [batch, tokens, dim] activation-dtype units one TPU device's step holds beyond what the terms below count,
    # as XLA's TPU buffer report shows them at the family's native size (each family names the buffers where
    # it sets this: RoPE's fp32 products laid out for the head split, copies a scan carries, ...); counted on one
    # device, where they were measured
    accelerator_units: float = 0.0


@dataclasses.dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    sp: int = 1
    offload_chunk: int | None = None  # blocks per streamed chunk; None = all resident

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.sp

    def describe(self) -> str:
        offload = f"offload {self.offload_chunk}" if self.offload_chunk else "resident"
        return f"dp={self.dp} tp={self.tp} sp={self.sp} {offload}"


@dataclasses.dataclass(frozen=True)
class Prediction:
    weights: int
    activations: int
    text_encoder: int
    vae: int
    release_stages: bool

    @property
    def denoise_peak(self) -> int:
        resident_text = 0 if self.release_stages else self.text_encoder
        return self.weights + self.activations + resident_text

    def largest_stage(self) -> tuple[str, int]:
        """The stage that sets the peak, and its bytes (with the stages released one after another)."""
        stages = {"the text encoder": self.text_encoder, "the DiT step": self.denoise_peak, "the VAE decode": self.vae}
        name = max(stages, key=stages.get)
        return name, self.total

    @property
    def total(self) -> int:
        if self.release_stages:
            return max(self.text_encoder, self.denoise_peak, self.vae)
        return self.weights + self.text_encoder + max(self.activations, self.vae)


def dit_weight_bytes(job: Job, layout: Layout) -> int:
    """Resident DiT weights per device: TP splits each block's params except those it keeps whole
    (`DiTSizes.whole_block_params`); offload keeps two chunks on device."""
    d = job.dit
    if layout.offload_chunk is None:
        blocks = d.all_blocks
    else:  # two chunks of the largest block kind on device
        blocks = min(d.depth, 2 * layout.offload_chunk) * d.block_params
    whole = blocks * d.whole_block_params / d.all_blocks
    per_block_param = job.block_weight_bytes if job.block_weight_bytes is not None else job.weight_bytes
    others = d.other_params - d.split_other_params + d.split_other_params / layout.tp
    return int(((blocks - whole) / layout.tp + whole) * per_block_param + others * job.weight_bytes)


def dit_activation_bytes(job: Job, layout: Layout) -> int:
    """Peak activations of one block's forward per device (inference: nothing kept for backward).

    Counted in units of the hidden state `[batch, tokens, dim]`: the residual stream plus one
    activation-sized buffer that follows the heads' split (XLA's buffer assignment on CPU keeps
    the normalised input only in that form; the coefficients were checked against
    `compiled.memory_analysis()` across widths, lengths, tp and sp), then the larger of the attention phase (q, k, v and the output,
    split over heads by TP; Ulysses trades sequence for heads, so the total stays) and the MLP
    phase (hidden before and after the nonlinearity). The blockwise kernel adds its score tiles
    (logits and probabilities, `[batch, 1, q_block, kv_block]` fp32: one head per step on the CPU,
    where it runs); flash kernels keep theirs
    in on-chip memory.
    """
    d = job.dit
    batch = rows_per_device(job.batch, layout.dp)
    seq = math.ceil(job.tokens / layout.sp)
    act, res = job.activation_bytes, job.residual_bytes
    unit = batch * seq * d.dim
    residual = unit * (res + act / layout.tp)
    attention = unit * 4 * act / layout.tp
    if job.blockwise_attention:  # one head per step where it runs (the CPU): its logits and probabilities
        tile = min(job.q_block, job.tokens) * min(job.kv_block, job.tokens)
        attention += 2 * batch * tile * 4 + unit * job.attention_input_copies * act / layout.tp
    hidden = (d.ffn_dim / d.dim) * mlp_hidden_buffers(d) / layout.tp / ffn_chunks(job, layout) + d.partial_sums
    # under TP a row-parallel projection (attention out, MLP out) leaves whole [batch, tokens, dim] partial sums,
    # the all-reduction's outputs beside them: at least two whole units however many ways TP splits the rest
    reduced = 2 * max(d.partial_sums, 1) if layout.tp > 1 else 0
    mlp = unit * max(hidden, reduced) * act
    text = batch * job.text_tokens * (d.text_dim + 2 * d.dim / layout.tp) * act if d.text_dim else 0
    modulation = batch * 6 * d.dim * 4
    carried = unit * (d.carried_activations * act + d.carried_streams * res)
    measured = unit * job.accelerator_units * act if _one_accelerator_device(layout, "tpu") else 0
    return int(residual + max(attention, mlp) + text + modulation + carried + scanned_mlp_bytes(job, layout)
               + job.step_input_bytes + measured)


def _one_accelerator_device(layout: Layout, kind: str | None = None) -> bool:
    """Whether the layout runs on one accelerator device (of platform `kind`, where given)."""
    from vidax.zoo.compute.runtime import platform

    return platform() != "cpu" and (kind is None or platform() == kind) and layout.devices == 1


# [batch, tokens, dim] copies the blockwise kernel makes of its inputs when q and k come rotated (RoPE): q, k and v
# each re-laid out in its blocks (`[blocks, block, head_dim]`; XLA's buffer report for the Wan2.1 14B step at 720p
# shows them beside the rotated q and k; a toy DiT without RoPE, tests/fit, has none). Only a block whose attention
# phase outweighs its MLP sees them (the 14B's MLP is 2.7 x dim wide, every other family's 4 x or more): its
# resident step (dp=2 sp=2, 2 blocks, fp32) was 15% under XLA's figure without them, 5% under with them; its
# offloaded chunk (sp=4, one block) 5% over. The Wan family sets `Job.attention_input_copies` to it.
BLOCKWISE_LAYOUT_COPIES = 3


# [batch, tokens, dim] activation-dtype buffers live in a block's attention sub-block on an accelerator: its
# modulated input, q, k, v, the attention output and its projection. Where these outgrow ATTENTION_ROWS_SHARE of
# the device, Wan's self-attention takes q/k/v heads-major from its projections (no padded, transposed copies;
# `heads_major_needed`), and may run one CFG row at a time (`kernels/heads_major.attention_rows`, opt-in with
# VIDAX_ATTENTION_ROWS=auto: it did not lower the Wan 720p peak, so `dit_activation_bytes` does not count it):
# Wan2.1-14B at 720p (75,600 tokens x 5120, the CFG pair: 9.3 GB) on a 15.75 GiB TPU v5e, not at 480p (4.0 GB).
ATTENTION_PHASE_UNITS = 6
ATTENTION_ROWS_SHARE = 0.3


def heads_major_needed(batch: int, tokens: int, width: int, activation_bytes: int, device_bytes: int) -> bool:
    """Whether self-attention takes q/k/v heads-major from its projections (`kernels/heads_major.py`): where the
    sub-block's activations outgrow ATTENTION_ROWS_SHARE of the device (the `[B, S, H, D]` program holds q/k/v
    twice there: padded, transposed copies)."""
    return batch * tokens * width * activation_bytes * ATTENTION_PHASE_UNITS > ATTENTION_ROWS_SHARE * device_bytes


def attention_by_rows(batch: int, tokens: int, width: int, activation_bytes: int, device_bytes: int) -> bool:
    """Whether the attention sub-block runs one batch row at a time, where asked (`kernels/heads_major`): the
    same rule, for a batch of rows."""
    return batch > 1 and heads_major_needed(batch, tokens, width, activation_bytes, device_bytes)


def rows_per_device(batch: int, dp: int) -> int:
    """The branch rows one device runs: `sharding.cfg_batch` splits the batch over the data axis only when
    the axis divides it (CFG + STG's three rows stay whole on every device under dp=2)."""
    return batch // dp if batch % dp == 0 else batch


def ffn_chunks(job: Job, layout: Layout) -> int:
    """The token chunks one device's feed-forward runs in (`layers.ffn_token_chunks`, the same rule): on one
    accelerator device, pieces of at most `FFN_CHUNK_BYTES` of hidden activation; one elsewhere."""
    from vidax.zoo.compute.layers import ffn_chunk_count

    if not _one_accelerator_device(layout):
        return 1
    return ffn_chunk_count(rows_per_device(job.batch, layout.dp), job.tokens, job.dit.ffn_dim, job.activation_bytes)


def mlp_hidden_buffers(d: DiTSizes) -> float:
    """ffn-wide buffers live in the MLP: before and after the nonlinearity, and a gated MLP's second input
    (gate, up, their product: 3). A block with two pathways runs them one after the other."""
    return d.mlp_inputs / d.mlp_outputs + 1


def scanned_mlp_bytes(job: Job, layout: Layout) -> int:
    """The MLP weights of the block being run, sliced out of the layer stack into buffers of their own: XLA
    copies a scanned layer's [dim, ffn] and [ffn, dim] matrices before its dots (`vidax-gen --dry-run`'s
    buffer report shows them beside the activations; attention's square matrices are read in place)."""
    d = job.dit
    return int((d.mlp_inputs + d.mlp_outputs) * d.dim * d.ffn_dim * job.weight_bytes / layout.tp)


def predict(job: Job, layout: Layout, release_stages: bool = True) -> Prediction:
    # the pipelines run the text encoder and the VAE on one device: only the DiT is split
    text_encoder = int(job.text_encoder_params * job.text_encoder_bytes)
    vae = int(job.vae_params * (job.vae_weight_bytes or job.weight_bytes) + job.vae_peak_activation_bytes)
    return Prediction(dit_weight_bytes(job, layout), dit_activation_bytes(job, layout), text_encoder, vae, release_stages)


def candidate_layouts(devices: int, heads: int, depth: int, *, all_devices: bool = False, batch: int = 2) -> list[Layout]:
    """Every (dp, tp, sp, offload) whose mesh fits `devices`, whose tp divides the heads and whose sp divides
    each device's share of them;
    `all_devices` keeps only meshes of exactly `devices` (a multi-process run spans every process)."""
    out = []
    for dp in (1, 2) if batch % 2 == 0 else (1,):  # the data axis splits CFG's branches: idle at an odd batch
        for tp in _powers_of_two(devices):
            for sp in _powers_of_two(devices):
                # Ulysses sp splits each device's heads again (`mesh.check_heads`): 30 heads take no sp=4
                split = heads % tp == 0 and (heads // tp) % sp == 0
                if dp * tp * sp > devices or not split or (all_devices and dp * tp * sp != devices):
                    continue
                for chunk in (None, *_offload_chunks(depth)):
                    out.append(Layout(dp, tp, sp, chunk))
    return out


def relative_step_time(job: Job, layout: Layout) -> float:
    """A coarse cost model for ranking layouts: compute split over devices, plus communication and
    offload penalties. Only the order matters; it is not a time prediction."""
    compute = job.batch * job.tokens * job.dit.depth / layout.devices
    communication = 1 + 0.08 * (layout.tp - 1) + 0.04 * (layout.sp - 1)
    offload = 1.0 if layout.offload_chunk is None else 1 + 0.25 / layout.offload_chunk
    return compute * communication * offload


def plan(job: Job, devices: int, device_bytes: int, release_stages: bool = True, *, all_devices: bool = False,
         host_is_device: bool = False):
    """All candidate layouts with their predictions, fastest first; and the fastest that fits (or None).

    `all_devices`: only layouts over every device (multi-process runs; `--plan --devices N` counts the
    devices of all hosts). `host_is_device`: the devices are this host's CPU, so blocks offloaded to host memory
    stay in the same memory (`fits`)."""
    rows = []
    for layout in candidate_layouts(devices, job.dit.heads, job.dit.depth, all_devices=all_devices, batch=job.batch):
        prediction = predict(job, layout, release_stages)
        rows.append((layout, prediction, fits(job, layout, prediction, device_bytes, host_is_device)))
    rows.sort(key=lambda row: (relative_step_time(job, row[0]), row[1].total))
    chosen = next((row for row in rows if row[2]), None)
    return rows, chosen


def need(job: Job, layout: Layout, prediction: Prediction, host_is_device: bool = False) -> tuple[str, int]:
    """The stage that sets the layout's peak and the bytes a device needs for it. On a CPU the host is the device:
    blocks an offloaded layout keeps in host memory stay beside the DiT step's peak in the same RAM (HunyuanVideo's
    25.6 GB DiT "offloaded" on a 24 GB host was killed by the kernel), so there they count too; blocks that are the
    folder's own file pages (`Job.blocks_in_files`) do not: the kernel pages them in and out as the blocks run,
    so a DiT larger than the host's memory runs, reading its blocks from the disk at every step."""
    stage, peak = prediction.largest_stage()
    if host_is_device and job.blocks_in_files and layout == Layout():
        # one device, resident: the blocks beyond the two in use stay in the folder's file pages, not in RAM
        paged = dit_weight_bytes(job, layout) - dit_weight_bytes(job, Layout(offload_chunk=1))
        stages = {"the text encoder": prediction.text_encoder, "the VAE decode": prediction.vae,
                  "the DiT step": prediction.denoise_peak - paged}
        stage = max(stages, key=stages.get)
        return stage, stages[stage]
    if host_is_device and layout.offload_chunk is not None:
        resident = dataclasses.replace(layout, offload_chunk=None)
        held = dit_weight_bytes(job, resident) - dit_weight_bytes(job, layout)
        return ("the DiT step", prediction.denoise_peak + held) if prediction.denoise_peak + held > peak else (stage, peak)
    return stage, peak


def fits(job: Job, layout: Layout, prediction: Prediction, device_bytes: int, host_is_device: bool = False) -> bool:
    """Whether the layout's peak (`need`) fits a device."""
    return need(job, layout, prediction, host_is_device)[1] <= device_bytes


def device_memory_bytes() -> tuple[int, int]:
    """(device count, bytes per device) of the local backend: the allocator's limit on accelerators,
    an even share of host RAM on CPU; the targeted chips' while compiling for them (`--target`)."""
    import jax
    import psutil

    from vidax.zoo.compute.runtime import target_memory

    if target_memory() is not None:
        return target_memory()
    devices = jax.devices()
    stats = devices[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    if not limit:
        limit = psutil.virtual_memory().total // len(devices)
    return len(devices), int(limit)


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(limit)) + 1)] if limit >= 1 else [1]


def _offload_chunks(depth: int) -> list[int]:
    return sorted({c for c in (1, 2, 4, 8) if 2 * c < depth})  # two chunks resident: larger is all
