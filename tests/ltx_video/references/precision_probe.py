"""Which matmuls of the LTX DiT lose most at a TPU's default precision (one bf16 pass, fp32 accumulation)?

Not a test: the script behind the numbers in zoo/ltx_video/transformer.py's "Precision" section. It emulates
the bf16 pass on CPU by rounding the operands of chosen matmul groups to bf16 (patching `jnp.dot` as
`zoo/compute/layers.py` sees it, and the plain attention kernel), runs a 4-block random-weight LTX DiT (width 512,
320 tokens) and prints each grouping's output error against the fp32 model.

    .venv/bin/python tests/ltx_video/references/precision_probe.py
"""

from __future__ import annotations

import pathlib
import tempfile

ACTIVE: set[str] = set()


def main() -> None:
    import flax.linen.module as flax_module
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from diffusers import LTXVideoTransformer3DModel
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    import vidax.zoo.compute.attention as attention_module
    import vidax.zoo.compute.kernels.plain as plain
    import vidax.zoo.compute.layers as layers
    from vidax.translator import convert
    from vidax.zoo.ltx_video import rope
    from vidax.zoo.ltx_video.config import TransformerConfig
    from vidax.zoo.ltx_video.transformer import LTXVideoTransformer

    jax.config.update("jax_default_matmul_precision", "highest")

    def bf16(x):
        return x.astype(jnp.bfloat16).astype(jnp.float32)

    class RoundingDot:  # `layers.jnp`, with `dot` rounding its operands in the active groups
        def __getattr__(self, name):
            return getattr(jnp, name)

        def dot(self, x, w):
            module = flax_module._context.module_stack[-1]
            path = "/" + "/".join(module.scope.path) + "/" if module is not None and module.scope else ""
            group = ("time" if "/time_embed/" in path else "caption" if "/caption_projection/" in path
                     else "proj" if ("/proj_in/" in path or "/proj_out/" in path) else "ffn" if "/ff/" in path else "qkv")
            return jnp.dot(bf16(x), bf16(w)) if group in ACTIVE else jnp.dot(x, w)

    def attention(q, k, v, kv_mask, scale):
        if "logits" in ACTIVE:
            q, k = bf16(q), bf16(k)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
        if kv_mask is not None:
            logits = jnp.where(kv_mask[:, None, None, :], logits, -jnp.inf)
        probs = jax.nn.softmax(logits, -1)
        if "pv" in ACTIVE:
            probs, v = bf16(probs), bf16(v)
        return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(q.dtype)

    layers.jnp = RoundingDot()
    attention_module.plain_attention = attention
    del plain

    torch.manual_seed(0)
    ref = LTXVideoTransformer3DModel(in_channels=128, out_channels=128, num_attention_heads=8, attention_head_dim=64,
                                     cross_attention_dim=512, num_layers=4, caption_channels=1024).eval()
    cfg = TransformerConfig.from_hf_config(dict(ref.config))
    model = LTXVideoTransformer(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        params = unflatten_dict(dict(convert("ltx_video/transformer", tmp, model.param_shapes(), dtype="float32")), sep="/")
    grid = (4, 8, 10)
    rng = np.random.default_rng(0)
    cos, sin = rope.rope_tables(rope.grid_coords(1, *grid, cfg, frame_rate=25), cfg)
    inputs = (jnp.asarray(rng.normal(size=(1, 320, 128)), jnp.float32),
              jnp.asarray(rng.normal(size=(1, 64, 1024)) * 0.2, jnp.float32), jnp.ones((1, 64)), jnp.array([700.0]),
              cos, sin)

    def run():
        jax.clear_caches()
        return np.asarray(jax.jit(lambda p, *i: model(p, *i))(params, *inputs))

    base = run()
    blocks = ["qkv", "ffn", "logits", "pv", "caption"]
    for groups in (["time"], ["proj"], ["caption"], ["qkv"], ["ffn"], ["logits"], ["pv"], blocks + ["time", "proj"],
                   blocks):
        ACTIVE.clear()
        ACTIVE.update(groups)
        err = run() - base
        rel = np.sqrt(np.mean(err**2) / np.mean(base**2))
        print(f"bf16 in {'+'.join(groups):42s} max |diff| {np.abs(err).max():.2e}   relative rms {rel:.2e}")


if __name__ == "__main__":
    main()
