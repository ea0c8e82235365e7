"""The memory planner's figure for CogVideoX1.5-5B at its native 768x1360x81 on 4 x 30.75 GB, beside the
vidax paper's measurement (SP=4: 31.5 GB per chip, TPU v4-8; docs/MODELS.md).

The job comes from the registry alone (`vidax-gen cogvideox1.5-5b --plan` with no download: the shipped
config.json entries), with the native settings (CFG batch 2, 226 text tokens in the joint sequence, T5 in
fp32, DiT weights and activations in bf16 with fp32 residual and text streams, VAE tiled in fp32) and
flash attention (the TPU kernel: no score tiles in memory). The prediction is shown with each stage's
weights released when it ends (vidax's default) and kept (`--keep-stages`).

    .venv/bin/python -m bench cogvideox_plan
"""

from __future__ import annotations

import os
import tempfile

PAPER_GB = 31.5  # vidax paper: CogVideoX1.5 SP=4, 52.8 s/step at 31.5 GB per chip
DEVICE_GB = 30.75
MODEL = "cogvideox1.5-5b"


def predictions() -> dict:
    """{"release stages": Prediction, "keep stages": Prediction} at SP=4 for the native request."""
    from bench.families import piece
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import Layout, predict
    from vidax.zoo.registry import make_pipeline

    memory_job = piece("cogvideox", "memory_job")
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as empty:
        import huggingface_hub.constants

        saved, huggingface_hub.constants.HF_HUB_CACHE = huggingface_hub.constants.HF_HUB_CACHE, empty
        try:
            family = make_pipeline(MODEL, GenerateOptions(model=MODEL, prompt=""))
            s = family.resolve_settings(GenerateOptions(model=MODEL, prompt=""))
            job = memory_job(family.dit_config, family.vae_config, s, t5=family.t5_config, weight_bytes=2,
                             t5_bytes=4, blockwise_attention=False)
        finally:
            huggingface_hub.constants.HF_HUB_CACHE = saved
    layout = Layout(sp=4)
    return {"release stages": predict(job, layout, True), "keep stages": predict(job, layout, False), "job": job}


def main() -> None:
    rows = predictions()
    job = rows.pop("job")
    gb = lambda n: f"{n / 1e9:.1f}"  # noqa: E731
    print(f"{MODEL} 768x1360x81, CFG batch {job.batch}, {job.tokens} joint tokens, {job.dit.depth} blocks: "
          f"per-device GB on 4 x {DEVICE_GB} GB at dp=1 tp=1 sp=4")
    print(f"{'':16} {'DiT weights':>11} {'activations':>11} {'T5':>6} {'VAE':>6} {'peak':>6}   paper")
    for name, p in rows.items():
        print(f"{name:16} {gb(p.weights):>11} {gb(p.activations):>11} {gb(p.text_encoder):>6} {gb(p.vae):>6} "
              f"{gb(p.total):>6}   {PAPER_GB} (SP=4, measured)")


if __name__ == "__main__":
    main()
