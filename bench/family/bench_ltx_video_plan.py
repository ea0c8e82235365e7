"""The memory planner for LTX-Video 13B at its native 704x1216, 121 frames, on a TPU v4-8 (4 x 30.75 GB), beside
the vidax paper's measurement (docs/MODELS.md: 15.3 GB per chip at TP=4).

The job is the one `vidax-gen ltx-video-13b --plan` builds offline from the registry's configs (nothing
loaded), with flash attention (accelerator kernels: no score tiles in HBM), bf16 weights and activations,
an fp32 residual stream. Rows: the 0.9.8 dev default (two passes: the second, at 896x1600 = 16 x 28 x 50
tokens, is the larger; CFG + STG rows), one pass at 704x1216 (13,376 tokens), and one pass with CFG only
(the paper's LTX run predates the 0.9.8 multi-scale default). Columns split the peak into the DiT stage,
T5-XXL (one device, its own stage) and the VAE decode (one device, weights + working set): the whole video
at once (`--no-vae-tiling`) and diffusers' 512-px, 16-frame tiles (`--vae-tiling`: one padded tile on the
device, the video stitched on the host). The default tiles only when the whole decode would not fit the
chip: "default" is that choice on a 30.75 GB chip (the planner's device memory set to it).

    .venv/bin/python -m bench ltx_video_plan
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

PAPER_GB = 15.3  # docs/MODELS.md, TPU v4-8, TP=4
CHIP_GIB = 30.75


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp()  # an empty cache: the registry's configs
    import huggingface_hub.constants

    huggingface_hub.constants.HF_HUB_CACHE = os.environ["HF_HUB_CACHE"]
    import vidax.zoo.compute.planner as planner
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import Layout, plan, predict
    from vidax.zoo.registry import make_pipeline

    chip = int(CHIP_GIB * 1e9)
    planner.device_memory_bytes = lambda: (4, chip)  # the default's fit check as on the target chip

    def job(extra):
        options = GenerateOptions(model="ltx-video-13b", prompt="", extra=extra)
        return dataclasses.replace(make_pipeline(options.model, options).memory_job(options), blockwise_attention=False)

    cases = [("two passes (0.9.8 dev default)", {}), ("one pass, CFG + STG", {"multi_scale": False}),
             ("one pass, CFG only", {"multi_scale": False, "stg": 0.0})]
    gb = lambda n: f"{n / 1e9:6.2f}"  # noqa: E731
    print(f"LTX-Video 13B, 704x1216, 121 frames, 4 x {CHIP_GIB} GB (TPU v4-8), bf16, flash attention")
    print(f"{'case':32} {'tokens':>6} {'rows':>4} {'DiT@tp4':>8} {'T5':>6} {'VAE whole':>9} {'tiled':>6} "
          f"{'peak default':>12} {'peak tiled':>10}  {'planner choice (default)':26} paper")
    for label, extra in cases:
        default, whole, tiled = job(extra), job({**extra, "vae_tiling": False}), job({**extra, "vae_tiling": True})
        p, pw, pt = (predict(j, Layout(tp=4)) for j in (default, whole, tiled))
        _, chosen = plan(default, 4, chip, True)
        choice = chosen[0].describe() if chosen else "nothing fits"
        fits = lambda n: "" if n <= chip else " (no)"  # noqa: E731
        print(f"{label:32} {default.tokens:6d} {default.batch:4d} {gb(p.denoise_peak):>8} {gb(p.text_encoder)} "
              f"{gb(pw.vae):>9} {gb(pt.vae)} {gb(p.total) + fits(p.total):>12} {gb(pt.total):>10}  {choice:26} "
              f"{PAPER_GB} GB/chip")
    print("(GB = 1e9 bytes; DiT@tp4 = weights + activations per chip while denoising; peak = the largest stage)")


if __name__ == "__main__":
    main()
