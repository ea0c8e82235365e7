"""LTX-2 DiT forward on CPU: vidax (compiled, warm) vs diffusers `LTX2VideoTransformer3DModel` eager.

The release's layer shapes (video 4096 = 32 heads x 128, audio 2048 = 32 x 64, FFN 4x, caption
3840, Lightricks/LTX-2's transformer config) with `num_layers=2`, at 25 frames 256x384 (latent
4 x 8 x 12 = 384 video tokens, 26 audio tokens at 24 fps) and 128 prompt tokens, one batch (no
CFG), fp32 at highest matmul precision. Random weights go through the real spec from a saved
diffusers checkpoint; RoPE coordinates and tables are the pipeline's. Both sides run on the same
threads, interleaved (bench/protocol.py); compile time is its own row.

    .venv/bin/python -m bench ltx2_dit
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

GRID, AUDIO_LEN, TEXT_LEN, FPS = (4, 8, 12), 26, 128, 24.0
CONFIG = dict(num_layers=2, rope_type="split")  # everything else: diffusers' defaults = the release sizes
REPEATS = int(os.environ.get("VIDAX_BENCH_REPEATS", "2"))


def main() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from diffusers import LTX2VideoTransformer3DModel
    from flax.traverse_util import unflatten_dict
    from safetensors.torch import save_file

    from bench.protocol import interleaved, print_table, reference_flops
    from vidax.translator import convert, load_spec
    from vidax.zoo.parts.dit import place_resident
    from bench.families import pieces

    TransformerConfig, ltx2_rope, DiTInputs, LTX2Transformer = pieces("ltx2", "TransformerConfig", "rope",
                                                                      "DiTInputs", "LTX2Transformer")
    audio_coords, dit_rope_tables, video_coords = (ltx2_rope.audio_coords, ltx2_rope.dit_rope_tables,
                                                   ltx2_rope.video_coords)

    jax.config.update("jax_default_matmul_precision", "highest")  # fp32 like torch's default
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    ref = LTX2VideoTransformer3DModel(**CONFIG).eval()
    cfg = TransformerConfig.from_hf_config(dict(ref.config))
    model = LTX2Transformer(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transformer"
        folder.mkdir()
        save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, folder / "diffusion_pytorch_model.safetensors")
        tree = convert(load_spec("ltx2/transformer"), tmp, model.param_shapes(), dtype="float32")
        params = place_resident(model, unflatten_dict(dict(tree), sep="/"))  # as the pipeline places it
        del tree

    g = torch.Generator().manual_seed(0)
    s = int(np.prod(GRID))
    inputs = dict(
        hidden_states=torch.randn(1, s, cfg.in_channels, generator=g),
        audio_hidden_states=torch.randn(1, AUDIO_LEN, cfg.audio_in_channels, generator=g),
        encoder_hidden_states=torch.randn(1, TEXT_LEN, cfg.caption_channels, generator=g),
        audio_encoder_hidden_states=torch.randn(1, TEXT_LEN, cfg.caption_channels, generator=g),
        timestep=torch.tensor([700.0]), sigma=torch.tensor([700.0]),
        encoder_attention_mask=torch.ones(1, TEXT_LEN), audio_encoder_attention_mask=torch.ones(1, TEXT_LEN),
        video_coords=ref.rope.prepare_video_coords(1, *GRID, "cpu", fps=FPS),
        audio_coords=ref.audio_rope.prepare_audio_coords(1, AUDIO_LEN, "cpu"),
    )
    j = lambda t: jnp.asarray(t.numpy())  # noqa: E731
    ours_in = DiTInputs.make(j(inputs["hidden_states"]), j(inputs["audio_hidden_states"]),
                             j(inputs["encoder_hidden_states"]), j(inputs["audio_encoder_hidden_states"]),
                             j(inputs["timestep"]), num_layers=cfg.num_layers)
    rope = dit_rope_tables(cfg, video_coords(*GRID, fps=FPS), audio_coords(AUDIO_LEN))
    start = time.perf_counter()
    compiled = jax.jit(model.__call__).lower(params, ours_in, rope).compile()
    compile_s = time.perf_counter() - start

    def run_reference():
        with torch.inference_mode():
            return ref(**inputs, return_dict=False)

    timings = interleaved({"diffusers (eager)": run_reference, "vidax (jit, warm)": lambda: compiled(params, ours_in, rope)},
                          repeats=REPEATS, flops=reference_flops(run_reference))
    theirs, ours = timings.outputs["diffusers (eager)"], timings.outputs["vidax (jit, warm)"]
    err = max(float(np.abs(np.asarray(o) - t.numpy()).max()) for o, t in zip(ours, theirs))
    scale = max(float(np.abs(t.numpy()).max()) for t in theirs)
    print_table(f"LTX-2 DiT, release layer shapes x {cfg.num_layers} blocks, {s} video + {AUDIO_LEN} audio + "
                f"{TEXT_LEN} text tokens, fp32, {torch.get_num_threads()} torch threads, {jax.device_count()} XLA device(s)",
                timings, reference="diffusers (eager)",
                note=f"compile {compile_s:.1f} s; max |diff| {err:.2e} (outputs up to {scale:.2f})")


if __name__ == "__main__":
    main()
