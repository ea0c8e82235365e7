"""The image-conditioned models' conditions in `vidax-train` come from the families' own encoders, as a generation
encodes its `--image` (issue 63, item 1): Wan2.1 I2V (the first frame VAE-encoded after the frame mask, its CLIP
tokens), Wan2.2 TI2V-5B (a share of rows with their first latent frame clean) and HunyuanVideo-1.5 I2V (the first
frame's latents and mask channels, its SigLIP tokens); two steps of each run. (The steps themselves are compared
with PyTorch in test_parity_*.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from tests.hunyuan_video15.pipelines import towers  # noqa: F401  (the tiny Qwen / ByT5 towers)
from tests.train.tiny import one_clip
from tests.wan.test_pipeline import _reference_i2v, _reference_ti2v
from vidax.train.run import TrainOptions, batch_arrays, prepare, train_lora

SIZE = dict(height=32, width=48, frames=5)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return one_clip(tmp_path_factory.mktemp("i2v_clips"))


def run(model: str, weights, clips, out):
    options = TrainOptions(model=model, weights=str(weights), data=clips, out=out, rank=4, steps=2, lr=1e-2,
                           dtype="float32", **SIZE)
    prep = prepare(options)
    losses = []
    train_lora(options, lambda s, n, loss, r: losses.append(loss), prep=prep)
    assert len(losses) == 2 and np.isfinite(losses).all()
    return options, prep


def test_wan21_i2v_conditions_on_the_first_frame_and_its_clip_tokens(clips, tmp_path):
    _reference_i2v(tmp_path / "model")
    _, prep = run("wan2.1-i2v-14b-480p", tmp_path / "model", clips, tmp_path / "i2v.safetensors")
    cond = prep.encoded[0].cond
    assert cond["condition"].shape == (4 + 16, 2, 4, 6) and cond["clip"].shape == (1, 17, 32)  # 16 patches + class
    mask = cond["condition"][:4]
    assert (mask[:, 0] == 1).all() and (mask[:, 1:] == 0).all()  # the first frame known, the rest to make


def test_ti2v_gives_a_share_of_rows_their_first_frame(clips, tmp_path):
    _reference_ti2v(tmp_path / "model")
    options, prep = run("wan2.2-ti2v-5b", tmp_path / "model", clips, tmp_path / "ti2v.safetensors")
    assert prep.first_frame_p == 0.1 and prep.denoisers[0].inputs.per_token
    share = np.mean([float(batch_arrays(prep, options, s)["first_frame"][0]) for s in range(300)])
    assert 0.05 < share < 0.15


def test_hunyuan_video15_i2v_conditions_on_the_first_frame_and_its_siglip_tokens(towers, clips, tmp_path):  # noqa: F811
    import transformers
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers import HunyuanVideo15ImageToVideoPipeline as Reference

    from tests.hunyuan_video15.hunyuan_spec_fixtures import dit_reference, vae_reference
    from tests.oracle import perturb

    text, _ = towers
    siglip = perturb(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(
        hidden_size=12, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)), 4)
    dit = dit_reference(in_channels=9, out_channels=4, text_embed_dim=32, task_type="i2v", use_meanflow=False)
    Reference(text_encoder=text.text_encoder, tokenizer=text.tokenizer, transformer=dit, vae=vae_reference(),
              scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=text.text_encoder_2,
              tokenizer_2=text.tokenizer_2, guider=None, image_encoder=siglip,
              feature_extractor=transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
              ).save_pretrained(tmp_path / "model")
    _, prep = run("hunyuanvideo-1.5-480p-i2v", tmp_path / "model", clips, tmp_path / "hv15.safetensors")
    cond = prep.encoded[0].cond
    assert cond["condition"].shape == (4 + 1, 2, 2, 3) and cond["image_tokens"].shape == (16, 12)
    assert (cond["condition"][4, 0] == 1).all() and (cond["condition"][4, 1:] == 0).all()  # the first-frame mask
    assert np.abs(cond["condition"][:4, 1:]).max() == 0  # later frames' condition latents are zero
