"""HunyuanVideo-1.5 on the family contract (follows diffusers `HunyuanVideo15Pipeline` and its I2V twin).

Text: Qwen2.5-VL hidden states inside the reference's chat template plus ByT5 glyph features
(`text.py`), for the prompt and the negative prompt. Sampling: flow-match Euler over
`linspace(1, 0, steps + 1)[:-1]` shifted statically (or `--sampler unipc|dpm++` at the same shift);
one DiT call per step on the [cond; uncond] batch with classifier-free guidance; the step-distilled
(meanflow) I2V model also takes the next step's timestep. Image-to-video adds the VAE-encoded first
frame and a first-frame mask as condition channels and the frame's SigLIP tokens (zeros for T2V);
the video size is the image's aspect bucket. Decode: the tiled VAE.

The DiT's sizes are read off its converted tree (official and diffusers checkpoints give the same
tree); the text towers come from the source's `text_encoder/` + `tokenizer/` (Qwen2.5-VL) and
`text_encoder_2/` + `tokenizer_2/` (ByT5), as the diffusers-layout repos and `vidax-convert`'s
output folders hold them, or from the official `ckpts/` folder's `text_encoder/{llm,byt5-small,
Glyph-SDXL-v2}/` and `vision_encoder/siglip/`.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.siglip import SIGLIP_MEAN, SIGLIP_STD, SiglipVisionModel, siglip_preprocess, siglip_vision_config
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.generator.stages import Run
from vidax.zoo.generator.contract import Decoded, DiTPart, Inputs, Settings, cfg_predict
from vidax.zoo.bases.hunyuan_base import HunyuanBase, joint_job, size_bucket, video_frames
from vidax.zoo.hunyuan_video15.config import TransformerConfig, VAEConfig
from vidax.zoo.hunyuan_video15.text import BYT5_MAX_LENGTH, MLLM_MAX_LENGTH, PromptEncoder, TextFeatures
from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE, decode_peak_bytes
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.planner import Job, abstract_param_count
from vidax.zoo.weights.quantize import quantized_job
from vidax.zoo.compute.runtime import platform

IMAGE_TOKENS = 729  # SigLIP semantic tokens (all zeros for text-to-video)
DEFAULT_ASPECT = (16, 9)  # width : height when the user gives no size
# Every video sequence is joined by the image (SigLIP, zeros for text-to-video), ByT5 and Qwen tokens.
JOINT_TEXT_TOKENS = IMAGE_TOKENS + BYT5_MAX_LENGTH + MLLM_MAX_LENGTH
TEXT_ENCODER_PARAMS = 7_070_000_000 + 218_000_000  # Qwen2.5-VL-7B language tower + ByT5-small encoder
# official ckpts/ folders (checkpoints-download.md) beside the diffusers / converted names
GLYPH_ASSETS = "text_encoder/Glyph-SDXL-v2/assets"
GLYPH_FILES = ("color_idx.json", "multilingual_10-lang_idx.json")


@dataclasses.dataclass(frozen=True)
class ImageCondition:
    """What the DiT gets besides the noisy latents: condition latents + mask channels, and image tokens."""

    latents: jax.Array  # [B, C + 1, F', H', W']: encoded first frame (later frames zero), then the mask
    tokens: jax.Array  # [B, N, image_embed_dim]: SigLIP tokens, zeros for text-to-video


@dataclasses.dataclass(frozen=True)
class Condition:
    text: TextFeatures  # prompt, then (guided) negative prompt, on the batch axis
    image: ImageCondition | None  # None: text-to-video (zeros made at the DiT's sizes)


jax.tree_util.register_dataclass(ImageCondition, data_fields=["latents", "tokens"], meta_fields=[])
jax.tree_util.register_dataclass(Condition, data_fields=["text", "image"], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class HunyuanPredict:
    """One DiT call (both CFG branches as one batch, sharing the image condition) and the guided velocity."""

    guided: bool
    dtype: str
    meanflow: bool  # the step-distilled I2V model also takes the next step's timestep
    condition_channels: int  # the DiT's input channels past the latents' (condition latents + mask)
    image_embed_dim: int

    def __call__(self, run, latents, timestep, cond: Condition, knobs):
        dtype = jnp.dtype(self.dtype)
        image = cond.image
        if image is None:  # text-to-video: zero condition channels and image tokens (the DiT masks them)
            image = _t2v_condition(self.condition_channels, self.image_embed_dim, latents)
        x = jnp.concatenate([latents, image.latents.astype(latents.dtype)], axis=1).astype(dtype)
        t = jnp.broadcast_to(timestep, (x.shape[0],)).astype(jnp.float32)
        t_r = jnp.broadcast_to(knobs["timestep_r"], (x.shape[0],)).astype(jnp.float32) if self.meanflow else None
        text = cond.text

        def branch(row: slice):
            return (x, t, text.text[row].astype(dtype), text.text_mask[row], text.text_2[row].astype(dtype),
                    text.text_mask_2[row], image.tokens.astype(dtype), t_r)

        return cfg_predict(run, branch(slice(0, 1)), branch(slice(1, 2)) if self.guided else None, knobs["scale"])


def _t2v_condition(channels: int, width: int, latents: jax.Array) -> ImageCondition:
    b = latents.shape[0]
    return ImageCondition(jnp.zeros((b, channels, *latents.shape[2:]), latents.dtype),
                          jnp.zeros((b, IMAGE_TOKENS, width), latents.dtype))


# --- sizes -------------------------------------------------------------------------------------


def default_size(target_size: int, aspect: tuple[int, int] = DEFAULT_ASPECT) -> tuple[int, int]:
    """(height, width) for text-to-video: the bucket of the default 16:9 aspect."""
    return size_bucket(aspect[1], aspect[0], target_size)


def resize_and_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """diffusers `VaeImageProcessor.resize(resize_mode="crop")`: Lanczos to cover, centre-paste on black."""
    from PIL import Image

    src = Image.fromarray(np.asarray(image, np.uint8)).convert("RGB")
    cover_w = width if width / height > src.width / src.height else src.width * height // src.height
    cover_h = height if width / height <= src.width / src.height else src.height * width // src.width
    canvas = Image.new("RGB", (width, height))
    canvas.paste(src.resize((cover_w, cover_h), Image.LANCZOS), (width // 2 - cover_w // 2, height // 2 - cover_h // 2))
    return np.asarray(canvas)


def vae_config(hf: Mapping) -> VAEConfig:
    """diffusers' `vae/config.json`, or the official one (hyvideo's `ffactor_spatial` / `ffactor_temporal`)."""
    names = {"ffactor_spatial": "spatial_compression_ratio", "ffactor_temporal": "temporal_compression_ratio"}
    return VAEConfig.from_hf_config({names.get(k, k): v for k, v in hf.items()})


def glyph_tokens(color_json: Mapping, font_json: Mapping) -> list[str]:
    """The official ByT5's added tokens (hyvideo/models/text_encoders/byT5 add_special_token, multilingual):
    `<xx-font-N>` per font code, then `<color-N>`... in the order the reference adds them (colour first)."""
    fonts = [f"<{code[:2]}-font-{font_json[code]}>" for code in font_json]
    colors = [f"<color-{i}>" for i in range(len(color_json))]
    return colors + fonts


def memory_job(dit: TransformerConfig, vae: VAEConfig, s: Settings, *, dtype_bytes: int = 2,
               text_encoder_params: int = TEXT_ENCODER_PARAMS, blockwise_attention: bool = False) -> Job:
    """What the memory planner needs for one generation (abstract shapes only, nothing allocated).

    Args:
        dit, vae: the checkpoint's configs; s: the size, frames and guidance to run.
        dtype_bytes: 2 for bf16 weights and activations (as shipped), 4 for `--dtype float32`.
        text_encoder_params: both text towers, resident together while the prompt is encoded.
        blockwise_attention: the CPU kernel (score tiles in memory) rather than flash attention.
    """
    latent_grid = ((s.frames - 1) // 4 + 1, s.height // 16, s.width // 16)
    return joint_job(HunyuanVideo15Transformer(dit), HunyuanVideo15VAE(vae), latent_grid, s,
                     text_tokens=JOINT_TEXT_TOKENS, dtype_bytes=dtype_bytes, text_encoder_params=text_encoder_params,
                     vae_weight_bytes=4,  # as shipped (fp32), and decoded in fp32
                     vae_peak_activation_bytes=decode_peak_bytes(vae, s.frames, s.height, s.width),
                     blockwise_attention=blockwise_attention)


# --- the family --------------------------------------------------------------------------------


class HunyuanVideo15Family(HunyuanBase):
    """HunyuanVideo-1.5: every variant (480p/720p, T2V/I2V, CFG- and step-distilled)."""

    name = "hunyuan_video15"
    size_multiple = 1  # HunyuanVideo15Pipeline checks no size: fit_sizes floors it to the VAE's 16 pixels
    frame_step = 1  # any count: the VAE decodes 4 ((F - 1) // 4) + 1 frames
    size_grid = 16  # the VAE's spatial compression (latents are H // 16 x W // 16)

    @cached_property
    def i2v(self) -> bool:
        # diffusers' config defaults `task_type` to "i2v" even for T2V checkpoints: the variant decides
        return "i2v" in (self.entry.variants or self.name.split("-"))

    @cached_property
    def dit_config(self) -> TransformerConfig:
        """The DiT's sizes: a converted tree's shapes (memory-mapped, nothing read), else its config.json
        (diffusers or official names), else the registry's."""
        part = self.component("transformer")
        if self.source_or_none is not None and self.source_or_none.kind == "converted":
            shapes = self.source.shapes(part.component, part.spec, part.subfolders)
            return TransformerConfig.from_param_shapes(shapes, **self._rope())
        config = self.require_config("transformer", *self._dit_configs())
        if "heads_num" in config:
            return TransformerConfig.from_official_config(config)
        return TransformerConfig.from_hf_config(config)

    def _dit_configs(self) -> list[str]:
        return ["transformer/config.json"] + [f"{f}/config.json" for f in self.component("transformer").subfolders if f]

    def _rope(self) -> dict:
        """RoPE settings, the only sizes not visible in the weights: diffusers or official config.json names."""
        config = self.read_config("transformer", *self._dit_configs()) or {}
        axes = config.get("rope_axes_dim") or config.get("rope_dim_list")
        theta = config.get("rope_theta")
        return {**({"rope_axes_dim": tuple(axes)} if axes else {}), **({"rope_theta": float(theta)} if theta else {})}

    @cached_property
    def vae_config(self) -> VAEConfig:
        return vae_config(self.read_config("vae", "vae/config.json") or {})

    @cached_property
    def target_size(self) -> int:
        dit_json = self.read_config("transformer", *self._dit_configs()) or {}
        return int(dit_json.get("target_size") or (960 if "720p" in self.entry.variants else 640))

    # --- settings ---------------------------------------------------------------------------

    def folder_settings(self) -> dict:
        height, width = default_size(self.target_size)
        out = {"height": height, "width": width}
        shift = self.scheduler_config().get("shift")
        return {**out, "shift": float(shift)} if shift is not None else out

    def fit_sizes(self, s: Settings) -> Settings:
        """Height and width floored to the VAE's 16 pixels: the reference makes H // 16 x W // 16 latents and
        decodes them (40x56 comes out 32x48); under 16 its latents are empty and it fails."""
        grid = self.size_grid
        for what, value in (("height", s.height), ("width", s.width)):
            if value < grid:
                raise PipelineError(f"--{what} {value} is below {grid}, the smallest size {self.name} generates "
                                    f"(its VAE's grid; smaller sizes are floored to 0)")
        return dataclasses.replace(s, height=s.height // grid * grid, width=s.width // grid * grid)

    def size_for_image(self, image: np.ndarray, s: Settings) -> tuple[int, int]:
        return size_bucket(*image.shape[:2], self.target_size)  # 480p: 640

    def latent_shape(self, s: Settings) -> tuple[int, ...]:
        c = self.vae_config.latent_channels
        return (1, c, (s.frames - 1) // 4 + 1, s.height // 16, s.width // 16)

    # --- encode -----------------------------------------------------------------------------

    def encode(self, run: Run, s: Settings, inputs: Inputs) -> Condition:
        prompts = [inputs.prompt] + ([inputs.negative_prompt] if inputs.negative_prompt is not None else [])
        features = self.encode_text(run, prompts)
        text = features[0] if len(features) == 1 else TextFeatures.concat(*features)
        image = inputs.images.get("image")
        return Condition(text, None if image is None else self.encode_image(run, image, s))

    def encode_text(self, run: Run, prompts: list[str]) -> list[TextFeatures]:
        """Text features of each prompt (the prompt, then the negative one when guided)."""
        tok = self.source.find("tokenizer", "text_encoder/llm", component="text_encoder")
        tok_2 = self.source.find("tokenizer_2", "text_encoder/byt5-small", component="text_encoder_2")
        qwen_json = self.read_config("text_encoder", "text_encoder/config.json", "text_encoder/llm/config.json")
        byt5_json = self.read_config("text_encoder_2", "text_encoder_2/config.json", "tokenizer_2/config.json",
                                     "text_encoder/byt5-small/config.json")
        if None in (tok, tok_2, qwen_json, byt5_json):
            raise PipelineError(f"{self.source.label}: needs text_encoder/, tokenizer/, text_encoder_2/ and "
                                "tokenizer_2/ (Qwen2.5-VL and ByT5) as the diffusers-layout repos and vidax-convert "
                                "folders hold them, or the official ckpts/ text_encoder/llm, byt5-small and Glyph-SDXL-v2")
        dtype = run.dtype
        qwen_part, byt5_part = self.component("text_encoder"), self.component("text_encoder_2")
        qwen = run.load(qwen_part.component, qwen_part.spec, qwen_part.subfolders, dtype)
        byt5 = run.load(byt5_part.component, byt5_part.spec, byt5_part.subfolders, dtype)
        # the official ByT5 is byt5-small with added colour/font tokens: the vocabulary is the weights'
        byt5_cfg = dataclasses.replace(T5Config.from_hf_config(byt5_json),
                                       vocab_size=int(byt5["shared"]["embedding"].shape[0]))
        encoder = PromptEncoder(load_tokenizer(tok), DecoderTextModel(DecoderConfig.from_hf_config(qwen_json)), qwen,
                                self._glyph_tokenizer(tok_2), T5EncoderModel(byt5_cfg), byt5)
        features = [encoder([p]) for p in prompts]
        jax.block_until_ready(features)
        run.done((qwen, byt5))
        return features

    def _glyph_tokenizer(self, folder):
        """ByT5's tokenizer, plus the official Glyph-SDXL-v2 colour/font tokens when their assets are there
        (official folder: text_encoder/Glyph-SDXL-v2/assets; converted: text_encoder_2/)."""
        tokenizer = load_tokenizer(folder)
        folder = "text_encoder_2" if self.source.kind == "converted" else GLYPH_ASSETS
        color, font = (self.source.read_json(f"{folder}/{f}", component="text_encoder_2") for f in GLYPH_FILES)
        if color is None or font is None:
            return tokenizer
        return tokenizer.with_added_tokens(glyph_tokens(color, font))

    def encode_image(self, run: Run, image: np.ndarray, s: Settings) -> ImageCondition:
        """The frame resized and cropped to the video size, its SigLIP tokens and VAE latents
        (diffusers `prepare_cond_latents_and_mask`)."""
        siglip_json = self.read_config("image_encoder", "image_encoder/config.json",
                                       "vision_encoder/siglip/image_encoder/config.json")
        if siglip_json is None:
            raise PipelineError(f"{self.source.label}: needs image_encoder/ (SigLIP) for image-to-video, as the "
                                "diffusers-layout I2V repos ship it")
        proc = self.read_config("image_encoder", "feature_extractor/preprocessor_config.json",
                                "vision_encoder/siglip/feature_extractor/preprocessor_config.json") or {}
        config = siglip_vision_config(siglip_json)
        frame = resize_and_crop(image, s.height, s.width)
        pixels = siglip_preprocess(frame, size=proc.get("size", {}).get("height", config.image_size),
                                   mean=proc.get("image_mean", SIGLIP_MEAN), std=proc.get("image_std", SIGLIP_STD))
        part = self.component("image_encoder")
        params = run.load(part.component, part.spec, part.subfolders, run.dtype)
        tokens = SiglipVisionModel(config).apply({"params": params}, jnp.asarray(pixels)).last_hidden_state
        run.done(params)
        vae = HunyuanVideo15VAE(self.vae_config)
        part = self.component("vae")
        vae_params = run.load(part.component, part.spec, part.subfolders)
        pixels = (jnp.asarray(frame, jnp.float32) / 255.0 * 2.0 - 1.0).transpose(2, 0, 1)[None, :, None]  # [1, 3, 1, H, W]
        first = vae.latent_mean(vae_params, pixels) * vae.cfg.scaling_factor  # [1, C, 1, H', W']
        b, c, f = self.latent_shape(s)[:3]
        rest = self.latent_shape(s)[3:]
        cond = jnp.zeros((b, c, f, *rest), jnp.float32).at[:, :, :1].set(first)
        mask = jnp.zeros((b, 1, f, *rest), jnp.float32).at[:, :, 0].set(1.0)
        condition = ImageCondition(jnp.concatenate([cond, mask], axis=1), tokens)
        jax.block_until_ready(condition)
        run.done(vae_params)
        return condition

    # --- denoise ----------------------------------------------------------------------------

    def build_dit(self, part: DiTPart, tree: Mapping[str, np.ndarray], s: Settings) -> HunyuanVideo15Transformer:
        return HunyuanVideo15Transformer(TransformerConfig.from_param_shapes(self.tree_shapes(tree), **self._rope()),
                                         self.weights_dtype(tree))

    def predictor(self, s: Settings, expert: int, dit: HunyuanVideo15Transformer, step: int) -> HunyuanPredict:
        cfg = dit.cfg
        return HunyuanPredict(s.guided, dit.dtype, self.i2v and cfg.use_meanflow,
                              cfg.in_channels - self.vae_config.latent_channels, cfg.image_embed_dim)

    def step_knobs(self, s: Settings, stepper, index: int, expert: int) -> dict:
        timesteps = np.asarray(stepper.timesteps)
        # the reference's I2V pipeline feeds meanflow models the next step's timestep (0 after the last)
        next_t = float(timesteps[index + 1]) if index + 1 < len(timesteps) else 0.0
        return {"scale": jnp.float32(s.guidance), "timestep_r": jnp.float32(next_t)}

    # --- decode -----------------------------------------------------------------------------

    def decode(self, run: Run, s: Settings, latents: jax.Array) -> Decoded:
        """Frames `[F, H, W, 3]` float32 in [0, 1] (diffusers' `postprocess_video(output_type="np")`)."""
        vae = HunyuanVideo15VAE(self.vae_config)
        part = self.component("vae")
        params = run.load(part.component, part.spec, part.subfolders)
        out = video_frames(vae.decode(params, latents.astype(jnp.float32) / vae.cfg.scaling_factor, tiling=True))
        run.done(params)
        return Decoded(out)

    # --- memory -----------------------------------------------------------------------------

    def memory_job(self, options) -> Job:
        """What the memory planner needs at the requested size (`--plan`, and the automatic layout when no
        mesh flag is given); configs only, no weights."""
        s = self.planned_settings(options)
        job = memory_job(self.dit_config, self.vae_config, s, dtype_bytes=4 if options.dtype == "float32" else 2,
                         text_encoder_params=self._text_encoder_params(),
                         blockwise_attention=platform() == "cpu")
        return quantized_job(job, HunyuanVideo15Transformer(self.dit_config), options.weights_dtype)  # --weights-dtype

    def _text_encoder_params(self) -> int:
        """Both text towers' parameters from their configs (abstractly), else the published sizes."""
        qwen = self.read_config("text_encoder", "text_encoder/config.json", "text_encoder/llm/config.json")
        byt5 = self.read_config("text_encoder_2", "text_encoder_2/config.json", "tokenizer_2/config.json",
                                "text_encoder/byt5-small/config.json")
        if qwen is None or byt5 is None:
            return TEXT_ENCODER_PARAMS
        ids = jnp.zeros((1, 8), jnp.int32)
        return (abstract_param_count(DecoderTextModel(DecoderConfig.from_hf_config(qwen)), ids)
                + abstract_param_count(T5EncoderModel(T5Config.from_hf_config(byt5)), ids, jnp.ones_like(ids)))


FAMILY = HunyuanVideo15Family
