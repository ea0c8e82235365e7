"""The generator behind `vidax-gen hunyuanvideo-i2v` against diffusers `HunyuanVideoImageToVideoPipeline`.

The released I2V DiT is the 16-channel token_replace model: the first frame's latent replaces latent frame
0 at every step, the Llava tower reads the prompt with the image. A tiny pipeline saved with
`save_pretrained` is the weights folder; same initial latents on both sides, the frames must agree. Module
reference runs: embedded guidance 6 (the official run's; diffusers' I2V default is 1.0), and true CFG 3 with
a negative prompt, where diffusers is made to encode the negative branch with the positive branch's image
interleave as tencent's code does (its `encode_prompt` falls back to 2 there: see zoo/hunyuan_video/family.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.registry import make_pipeline

from tests.oracle import hub_cached

from . import pipelines as tiny
from .test_generate import FRAME_ATOL, run


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv_generate_i2v")
    pipe = tiny.i2v_pipeline(root, tiny.towers(root))
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / "first.png")
    noise = root / "noise.npy"
    np.save(noise, tiny.latents(1))
    common = dict(image=Image.open(root / "first.png"), prompt=tiny.PROMPT, height=tiny.HEIGHT, width=tiny.WIDTH,
                  num_frames=tiny.FRAMES, num_inference_steps=tiny.STEPS, guidance_scale=6.0, output_type="np")
    encode_prompt = pipe.encode_prompt

    def official_negative(*args, image_embed_interleave=4, **kwargs):  # the positive call passes its own
        return encode_prompt(*args, image_embed_interleave=image_embed_interleave, **kwargs)

    with torch.no_grad():
        embedded = pipe(latents=torch.from_numpy(np.load(noise)), **common).frames[0]
        pipe.encode_prompt = official_negative
        true_cfg = pipe(latents=torch.from_numpy(np.load(noise)), negative_prompt=tiny.NEGATIVE, true_cfg_scale=3.0,
                        **common).frames[0]
        pipe.encode_prompt = encode_prompt
    return root, pipe, noise, {"embedded": embedded, "true_cfg": true_cfg}


def options(weights, root, tmp_path, **extra) -> GenerateOptions:
    family = {k: extra.pop(k) for k in ("true_cfg", "image_embed_interleave") if k in extra}
    base = dict(model="hunyuanvideo-i2v", prompt=tiny.PROMPT, image=root / "first.png",
                weights=None if weights is None else str(weights), height=tiny.HEIGHT, width=tiny.WIDTH,
                frames=tiny.FRAMES, steps=tiny.STEPS, latents=root / "noise.npy", out=tmp_path / "out.npy",
                compile_cache=False, dtype="float32")
    return GenerateOptions(**{**base, **extra}, extra=family)


def test_i2v_matches_reference(saved, tmp_path):
    root, _, _, expected = saved
    result = run(options(root / "model", root, tmp_path))
    assert result.frames.shape == expected["embedded"].shape == (5, 32, 48, 3)
    np.testing.assert_allclose(result.frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)
    assert (result.settings["guidance"], result.settings["image_embed_interleave"]) == (6.0, 4)


def test_i2v_true_cfg_from_the_hub(saved, tmp_path, monkeypatch):
    """No --weights: hunyuanvideo-community/HunyuanVideo-I2V from the Hugging Face cache; `--true-cfg 3` with
    the branches on the data axis (the negative one reads a black image)."""
    root, _, _, expected = saved
    assert np.abs(expected["true_cfg"] - expected["embedded"]).max() > 1e-2
    hub_cached(monkeypatch, tmp_path / "hub", "hunyuanvideo-community/HunyuanVideo-I2V", root / "model")
    opts = options(None, root, tmp_path, negative_prompt=tiny.NEGATIVE, true_cfg=3.0, dp=2)
    result = run(opts)
    assert result.settings["weights_source"].startswith("hunyuanvideo-community/HunyuanVideo-I2V@")
    np.testing.assert_allclose(result.frames, expected["true_cfg"], atol=FRAME_ATOL, rtol=0)


def test_i2v_official_folder_and_its_conversion(saved, tmp_path):
    """tencent/HunyuanVideo-I2V's ckpts/ (the whole Llava in text_encoder_i2v/; the DiT's token_replace and
    RoPE from the registry), and its `vidax-convert hunyuanvideo-i2v` output: the reference's frames."""
    from vidax.translator.models import ConvertOptions, convert_model

    root, pipe, _, expected = saved
    ckpts = tiny.official_i2v_folder(tmp_path / "ckpts", pipe)
    result = run(options(ckpts, root, tmp_path))
    np.testing.assert_allclose(result.frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)
    out = tmp_path / "converted"
    convert_model(ConvertOptions(model="hunyuanvideo-i2v", source=str(ckpts), out=out, dtype="float32"))
    assert (out / "image_processor" / "preprocessor_config.json").is_file()
    np.testing.assert_allclose(run(options(out, root, tmp_path)).frames, expected["embedded"], atol=FRAME_ATOL, rtol=0)


def test_i2v_without_an_image_fails_before_work(saved, tmp_path):
    root, _, _, _ = saved
    opts = GenerateOptions(**{**options(root / "model", root, tmp_path).__dict__, "image": None})
    with pytest.raises(PipelineError, match="hunyuanvideo-i2v is an image-to-video model: give --image PATH"):
        run(opts)


def test_i2v_size_from_the_image(saved, tmp_path):
    """No --height/--width: tencent/HunyuanVideo-I2V's 720p bucket of the image's aspect (hyvideo
    generate_crop_size_list(960, 32): 32 px steps of about 960^2 px; get_closest_ratio: the nearest ratio
    not past the image's, strictly above it for landscape, so a 16:9 image gets 704x1248)."""
    root, _, _, _ = saved
    opts = GenerateOptions(**{**options(root / "model", root, tmp_path).__dict__, "height": None, "width": None})
    family = make_pipeline(opts.model, opts)
    for (h, w), size in (((720, 1280), (704, 1248)), ((1280, 720), (1248, 704)), ((512, 512), (960, 960)),
                         ((600, 800), (832, 1088))):
        s = family.resolve_settings(opts, {"image": np.zeros((h, w, 3), np.uint8)})
        assert (s.height, s.width) == size
