"""`--transformer FILE` / `--transformer-2 FILE` with GGUF DiTs laid out as city96's Wan files are, against
diffusers' `WanPipeline` run on the same weights dequantized in fp32.

A tiny perturbed Wan2.2 A14B pipeline (two experts) is saved with `save_pretrained`, but with DiT weights
that are NOT the ones in the GGUF files (perturbed again after the files were written), so a run that
ignored a `--transformer` flag could not match. Each expert's GGUF has the original Wan keys:
- expert 1, a "Q8_0" file: block matrices Q8_0, embeddings F16, head BF16, the 5-D patch embedding whole
  in F32 (city96's fix_5d_tensors), vectors and modulations F32;
- expert 2, a "Q4_K_M"-style file under ComfyUI's `model.diffusion_model.` prefix: attention q/k/o and
  ffn.0 Q4_K, v and ffn.2 Q6_K, embeddings Q5_0/Q4_0, all flattened to rows of 256 with
  `comfy.gguf.orig_shape` (the tiny model's rows are 32 wide), the patch embedding flattened in Q8_0.
diffusers runs on `gguf.quants.dequantize` of those same blocks (fp32), vidax reads the files.
"""

from __future__ import annotations

import json
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch
import transformers

from tests.oracle import perturb, state_of
from tests.quantized.gguf_files import dequantized, encode, write_gguf
from tests.tiny_references import umt5_encoder, unipc_flow_scheduler, wan_pipeline_vae
from tests.translator.wan_transformer_spec_fixtures import official_key
from vidax.translator import SourceError, convert, convert_model, load
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.weights.source import WeightsSource
from vidax.zoo.api import generate
from vidax.zoo.wan.tiny import build_tokenizer

PROMPT, NEGATIVE = "a red kite over a grey sea", "blurry, low quality"
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE, GUIDANCE_2 = 32, 48, 5, 3, 4.0, 3.0
# Both sides run fp32 at highest matmul precision on bit-identical weights; what remains is summation order
# (XLA vs torch kernels) through 3 UniPC steps with guidance, measured ~1e-6 in tests/wan. 2e-5 is 5-50x
# below what a quantization error of these files moves the frames by (checked below).
FRAME_ATOL = 2e-5
PREFIX = "model.diffusion_model."
# --weights-dtype int8 on top: measured 0.0032 from the full-precision frames (2026-12-02); a missing scale
# or a wrong axis moves frames by > 0.1.
INT8_FRAMES_ATOL = 0.01


def _transformer():
    return diffusers.WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
        text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64).eval()


def _q8_0_mix(name: str, shape: tuple[int, ...]) -> tuple[str, bool]:
    """(ggml type, flattened with orig_shape) of a tensor in the Q8_0 file."""
    if len(shape) == 1 or name.endswith("modulation") or len(shape) == 5:
        return "F32", False
    if name.startswith("blocks."):
        return "Q8_0", False
    return ("BF16", False) if name.startswith("head.") else ("F16", False)


def _q4_k_m_mix(name: str, shape: tuple[int, ...]) -> tuple[str, bool]:
    """The Q4_K_M-style file: Q4_K, with Q6_K for attention values and the FFN's down projection."""
    if len(shape) == 1 or name.endswith("modulation"):
        return "F32", False
    if len(shape) == 5:
        return "Q8_0", True
    if name.startswith("blocks."):
        return ("Q6_K" if name.endswith((".v.weight", "ffn.2.weight")) else "Q4_K"), True
    return ("Q5_0" if name.startswith("time_") else "Q4_0"), False


def _write_expert(state: dict, path: Path, mix, prefix: str = "") -> dict[str, torch.Tensor]:
    """The expert as a GGUF file with original Wan keys; returns its fp32 dequantized state (diffusers keys)."""
    tensors, flatten, dequant = [], [], {}
    for key, value in state.items():
        name, data = official_key(key), value.numpy().astype(np.float32)
        kind, flat = mix(name, data.shape)
        tensors.append((prefix + name, data, kind))
        if flat:
            flatten.append(prefix + name)
        stored = data.reshape(-1, 256) if flat else data
        dequant[key] = torch.from_numpy(dequantized(encode(stored, kind), kind, data.shape).copy())
    write_gguf(path, "wan", tensors, flatten=tuple(flatten))
    return dequant


@pytest.fixture(scope="module")
def a14b_gguf(tmp_path_factory):
    """(folder, latents, q8 file, q4km file, diffusers frames on the dequantized weights, frames on the folder's)."""
    folder = tmp_path_factory.mktemp("gguf_a14b")
    torch.manual_seed(3)
    build_tokenizer(folder / "tokenizer_source")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder / "tokenizer_source")
    parts = dict(text_encoder=umt5_encoder(len(tokenizer)), vae=wan_pipeline_vae(), transformer=_transformer(),
                 transformer_2=_transformer())
    for seed, module in enumerate(parts.values()):
        perturb(module, 60 + seed)
    q8 = _write_expert(state_of(parts["transformer"]), folder / "wan-high-Q8_0.gguf", _q8_0_mix)
    q4 = _write_expert(state_of(parts["transformer_2"]), folder / "wan-low-Q4_K_M.gguf", _q4_k_m_mix, PREFIX)
    perturb(parts["transformer"], 70), perturb(parts["transformer_2"], 71)  # the folder's DiTs are other weights
    pipe = diffusers.WanPipeline(tokenizer=tokenizer, scheduler=unipc_flow_scheduler(), boundary_ratio=0.875, **parts)
    pipe.save_pretrained(folder / "model")
    latents = torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(5))
    np.save(folder / "latents.npy", latents.numpy())
    run = dict(negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
               guidance_scale=GUIDANCE, guidance_scale_2=GUIDANCE_2, output_type="np")
    with torch.no_grad():
        pipe.transformer.load_state_dict(q8, strict=True)
        pipe.transformer_2.load_state_dict(q4, strict=True)
        frames = pipe(PROMPT, latents=latents.clone(), **run).frames[0]
    return folder, folder / "wan-high-Q8_0.gguf", folder / "wan-low-Q4_K_M.gguf", frames, q8, q4


def _options(folder: Path, out: Path, **extra) -> GenerateOptions:
    return GenerateOptions(model="wan2.2-t2v-a14b", prompt=PROMPT, negative_prompt=NEGATIVE, weights=str(folder / "model"),
                           height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS, guidance=GUIDANCE,
                           latents=folder / "latents.npy", out=out, dtype="float32", compile_cache=False,
                           extra={"guidance_2": GUIDANCE_2}, **extra)


def test_gguf_experts_match_diffusers_on_dequantized_weights(a14b_gguf, tmp_path):
    folder, q8, q4, expected, _, _ = a14b_gguf
    result = generate(_options(folder, tmp_path / "v.npy", transformer=q8, transformer_2=q4))
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
    # only the high-noise expert from its file: the low-noise one is the folder's (other weights), far off
    half = generate(_options(folder, tmp_path / "w.npy", transformer=q8))
    assert np.abs(half.frames - expected).max() > 50 * FRAME_ATOL


def test_gguf_tree_is_the_dequantized_official_checkpoint(a14b_gguf, tmp_path):
    """Through the spec: the GGUF's tree equals the tree of its dequantized weights saved as safetensors."""
    from safetensors.torch import save_file

    _, q8, q4, _, q8_state, q4_state = a14b_gguf
    for path, state in ((q8, q8_state), (q4, q4_state)):
        save_file(state, tmp_path / f"{path.stem}.safetensors")
        expected = convert("wan/transformer", tmp_path / f"{path.stem}.safetensors", dtype="float32")
        got = convert("wan/transformer", path, dtype="float32")
        assert set(got) == set(expected)
        for leaf in expected:
            np.testing.assert_array_equal(got[leaf], expected[leaf], err_msg=f"{path.name}: {leaf}")


def test_vidax_convert_takes_the_dit_from_its_file(a14b_gguf, tmp_path):
    folder, q8, _, _, q8_state, _ = a14b_gguf
    from safetensors.torch import save_file

    result = convert_model("wan2.2-t2v-a14b", source=str(folder / "model"), out=tmp_path / "out",
                           components=("transformer",), dtype="float32", transformer=q8)
    assert result.written == {"transformer": True}
    save_file(q8_state, tmp_path / "q8.safetensors")
    expected = convert("wan/transformer", tmp_path / "q8.safetensors", dtype="float32")
    written = load(tmp_path / "out" / "transformer")
    for leaf in expected:
        np.testing.assert_array_equal(np.asarray(written[leaf]), expected[leaf], err_msg=leaf)
    # the weights are the file's, the DiT's config the source folder's: vidax-gen finds it there
    manifest = json.loads((tmp_path / "out" / "transformer" / "manifest.json").read_text())
    assert manifest["source"]["origin"] == str(q8) and manifest["configs"] == str(folder / "model")
    converted = WeightsSource.resolve(tmp_path / "out", None)
    config = converted.read_json("transformer/config.json", component="transformer")
    assert config == json.loads((folder / "model" / "transformer" / "config.json").read_text())


def test_bad_dit_files_are_one_line_before_work(a14b_gguf, tmp_path):
    folder, q8, _, _, _, _ = a14b_gguf
    other = write_gguf(tmp_path / "hv.gguf", "hyvid", [("img_in.proj.weight", np.zeros((4, 32), np.float32), "F32")])
    with pytest.raises(SourceError, match="'hyvid'"):
        generate(_options(folder, tmp_path / "a.npy", transformer=other))
    with pytest.raises(PipelineError, match="no such file"):
        generate(_options(folder, tmp_path / "b.npy", transformer=tmp_path / "missing.gguf"))
    single = GenerateOptions(model="wan2.1-t2v-1.3b", prompt=PROMPT, weights=str(folder / "model"), transformer_2=q8,
                             out=tmp_path / "c.npy")
    with pytest.raises(PipelineError, match="has no transformer_2"):
        generate(single)
    with pytest.raises(SourceError, match="'hyvid'"):
        convert_model("wan2.2-t2v-a14b", source=str(folder / "model"), out=tmp_path / "out", components=("transformer",),
                      transformer=other)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob("*.npy"))


def test_weights_dtype_int8_keeps_block_weights_8bit_through_the_pipeline(a14b_gguf, tmp_path):
    """--weights-dtype int8 on top of the GGUF experts: one device and tensor parallel (the scales split
    with their kernels) agree, and stay near the full-precision frames."""
    folder, q8, q4, expected, _, _ = a14b_gguf
    one = generate(_options(folder, tmp_path / "a.npy", transformer=q8, transformer_2=q4, weights_dtype="int8"))
    tp = generate(_options(folder, tmp_path / "b.npy", transformer=q8, transformer_2=q4, weights_dtype="int8", tp=2))
    assert 0 < np.abs(one.frames - expected).max() < INT8_FRAMES_ATOL
    np.testing.assert_allclose(tp.frames, one.frames, atol=FRAME_ATOL, rtol=0)
    # --offload-chunk: the blocks streamed from host memory carry their 8-bit kernels and scales
    streamed = generate(_options(folder, tmp_path / "c.npy", transformer=q8, transformer_2=q4, weights_dtype="int8",
                                 offload_chunk=1, tp=2))
    np.testing.assert_allclose(streamed.frames, one.frames, atol=FRAME_ATOL, rtol=0)


def test_lora_merges_into_a_gguf_dit(a14b_gguf, tmp_path):
    """--lora on a --transformer GGUF: merged into the dequantized fp32 weights as they are read, in vidax-gen
    and vidax-convert alike; the run equals one whose DiT file holds the hand-merged weights."""
    from safetensors.torch import save_file

    from tests.lora.formats import hand_merge, low_rank_factors, wan_modules, write_peft

    folder, q8, q4, _, q8_state, _ = a14b_gguf
    factors = low_rank_factors(q8_state, wan_modules(2), rank=4, seed=1)
    lora = write_peft(tmp_path / "style.safetensors", factors, alpha=8.0)
    merged = hand_merge(q8_state, factors, 0.5 * 8.0 / 4)
    save_file({k: torch.from_numpy(v) for k, v in merged.items()}, tmp_path / "merged.safetensors")
    by_hand = generate(_options(folder, tmp_path / "a.npy", transformer=tmp_path / "merged.safetensors", transformer_2=q4))
    with_lora = generate(_options(folder, tmp_path / "b.npy", transformer=q8, transformer_2=q4, lora=(f"{lora}=0.5",)))
    np.testing.assert_allclose(with_lora.frames, by_hand.frames, atol=FRAME_ATOL, rtol=0)
    plain = generate(_options(folder, tmp_path / "c.npy", transformer=q8, transformer_2=q4))
    assert np.abs(plain.frames - by_hand.frames).max() > 50 * FRAME_ATOL  # the LoRA moves the frames

    convert_model("wan2.2-t2v-a14b", source=str(folder / "model"), out=tmp_path / "out", components=("transformer",),
                  dtype="float32", transformer=q8, lora=(f"{lora}=0.5",))
    expected = convert("wan/transformer", tmp_path / "merged.safetensors", dtype="float32")
    written = load(tmp_path / "out" / "transformer")
    for leaf in expected:
        np.testing.assert_allclose(np.asarray(written[leaf]), expected[leaf], atol=1e-6, rtol=0, err_msg=leaf)
