"""Tiny diffusers CogVideoX pipelines for the generator's parity tests, and the reference's random draws.

Each pipeline is a perturbed tiny DiT, VAE and T5 encoder with a sentencepiece tokenizer trained here
(no Hub), saved with `save_pretrained` so vidax reads the same folder the reference runs from.

The reference draws from its torch generator, in this order: (I2V) the image posterior's sample, then
(initial latents, when not given), then at each `CogVideoXDPMScheduler` step one normal draw, and a
second one on the second-order steps (every step but the first and the last; the second replaces the
first). `reference_draws` replays that sequence; the tests give vidax the same values through
`--latents` and by patching `Run.host_noise` (vidax's own runs draw them from the seed on the host).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from tests.oracle import perturb

from . import cogvideox_spec_fixtures as fx

PROMPT = "a small boat drifts on calm water"
NEGATIVE = "the cat sat"
CORPUS = ["a red kite over a grey sea", "the cat sat on the mat", "waves crash against the rocks at dusk",
          "a small boat drifts on calm water", "a girl rides a bike through the park"] * 20
SCHEDULER = dict(beta_end=0.012, beta_schedule="scaled_linear", beta_start=0.00085, clip_sample=False,
                 num_train_timesteps=1000, prediction_type="v_prediction", rescale_betas_zero_snr=True,
                 set_alpha_to_one=True, snr_shift_scale=1.0, steps_offset=0, timestep_spacing="trailing")
T5_DIM = 32
# one 32x48 video is one VAE tile of this sample size (half of it): tiling on, nothing blended, as cheap
# as untiled; the tiled path itself is compared with diffusers in test_vae.py and test_generate_10.py
VAE_ONE_TILE = dict(sample_height=64, sample_width=96)
HEIGHT, WIDTH, FRAMES, STEPS, GUIDANCE = 32, 48, 9, 3, 6.0


def build_tokenizer(folder: Path, max_length: int = 226) -> Path:
    """A T5 sentencepiece tokenizer folder (spiece.model + T5Tokenizer config) as the repos' `tokenizer/`."""
    import sentencepiece

    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "corpus.txt").write_text("\n".join(CORPUS))
    sentencepiece.SentencePieceTrainer.train(input=str(folder.parent / "corpus.txt"), model_prefix=str(folder / "spiece"),
                                             vocab_size=40, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                             model_type="unigram", minloglevel=2)
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
         "extra_ids": 0, "model_max_length": max_length}))
    return folder


def t5_reference(seed: int = 1):
    import transformers

    torch.manual_seed(seed)
    return perturb(transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=40, d_model=T5_DIM, d_kv=8, d_ff=48, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu",
        relative_attention_num_buckets=8, relative_attention_max_distance=32)), seed)


# Tiny DiTs of each generation: 4 heads of 16 (tp x sp up to 4), the T5's width, 226 text tokens (the
# releases' length: the 2B and 5B-I2V position tables cover exactly that many).
DIT = dict(num_attention_heads=4, attention_head_dim=16, text_embed_dim=T5_DIM, max_text_seq_length=226)


def pipeline(folder: Path, variant: str, scheduler: str = "dpm", vae: dict | None = None, seed: int = 0,
             scheduler_config: dict | None = None, **dit):
    """A tiny `CogVideoXPipeline` / `CogVideoXImageToVideoPipeline` of `variant` (cogvideox_spec_fixtures'
    DIT_VARIANTS), saved with `save_pretrained` in `folder`."""
    import transformers
    from diffusers import (
        CogVideoXDDIMScheduler,
        CogVideoXDPMScheduler,
        CogVideoXImageToVideoPipeline,
        CogVideoXPipeline,
    )

    tokenizer_source = build_tokenizer(folder.parent / f"{folder.name}_tokenizer" / "tokenizer")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_source)
    cls = {"ddim": CogVideoXDDIMScheduler, "dpm": CogVideoXDPMScheduler}[scheduler]
    parts = dict(tokenizer=tokenizer, text_encoder=t5_reference(seed + 1),
                 transformer=fx.dit_reference(variant, seed, **{**DIT, **dit}),
                 vae=fx.vae_reference(seed + 2, **(vae or VAE_ONE_TILE)), scheduler=cls(**(scheduler_config or SCHEDULER)))
    ref = (CogVideoXImageToVideoPipeline if "i2v" in variant else CogVideoXPipeline)(**parts)
    ref.save_pretrained(folder)
    return ref


def reference_draws(seed: int, steps: int, shape: tuple[int, ...], image_shape: tuple[int, ...] | None = None,
                    dpm: bool = True) -> tuple[np.ndarray | None, list[np.ndarray]]:
    """(posterior noise in the VAE layout, the noise each DPM step uses in vidax's layout) as a reference run
    seeded `seed` draws them (latents given, so none drawn for them). `shape` is the reference's latent shape
    `[B, F', C, H', W']`."""
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(image_shape, generator=gen).numpy() if image_shape is not None else None
    per_step = []
    for i in range(steps if dpm else 0):
        noise = torch.randn(shape, generator=gen)
        second_order = 0 < i < steps - 1  # trailing spacing: the last step lands past t = 0
        if second_order:
            noise = torch.randn(shape, generator=gen)
        per_step.append(noise.numpy().transpose(0, 2, 1, 3, 4))
    return image, per_step


def patch_host_noise(monkeypatch, image: np.ndarray | None, steps: list[np.ndarray]) -> None:
    """vidax's host noise replaced by the reference's draws (tests only): stream 1 = the sampler's steps,
    stream 3 = the I2V posterior sample."""
    from vidax.zoo.cogvideox.family import IMAGE_NOISE_STREAM
    from vidax.zoo.generator.stages import Run

    def host_noise(self, stream, index, shape):
        value = steps[index] if stream == 1 else image if stream == IMAGE_NOISE_STREAM else None
        assert value is not None and value.shape == tuple(shape), (stream, index, shape)
        return np.asarray(value, np.float32)

    monkeypatch.setattr(Run, "host_noise", host_noise)


def draw_as_fp32(monkeypatch) -> None:
    """A reference run in fp64 draws the values an fp32 run draws (each normal draw made in fp32 from the same
    generator, then widened): diffusers draws in the latents' dtype, and fp64 draws are other values."""
    import diffusers.models.autoencoders.vae as posterior
    import diffusers.pipelines.cogvideo.pipeline_cogvideox_image2video as image_to_video
    import diffusers.schedulers.scheduling_dpm_cogvideox as dpm

    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        return torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype or torch.float32)

    for module in (posterior, image_to_video, dpm):
        monkeypatch.setattr(module, "randn_tensor", randn_tensor)
