"""`vidax-gen` run in this process, then the device's memory peak: a native-size run's figures in one JSON.

    python -m bench.accelerator.chip.native_run --json OUT.json -- wan2.1-t2v-1.3b --weights DIR --prompt ... --out v.mp4

Everything after `--` is `vidax-gen`'s command line, run through the CLI's own entry point (so the run is
exactly what a user's is: planner, stages, progress, the sidecar). Afterwards the JSON holds the wall time,
the exit code, the device's `peak_bytes_in_use` and `bytes_limit`, and the sidecar's stage seconds and layout
(`OUT.mp4.json` beside the video, written by the CLI).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m bench.accelerator.chip.native_run --json OUT.json -- MODEL [vidax-gen flags]")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv[:split])
    gen_argv = argv[split + 1:]

    import jax
    from vidax.cli import gen_main

    started = time.perf_counter()
    code = 0
    sys.argv = ["vidax-gen", *gen_argv]
    try:
        gen_main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    wall = time.perf_counter() - started
    stats = jax.devices()[0].memory_stats() or {}
    record = {"argv": gen_argv, "exit_code": code, "wall_s": wall, "device": jax.devices()[0].device_kind,
              "jax": jax.__version__, "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
              "bytes_limit": stats.get("bytes_limit")}
    out = gen_argv[gen_argv.index("--out") + 1] if "--out" in gen_argv else "out.mp4"
    for sidecar in (Path(out + ".json"), Path(out).with_suffix(".json")):
        if sidecar.exists():
            record["sidecar"] = json.loads(sidecar.read_text())
            break
    Path(args.json).write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps({k: v for k, v in record.items() if k != "sidecar"}, default=str), flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
