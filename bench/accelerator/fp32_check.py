"""`--dtype float32` on an accelerator against the CPU: the same programs, the outputs compared.

A TPU multiplies fp32 matrices in bf16 passes unless asked for the highest precision, and a GPU in
TF32; vidax's float32 setting asks for "highest" everywhere, so its frames should match the CPU's
to fp32 rounding. Two programs, each run on the default backend and saved as `.npy`:

- `wan-tiny`: the embedded trained model through the public API (`generate_video`), seed 0, fp32;
- `wan13-dit`: one Wan2.1-1.3B DiT forward (30 blocks, real width, seeded random weights in fp32)
  on a 256x256, 9-frame latent (the CFG pair) with the bench's inputs.

    python -m bench.accelerator.fp32_check run --out DIR          # on the accelerator, then on the CPU
    JAX_PLATFORMS=cpu python -m bench.accelerator.fp32_check run --out CPU_DIR
    python -m bench.accelerator.fp32_check compare DIR CPU_DIR    # max |difference| per program
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.accelerator.run import ensure_vidax

PROMPT = "a red circle moves left on a blue background"


def wan_tiny_frames() -> np.ndarray:
    from vidax.zoo import GenerateOptions, generate_video, make_pipeline

    options = GenerateOptions(model="wan-tiny", prompt=PROMPT, seed=0, out="unused.mp4", dtype="float32")
    return np.asarray(generate_video(make_pipeline(options.model, options), options).frames, np.float32)


def wan13_dit_output() -> np.ndarray:
    import jax
    import jax.numpy as jnp

    from bench.accelerator import cases, families
    from bench.accelerator.vidax_side import dit_forward, random_tree

    row = families.row("wan")  # the family's DiT by name, as every bench reaches it
    model = families.resolve(row.dit)(families.resolve(row.dit_config).from_hf_config(cases.WAN13B), dtype=jnp.float32)
    params = random_tree({p: (s, jnp.float32) for p, s in model.param_shapes().items()})
    rng = np.random.default_rng(5)
    latents = rng.standard_normal((2, 16, 3, 32, 32)).astype(np.float32)  # 9 frames at 256x256, the CFG pair
    text = (0.5 * rng.standard_normal((2, cases.WAN_TEXT, 4096))).astype(np.float32)
    with jax.default_matmul_precision("highest"):
        out = dit_forward(model, True, params, latents, np.array([700.0, 700.0], np.float32), text, None)
    return np.asarray(out, np.float32)


PROGRAMS = {"wan-tiny": wan_tiny_frames, "wan13-dit": wan13_dit_output}


def run(out: Path, names: list[str]) -> dict:
    import jax

    out.mkdir(parents=True, exist_ok=True)
    report = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__}
    for name in names:
        start = time.perf_counter()
        try:
            np.save(out / f"{name}.npy", PROGRAMS[name]())
            report[name] = {"seconds": time.perf_counter() - start}
        except Exception as exc:  # noqa: BLE001 - one failure must not lose the other program
            report[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    (out / "fp32_check.json").write_text(json.dumps(report, indent=1))
    return report


def compare(a: Path, b: Path) -> dict:
    result = {}
    for name in PROGRAMS:
        if (a / f"{name}.npy").exists() and (b / f"{name}.npy").exists():
            x, y = np.load(a / f"{name}.npy"), np.load(b / f"{name}.npy")
            diff = np.abs(x.astype(np.float64) - y)
            result[name] = {"shape": list(x.shape), "max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
                            "max_abs_value": float(np.abs(y).max())}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--programs", default=",".join(PROGRAMS))
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    ensure_vidax()
    import vidax.zoo.compute.runtime  # noqa: F401 - before the backend starts (TPU flags)

    if args.command == "run":
        print(json.dumps(run(args.out, args.programs.split(",")), indent=1))
    else:
        print(json.dumps(compare(args.a, args.b), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
