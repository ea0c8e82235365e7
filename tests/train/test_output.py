"""The files `vidax-train lora` writes load everywhere (issue 49, item 3): a trained LoRA (B nonzero) saved as
PEFT and as ComfyUI keys, loaded by diffusers' `WanPipeline.load_lora_weights` + `fuse_lora` and by vidax's own
`--lora` merge (`vidax.translator.convert(..., loras=...)`): the merged weights agree, in both formats, with
alpha / rank applied (alpha 8 at rank 4: a loader that ignored alpha would be off by 2x)."""

from __future__ import annotations

import copy
import json

import jax
import numpy as np
import pytest
import torch
from diffusers import WanPipeline

from tests.oracle import save_diffusers
from tests.train.tiny import build
from vidax.train.export import read_peft, save_lora
from vidax.train.lora import LoraConfig, dense_layers, diffusers_name, init_lora
from vidax.translator import convert
from vidax.translator.lora import resolve_adapter
from vidax.translator.formats.safetensors_io import SafetensorsFile

CONFIG = LoraConfig(rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    ref, model, params = build(root)
    lora = init_lora(jax.random.key(0), params["blocks"], CONFIG)
    keys = iter(jax.random.split(jax.random.key(1), len(lora)))
    lora = {m: {"A": p["A"], "B": 0.05 * jax.random.normal(next(keys), p["B"].shape)} for m, p in lora.items()}
    files = {fmt: save_lora(root / f"{fmt}.safetensors", lora, CONFIG, fmt, settings={"steps": 1})
             for fmt in ("peft", "comfy")}
    return dict(root=root, ref=ref, model=model, params=params, lora=lora, files=files)


def diffusers_merged(trained, fmt, tmp_path):
    """The base merged by diffusers (`load_lora_weights`, `fuse_lora`), converted to vidax's tree."""
    ref = copy.deepcopy(trained["ref"])
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None, transformer=ref)
    pipe.load_lora_weights(str(trained["files"][fmt]))
    pipe.fuse_lora(lora_scale=1.0)
    pipe.unload_lora_weights()
    state = {k: v for k, v in ref.state_dict().items()}
    save_diffusers(ref, tmp_path / "transformer", state)
    return convert("wan/transformer", tmp_path, trained["model"].param_shapes(), dtype="float32")


def vidax_merged(trained, fmt):
    return convert("wan/transformer", trained["root"], trained["model"].param_shapes(), dtype="float32",
                   loras=[resolve_adapter(str(trained["files"][fmt]))])


@pytest.mark.parametrize("fmt", ["peft", "comfy"])
def test_diffusers_and_vidax_merge_the_file_alike(trained, fmt, tmp_path):
    want = diffusers_merged(trained, fmt, tmp_path)
    got = vidax_merged(trained, fmt)
    assert set(got) == set(want)
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-6, atol=1e-6, err_msg=path)
    # the merge is the LoRA's: W + (alpha / rank) * A @ B on every targeted kernel, and nothing else moved
    base = convert("wan/transformer", trained["root"], trained["model"].param_shapes(), dtype="float32")
    for module, pair in trained["lora"].items():
        path = f"blocks/{module}/kernel"
        delta = CONFIG.scale * np.einsum("lir,lro->lio", np.asarray(pair["A"]), np.asarray(pair["B"]))
        np.testing.assert_allclose(got[path] - base[path], delta, rtol=1e-5, atol=1e-6, err_msg=path)
    untouched = set(base) - {f"blocks/{m}/kernel" for m in trained["lora"]}
    assert all(np.array_equal(got[p], base[p]) for p in untouched)


def test_file_contents(trained):
    peft = SafetensorsFile(trained["files"]["peft"])
    assert peft.tensors["transformer.blocks.1.attn1.to_out.0.lora_A.weight"].shape == (4, 16)
    assert peft.tensors["transformer.blocks.0.ffn.net.0.proj.lora_B.weight"].shape == (40, 4)
    meta = json.loads(peft.metadata["lora_adapter_metadata"])
    assert meta["transformer.r"] == 4 and meta["transformer.lora_alpha"] == 8.0
    assert len(meta["transformer.target_modules"]) == 2 * 10  # the full names: 10 layers in each of 2 blocks
    assert "blocks.1.attn1.to_out.0" in meta["transformer.target_modules"]
    assert json.loads(peft.metadata["vidax_training"]) == {"steps": 1}
    comfy = SafetensorsFile(trained["files"]["comfy"])
    assert comfy.tensors["diffusion_model.blocks.0.self_attn.q.lora_down.weight"].shape == (4, 16)
    assert comfy.tensors["diffusion_model.blocks.1.ffn.2.lora_up.weight"].shape == (16, 4)
    assert float(comfy.array("diffusion_model.blocks.1.cross_attn.o.alpha")) == 8.0
    assert len(comfy.tensors) == 3 * len(peft.tensors) // 2


def test_peft_file_reads_back(trained):
    paths = {diffusers_name(m): m for m in dense_layers(trained["params"]["blocks"])}
    lora, config = read_peft(trained["files"]["peft"], paths)
    assert config == LoraConfig(rank=4, alpha=8.0, targets=tuple(sorted(diffusers_name(m) for m in trained["lora"])))
    for module, pair in trained["lora"].items():
        for role in ("A", "B"):
            np.testing.assert_array_equal(lora[module][role], np.asarray(pair[role]))
