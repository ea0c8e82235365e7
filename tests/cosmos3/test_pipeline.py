"""Cosmos3's prompt construction, sequence layout and pipeline pieces against `Cosmos3OmniPipeline`.

A Qwen-like tokenizer (byte-level BPE with Qwen's chat specials and `<|vision_start|>`, Qwen2-VL's
chat template), a tiny Wan2.2 VAE and a tiny Nano-backbone DiT: `tokenize_prompt` (system prompt,
fps/duration and resolution sentences, inverse sentences on the negative prompt, image mode, no
system prompt), `prepare_latents` (VAE encode through `vidax.zoo.parts.wan_vae`, normalisation, the clean
conditioning frames written into the initial noise), and a whole guided image-to-video and
text-to-video loop (output_type="latent") composed of our pieces, our batched DiT and the shared
UniPC stepper, against the pipeline on the same models and seed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import Cosmos3OmniPipeline
from diffusers.utils.torch_utils import randn_tensor
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from vidax.translator import convert, load_spec
from vidax.zoo.cosmos3 import Cosmos3Transformer, Cosmos3TransformerConfig
from vidax.zoo.cosmos3 import conditioning as cond
from vidax.zoo.cosmos3 import rope as cosmos3_rope
from vidax.zoo.cosmos3 import text as cosmos3_text
from vidax.zoo.samplers import stepper_from_config
from vidax.zoo.parts.wan_vae import WanVAE, WanVAEConfig

from tests.tiny_references import QWEN2_VL_TEMPLATE
from tests.oracle import perturb, save_diffusers

from .cosmos3_spec_fixtures import dit_reference

CORPUS = ["a robot arm folds a towel on a table", "the video is of 16 fps", "this image is not of resolution",
          "you are a helpful assistant who will generate videos"] * 20
TINY_VAE22 = dict(base_dim=8, decoder_base_dim=12, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                  temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
                  out_channels=12, scale_factor_spatial=16,
                  latents_mean=[0.1, -0.2, 0.05, 0.3], latents_std=[0.8, 1.2, 0.9, 1.5])
FRAMES, HEIGHT, WIDTH, FPS = 9, 64, 64, 16.0  # 3 latent frames of 4 x 4 (2 x 2 patches)
SCHEDULER = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=10.0, use_karras_sigmas=False)


def tokenizer_folder(path):
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.chat_template = QWEN2_VL_TEMPLATE
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos3_pipe")
    folder = tokenizer_folder(root / "text_tokenizer")
    torch.manual_seed(0)
    vae = perturb(AutoencoderKLWan(**TINY_VAE22), seed=1)
    vae.save_pretrained(root / "vae")
    dit = dit_reference("nano", seed=2, attention_bias=False, latent_channel=4, patch_latent_dim=16, vocab_size=400,
                        sound_gen=False, action_gen=False)
    save_diffusers(dit, root / "transformer")
    pipe = Cosmos3OmniPipeline(transformer=dit, text_tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
                               vae=vae, scheduler=UniPCMultistepScheduler(**SCHEDULER), enable_safety_checker=False)
    our_vae = WanVAE(WanVAEConfig.from_hf_config(dict(vae.config)))
    vae_params = jax.tree.map(np.asarray, _unflatten(convert(load_spec("wan/vae22"), root, our_vae.param_shapes(),
                                                             dtype="float32")))
    model = Cosmos3Transformer(Cosmos3TransformerConfig.from_hf_config(dict(dit.config)))
    params = _unflatten(convert(load_spec("cosmos3/transformer"), root, model.param_shapes(), dtype="float32"))
    return pipe, cosmos3_text.PromptTokenizer(folder), our_vae, vae_params, model, params


def _unflatten(tree):
    from flax.traverse_util import unflatten_dict

    return unflatten_dict({k: np.asarray(v) for k, v in tree.items()}, sep="/")


@pytest.mark.parametrize("frames,negative,system", [(93, None, True), (93, "blurry. ugly", True), (1, "dark", True),
                                                    (121, "", False)], ids=["video", "negative", "image", "no_system"])
def test_tokenize_prompt(setup, frames, negative, system):
    pipe, tokenizer = setup[:2]
    kw = dict(num_frames=frames, height=704, width=1280, fps=FPS, use_system_prompt=system)
    expected = pipe.tokenize_prompt("A robot arm folds a towel.", negative, **kw)
    assert tokenizer("A robot arm folds a towel.", negative, **kw) == tuple(expected)


def test_prompt_sentences():
    text = cosmos3_text.augment("A robot arm folds a towel.", num_frames=93, height=704, width=1280, fps=16)
    assert text == ("A robot arm folds a towel. The video is 5.8 seconds long and is of 16 FPS. "
                    "This video is of 704x1280 resolution.")
    negative = cosmos3_text.augment("", num_frames=93, height=704, width=1280, fps=16, negative=True)
    assert negative == "The video is not 5.8 seconds long and is not of 16 FPS. This video is not of 704x1280 resolution."


def _image():
    pixels = (np.random.default_rng(3).random((HEIGHT, WIDTH, 3)) * 255).astype(np.uint8)
    return Image.fromarray(pixels), pixels.astype(np.float32).transpose(2, 0, 1) / 127.5 - 1


def _our_clean(setup, mode):
    _, _, vae, vae_params, _, _ = setup
    shape = cond.latent_shape(FRAMES, HEIGHT, WIDTH, channels=4)
    if mode == "t2v":
        video = np.zeros((1, 3, FRAMES, HEIGHT, WIDTH), np.float32)
    else:
        video = cond.image_video(_image()[1], FRAMES)
    clean = cond.normalize(vae.encode(vae_params, jnp.asarray(video)), vae.config.latents_mean, vae.config.latents_std)
    assert clean.shape == shape
    return clean, cond.condition_frames(shape[2], mode)


@pytest.mark.parametrize("mode", ["t2v", "i2v"])
def test_prepare_latents(setup, mode):
    pipe = setup[0]
    image = _image()[0] if mode == "i2v" else None
    with torch.no_grad():
        out = pipe.prepare_latents(image=image, num_frames=FRAMES, height=HEIGHT, width=WIDTH, fps=FPS,
                                   generator=torch.Generator().manual_seed(11), device="cpu", dtype=torch.float32)
    latents, mask = out[0], out[5]
    clean, ours_mask = _our_clean(setup, mode)
    np.testing.assert_array_equal(ours_mask, mask[:, 0, 0].numpy())
    noise = randn_tensor(tuple(latents.shape), generator=torch.Generator().manual_seed(11), dtype=torch.float32)
    ours = cond.initial_latents(clean, jnp.asarray(noise.numpy()), ours_mask)
    np.testing.assert_allclose(np.asarray(ours), latents.numpy(), atol=1e-5, rtol=1e-5)


def test_video_conditioning_frames():
    frames = np.random.default_rng(5).uniform(-1, 1, (3, 12, 2, 2)).astype(np.float32)
    video = cond.video_video(frames, 9, (0, 1))
    np.testing.assert_array_equal(video[0, :, :5], frames[:, :5])
    np.testing.assert_array_equal(video[0, :, 5:], np.repeat(frames[:, 4:5], 4, axis=1))
    np.testing.assert_array_equal(cond.video_video(frames, 9, (0, 1), keep="last")[0, :, :5], frames[:, -5:])
    np.testing.assert_array_equal(cond.condition_frames(3, "v2v", (0, 1, 7)), [1, 1, 0])


@pytest.mark.parametrize("mode", ["t2v", "i2v"])
def test_denoising_loop_matches_the_pipeline(setup, mode):
    pipe, tokenizer, _, _, model, params = setup
    steps, guidance, prompt, negative = 3, 6.0, "A robot arm folds a towel.", "blurry"
    image = _image()[0] if mode == "i2v" else None
    with torch.no_grad():
        expected = pipe(prompt=prompt, negative_prompt=negative, image=image, num_frames=FRAMES, height=HEIGHT,
                        width=WIDTH, fps=FPS, num_inference_steps=steps, guidance_scale=guidance,
                        generator=torch.Generator().manual_seed(13), output_type="latent", return_dict=False,
                        enable_safety_check=False)[0]

    cfg = model.cfg
    clean, mask = _our_clean(setup, mode)
    shape = cond.latent_shape(FRAMES, HEIGHT, WIDTH, channels=4)
    noise = randn_tensor(shape, generator=torch.Generator().manual_seed(13), dtype=torch.float32).numpy()
    latents = cond.initial_latents(clean, jnp.asarray(noise), mask)
    ids, text_mask, lengths = cosmos3_text.pad_prompts(
        tokenizer(prompt, negative, num_frames=FRAMES, height=HEIGHT, width=WIDTH, fps=FPS))
    grid = (shape[2], shape[3] // 2, shape[4] // 2)
    cos, sin = cosmos3_rope.rope_tables(cfg, cosmos3_rope.batch_positions(cfg, lengths, grid, FPS))
    noisy = jnp.asarray(np.broadcast_to(1 - mask, (2, shape[2])))
    stepper = stepper_from_config({**pipe.scheduler.config, "_class_name": "UniPCMultistepScheduler"}, steps)
    np.testing.assert_array_equal(cond.vision_timestep(stepper.sigmas[:-1]), pipe.scheduler.timesteps.numpy())
    dit = jax.jit(model.__call__)
    state = stepper.init(latents)
    for i in range(steps):
        t = cond.vision_timestep(stepper.sigmas[i])
        both = jnp.concatenate([state["latents"]] * 2)  # CFG's two prompts as one batch
        v = dit(params, jnp.asarray(ids), jnp.asarray(text_mask), both, jnp.full((2,), t), noisy, cos, sin)
        state, _ = stepper.step(state, cond.guide(v[:1], v[1:], guidance), jnp.int32(i))
    # guidance 6 weighs the DiT outputs 6x and 5x; fp32 differences ~1e-6 grow over 3 steps
    np.testing.assert_allclose(np.asarray(state["latents"])[0], expected.numpy()[0], atol=3e-5, rtol=1e-5)


def test_native_flow_sigmas_and_guidance():
    np.testing.assert_allclose(cond.native_flow_sigmas(4), [0.999, 0.74925, 0.4995, 0.24975])
    np.testing.assert_allclose(np.asarray(cond.guide(jnp.ones(2), jnp.zeros(2), 6.0)), [6.0, 6.0])
    assert cond.latent_shape(93, 720, 1280) == (1, 48, 24, 45, 80)  # diffusers' default size: the DiT pads 45
    with pytest.raises(ValueError, match="multiples of 16"):
        cond.latent_shape(93, 712, 1280)
