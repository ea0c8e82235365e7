"""The Wan VAE's decode on the local device: compile seconds and the warm decode, as staged units (what
`WanVAE.decode` runs: six units per chunk kind) or as one whole decoder chunk per kind (what it ran before).

    python -m bench.accelerator.chip.vae_units --size 480x832 --frames 81 --mode staged --json OUT.json

Random weights at the Wan2.1 VAE's real shapes and random latents; the first decode compiles (counted by
`vidax.zoo.compute.compiles.ProgramCount`, with its seconds) and runs, the second is the warm decode. Run each
mode in its own process (an empty persistent cache: VIDAX_NO_COMPILE_CACHE=1), so that neither finds the other's
programs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="480x832")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--mode", choices=("staged", "whole"), default="staged")
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from vidax.zoo.compute.compiles import ProgramCount
    from vidax.zoo.parts import wan_vae

    height, width = (int(v) for v in args.size.split("x"))
    vae = wan_vae.WanVAE(wan_vae.WAN21_VAE)
    params = jax.device_put(vae.init_params(jax.random.key(0)))
    latents = jax.random.normal(jax.random.key(1), (1, 16, 1 + (args.frames - 1) // 4, height // 8, width // 8))
    decode = vae.decode if args.mode == "staged" else lambda p, z: _whole(vae, p, z)
    row = {"mode": args.mode, "size": args.size, "frames": args.frames, "device": jax.devices()[0].device_kind,
           "jax": jax.__version__}
    with ProgramCount() as count:
        start = time.perf_counter()
        decode(params, latents).block_until_ready()
        row["first_decode_s"] = time.perf_counter() - start
    row.update(programs_compiled=count.compiled, programs_loaded=count.loaded, compile_s=count.seconds)
    start = time.perf_counter()
    decode(params, latents).block_until_ready()
    row["warm_decode_s"] = time.perf_counter() - start
    stats = jax.devices()[0].memory_stats() or {}
    row["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
    with open(args.json, "w") as fh:
        json.dump(row, fh, indent=1)
    print(json.dumps(row), flush=True)
    return 0


def _whole(vae, params, latents):
    """The decode as one compiled decoder chunk per chunk kind (before the staged units)."""
    import jax.numpy as jnp

    from vidax.zoo.parts.wan_vae import _run_chunk

    z = jnp.moveaxis(latents, 1, -1)
    out, cache = _run_chunk(vae.module, "decode_chunk", params, None, z[:, :1], True)
    outs = [out]
    for i in range(1, z.shape[1]):
        out, cache = _run_chunk(vae.module, "decode_chunk", params, cache, z[:, i:i + 1], False)
        outs.append(out)
    return jnp.moveaxis(jnp.concatenate(outs, axis=1), -1, 1)


if __name__ == "__main__":
    sys.exit(main())
