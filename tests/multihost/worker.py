"""One process of a multi-process test run: joins the run, generates each case, records what it read.

    python -m tests.multihost.worker PORT NUM_PROCESSES PROCESS_ID OUT_DIR CASES_JSON

Each case is a dict of `GenerateOptions` fields; process 0 writes `OUT_DIR/<case>.npy` (through
`generate`), every process writes `OUT_DIR/<case>.p<ID>.json` with the bytes it read to place its
shards. A case with `"die_after_step": k` makes process 1 exit hard after k sampling steps.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(port: str, count: str, index: str, out: str, cases: str) -> None:
    from vidax.zoo.distributed import join

    join(f"127.0.0.1:{port}", int(count), int(index), heartbeat_timeout=int(os.environ.get("HEARTBEAT", "60")))
    import jax

    from vidax.zoo import sharding
    from vidax.zoo.pipeline import GenerateOptions, Progress, generate

    class DieAfter(Progress):
        def __init__(self, steps: int):
            self.steps = steps

        def advance(self, stage: str, amount: int = 1, note: str = "") -> None:
            self.steps -= amount
            if stage == "denoise" and self.steps <= 0 and jax.process_index() == 1:
                os._exit(9)  # a peer dies mid-run, no goodbye

    out_dir = Path(out)
    for name, case in json.loads(cases).items():
        case = dict(case)
        die = case.pop("die_after_step", None)
        if case.pop("latents_missing_on_process", None) == int(index):
            case["latents"] = case["latents"] + ".missing"
        before = sharding.slice_bytes_read()
        options = GenerateOptions(**{**case, "out": out_dir / f"{name}.npy"})
        generate(options, DieAfter(die) if die else None)
        (out_dir / f"{name}.p{index}.json").write_text(json.dumps({"bytes": sharding.slice_bytes_read() - before}))
    print(f"process {index} done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
