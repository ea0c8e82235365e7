"""`--transformer FILE` with an fp8/int8-scaled safetensors DiT (original Wan keys, as ComfyUI's and others'
files are) against diffusers' `WanPipeline` run on the same weights dequantized by torch: float(w) x scale.

The one file mixes the layouts the reader takes, layer by layer: self-attention in ComfyUI's legacy
`scaled_fp8` (marker, `.scale_weight`, `.scale_input`), cross-attention float8_e5m2 named in the header's
`_quantization_metadata`, the FFN int8 with per-row scales and `.comfy_quant`, the embeddings a plain fp8
cast (Kijai's), the rest (norms, biases, modulation, the 5-D patch embedding) bf16 or fp32 as shipped.
The folder the rest comes from holds other DiT weights, so a run that ignored the file could not match.
"""

from __future__ import annotations

import dataclasses
import json

import diffusers
import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from tests.oracle import perturb, state_of
from tests.tiny_references import umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
from tests.translator.wan_transformer_spec_fixtures import official_key
from vidax.translator import FormatError
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate
from vidax.zoo.wan.tiny import build_tokenizer

PROMPT, NEGATIVE = "a red kite over a grey sea", "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 5, 3, 4.0
FRAME_ATOL = 2e-5  # fp32 on both sides on bit-identical weights (see test_gguf_pipeline.py)


def _transformer():
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64).eval()


def _quantize(name: str, w: torch.Tensor, out: dict, layers: dict) -> torch.Tensor:
    """Store `name` (an original Wan key) in its layout into `out`; returns the fp32 weight torch reads back."""
    layer = name[:-len(".weight")]
    if ".self_attn." in name and w.ndim == 2:
        scale = (w.abs().max() / 448).reshape(())
        q = (w / scale).to(torch.float8_e4m3fn)
        out |= {name: q, f"{layer}.scale_weight": scale, f"{layer}.scale_input": torch.tensor(1.0)}
        return q.float() * scale
    if ".cross_attn." in name and w.ndim == 2:
        scale = (w.abs().max() / 57344).reshape(1)
        q = (w / scale).to(torch.float8_e5m2)
        out |= {name: q, f"{layer}.weight_scale": scale}
        layers[layer] = {"format": "float8_e5m2"}
        return q.float() * scale
    if ".ffn." in name and w.ndim == 2:
        scale = w.abs().amax(1, keepdim=True) / 127
        q = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
        cq = torch.tensor(list(json.dumps({"format": "int8_tensorwise", "per_row": True}).encode()), dtype=torch.uint8)
        out |= {name: q, f"{layer}.weight_scale": scale, f"{layer}.comfy_quant": cq}
        return q.float() * scale
    if name.startswith(("text_embedding", "time_embedding")) and w.ndim == 2:
        out[name] = w.to(torch.float8_e4m3fn)
        return out[name].float()
    out[name] = w.to(torch.bfloat16) if name.endswith("norm_q.weight") else w
    return out[name].float()


@pytest.fixture(scope="module")
def fp8_wan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp8_wan")
    torch.manual_seed(7)
    build_tokenizer(folder / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder / "tokenizer_source")
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), vae=wan_pipeline_vae(), transformer=_transformer())
    for seed, module in enumerate(parts.values()):
        perturb(module, 80 + seed)
    stored, layers, dequantized = {"scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn)}, {}, {}
    for key, value in state_of(parts["transformer"]).items():
        # a copy: state_of shares the parameters' storage, and they are perturbed again below
        dequantized[key] = _quantize(official_key(key), value.clone(), stored, layers).clone()
    metadata = {"_quantization_metadata": json.dumps({"format_version": "1.0", "layers": layers})}
    save_file(stored, folder / "wan_t2v_fp8_scaled.safetensors", metadata=metadata)
    perturb(parts["transformer"], 90)  # the folder's DiT is other weights
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), **parts)
    pipe.save_pretrained(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(8))
    np.save(folder / "latents.npy", latents.numpy())
    with torch.no_grad():
        pipe.transformer.load_state_dict(dequantized, strict=True)
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                      num_inference_steps=STEPS, guidance_scale=GUIDANCE, latents=latents.clone(),
                      output_type="np").frames[0]
    return folder, frames, stored, metadata


def _options(folder, out, file):
    return GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"),
                           height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE,
                           latents=folder / "latents.npy", out=out, dtype="float32", compile_cache=False, transformer=file)


def test_scaled_8bit_dit_matches_diffusers_on_dequantized_weights(fp8_wan, tmp_path):
    folder, expected, _, _ = fp8_wan
    result = generate(_options(folder, tmp_path / "v.npy", folder / "wan_t2v_fp8_scaled.safetensors"))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


def test_a_bad_scale_stops_the_run_before_work(fp8_wan, tmp_path):
    folder, _, stored, metadata = fp8_wan
    broken = dict(stored)
    key = next(k for k in stored if k.endswith("ffn.0.weight_scale"))
    broken[key] = stored[key][:3].clone()  # three rows' scales for a 64-row weight
    save_file(broken, tmp_path / "broken.safetensors", metadata=metadata)
    with pytest.raises(FormatError, match=r"ffn\.0\.weight_scale has shape \[3, 1\]"):
        generate(_options(folder, tmp_path / "v.npy", tmp_path / "broken.safetensors"))
    assert not (tmp_path / "v.npy").exists()


SIDE_TENSORS = (".scale_weight", ".scale_input", ".weight_scale", ".input_scale", ".comfy_quant")


def _all_int8(stored: dict) -> dict:
    """The file with every block matrix int8 per row at amax / 120 (a fresh quantization would take 127)."""
    blocks = {k for k, v in stored.items() if k.startswith("blocks.") and k.endswith(".weight") and v.ndim == 2}
    out = {}
    for key, value in stored.items():
        layer = key.rsplit(".", 1)[0]
        if key in blocks:
            scale = stored.get(f"{layer}.scale_weight", stored.get(f"{layer}.weight_scale"))
            w = value.float() * scale if scale is not None else value.float()
            per_row = w.abs().amax(1, keepdim=True) / 120
            out |= {key: torch.round(w / per_row).clamp(-127, 127).to(torch.int8), f"{layer}.weight_scale": per_row}
        elif not (layer + ".weight" in blocks and key.endswith(SIDE_TENSORS)):  # a block layer's old scales go
            out[key] = value
    return out


def test_weights_dtype_places_the_files_own_int8_kernels(fp8_wan, tmp_path, monkeypatch):
    """--weights-dtype int8 on a file whose block matrices are int8 per row: the file's values and scales are
    placed as they are, so at fp32 the frames are the dequantized file's within 2e-5. Requantized afresh
    (what it did before, and still does for kernels whose format or scales do not fit) they land further."""
    import vidax.zoo.weights.quantize as quantize

    folder, _, stored, _ = fp8_wan
    save_file(_all_int8(stored), tmp_path / "int8.safetensors")
    options = _options(folder, tmp_path / "a.npy", tmp_path / "int8.safetensors")
    dequantized = generate(options).frames
    kept = generate(dataclasses.replace(options, out=tmp_path / "b.npy", weights_dtype="int8")).frames
    np.testing.assert_allclose(kept, dequantized, atol=FRAME_ATOL, rtol=0)
    monkeypatch.setattr(quantize, "file_kernels", lambda *args: {})
    fresh = generate(dataclasses.replace(options, out=tmp_path / "c.npy", weights_dtype="int8")).frames
    assert np.abs(fresh - dequantized).max() > 10 * FRAME_ATOL
