"""HunyuanVideo 1.0 on the family contract (follows diffusers `HunyuanVideoPipeline` and
`HunyuanVideoImageToVideoPipeline`; tencent/HunyuanVideo and -I2V where diffusers departs from them).

The released DiT is guidance-distilled: `--guidance` is the *embedded* guidance (the scale x 1000 feeds the
DiT's guidance embedder, in the DiT's dtype as the references build it), one DiT call per step. `--true-cfg S`
(diffusers' `true_cfg_scale`, the official `--cfg-scale`; default 1 = off) adds real classifier-free guidance:
the negative prompt's branch runs beside the prompt's (on the data axis when dp = 2), with the same embedded
guidance, and `neg + S (pos - neg)` is the velocity.

Text (`text.py`): the Llama-3 tower behind the video-description template, cropped after the template,
`hidden_states[-3]`, `--max-sequence-length` tokens; CLIP-L's pooled output of the raw prompt (`--prompt-2`
when given). The text after the last token any branch attends to is dropped before sampling
(`trim_text_padding`, in buckets of 32: the same frames, less work where the prompt is short). Image-to-video (the released 16-channel "token_replace" model): the Llava tower reads the prompt
with the image (image tokens every `--image-embed-interleave`-th, 4 by default); the first frame's VAE latent
(posterior mode x scaling factor) is mixed into the initial noise (0.999 noise + 0.001 image on every frame),
replaces latent frame 0 at every step and at the end; the sampler moves frames 1: only. With true CFG the
negative branch reads a black image. Sampling: flow-match Euler over `linspace(1, 0, steps + 1)[:-1]` at the
folder's shift (7), or `--sampler unipc|dpm++` at the same shift. Decode: latents / scaling factor through
the VAE with the reference's temporal windows, and spatial tiles unless `--no-vae-tiling`.

Where the references disagree (README, "HunyuanVideo 1.0"):
- I2V with true CFG: diffusers encodes the negative prompt with its `encode_prompt` default interleave 2 (the
  keyword is not passed on), a sequence the two-branch batch of the official code could not hold; vidax
  uses the positive branch's interleave in both, as tencent/HunyuanVideo-I2V's text encoder does.
- `--prompt-2` / `--negative-prompt-2`: diffusers 0.42 accepts `prompt_2` but hands CLIP `prompt`; vidax
  gives CLIP `prompt_2` (what the keyword documents; the official code has one prompt). Unset, both agree.
- True CFG without `--negative-prompt`: diffusers silently runs no CFG; vidax uses the official default
  negative prompt (the registry's `negative_prompt`), as tencent's `--cfg-scale` does.
- Size of an I2V video when no `--height`/`--width` is given: the official 720p bucket nearest the image's
  aspect (diffusers' default is 720x1280 whatever the image); the image is then resized to the video size
  as diffusers' `VideoProcessor` does (Lanczos to the exact size).
"""

from __future__ import annotations

import dataclasses
import math
from functools import cached_property
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.clip import CLIP_MEAN, CLIP_STD, clip_preprocess
from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.llava import LlavaConfig, LlavaTextEncoder
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Decoded, DiTPart, Flag, Inputs, Settings, cfg_predict
from vidax.zoo.hunyuan_video import text as hv_text
from vidax.zoo.hunyuan_video.config import TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video.transformer import HunyuanVideoTransformer
from vidax.zoo.hunyuan_video.vae import HunyuanVideoVAE
from vidax.zoo.bases.hunyuan_base import HunyuanBase, joint_job, size_bucket, video_frames
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.video_io import vae_image
from vidax.zoo.compute.runtime import platform

# The Llama-3-8B tower (llava-llama-3's language model, as the official preprocess extracts it) and CLIP-L's
# text tower: the sizes `--plan` falls back to when neither the checkpoint nor the registry has their configs.
LLAMA_PARAMS = 7_504_924_672
LLAVA_VISION_PARAMS = 303_507_456 + 20_979_712  # CLIP ViT-L/14-336 + the two-layer projector
CLIP_TEXT_PARAMS = 123_060_480
I2V_BUCKET_BASE = 960  # tencent/HunyuanVideo-I2V: `--i2v-resolution 720p` -> buckets of about 960^2 px
I2V_BUCKET_PATCH = 32
TEXT_BUCKET = 32  # text kept in multiples of this: few distinct lengths (compiles), at most 31 padded rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class HunyuanVideoSettings(Settings):
    """HunyuanVideo's settings: `guidance` is the embedded guidance; `true_cfg` > 1 runs real CFG.

    The field names are the diffusers pipelines' keyword arguments (`true_cfg` for `true_cfg_scale`, as
    `guidance` stands for `guidance_scale`).
    """

    true_cfg: float = 1.0
    max_sequence_length: int = hv_text.MAX_LENGTH
    image_embed_interleave: int | None = None  # I2V: None = the model's (4 for token_replace)
    prompt_2: str | None = None  # CLIP's prompt (None: the prompt)
    negative_prompt_2: str | None = None  # CLIP's negative prompt (None: the negative prompt)
    vae_tiling: bool = True

    @property
    def guided(self) -> bool:
        return self.true_cfg > 1.0


@dataclasses.dataclass(frozen=True)
class Condition:
    """What the DiT gets besides the latents: prompt then (guided) negative prompt on the batch axis."""

    text: jax.Array  # [B, N, 4096]: Llama (T2V) or Llava image + text tokens (I2V)
    text_mask: jax.Array  # [B, N] bool, valid first
    pooled: jax.Array  # [B, 768] CLIP-L pooled
    image_latents: jax.Array | None  # [1, C, 1, H', W'] the first frame's latent (I2V token_replace), else None


jax.tree_util.register_dataclass(Condition, data_fields=["text", "text_mask", "pooled", "image_latents"],
                                 meta_fields=[])


@dataclasses.dataclass(frozen=True)
class HunyuanVideoPredict:
    """The velocity at one step: one DiT call on [prompt; negative] (true CFG) or the prompt alone."""

    guided: bool
    dtype: str  # the DiT's compute dtype (its weights')
    embedded_guidance: bool  # the DiT has a guidance embedder (every released one)
    token_replace: bool  # I2V: latent frame 0 is the image latent at every step

    def __call__(self, run, latents, timestep, cond: Condition, knobs):
        dtype = jnp.dtype(self.dtype)
        x = latents
        if self.token_replace:
            x = jnp.concatenate([cond.image_latents.astype(latents.dtype), latents[:, :, 1:]], axis=2)
        x = x.astype(dtype)
        t = jnp.broadcast_to(timestep, (1,)).astype(jnp.float32)
        guidance = None
        if self.embedded_guidance:
            guidance = jnp.broadcast_to(embedded_guidance(knobs["guidance"], self.dtype), (1,)).astype(jnp.float32)

        def branch(row: slice):
            return (x, t, cond.text[row].astype(dtype), cond.text_mask[row], cond.pooled[row].astype(dtype), guidance)

        v = cfg_predict(run, branch(slice(0, 1)), branch(slice(1, 2)) if self.guided else None, knobs["scale"])
        # token_replace: the reference steps frames 1: only; frame 0 is replaced at every step and at the end
        return v.at[:, :, :1].set(0.0) if self.token_replace else v


def trim_text_padding(text: jax.Array, mask: jax.Array, multiple: int = TEXT_BUCKET) -> tuple[jax.Array, jax.Array]:
    """`text[:, :n], mask[:, :n]` with `n` the last token any row attends to, rounded up to `multiple`.

    Exact for this DiT: a masked text token is never a key (the joint attention and the token refiner mask
    it; the refiner's pooled mean skips it), and its own output is dropped with the text stream at the
    head, so the tokens after the last valid one change nothing but the work. diffusers runs all
    `max_sequence_length` (256) of them; a short prompt needs 32 or 64. The mask is read on the host (it
    is concrete after the text encoders), so the DiT compiles once per bucket.
    """
    valid = np.asarray(mask).astype(bool)
    ends = np.where(valid.any(axis=1), valid.shape[1] - np.argmax(valid[:, ::-1], axis=1), 0)
    keep = min(valid.shape[1], -(-max(int(ends.max()), 1) // multiple) * multiple)
    return text[:, :keep], mask[:, :keep]


def embedded_guidance(scale, dtype: str) -> jax.Array:
    """The guidance embedder's input as the references build it: `tensor([scale], dtype) * 1000` in the
    DiT's dtype (bf16: 6.0 -> 6016.0), then read in fp32 by the sinusoidal projection."""
    dt = jnp.dtype(dtype)
    return (jnp.asarray(scale, jnp.float32).astype(dt).astype(jnp.float32) * jnp.float32(1000.0)).astype(dt).astype(
        jnp.float32)


def vae_decode_peak_bytes(cfg: VAEConfig, frames: int, height: int, width: int, tiling: bool = True) -> int:
    """The decoder's working set beyond its weights: a few fp32 maps of its widest stage on one temporal window
    and spatial tile, plus the decoded windows and the blended video. On a CPU the widest is the last stage
    (`block_out_channels[0]` channels at full resolution; a GPU not measured, counted alike); on a TPU it is
    `up_blocks_2`, whose output has the next width's channels at full resolution (measured: XLA's v5e compile of
    the 720p decode, 7,442 MiB for that unit, the planner 0.83 of it when it counted the last stage's channels)."""
    window = min(frames, cfg.tile_sample_min_num_frames + 1)
    tile_h, tile_w = (min(height, cfg.tile_sample_min_size), min(width, cfg.tile_sample_min_size)) if tiling \
        else (height, width)
    channels = cfg.block_out_channels[1] if platform() == "tpu" else cfg.block_out_channels[0]
    widest = 3 * window * tile_h * tile_w * channels * 4
    video = frames * height * width * cfg.out_channels * 4
    return int(widest + 3 * video)


# --- the family --------------------------------------------------------------------------------


class HunyuanVideoFamily(HunyuanBase):
    """HunyuanVideo 1.0: text-to-video and image-to-video (token_replace)."""

    name = "hunyuan_video"
    settings_class = HunyuanVideoSettings
    flags = (
        Flag("--true-cfg", "true_cfg", float, "real classifier-free guidance with the negative prompt (diffusers "
             "true_cfg_scale; default 1 = off: --guidance is the DiT's embedded guidance)"),
        Flag("--max-sequence-length", "max_sequence_length", int, "Llama/Llava text tokens after the template "
             "(default 256)"),
        Flag("--image-embed-interleave", "image_embed_interleave", int, "image-to-video: keep every N-th Llava "
             "image token (default 4, the token_replace model's)"),
        Flag("--prompt-2", "prompt_2", str, "CLIP's prompt (default: --prompt)"),
        Flag("--negative-prompt-2", "negative_prompt_2", str, "CLIP's negative prompt (default: the negative prompt)"),
        Flag("--vae-tiling", "vae_tiling", bool, "decode (and encode the image) in overlapping spatial tiles "
             "(default on, as the official code and diffusers' examples)"),
    )
    size_multiple = 16  # diffusers check_inputs: VAE 8x and patch 2
    frame_step = 1  # any count, as the pipelines take it: the VAE decodes 4 ((F - 1) // 4) + 1 frames

    # --- configs ----------------------------------------------------------------------------

    def _folders(self, name: str) -> list[str]:
        """Where a registry component sits in a local folder or repo, every layout's, then `name/`."""
        return list(dict.fromkeys([*filter(None, self.folders(name)), name]))

    def _configs(self, name: str) -> list[str]:
        return [f"{folder}/config.json" for folder in self._folders(name)]

    @cached_property
    def dit_config(self) -> TransformerConfig:
        """The DiT's sizes: diffusers' config.json (also copied into converted folders), else the checkpoint's
        shapes (the official .pt ships none: its sizes are hyvideo code), else the registry's.

        RoPE and the image-condition type are not in the weights: without a config.json they come from the
        registry (the released models' values)."""
        registry = dict(self.entry.config.get("transformer", {}))
        source = self.source_or_none
        found = source.read_json(*self._configs("transformer"), component="transformer") if source else None
        if found is not None:
            return TransformerConfig.from_hf_config(found)
        fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in registry.items()
                 if k in ("rope_axes_dim", "rope_theta", "image_condition_type")}
        if source is not None:
            part = self.component("transformer")
            try:
                shapes = source.shapes(part.component, part.spec, part.subfolders)
            except Exception as err:  # a Hub source in the official layout: no headers without the .pt
                from vidax.translator import TranslatorError

                if not isinstance(err, TranslatorError):
                    raise
            else:
                return TransformerConfig.from_param_shapes(shapes, **fixed)
        if not registry:
            raise PipelineError(f"{self.name}: no transformer config in {source.label if source else 'the registry'}")
        return TransformerConfig.from_hf_config(registry)

    @cached_property
    def vae_config(self) -> VAEConfig:
        return VAEConfig.from_hf_config(self.require_config("vae", *self._configs("vae")))

    @cached_property
    def i2v(self) -> bool:
        kind = self.dit_config.image_condition_type
        if kind == "latent_concat":
            raise PipelineError(f"{self.name}: the 33-channel latent_concat I2V DiT (superseded by the released "
                                "16-channel token_replace model) is not supported")
        return kind == "token_replace"

    # --- settings ---------------------------------------------------------------------------

    def folder_settings(self) -> dict:
        shift = self.scheduler_config().get("shift")
        return {"shift": float(shift)} if shift is not None else {}

    def check_settings(self, s: HunyuanVideoSettings) -> None:
        if s.max_sequence_length < 1:
            raise PipelineError(f"--max-sequence-length must be at least 1, got {s.max_sequence_length}")
        if s.image_embed_interleave is not None:
            if not self.i2v:
                raise PipelineError(f"--image-embed-interleave is for image-to-video: {self.name} is text-to-video")
            if s.image_embed_interleave < 1:
                raise PipelineError(f"--image-embed-interleave must be at least 1, got {s.image_embed_interleave}")
        if s.negative_prompt_2 is not None and not s.guided:
            raise PipelineError("--negative-prompt-2 is the CLIP negative prompt of true CFG: give --true-cfg > 1")

    def size_for_image(self, image: np.ndarray, s: Settings) -> tuple[int, int]:
        # tencent/HunyuanVideo-I2V's bucket (hyvideo `generate_crop_size_list(960, 32)` + `get_closest_ratio`)
        return size_bucket(*image.shape[:2], I2V_BUCKET_BASE, I2V_BUCKET_PATCH, exact_wide=False)

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        v = self.vae_config
        t, sp = v.temporal_compression_ratio, v.spatial_compression_ratio
        return (1, v.latent_channels, (s.frames - 1) // t + 1, s.height // sp, s.width // sp)

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: HunyuanVideoSettings, inputs: Inputs) -> Condition:
        prompts = [inputs.prompt] + ([inputs.negative_prompt] if inputs.negative_prompt is not None else [])
        clip_prompts = [s.prompt_2 if s.prompt_2 is not None else inputs.prompt]
        if inputs.negative_prompt is not None:
            clip_prompts.append(s.negative_prompt_2 if s.negative_prompt_2 is not None else inputs.negative_prompt)
        image = inputs.images.get("image")
        if image is None:
            text, mask = self.encode_llama(run, s, prompts)
            image_latents = None
        else:
            text, mask = self.encode_llava(run, s, prompts, image)
            image_latents = self.encode_image(run, s, image)
        pooled = self.encode_clip(run, clip_prompts)
        text, mask = trim_text_padding(text, mask)
        cond = Condition(text, mask.astype(bool), pooled, image_latents)
        jax.block_until_ready(cond)
        return cond

    def _tokenizer(self, name: str):
        folder = self.source.find(*self._folders(name), component=name)
        if folder is None:
            raise PipelineError(f"{self.source.label}: no {name}/ folder ({' or '.join(self._folders(name))})")
        return load_tokenizer(folder)

    def _text_config(self, name: str) -> dict:
        found = self.read_config(name, *self._configs(name))
        if found is None:
            raise PipelineError(f"{self.source.label}: no {name} config ({', '.join(self._configs(name))})")
        return found

    def encode_llama(self, run: Run, s: HunyuanVideoSettings, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """T2V: Llama `hidden_states[-3]` behind the template, cropped (`text.llama_text_features`)."""
        config = self._text_config("text_encoder")
        model = DecoderTextModel(DecoderConfig.from_hf_config(config.get("text_config", config)))
        part = self.component("text_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        out = hv_text.llama_text_features(model, params, self._tokenizer("tokenizer"), prompts,
                                          max_length=s.max_sequence_length)
        jax.block_until_ready(out)
        run.done(params)
        return out

    def encode_llava(self, run: Run, s: HunyuanVideoSettings, prompts: list[str], image: np.ndarray):
        """I2V: Llava tokens of the prompt with the image (the negative prompt with a black image)."""
        config = LlavaConfig.from_hf_config(self._text_config("text_encoder"))
        processor = self.read_config("image_processor", *[f"{f}/preprocessor_config.json"
                                                          for f in self._folders("image_processor")]) or {}
        size = processor.get("size", {}).get("shortest_edge") or config.vision.image_size
        images = [image] + [np.zeros_like(image)] * (len(prompts) - 1)
        pixels = clip_preprocess(images, size=size, mean=processor.get("image_mean", CLIP_MEAN),
                                 std=processor.get("image_std", CLIP_STD))
        patches = (config.vision.image_size // config.vision.patch_size) ** 2
        base = hv_text.I2V_TEMPLATE
        template = dataclasses.replace(base, image_emb_len=patches, image_emb_end=base.image_emb_start + patches)
        tokenizer = self._tokenizer("tokenizer")
        end_header = tokenizer([hv_text.END_HEADER], max_length=None, padding="longest", add_special_tokens=False)
        part = self.component("text_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        interleave = s.image_embed_interleave or hv_text.IMAGE_EMBED_INTERLEAVE["token_replace"]
        out = hv_text.llava_text_features(LlavaTextEncoder(config), params, tokenizer, prompts, pixels,
                                          end_header_id=int(end_header.input_ids[0, 0]), template=template,
                                          max_length=s.max_sequence_length, interleave=interleave)
        jax.block_until_ready(out)
        run.done(params)
        return out

    def encode_clip(self, run: Run, prompts: list[str]) -> jax.Array:
        config = CLIPTextConfig.from_hf_config(self._text_config("text_encoder_2"))
        part = self.component("text_encoder_2")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        pooled = hv_text.clip_pooled(CLIPTextModel(config), params, self._tokenizer("tokenizer_2"), prompts)
        pooled.block_until_ready()
        run.done(params)
        return pooled

    def encode_image(self, run: Run, s: HunyuanVideoSettings, image: np.ndarray) -> jax.Array:
        """The first frame's latent `[1, C, 1, H', W']`: posterior mode of the resized image x scaling factor."""
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        vae = HunyuanVideoVAE(self.vae_config)
        pixels = jnp.asarray(vae_image(image, s.height, s.width))
        latents = vae.latent_mode(params, pixels, tiling=s.vae_tiling) * np.float32(self.vae_config.scaling_factor)
        latents = latents.astype(jnp.float32)
        latents.block_until_ready()
        run.done(params)
        return latents

    # --- denoise ----------------------------------------------------------------------------

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: Settings) -> HunyuanVideoTransformer:
        cfg = self.dit_config
        fixed = dict(rope_axes_dim=cfg.rope_axes_dim, rope_theta=cfg.rope_theta,
                     image_condition_type=cfg.image_condition_type)
        return HunyuanVideoTransformer(TransformerConfig.from_param_shapes(self.tree_shapes(tree), **fixed),
                                       self.weights_dtype(tree))

    def predictor(self, s: HunyuanVideoSettings, expert: int, dit: HunyuanVideoTransformer, step: int) -> HunyuanVideoPredict:
        return HunyuanVideoPredict(s.guided, dit.dtype, dit.cfg.guidance_embeds, dit.cfg.token_replace)

    def step_knobs(self, s: HunyuanVideoSettings, stepper, index: int, expert: int) -> dict:
        return {"scale": jnp.float32(s.true_cfg), "guidance": jnp.float32(s.guidance)}

    def sample(self, run: Run, s: HunyuanVideoSettings, latents: np.ndarray, cond: Condition) -> jax.Array:
        if cond.image_latents is None:
            return super().sample(run, s, latents, cond)
        # token_replace (diffusers prepare_latents with i2v_stability): 0.999 noise + 0.001 image on every frame
        image = np.asarray(cond.image_latents, np.float32)
        t = np.float32(0.999)
        mixed = (latents * t + image * (np.float32(1.0) - t)).astype(np.float32)
        out = super().sample(run, s, mixed, cond)
        return jnp.concatenate([jnp.asarray(image), out[:, :, 1:]], axis=2)

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: HunyuanVideoSettings, latents: jax.Array) -> Decoded:
        """Frames `[F, H, W, 3]` float32 in [0, 1] (diffusers' `postprocess_video(output_type="np")`)."""
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        vae = HunyuanVideoVAE(self.vae_config)
        out = video_frames(vae.decode(params, latents.astype(jnp.float32) / np.float32(self.vae_config.scaling_factor),
                                      tiling=s.vae_tiling))
        run.done(params)
        return Decoded(out)

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the planner needs at the requested size (`--plan`, the automatic layout): configs only."""
        s = self.planned_settings(options)
        job = memory_job(self.dit_config, self.vae_config, s, i2v=self.i2v,
                         dtype_bytes=4 if options.dtype == "float32" else 2,
                         text_encoder_params=self._text_encoder_params(),
                         blockwise_attention=platform() == "cpu")
        return quantized_job(job, HunyuanVideoTransformer(self.dit_config), options.weights_dtype)  # --weights-dtype

    def _text_encoder_params(self) -> int:
        """The text towers resident together while the prompt is encoded (Llama or Llava, and CLIP-L)."""
        ids = jnp.zeros((1, 8), jnp.int32)
        llm = self.read_config("text_encoder", *self._configs("text_encoder"))
        clip = self.read_config("text_encoder_2", *self._configs("text_encoder_2"))
        if llm is None:
            total = LLAMA_PARAMS + (LLAVA_VISION_PARAMS if self.i2v else 0)
        elif self.i2v:
            cfg = LlavaConfig.from_hf_config(llm)
            size = cfg.vision.image_size
            total = abstract_param_count(LlavaTextEncoder(cfg), ids, jnp.ones_like(ids), jnp.zeros((1, 3, size, size)))
        else:
            llama = DecoderConfig.from_hf_config(llm.get("text_config", llm))
            total = abstract_param_count(DecoderTextModel(llama), ids)
        if clip is None:
            return total + CLIP_TEXT_PARAMS
        return total + abstract_param_count(CLIPTextModel(CLIPTextConfig.from_hf_config(clip)), ids)


def text_tokens(s: HunyuanVideoSettings, i2v: bool, image_tokens: int = 576) -> int:
    """Text tokens in every block's joint sequence: the Llama tokens, or for I2V the Llava image tokens
    (every `interleave`-th of 576) and the text tokens less the 4 cut around the assistant header."""
    if not i2v:
        return s.max_sequence_length
    interleave = s.image_embed_interleave or hv_text.IMAGE_EMBED_INTERLEAVE["token_replace"]
    return math.ceil(image_tokens / interleave) + s.max_sequence_length - 4


def memory_job(dit: TransformerConfig, vae: VAEConfig, s: HunyuanVideoSettings, *, i2v: bool = False,
               dtype_bytes: int = 2, text_encoder_params: int = LLAMA_PARAMS + CLIP_TEXT_PARAMS,
               blockwise_attention: bool = False) -> Job:
    """What the memory planner needs for one generation (abstract shapes only, nothing allocated).

    Args:
        dit, vae: the checkpoint's configs; s: the size, frames, text length and guidance to run.
        i2v: the image-to-video model (Llava image tokens join the text).
        dtype_bytes: 2 for bf16 weights and activations (as shipped), 4 for `--dtype float32`.
        text_encoder_params: the text towers resident together while the prompt is encoded.
        blockwise_attention: the CPU kernel (score tiles in memory) rather than flash attention.
    """
    t, sp = vae.temporal_compression_ratio, vae.spatial_compression_ratio
    latent_grid = ((s.frames - 1) // t + 1, s.height // sp, s.width // sp)
    job = joint_job(HunyuanVideoTransformer(dit), HunyuanVideoVAE(vae), latent_grid, s,
                    text_tokens=text_tokens(s, i2v), dtype_bytes=dtype_bytes, text_encoder_params=text_encoder_params,
                    vae_weight_bytes=dtype_bytes,
                    vae_peak_activation_bytes=vae_decode_peak_bytes(vae, s.frames, s.height, s.width, s.vae_tiling),
                    blockwise_attention=blockwise_attention)
    # the single blocks' attention and MLP chunks run side by side into `proj_out`'s row blocks: all five
    # products are live at once (planner.DiTSizes.partial_sums; the dry run's DiT step was 34% under without)
    return dataclasses.replace(job, dit=dataclasses.replace(job.dit, partial_sums=dit.mlp_chunks + 1))


FAMILY = HunyuanVideoFamily
