"""The layout a generation runs with: the memory planner's table for a request (`--plan`), and the fastest
layout that fits when the flags give none."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

import jax

from vidax.zoo.errors import PipelineError
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.compute.runtime import platform, target_memory

def _layout_given(options: GenerateOptions) -> bool:
    return any(v is not None for v in (options.tp, options.sp, options.dp, options.offload_chunk))


@dataclasses.dataclass
class LayoutPlan:
    """The memory planner's answer for one request.

    rows: `(Layout, Prediction, fits)`, fastest first (one row: the layout the flags gave).
    chosen: the fastest row that fits, or None.
    devices, device_bytes: what it planned for.
    size: the video it planned for ("832x480, 81 frames").
    idle: devices that even the largest layout of `rows` leaves without work.
    given: whether the rows are the layout the flags gave.
    host_is_device: the devices are this host's CPU (offloaded blocks stay in the same memory).
    job: what the planner planned (`planner.Job`).
    """

    rows: list
    chosen: tuple | None
    devices: int
    device_bytes: int
    size: str
    idle: int
    given: bool = False
    host_is_device: bool = False
    job: Any = None

    def peak(self, layout: Any, prediction: Any) -> int:
        """The bytes a device needs for the layout's largest stage, as `fits` counts them (`planner.need`)."""
        from vidax.zoo.compute.planner import need

        return need(self.job, layout, prediction, self.host_is_device)[1]

    def refusal(self, model: str) -> str:
        """The one line saying why nothing fits: the stage of the row that needs least, its need and the room."""
        from vidax.zoo.compute.planner import need

        needs = [(row[0], need(self.job, row[0], row[1], self.host_is_device)) for row in self.rows]
        layout, (stage, needed) = min(needs, key=lambda row: row[1][1])
        room = "of host memory" if self.host_is_device else "per device"
        return (f"{model} at this size does not fit: {stage} needs about {needed / 2**30:.1f} GiB per device even "
                f"with {layout.describe()}; {self.devices} device(s) have {self.device_bytes / 2**30:.1f} GiB {room}")

    def paged_note(self) -> str:
        """What a run on this host does with DiT blocks that stay file pages ("" when they do not)."""
        if not (self.host_is_device and self.job.blocks_in_files):
            return ""
        return ("on this host the DiT's blocks stay the folder's file pages (a resident row's peak counts the two "
                "being run): where they outgrow the memory, each step reads them from the disk again")

    def idle_note(self) -> str:
        """Why some devices would get no work ("" when every one can)."""
        if not self.idle:
            return ""
        used = self.devices - self.idle
        why = (f"the layout given uses {used}" if self.given else f"layouts use at most {used} (tp and sp split "
               "the attention heads in powers of two, dp is 1 or 2)")
        return f"{self.idle} of the {self.devices} devices would stay idle: {why}"


def plan_layouts(pipeline: Any, options: GenerateOptions, devices: int | None = None,
                 device_bytes: int | None = None) -> LayoutPlan:
    """The memory planner's table for this model and size, for the layout flags given (`--tp/--sp/--dp/
    --offload-chunk`: that layout alone, checked as a run would check it) or else every candidate.
    Devices and their memory default to the local backend's.
    """
    from vidax.zoo.compute.distributed import multiprocess
    from vidax.zoo.compute.planner import device_memory_bytes, plan

    if not hasattr(pipeline, "memory_job"):
        raise PipelineError(f"{options.model}: this family has no memory model for --plan yet")
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, numbers.Integral) or devices < 1):
        raise PipelineError(f"--devices must be a positive integer, got {devices!r}")
    if device_bytes is not None and device_bytes <= 0:
        raise PipelineError(f"--device-memory must be positive, got {device_bytes / 2**30:g} GiB")
    local_devices, local_bytes = device_memory_bytes()
    # the host's own CPU as the devices (no --devices / --device-memory / --target asked for others)
    host_is_device = platform() == "cpu" and devices is None and device_bytes is None and target_memory() is None
    devices, device_bytes = devices or local_devices, device_bytes or local_bytes
    job = pipeline.memory_job(options)
    if host_is_device and _runs_layer_by_layer(job) and blocks_stay_in_files(pipeline, options):
        job = dataclasses.replace(job, blocks_in_files=True)
    s = pipeline.resolve_settings(options)
    if _layout_given(options):
        rows = [_given_layout(job, options, devices, device_bytes, host_is_device)]
        chosen = rows[0] if rows[0][2] else None
    else:
        rows, chosen = plan(job, devices, device_bytes, options.release_stages, all_devices=multiprocess(),
                            host_is_device=host_is_device)
    idle = devices - max((row[0].devices for row in rows), default=0)
    return LayoutPlan(rows, chosen, devices, device_bytes, f"{s.width}x{s.height}, {s.frames} frames", idle,
                      _layout_given(options), host_is_device, job)


def _runs_layer_by_layer(job: Any) -> bool:
    """Whether a CPU run places this DiT a block at a time (`runtime.runs_layer_by_layer`): a whole-model program
    could hold converted copies of every block's weights at once."""
    from vidax.zoo.compute.planner import Layout, dit_weight_bytes
    from vidax.zoo.compute.runtime import runs_layer_by_layer

    return runs_layer_by_layer(dit_weight_bytes(job, Layout()))


def blocks_stay_in_files(pipeline: Any, options: GenerateOptions) -> bool:
    """Whether a CPU run would place the DiT's weights as the folder's own file pages: a `vidax-convert` folder
    (mmapped, 64-byte aligned, so a CPU placement aliases it) read in its own dtypes (no `--dtype float32` cast of
    bf16 leaves), with nothing merged or re-quantized into the blocks (`--lora`, `--weights-dtype`) and no DiT
    file given beside the folder. Reads manifests and headers only."""
    from vidax.zoo.weights.dit_file import dit_file

    if options.lora or getattr(options, "lora_2", ()) or options.weights_dtype is not None:
        return False
    source = getattr(pipeline, "source_or_none", None)
    if source is None or source.kind != "converted":
        return False
    from vidax.translator import MANIFEST, load  # the converted folder's mmapped leaves: headers read, no weights

    for part in pipeline.dit_parts(pipeline.resolve_settings(options)):
        folder = source.root / part.component
        if dit_file(options, part.component) is not None or not (folder / MANIFEST).is_file():
            return False
        if options.dtype == "float32" and any(leaf.dtype != "float32" for leaf in load(folder).values()):
            return False
    return True


def _given_layout(job: Any, options: GenerateOptions, devices: int, device_bytes: int,
                  host_is_device: bool = False) -> tuple:
    """The row of the layout the flags name (1 for a degree left unset), refused as a run would refuse it."""
    from vidax.zoo.compute.distributed import multiprocess
    from vidax.zoo.compute.mesh import check_heads
    from vidax.zoo.compute.planner import Layout, fits, predict

    layout = Layout(options.dp or 1, options.tp or 1, options.sp or 1, options.offload_chunk)
    check_heads(job.dit.heads, layout.tp, layout.sp)
    if layout.devices > devices or (multiprocess() and layout.devices != devices):
        raise PipelineError(f"dp*tp*sp = {layout.dp}*{layout.tp}*{layout.sp} = {layout.devices} devices; "
                            f"the plan is for {devices} (--devices N plans for more)")
    prediction = predict(job, layout, options.release_stages)
    return layout, prediction, fits(job, layout, prediction, device_bytes, host_is_device)


def choose_layout(pipeline: Any, options: GenerateOptions) -> tuple[GenerateOptions, str]:
    """Fill in tp/sp/dp/offload: the user's flags when given, else the planner's fastest fitting layout.

    Returns the options to run with and a line saying what was chosen and why.
    """
    if _layout_given(options) or not hasattr(pipeline, "memory_job"):
        ones = {k: getattr(options, k) or 1 for k in ("tp", "sp", "dp")}
        return dataclasses.replace(options, **ones), "as given"
    planned = plan_layouts(pipeline, options)
    rows, chosen, devices, device_bytes = planned.rows, planned.chosen, planned.devices, planned.device_bytes
    if chosen is None:
        raise PipelineError(f"{planned.refusal(options.model)} (see --plan; nothing was loaded)")
    from vidax.zoo.compute.distributed import multiprocess

    if platform() == "cpu" and not multiprocess():  # CPU "devices" share the host's cores: spread only when one does not fit
        single = next(row for row in rows if row[0].devices == 1 and row[0].offload_chunk is None)
        chosen = single if single[2] else chosen
    layout, prediction, _ = chosen
    chosen_options = dataclasses.replace(
        options, tp=layout.tp, sp=layout.sp, dp=layout.dp, offload_chunk=layout.offload_chunk)
    idle = f"; {devices - layout.devices} of the {devices} devices idle" if layout.devices < devices else ""
    paged = f"; {planned.paged_note()}" if planned.paged_note() else ""
    peak = planned.peak(layout, prediction)
    return chosen_options, (f"{layout.describe()} chosen by the memory planner (predicted {peak / 2**30:.2f} of "
                            f"{device_bytes / 2**30:.1f} GiB per device{idle}{paged})")
