"""Encoder forward on CPU at the real layer widths (few layers), fp32: vidax (jit, warm) vs transformers eager.

Shapes: UMT5-XXL (Wan, 512 tokens), Qwen2.5-VL-7B text tower (HunyuanVideo-1.5, 1108 tokens), CLIP
ViT-H/14 (Wan I2V, 224 px) and SigLIP so400m/14 (HunyuanVideo-1.5 I2V, 384 px). Layers are cut to
2-4 so that both frameworks' weights fit beside each other; per-layer cost is what compares.
"""

from __future__ import annotations

import time

import jax
import numpy as np


def _best_of(fn, repeats=3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _cases():
    import transformers

    from vidax.zoo.parts.encoders import clip, decoder, siglip, t5

    ids = lambda n: np.random.default_rng(0).integers(3, 1000, size=(1, n)).astype(np.int32)  # noqa: E731
    pixels = lambda n: np.random.default_rng(0).normal(size=(1, 3, n, n)).astype(np.float32)  # noqa: E731
    umt5 = dict(vocab_size=1000, d_model=4096, d_kv=64, d_ff=10240, num_layers=2, num_heads=64, feed_forward_proj="gated-gelu")
    qwen = dict(vocab_size=1000, hidden_size=3584, intermediate_size=18944, num_hidden_layers=2, num_attention_heads=28,
                num_key_value_heads=4, rms_norm_eps=1e-6)
    vit_h = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=4, num_attention_heads=16, image_size=224,
                 patch_size=14, projection_dim=1024, hidden_act="gelu")
    so400m = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=4, num_attention_heads=16, image_size=384,
                  patch_size=14)
    yield ("UMT5-XXL, 2 layers, 512 tokens", lambda: transformers.UMT5EncoderModel(transformers.UMT5Config(**umt5)),
           lambda: t5.T5EncoderModel(t5.T5Config(**umt5, per_layer_position_bias=True)), (ids(512), np.ones((1, 512), np.int32)))
    yield ("Qwen2.5-VL-7B text, 2 layers, 1108 tokens",
           lambda: transformers.Qwen2_5_VLTextModel(transformers.Qwen2_5_VLTextConfig(**qwen)),
           lambda: decoder.DecoderTextModel(decoder.DecoderConfig(**qwen, qkv_bias=True)), (ids(1108), np.ones((1, 1108), np.int32)))
    yield ("CLIP ViT-H/14, 4 layers, 257 tokens",
           lambda: transformers.CLIPVisionModelWithProjection(transformers.CLIPVisionConfig(**vit_h)),
           lambda: clip.CLIPVisionModelWithProjection(clip.clip_vision_config(vit_h)), (pixels(224),))
    yield ("SigLIP so400m/14, 4 layers, 729 tokens",
           lambda: transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**so400m)),
           lambda: siglip.SiglipVisionModel(siglip.siglip_vision_config(so400m)), (pixels(384),))


def _torch_time(build, inputs) -> float:
    import torch

    model = build().eval()
    args = [torch.from_numpy(x).long() if x.dtype == np.int32 else torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        model(*args)  # warm-up
        seconds = _best_of(lambda: model(*args))
    del model
    return seconds


def _vidax_time(build, inputs) -> tuple[float, float]:
    model = build()
    params = jax.jit(model.init)(jax.random.key(0), *inputs)
    forward = jax.jit(model.apply)
    start = time.perf_counter()
    jax.block_until_ready(forward(params, *inputs))
    compile_s = time.perf_counter() - start
    seconds = _best_of(lambda: jax.block_until_ready(forward(params, *inputs)))
    del params
    return compile_s, seconds


def main() -> None:
    import torch

    jax.config.update("jax_default_matmul_precision", "highest")
    torch.manual_seed(0)
    print(f"CPU threads: torch {torch.get_num_threads()}, jax {jax.devices()[0].platform}; fp32; best of 3")
    print(f"{'encoder':44s} {'transformers s':>15s} {'vidax s':>9s} {'ratio':>7s} {'vidax compile s':>16s}")
    for name, build_torch, build_vidax, inputs in _cases():
        torch_s = _torch_time(build_torch, inputs)
        compile_s, vidax_s = _vidax_time(build_vidax, inputs)
        print(f"{name:44s} {torch_s:15.3f} {vidax_s:9.3f} {vidax_s / torch_s:6.2f}x {compile_s:16.1f}", flush=True)


if __name__ == "__main__":
    main()
