"""HunyuanVideo 1.0's memory plan at the vidax paper's setting, beside its figure.

720x1280, 129 frames (33 x 90 x 160 latents, 118,800 video tokens + 256 Llama tokens in every block's joint
sequence), embedded guidance only (batch 1), bf16 weights and activations, flash attention (a TPU's
Pallas kernel: no score tiles in HBM), on 4 x 30.75 GB (TPU v4-8). The vidax paper measured 18.4 GB per
chip with TP=4 + offload. The job is the one `vidax-gen hunyuanvideo --plan` builds, from the registry's
shipped configs (nothing downloaded, nothing allocated).

    .venv/bin/python -m bench hunyuan_video_plan
"""

from __future__ import annotations

import dataclasses
import math

PAPER_GB = 18.4
CHIP = 30.75e9


def main() -> None:
    from vidax.translator.registry import get_model
    from bench.families import pieces
    from vidax.zoo.compute.planner import Layout, plan, predict

    TransformerConfig, VAEConfig, HunyuanVideoSettings, memory_job, HunyuanVideoTransformer = pieces(
        "hunyuan_video", "TransformerConfig", "VAEConfig", "HunyuanVideoSettings", "memory_job",
        "HunyuanVideoTransformer")

    entry = get_model("hunyuanvideo")
    settings = HunyuanVideoSettings(**{k: v for k, v in entry.settings.items()
                                       if k in {f.name for f in dataclasses.fields(HunyuanVideoSettings)}})
    dit = TransformerConfig.from_hf_config(entry.config["transformer"])
    vae = VAEConfig.from_hf_config(entry.config["vae"])
    job = dataclasses.replace(memory_job(dit, vae, settings), blockwise_attention=False)
    shapes = HunyuanVideoTransformer(dit).param_shapes()
    true_params = sum(math.prod(s) for s in shapes.values())
    print(f"HunyuanVideo 1.0, {settings.height}x{settings.width}, {settings.frames} frames: {job.tokens} tokens, "
          f"batch {job.batch}, DiT {true_params / 1e9:.2f} B params ({job.dit.depth} blocks), 4 x {CHIP / 1e9:.2f} GB")
    print(f"{'layout':<28}{'weights':>9}{'activ.':>9}{'text enc':>10}{'vae':>8}{'peak GB':>9}  paper")
    rows = [Layout(tp=4)] + [Layout(tp=4, offload_chunk=c) for c in (8, 4, 2, 1)]
    for layout in rows:
        p = predict(job, layout)
        paper = f"{PAPER_GB} GB (TP=4 + offload)" if layout.offload_chunk else ""
        print(f"{layout.describe():<28}{p.weights / 1e9:>9.2f}{p.activations / 1e9:>9.2f}{p.text_encoder / 1e9:>10.2f}"
              f"{p.vae / 1e9:>8.2f}{p.total / 1e9:>9.2f}  {paper}")
    _, chosen = plan(job, 4, int(CHIP))
    if chosen:
        print(f"planner's choice: {chosen[0].describe()} (peak {chosen[1].total / 1e9:.2f} GB)")
    print("note: the planner counts every block at the largest block kind's size (dual-stream, 340 M) for the "
          f"resident DiT: {job.dit.depth * job.dit.block_params / 1e9:.1f} B block params against "
          f"{(true_params - job.dit.other_params) / 1e9:.1f} B; the text encoder (Llama-3-8B + CLIP-L, one device) "
          "sets the peak under TP=4 + offload.")


if __name__ == "__main__":
    main()
