"""LTX-2.5's memory plan at its native 704x1216x121 on 4 x 30.75 GB, beside the vidax paper's figure.

The job is the one `vidax-gen ltx-2.5 --plan` builds from the registry's shipped configs alone (nothing
downloaded, nothing allocated): the joint audio+video DiT with every guidance pass a batch row (CFG, STG
and modality isolation: 4), the Gemma text tower, bf16 weights and activations with fp32 residual
streams, the video VAE in fp32, flash attention (an accelerator kernel: no score tiles in memory). The
VAE column is the default decode: diffusers' 512-px, 16-frame tiles (one padded tile on the device, the
video stitched on the host), as Lightricks' pipelines decode tiled; the whole-video decode
(`--no-vae-tiling`) is printed below the table. The vidax paper measured 16.7 GB per chip with TP=4 +
offload (video only). The diffusion decoder's own working set (compiled, XLA's memory analysis) is
`python -m bench ltx2_decoder`.

    .venv/bin/python -m bench ltx2_plan
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

PAPER_GB = 16.7
DEVICE_GB = 30.75
MODEL = "ltx-2.5"


def job(**extra):
    """The planner's job for the native request, built offline from the registry."""
    import huggingface_hub.constants

    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.registry import make_pipeline

    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as empty:
        saved, huggingface_hub.constants.HF_HUB_CACHE = huggingface_hub.constants.HF_HUB_CACHE, empty
        try:
            options = GenerateOptions(model=MODEL, prompt="", dtype="bfloat16", extra=extra)
            planned = make_pipeline(MODEL, options).memory_job(options)
        finally:
            huggingface_hub.constants.HF_HUB_CACHE = saved
    return dataclasses.replace(planned, blockwise_attention=False)


def main() -> None:
    from vidax.zoo.compute.planner import Layout, plan, predict

    planned = job()
    gb = lambda n: f"{n / 1e9:.2f}"  # noqa: E731
    print(f"{MODEL} 704x1216x121: {planned.tokens} video tokens, guidance batch {planned.batch}, "
          f"{planned.dit.depth} blocks, 4 x {DEVICE_GB} GB")
    print(f"{'layout':<28}{'weights':>9}{'activ.':>9}{'text enc':>10}{'vae':>8}{'peak GB':>9}  paper")
    for layout in [Layout(tp=4)] + [Layout(tp=4, offload_chunk=c) for c in (8, 4, 2, 1)]:
        p = predict(planned, layout)
        paper = f"{PAPER_GB} GB (TP=4 + offload)" if layout.offload_chunk else ""
        print(f"{layout.describe():<28}{gb(p.weights):>9}{gb(p.activations):>9}{gb(p.text_encoder):>10}"
              f"{gb(p.vae):>8}{gb(p.total):>9}  {paper}")
    _, chosen = plan(planned, 4, int(DEVICE_GB * 1e9))
    if chosen:
        print(f"planner's choice: {chosen[0].describe()} (peak {chosen[1].total / 1e9:.2f} GB)")
    whole = predict(job(vae_tiling=False), Layout(tp=4, offload_chunk=8))
    print(f"--no-vae-tiling: vae {gb(whole.vae)} GB (the whole video at once), peak {gb(whole.total)} GB")


if __name__ == "__main__":
    main()
