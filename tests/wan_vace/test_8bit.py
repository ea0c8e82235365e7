"""8-bit weights with Wan VACE, as `tests/quantized` tests them for the other DiTs:

- `--transformer FILE` with an fp8/int8-scaled safetensors VACE DiT in the official names (main and VACE blocks:
  self-attention ComfyUI's `scaled_fp8`, cross-attention float8_e5m2 in `_quantization_metadata`, FFNs and VACE's
  `before_proj` / `after_proj` int8 per row with `.comfy_quant`), against `WanVACEPipeline` on the same weights
  dequantized by torch: frames within 2e-5 at fp32. The folder's own DiT is other weights.
- `--weights-dtype int8` on a file whose matrices of both block groups are int8 per row: the file's values and
  scales are placed as they are (the `vace_blocks` kernels among them), so the frames equal the dequantized
  file's within 2e-5, on one device and at tp=2 with the blocks streamed (`--offload-chunk 1`).
- `--weights-dtype int8|fp8` on the tiny VACE DiT (`vace_spec_fixtures`): both groups' kernels 8-bit with their
  scales, the output within `tests/quantized`'s bound of the bf16-kernel DiT's; every scale 1 lands far off.
"""

from __future__ import annotations

import dataclasses
import json

import diffusers
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.oracle import perturb, state_of
from tests.quantized.test_scaled_pipeline import _quantize
from tests.quantized.test_weights_dtype_families import BOUND, _distance, _inputs, _runner, _tree
from tests.tiny_references import WAN_PIPELINE_DIT, umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
from tests.wan_vace import vace_spec_fixtures as fixtures
from tests.wan_vace.test_pipeline import (FRAME_ATOL, FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, STEPS, WIDTH,
                                          _box_mask, _clip, _options, _pil)
from vidax.zoo.parts.dit import block_groups
from vidax.zoo.weights.quantize import device_weights
from vidax.zoo.api import generate
from vidax.zoo.wan.tiny import build_tokenizer
from vidax.zoo.wan.vace import WanVACEConfig, WanVACETransformer

COMFY_PER_ROW = torch.tensor(list(json.dumps({"format": "int8_tensorwise", "per_row": True}).encode()),
                             dtype=torch.uint8)


def _quantize_vace(name: str, w: torch.Tensor, out: dict, layers: dict) -> torch.Tensor:
    """`_quantize`'s layouts, and VACE's own projections int8 per row."""
    if name.endswith((".before_proj.weight", ".after_proj.weight")):
        layer = name[:-len(".weight")]
        scale = w.abs().amax(1, keepdim=True) / 127
        q = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
        out |= {name: q, f"{layer}.weight_scale": scale, f"{layer}.comfy_quant": COMFY_PER_ROW.clone()}
        return q.float() * scale
    return _quantize(name, w, out, layers)


def _all_int8(stored: dict) -> dict:
    """The file with every 2-D matrix of both block groups int8 per row at amax / 120 (a fresh quantization
    would take 127), their old scales dropped."""
    blocks = {k for k, v in stored.items()
              if k.startswith(("blocks.", "vace_blocks.")) and k.endswith(".weight") and v.ndim == 2}
    side = (".scale_weight", ".scale_input", ".weight_scale", ".input_scale", ".comfy_quant")
    out = {}
    for key, value in stored.items():
        layer = key.rsplit(".", 1)[0]
        if key in blocks:
            scale = stored.get(f"{layer}.scale_weight", stored.get(f"{layer}.weight_scale"))
            w = value.float() * scale if scale is not None else value.float()
            per_row = w.abs().amax(1, keepdim=True) / 120
            out |= {key: torch.round(w / per_row).clamp(-127, 127).to(torch.int8), f"{layer}.weight_scale": per_row}
        elif not (layer + ".weight" in blocks and key.endswith(side)):
            out[key] = value
    return out


@pytest.fixture(scope="module")
def fp8_vace(tmp_path_factory):
    """(folder, the pipeline's frames on the dequantized file, the file's tensors)."""
    folder = tmp_path_factory.mktemp("fp8_vace")
    torch.manual_seed(13)
    build_tokenizer(folder / "tokenizer_source")
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder / "tokenizer_source")
    transformer = diffusers.WanVACETransformer3DModel(**WAN_PIPELINE_DIT, vace_layers=[0, 1], vace_in_channels=96)
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), vae=wan_pipeline_vae(), transformer=transformer.eval())
    for seed, module in enumerate(parts.values()):
        perturb(module, 120 + seed)
    stored, layers, dequantized = {"scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn)}, {}, {}
    for key, value in state_of(parts["transformer"]).items():
        dequantized[key] = _quantize_vace(fixtures.official_key(key), value.clone(), stored, layers).clone()
    assert any(k.startswith("vace_blocks.") and stored[k].dtype == torch.int8 for k in stored)
    assert any(k.endswith("after_proj.weight") and stored[k].dtype == torch.int8 for k in stored)
    metadata = {"_quantization_metadata": json.dumps({"format_version": "1.0", "layers": layers})}
    save_file(stored, folder / "vace_fp8_scaled.safetensors", metadata=metadata)
    perturb(parts["transformer"], 130)  # the folder's DiT is other weights
    pipe = diffusers.WanVACEPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts)
    pipe.save_pretrained(folder / "model")
    video, mask = _clip(0), _box_mask(inner=True)
    np.save(folder / "video.npy", video)
    np.save(folder / "mask.npy", mask)
    latents = torch.randn((1, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8),
                          generator=torch.Generator().manual_seed(14))
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        pipe.transformer.load_state_dict(dequantized, strict=True)
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, video=_pil(video), mask=_pil(mask), height=HEIGHT, width=WIDTH,
                      num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                      output_type="np").frames[0]
    return folder, frames, stored


def _run(folder, out, file, **extra):
    return generate(_options(folder, out, folder / "latents.npy", video=folder / "video.npy", mask=folder / "mask.npy",
                             transformer=file, **extra)).frames


def test_scaled_8bit_vace_dit_matches_diffusers_on_dequantized_weights(fp8_vace, tmp_path):
    folder, expected, _ = fp8_vace
    frames = _run(folder, tmp_path / "v.npy", folder / "vace_fp8_scaled.safetensors")
    np.testing.assert_allclose(frames, expected, atol=FRAME_ATOL, rtol=0)


def test_weights_dtype_int8_places_the_files_own_kernels_of_both_groups(fp8_vace, tmp_path, monkeypatch):
    import vidax.zoo.weights.quantize as quantize

    folder, _, stored = fp8_vace
    save_file(_all_int8(stored), tmp_path / "int8.safetensors")
    file = tmp_path / "int8.safetensors"
    dequantized = _run(folder, tmp_path / "a.npy", file)
    kept_paths = []
    original = quantize.file_kernels

    def spy(*args):
        kept = original(*args)
        kept_paths.extend(kept)
        return kept

    monkeypatch.setattr(quantize, "file_kernels", spy)
    kept = _run(folder, tmp_path / "b.npy", file, weights_dtype="int8")
    np.testing.assert_allclose(kept, dequantized, atol=FRAME_ATOL, rtol=0)
    assert {p.split("/", 1)[0] for p in kept_paths} == {"blocks", "vace_blocks"}
    assert any(p.startswith("vace_blocks/") and "proj_out" in p for p in kept_paths)
    streamed = _run(folder, tmp_path / "c.npy", file, weights_dtype="int8", tp=2, offload_chunk=1)
    np.testing.assert_allclose(streamed, dequantized, atol=FRAME_ATOL, rtol=0)


def test_8bit_vace_dit_output_against_bf16_is_bounded():
    reference = fixtures.build_reference(fixtures.tiny_config())
    model = WanVACETransformer(WanVACEConfig.from_hf_config(fixtures.diffusers_config(reference)), dtype=jnp.float32)
    tree, run = _tree(model), _runner(model, _inputs(model))
    bf16 = run(tree)
    groups = tuple(g.name for g in block_groups(model))
    assert set(groups) == {"vace_blocks", "blocks"}
    got = {}
    for choice in ("int8", "fp8"):
        quantized = device_weights(tree, groups, choice)
        for group in groups:
            kernels = [p for p in quantized if p.startswith(group + "/") and p.endswith("/kernel")]
            assert kernels and all(quantized[p].dtype.itemsize == 1 for p in kernels), (choice, group)
            assert all(p[:-len("kernel")] + "kernel_scale" in quantized for p in kernels)
        got[choice] = _distance(run(quantized), bf16)
        if choice == "int8":
            got["unscaled"] = _distance(run({p: np.ones_like(a) if p.endswith("kernel_scale") else a
                                             for p, a in quantized.items()}), bf16)
    print(got)
    for choice in ("int8", "fp8"):
        assert 0 < got[choice] < BOUND[choice], got
    assert got["unscaled"] > 100 * got["int8"] and got["unscaled"] > 0.1, got


def test_the_planner_counts_both_groups_8bit():
    """`--plan`'s one-device DiT weight bytes for wan2.1-vace-14b with --weights-dtype int8 within 5% of what the
    placed tree takes at the real shapes (8-bit kernels of both groups with fp32 scales, the rest bf16)."""
    import ml_dtypes

    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.compute.planner import Layout, dit_weight_bytes
    from vidax.zoo.weights.quantize import placed_bytes
    from vidax.zoo.registry import make_pipeline

    options = GenerateOptions(model="wan2.1-vace-14b", prompt="x", weights_dtype="int8")
    family = make_pipeline(options.model, options)
    dit = WanVACETransformer(family.vace_config)
    shapes = {p: (s, np.dtype(ml_dtypes.bfloat16)) for p, s in dit.param_shapes().items()}
    placed = placed_bytes(shapes, tuple(g.name for g in block_groups(dit)), "int8")
    predicted = dit_weight_bytes(family.memory_job(options), Layout())
    assert abs(predicted - placed) <= 0.05 * placed, (predicted, placed)
    bf16 = dit_weight_bytes(family.memory_job(dataclasses.replace(options, weights_dtype=None)), Layout())
    assert predicted < 0.6 * bf16
