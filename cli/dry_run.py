"""`vidax-gen MODEL --dry-run`: every stage compiled at its real size on abstract weights; XLA's bytes per
device beside the memory planner's (`vidax.zoo.plan.dry_run`). Exit code 1 when a stage would not fit."""

from __future__ import annotations

import os
import sys

from rich.table import Table

from vidax.cli.common import console

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def use_host_devices(count: int | None) -> None:
    """Ask XLA for `count` host (CPU) devices before jax starts its backends (importing jax does not): a dry
    run for N devices compiles on N fake CPU devices where the machine has fewer. A process whose backends
    are already up keeps its devices."""
    if not count or count < 2 or _backends_started():
        return
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(HOST_DEVICES_FLAG)]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{HOST_DEVICES_FLAG}={count}"])


def _backends_started() -> bool:
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def print_dry_run(options, devices: int | None, device_bytes: int | None, target: str | None = None) -> int:
    """Compile the stages for the layout the flags name (else the planner's choice) and print the table; with
    `target` (`v5e:2x2`) for those TPU chips, on XLA's TPU compiler without them."""
    from rich.console import Console

    from vidax.zoo.compute.target import compiling_for, parse_target
    from vidax.zoo.plan.dry_run import dry_run, stages_of
    from vidax.zoo.plan.layouts import plan_layouts
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.compute.runtime import configure_compile_cache

    chosen = parse_target(target) if target else None
    configure_compile_cache(options.compile_cache)
    family = make_pipeline(options.model, options)
    stages_of(family)  # a family the dry run cannot build yet: one line, before any planning
    with compiling_for(chosen) as targeted:
        if chosen is not None:
            devices, device_bytes = len(targeted), device_bytes or chosen.chip.device_bytes
        planned = plan_layouts(family, options, devices, device_bytes)
        layout = planned.rows[0][0] if planned.given else (planned.chosen[0] if planned.chosen else None)
        if layout is None:
            console.print("[red]error:[/red] the planner finds no layout that fits (see --plan); give one with "
                          "--dp/--tp/--sp to compile it anyway", highlight=False)
            return 1
        result = dry_run(family, options, layout, planned.devices, planned.device_bytes, targeted=targeted)
    out = Console(width=None if sys.stdout.isatty() else 160)
    where = f"{result.devices} x {result.device_bytes / 2**30:.2f} GiB"
    if chosen is not None:
        where += f" ({chosen.chip.device_kind}, {chosen.name}, XLA's TPU compiler without a chip)"
    out.print(f"{options.model} at {result.size}, {layout.describe()}: MiB per device on {where} (XLA's compiled "
              f"memory analysis; nothing allocated)", highlight=False, soft_wrap=True)
    out.print(stage_table(result))
    if not result.fits:
        over = ", ".join(s.stage for s in result.stages if s.total > result.device_bytes)
        console.print(f"[red]error:[/red] does not fit: {over}", highlight=False, soft_wrap=True)
        return 1
    out.print("fits", highlight=False)
    return 0


def stage_table(result) -> Table:
    mib = lambda n: f"{n / 2**20:,.0f}"  # noqa: E731
    table = Table()
    table.add_column("stage", no_wrap=True)
    for column in ("arguments", "outputs", "temporaries", "XLA total", "planner", "planner/XLA", "compile s",
                   "GFLOP", "fits"):
        table.add_column(column, justify="right")
    peaks = {result.peak(s.kind).stage for s in result.stages}
    if len(peaks) < len(result.stages):
        table.caption = "planner: its figure for a stage run as several units, beside the largest of them"
    for s in result.stages:
        # the planner predicts a stage's peak: its figure stands on the stage's largest unit, the others say which
        shown = s.stage in peaks
        table.add_row(s.stage, mib(s.argument), mib(s.output), mib(s.temp), mib(s.total),
                      "-" if s.planned is None or not shown else mib(s.planned),
                      "-" if s.ratio is None or not shown else f"{s.ratio:.2f}",
                      f"{s.compile_seconds:.1f}", "-" if s.flops is None else f"{s.flops / 1e9:,.0f}",
                      "yes" if s.total <= result.device_bytes else "no")
    return table
