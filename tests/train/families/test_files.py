"""The files `vidax-train lora` writes for HunyuanVideo-1.5, LTX-2 and CogVideoX load where people load them
(issue 63, item 2): a trained LoRA (B nonzero) on each family's tiny perturbed diffusers DiT, saved as PEFT and as
ComfyUI keys, merged by vidax's `--lora` (`vidax.translator.convert(..., loras=...)`) into exactly W + (alpha /
rank)·A·B on the targeted kernels and nothing else (alpha 8 at rank 4: a loader ignoring alpha is off by 2x); the
PEFT file merged by diffusers' `load_lora_weights` + `fuse_lora` where the pipeline has it (LTX-2, CogVideoX) to
the same weights; HunyuanVideo-1.5's ComfyUI file (official names) also into the official-layout checkpoint."""

from __future__ import annotations

import diffusers
import jax
import numpy as np
import pytest
from safetensors.torch import save_file

from tests.lora.fused import diffusers_fused
from tests.oracle import save_diffusers, state_of
from vidax.train.export import save_lora
from vidax.train.families.cogvideox import CogVideoXTrainFamily
from vidax.train.families.hunyuan_video15 import HunyuanVideo15TrainFamily
from vidax.train.families.ltx2 import LTX2TrainFamily
from vidax.train.lora import LoraConfig, init_lora
from vidax.translator import convert
from vidax.translator.formats.safetensors_io import SafetensorsFile
from vidax.translator.lora import resolve_adapter


def _hv15():
    from tests.hunyuan_video15.hunyuan_spec_fixtures import dit_reference

    return dit_reference()


def _ltx2():
    from tests.ltx2.references.ltx2_spec_fixtures import dit_reference

    return dit_reference("2.3")


def _cogvideox():
    from tests.cogvideox.cogvideox_spec_fixtures import dit_reference

    return dit_reference("5b")


# family: (tiny reference, spec, its TrainFamily, the diffusers pipeline with load_lora_weights or None)
FAMILIES = {
    "hunyuan_video15": (_hv15, "hunyuan_video15/transformer", HunyuanVideo15TrainFamily, None),
    "ltx2": (_ltx2, "ltx2/transformer", LTX2TrainFamily, "LTX2Pipeline"),
    "cogvideox": (_cogvideox, "cogvideox/transformer", CogVideoXTrainFamily, "CogVideoXPipeline"),
}
CONFIG = dict(rank=4, alpha=8.0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vidax_and_diffusers_merge_the_files(family, tmp_path):
    build, spec, trained, pipeline = FAMILIES[family]
    ref = build()
    root = save_diffusers(ref, tmp_path / "base" / "transformer").parent
    base = convert(spec, root, dtype="float32")
    blocks = {k[len("blocks/"):]: v for k, v in base.items() if k.startswith("blocks/")}
    config = LoraConfig(targets=trained.default_targets, **CONFIG)
    lora = init_lora(jax.random.key(0), _unflatten(blocks), config)
    keys = iter(jax.random.split(jax.random.key(1), len(lora)))
    lora = {m: {"A": p["A"], "B": 0.05 * jax.random.normal(next(keys), p["B"].shape)} for m, p in lora.items()}
    files = {fmt: save_lora(tmp_path / f"{fmt}.safetensors", lora, config, fmt, spec=spec, group=trained.block_list)
             for fmt in ("peft", "comfy")}
    assert all(k.startswith("diffusion_model.") for k in SafetensorsFile(files["comfy"]).tensors)
    merged = {fmt: convert(spec, root, dtype="float32", loras=[resolve_adapter(str(path))]) for fmt, path in files.items()}
    for path in base:
        module = path[len("blocks/"):-len("/kernel")] if path.startswith("blocks/") else None
        if module in lora:
            delta = config.scale * np.einsum("lir,lro->lio", np.asarray(lora[module]["A"]), np.asarray(lora[module]["B"]))
            for fmt in files:
                np.testing.assert_allclose(merged[fmt][path] - base[path], delta, rtol=1e-5, atol=1e-6, err_msg=(fmt, path))
        else:
            assert all(np.array_equal(merged[fmt][path], base[path]) for fmt in files), path
    if pipeline is not None:
        expected = diffusers_fused(getattr(diffusers, pipeline), ref, tmp_path, spec, {"x": (files["peft"], 1.0)})
        for path in expected:
            np.testing.assert_allclose(merged["peft"][path], expected[path], rtol=1e-6, atol=1e-6, err_msg=path)
    if family == "hunyuan_video15":  # ComfyUI's names are the official checkpoint's: they merge into it too
        from tests.hunyuan_video15.hunyuan_spec_fixtures import official_dit_state

        official = tmp_path / "official"
        official.mkdir()
        save_file({k: v.contiguous() for k, v in official_dit_state(state_of(ref)).items()},
                  official / "diffusion_pytorch_model.safetensors")
        ours = convert(spec, official, dtype="float32", loras=[resolve_adapter(str(files["comfy"]))])
        for path in base:
            np.testing.assert_allclose(ours[path], merged["comfy"][path], rtol=1e-6, atol=1e-6, err_msg=path)


def _unflatten(flat: dict) -> dict:
    from flax import traverse_util

    return traverse_util.unflatten_dict(flat, sep="/")
