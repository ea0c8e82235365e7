"""Host memory of putting one component's weights on the chip: the staged transfer against the grouped one.

    python -m bench.accelerator.chip.host_memory FOLDER [--component text_encoder] [--rounds 2] [--json out.json]

FOLDER is a converted folder (`vidax-convert MODEL --synthetic --out FOLDER`). Each contender runs in its own
process, the two alternating `--rounds` times: the process starts the runtime (its resident set then is the
floor, what the runtime itself holds), maps the component's files, moves every tensor with
`compute.transfer.to_devices` and reports the seconds, the resident set sampled every 50 ms (its peak) and the
resident set after the move. "staged": mapped leaves through one reused `STAGE_BYTES` buffer (what vidax does);
"grouped": the leaves handed to the runtime as mapped views, a group of up to `GROUP_BYTES` at a time (before).
The resident set is the kernel's VmRSS: the v5e hosts' sandbox tells no kinds apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CONTENDERS = ("staged", "grouped")


def _resident_gib() -> float:
    from vidax.zoo.compute.progress import resident_parts

    return sum(resident_parts().values()) / 2**30


def child(folder: str, component: str, contender: str) -> dict:
    import jax

    from vidax.translator.formats.safetensors_io import SafetensorsFile
    from vidax.zoo.compute import transfer
    from vidax.zoo.compute.progress import ResidentPeak

    started = time.perf_counter()
    jax.devices()
    init_s, floor = time.perf_counter() - started, _resident_gib()
    if contender == "grouped":
        transfer._stageable = lambda leaf, target: False
    files = [SafetensorsFile(p) for p in sorted(Path(folder, component).glob("*.safetensors"))]
    tree = {f"{i}/{name}": f.array(name) for i, f in enumerate(files) for name in f.tensors}
    with ResidentPeak(interval=0.05) as peak:
        start = time.perf_counter()
        placed = transfer.to_devices(tree)
        jax.block_until_ready(placed)
        seconds = time.perf_counter() - start
    return {"contender": contender, "gib": round(sum(a.nbytes for a in tree.values()) / 2**30, 2),
            "init_s": round(init_s, 2), "floor_gib": round(floor, 2), "seconds": round(seconds, 2),
            "peak_gib": round(peak.figures()["bytes"] / 2**30, 2), "after_gib": round(_resident_gib(), 2),
            "device": jax.devices()[0].device_kind, "jax": jax.__version__}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--component", default="text_encoder")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.folder, args.component, args.child)))
        return 0
    print(f"load {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for round_ in range(args.rounds):
        for contender in CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]:
            done = subprocess.run([sys.executable, "-m", "bench.accelerator.chip.host_memory", args.folder,
                                   "--component", args.component, "--child", contender],
                                  capture_output=True, text=True)
            if done.returncode:
                print(f"{contender}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            rows.append({"round": round_, **json.loads(done.stdout.strip().splitlines()[-1])})
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"load": os.getloadavg()[0], "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
