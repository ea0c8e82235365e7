"""One prepared accelerator benchmark: vidax beside diffusers + PyTorch SDPA on the same device.

    python -m bench.accelerator                       # real shapes, on a GPU/TPU host (about 5.5 min)
    python -m bench.accelerator --profile toy         # the same code path at toy sizes, on any CPU
    bash scripts/bench_accelerator.sh                 # the wrapper: wheels, time limit, table to a file

Modules: `cases` (shapes, FLOPs, chip peaks), `families` (every per-family fact, one row per family:
its zoo and diffusers classes, geometry, inputs and FLOP count), `vidax_side` (JAX), `torch_side`
(the diffusers worker process), `timing` (protocol and budget), `report` (the Markdown table), `run`
(the order). `maxdiffusion_side`: MaxDiffusion's own Wan 2.1 transformer as a peer (scripts/prepare_maxdiffusion.sh).
"""
