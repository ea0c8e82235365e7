"""The memory planner at native resolution, beside the reference measurements in docs/MODELS.md.

Model sizes come from each family's own param shapes at the published default config (abstract
shapes only: nothing is allocated). Accelerator runs use flash attention (no score tiles in HBM),
bf16 weights; Wan keeps its fp32 residual stream. Wan's text encoder and VAE sizes are the published
parameter counts and its VAE working set an assumption; HunyuanVideo-1.5's job is the one `vidax-gen
--plan` builds (both VAE halves' real parameter count in fp32, the decode working set calibrated on
XLA's memory analysis of the widest decoder stage).
"""

from __future__ import annotations

from bench.families import pieces
from vidax.zoo.generator.contract import Settings
from vidax.zoo.compute.planner import GIB, Job, Layout, plan, predict

HunyuanConfig, HunyuanVAEConfig, hunyuan_memory_job = pieces("hunyuan_video15", "TransformerConfig", "VAEConfig",
                                                             "memory_job")
WanTransformer, WanTransformerConfig = pieces("wan", "WanTransformer", "WanTransformerConfig")

V4_CHIP = 30.75 * GIB
H200 = 141 * GIB


def wan14b_720p() -> Job:
    cfg = WanTransformerConfig(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40)
    sizes = WanTransformer(cfg).memory_sizes(dim=cfg.inner_dim, ffn_dim=cfg.ffn_dim, heads=40, text_dim=cfg.inner_dim)
    return Job(
        sizes,
        tokens=21 * 45 * 80,  # 81 frames 720x1280 -> latent 21x90x160 -> patches 1x2x2
        text_tokens=512,
        text_encoder_params=5_680_000_000,  # UMT5-XXL encoder
        vae_params=127_000_000,
        vae_peak_activation_bytes=6 * GIB,  # assumption: one causal chunk at 720p
        blockwise_attention=False,
    )


def hunyuan15_720p() -> Job:
    """The generator's own memory job (vidax-gen --plan) for the shipped configs at 720p, 121 frames, CFG."""
    settings = Settings(height=720, width=1280, frames=121, guidance=6.0, shift=9.0)
    return hunyuan_memory_job(HunyuanConfig(), HunyuanVAEConfig(), settings)


def _gib(n: int) -> str:
    return f"{n / GIB:6.1f}"


def _table(title: str, job: Job, devices: int, device_bytes: float, rows_of_interest: list[tuple[Layout, str]]):
    print(f"\n{title}: {devices} x {device_bytes / GIB:.2f} GiB, {job.tokens} tokens, DiT {job.dit.depth} blocks")
    print(f"{'layout':<32}{'weights':>9}{'activ.':>9}{'text enc':>10}{'vae':>8}{'peak':>8}  fits  reference")
    for layout, reference in rows_of_interest:
        p = predict(job, layout)
        fits = "yes" if p.total <= device_bytes else "no"
        print(f"{layout.describe():<32}{_gib(p.weights):>9}{_gib(p.activations):>9}{_gib(p.text_encoder):>10}{_gib(p.vae):>8}{_gib(p.total):>8}  {fits:<4}  {reference}")
    _, chosen = plan(job, devices, int(device_bytes))
    print(f"planner's choice: {chosen[0].describe() if chosen else 'nothing fits'}"
          + (f" (peak {chosen[1].total / GIB:.1f} GiB)" if chosen else ""))


def main():
    wan = wan14b_720p()
    _table(
        "Wan2.1-14B 720p / 81 frames on TPU v4-8",
        wan,
        4,
        V4_CHIP,
        [
            (Layout(), "-"),
            (Layout(tp=4), "paper, all 40 blocks resident: 26.1 GB (layout not stated)"),
            (Layout(tp=4, offload_chunk=1), "paper, offload chunk 1: 15.2 GB (layout not stated)"),
            (Layout(sp=4), "-"),
            (Layout(sp=4, offload_chunk=1), "-"),
        ],
    )
    hunyuan = hunyuan15_720p()
    _table(
        "HunyuanVideo-1.5 720p / 121 frames on TPU v4-8",
        hunyuan,
        4,
        V4_CHIP,
        [(Layout(tp=4), "paper: 30.3 GB/chip at TP=4"), (Layout(sp=4), "-"), (Layout(tp=2, sp=2), "-"), (Layout(tp=4, offload_chunk=2), "-")],
    )
    _table("HunyuanVideo-1.5 720p / 121 frames on one H200", hunyuan, 1, H200, [(Layout(), "-"), (Layout(offload_chunk=4), "-")])


if __name__ == "__main__":
    main()
