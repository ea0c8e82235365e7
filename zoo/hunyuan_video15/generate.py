"""`vidax-gen hunyuanvideo-1.5...`: text (and image) encode -> flow sampling -> tiled VAE decode -> frames.

Each stage loads its weights, runs, and releases them before the next stage needs the memory. The
DiT's sizes are read off its converted tree (official and diffusers checkpoints give the same
tree); the text towers come from the source's `text_encoder/` + `tokenizer/` (Qwen2.5-VL) and
`text_encoder_2/` + `tokenizer_2/` (ByT5), as the diffusers-layout repos and `vidax-convert`'s output
folders hold them, or from the official `ckpts/` folder's `text_encoder/{llm,byt5-small,Glyph-SDXL-v2}/`
and `vision_encoder/siglip/`. The variant (settings, I2V) is the model name's, or the one a converted
folder records in `vidax_model.json`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from vidax.translator.registry import load_registry
from vidax.zoo import registry
from vidax.zoo.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.encoders.tokenizer import load_tokenizer
from vidax.zoo.hunyuan_video15.config import TransformerConfig, VAEConfig
from vidax.zoo.encoders.siglip import SIGLIP_MEAN, SIGLIP_STD, SiglipVisionModel, siglip_preprocess, siglip_vision_config
from vidax.zoo.hunyuan_video15.pipeline import (
    HunyuanVideo15Pipeline,
    IMAGE_TOKENS,
    ImageCondition,
    SampleSettings,
    bucket_size,
    default_size,
    image_condition,
    resize_and_crop,
)
from vidax.zoo.hunyuan_video15.text import BYT5_MAX_LENGTH, MLLM_MAX_LENGTH, PromptEncoder
from vidax.zoo.hunyuan_video15.transformer import HunyuanVideo15Transformer
from vidax.zoo.hunyuan_video15.vae import HunyuanVideo15VAE, decode_peak_bytes
from vidax.zoo.hunyuan_video15.sharding import DIT_RULES, place_transformer
from vidax.zoo.mesh import check_heads, make_mesh
from vidax.zoo.offload import stream_blocks
from vidax.zoo.planner import Job, abstract_param_count, dit_sizes
from vidax.zoo.runtime import use_mesh
from vidax.zoo.video_io import read_image
from vidax.zoo.pipeline import (
    GenerateOptions,
    GenerateResult,
    PipelineError,
    Progress,
    StageTimer,
    WeightsSource,
    load_latents,
    release,
)

FAMILY = "hunyuan_video15"
FPS = 24.0


MODEL_FILE = "vidax_model.json"  # written by vidax-convert (vidax.cli.convert.MODEL_FILE)
# official ckpts/ folders (checkpoints-download.md) beside the diffusers / converted names
GLYPH_ASSETS = "text_encoder/Glyph-SDXL-v2/assets"
GLYPH_FILES = ("color_idx.json", "multilingual_10-lang_idx.json")


def native_settings(name: str, tags=None, settings: Mapping | None = None) -> SampleSettings:
    """MODELS.md defaults: 121 frames, 50 steps, guidance 6 (distilled 1), shift 5 / 9 (720p T2V) / 7 (720p I2V).

    Args:
        name: the model name (its words stand for the tags when `tags` is None).
        tags: the variant's tags (480p/720p, t2v/i2v, distilled).
        settings: the variant's registry settings (shift, guidance, steps), which win.
    """
    tags = set(tags) if tags else set(name.replace("_", "-").split("-"))
    high = "720p" in tags
    height, width = default_size(960 if high else 640)
    shift = (7.0 if "i2v" in tags else 9.0) if high else 5.0
    base = SampleSettings(height=height, width=width, shift=shift, guidance=1.0 if "distilled" in tags else 6.0)
    picked = {k: float(v) for k, v in (settings or {}).items() if k in ("shift", "guidance")}
    picked.update({k: int(v) for k, v in (settings or {}).items() if k == "steps"})
    return dataclasses.replace(base, **picked)


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


# Every video sequence is joined by the image (SigLIP, zeros for text-to-video), ByT5 and Qwen tokens.
JOINT_TEXT_TOKENS = IMAGE_TOKENS + BYT5_MAX_LENGTH + MLLM_MAX_LENGTH
TEXT_ENCODER_PARAMS = 7_070_000_000 + 218_000_000  # Qwen2.5-VL-7B language tower + ByT5-small encoder


def memory_job(dit: TransformerConfig, vae: VAEConfig, settings: SampleSettings, *, dtype_bytes: int = 2,
               text_encoder_params: int = TEXT_ENCODER_PARAMS, blockwise_attention: bool = False) -> Job:
    """What the memory planner needs for one generation (abstract shapes only, nothing allocated).

    Args:
        dit, vae: the checkpoint's configs; settings: the size, frames and guidance to run.
        dtype_bytes: 2 for bf16 weights and activations (as shipped), 4 for `--dtype float32`.
        text_encoder_params: both text towers, resident together while the prompt is encoded.
        blockwise_attention: the CPU kernel (score tiles in memory) rather than flash attention.
    """
    sizes = dit_sizes(HunyuanVideo15Transformer(dit).param_shapes(), dim=dit.inner_dim, ffn_dim=dit.mlp_dim,
                      heads=dit.num_attention_heads)
    _, _, f, h, w = settings.latent_shape(1, vae.latent_channels)
    video_tokens = (f // dit.patch_size_t) * (h // dit.patch_size) * (w // dit.patch_size)
    return Job(
        sizes,
        tokens=video_tokens + JOINT_TEXT_TOKENS,  # joint attention: the text tokens are in every block's sequence
        text_tokens=0,
        batch=2 if settings.cfg else 1,
        weight_bytes=dtype_bytes,
        activation_bytes=dtype_bytes,
        residual_bytes=dtype_bytes,
        text_encoder_params=text_encoder_params,
        text_encoder_bytes=dtype_bytes,
        vae_params=sum(math.prod(shape) for shape in HunyuanVideo15VAE(vae).param_shapes().values()),
        vae_weight_bytes=4,  # as shipped (fp32), and decoded in fp32
        vae_peak_activation_bytes=decode_peak_bytes(vae, settings.frames, settings.height, settings.width),
        blockwise_attention=blockwise_attention,
    )


SAMPLERS = ("euler",)  # the reference's flow-match Euler (its shift and sigma grid)


def resolve_settings(options: GenerateOptions, native: SampleSettings) -> SampleSettings:
    """Native settings <- the user's options, validated (one-line errors before any work)."""
    if options.sampler is not None and options.sampler not in SAMPLERS:
        raise PipelineError(f"HunyuanVideo-1.5 samples with {', '.join(SAMPLERS)} (the reference's flow-match Euler); "
                            f"--sampler {options.sampler} is not available for this family")
    if options.guidance_2 is not None:
        raise PipelineError("--guidance-2 is the low-noise expert's scale of two-expert models; HunyuanVideo-1.5 has one DiT")
    given = {k: getattr(options, k) for k in ("height", "width", "frames", "steps", "guidance", "shift")
             if getattr(options, k) is not None}
    settings = dataclasses.replace(native, **given)
    if settings.steps < 1:
        raise PipelineError(f"--steps must be at least 1, got {settings.steps}")
    return settings


def _place(tree: Mapping[str, np.ndarray]) -> dict:
    """The whole host tree onto the default device in one transfer."""
    return jax.device_put(traverse_util.unflatten_dict(dict(tree), sep="/"))


class HunyuanVideo15Generator:
    """Generates video with a HunyuanVideo-1.5 checkpoint (text-to-video, or image-to-video with `--image`).

    Args:
        name: registered model name (selects the native settings and the official variant folder).
        options: used for the weights source; `generate` takes the rest.
    """

    def __init__(self, name: str, options: GenerateOptions):
        self.name = name
        entry = load_registry().get(name)
        # Without --weights: the variant's diffusers-layout mirror, the one Hub repo that holds every tower
        # (the official repo ships DiT and VAE only; vidax-convert assembles the rest from their repos).
        hub = (entry.repos.get("diffusers") or entry.repo()) if entry else None
        self.source = WeightsSource.resolve(options.weights, hub)
        entry = self._recorded_variant(entry)
        tags = entry.variants if entry else ()
        choice = entry.choices.get(entry.variant) if entry and entry.choices else None
        self.variant = entry.variant if entry else None
        self.native = native_settings(name, tags, choice.settings if choice else None)
        self.subfolder = entry.components["transformer"].subfolder.get("official") if entry else None
        dit_json = self.source.read_json("transformer/config.json", *self._dit_configs(),
                                         component="transformer") or {}
        # diffusers' config defaults `task_type` to "i2v" even for T2V checkpoints: the variant decides.
        self.i2v = "i2v" in (tags or name.split("-"))
        self.target_size = int(dit_json.get("target_size") or (960 if "720p" in tags else 640))

    def _recorded_variant(self, entry):
        """A converted folder's recorded variant wins over the name's (`vidax-gen hunyuanvideo-1.5
        --weights ckpt` runs the variant `vidax-convert --variant` converted)."""
        if self.source.kind != "converted" or entry is None or not entry.choices:
            return entry
        path = self.source.root / MODEL_FILE
        recorded = json.loads(path.read_text()).get("variant") if path.is_file() else None
        if recorded is None or recorded == entry.variant:
            return entry
        if recorded not in entry.choices:
            raise PipelineError(f"{path}: variant {recorded!r} is not one of {self.name}'s ({', '.join(entry.choices)})")
        return entry.select(recorded)

    def memory_job(self, options: GenerateOptions) -> Job:
        """What the memory planner needs for this checkpoint at the requested size (`--plan`, and the
        automatic layout when no mesh flag is given); reads configs only, no weights."""
        native = self.native
        if options.image is not None and self.i2v:  # the image's aspect bucket decides the size
            native = dataclasses.replace(native, **dict(zip(("height", "width"), bucket_size(
                *read_image(options.image).shape[:2], self.target_size))))
        s = resolve_settings(options, native)
        vae_cfg = vae_config(self.source.read_json("vae/config.json", component="vae") or {})
        return memory_job(self._dit_config(), vae_cfg, s, dtype_bytes=4 if options.dtype == "float32" else 2,
                          text_encoder_params=self._text_encoder_params(),
                          blockwise_attention=jax.default_backend() == "cpu")

    def _dit_config(self) -> TransformerConfig:
        """The DiT's sizes: a converted tree's shapes (memory-mapped, nothing read), else its config.json
        (diffusers or official names), else the shipped 8.3B defaults."""
        if self.source.kind == "converted":
            tree = self.load("transformer", "hunyuan_video15/transformer", (self.subfolder, None))
            return TransformerConfig.from_param_shapes({p: tuple(a.shape) for p, a in tree.items()}, **self._rope())
        config = self.source.read_json("transformer/config.json", *self._dit_configs(), component="transformer") or {}
        if "heads_num" in config:
            return TransformerConfig.from_official_config(config)
        return TransformerConfig.from_hf_config(config)

    def _text_encoder_params(self) -> int:
        """Both text towers' parameters from their configs (abstractly), else the published sizes."""
        qwen = self.source.read_json("text_encoder/config.json", "text_encoder/llm/config.json", component="text_encoder")
        byt5 = self.source.read_json("text_encoder_2/config.json", "tokenizer_2/config.json",
                                     "text_encoder/byt5-small/config.json", component="text_encoder_2")
        if qwen is None or byt5 is None:
            return TEXT_ENCODER_PARAMS
        ids = jnp.zeros((1, 8), jnp.int32)
        return (abstract_param_count(DecoderTextModel(DecoderConfig.from_hf_config(qwen)), ids)
                + abstract_param_count(T5EncoderModel(T5Config.from_hf_config(byt5)), ids, jnp.ones_like(ids)))

    def _dit_configs(self) -> list[str]:
        return [f"{self.subfolder}/config.json"] if self.subfolder else []

    def load(self, component: str, spec: str, subfolders=(None,), dtype: str | None = None) -> Mapping[str, np.ndarray]:
        return self.source.load(component, spec, subfolders, dtype=dtype)

    def generate(self, options: GenerateOptions, progress: Progress | None = None) -> GenerateResult:
        """Run the whole pipeline; returns float32 frames `[F, H, W, 3]` in [0, 1] and the final latents."""
        image = self._check_image(options)
        if options.offload_chunk is not None and options.offload_chunk < 1:
            raise PipelineError(f"--offload-chunk must be at least 1 block, got {options.offload_chunk}")
        # None (a library call without the planner): one device; a clear error when the devices do not suffice
        mesh = make_mesh(*(1 if d is None else d for d in (options.dp, options.tp, options.sp)))
        native = self.native
        if image is not None:  # the reference sizes image-to-video by the image's aspect
            height, width = bucket_size(*image.shape[:2], self.target_size)
            native = dataclasses.replace(native, height=height, width=width)
        s = resolve_settings(options, native)
        timer = StageTimer(progress)
        vae_cfg = vae_config(self.source.read_json("vae/config.json", component="vae") or {})
        shape = s.latent_shape(1, vae_cfg.latent_channels)
        noise = (load_latents(options.latents, shape) if options.latents is not None
                 else np.asarray(jax.random.normal(jax.random.key(options.seed), shape, jnp.float32)))
        with timer.stage("text encode"):
            negative = options.negative_prompt or ""
            prompt, neg = self.encode([options.prompt] + ([negative] if s.cfg else []), options.dtype)
        condition = None
        if image is not None:
            with timer.stage("image encode"):
                condition = self.encode_image(image, s, vae_cfg, shape, options.dtype)
        with timer.stage("denoise", total=s.steps):
            latents = self.denoise(s, noise, prompt, neg, condition, timer, options.dtype, mesh, options.offload_chunk)
        with timer.stage("decode"):
            frames = self.decode(latents, vae_cfg)
        settings = {**dataclasses.asdict(options), **dataclasses.asdict(s), "model": self.name,
                    "weights_source": self.source.label, "latent_shape": list(shape)}
        return GenerateResult(frames=frames[0], latents=np.asarray(latents), fps=FPS, settings=settings,
                              times=timer.times)

    def encode(self, prompts: list[str], dtype: str | None):
        """Text features of each prompt (the prompt, then the negative one when guided)."""
        tok = self.source.find("tokenizer", "text_encoder/llm", component="text_encoder")
        tok_2 = self.source.find("tokenizer_2", "text_encoder/byt5-small", component="text_encoder_2")
        qwen_json = self.source.read_json("text_encoder/config.json", "text_encoder/llm/config.json",
                                          component="text_encoder")
        byt5_json = self.source.read_json("text_encoder_2/config.json", "tokenizer_2/config.json",
                                          "text_encoder/byt5-small/config.json", component="text_encoder_2")
        if None in (tok, tok_2, qwen_json, byt5_json):
            raise PipelineError(f"{self.source.root or self.source.repo}: needs text_encoder/, tokenizer/, "
                                "text_encoder_2/ and tokenizer_2/ (Qwen2.5-VL and ByT5) as the diffusers-layout "
                                "repos and vidax-convert folders hold them, or the official ckpts/ text_encoder/llm, "
                                "byt5-small and Glyph-SDXL-v2")
        qwen = self.load("text_encoder", "encoders/decoder", ("text_encoder", "text_encoder/llm", None), dtype)
        byt5 = self.load("text_encoder_2", "encoders/t5", ("text_encoder_2", None), dtype)
        # the official ByT5 is byt5-small with added colour/font tokens: the vocabulary is the weights'
        byt5_cfg = dataclasses.replace(T5Config.from_hf_config(byt5_json), vocab_size=int(byt5["shared/embedding"].shape[0]))
        encoder = PromptEncoder(
            load_tokenizer(tok), DecoderTextModel(DecoderConfig.from_hf_config(qwen_json)), _place(qwen),
            self._glyph_tokenizer(tok_2), T5EncoderModel(byt5_cfg), _place(byt5),
        )
        features = [encoder([p]) for p in prompts]
        jax.block_until_ready(features)
        release((encoder.decoder_params, encoder.byt5_params))
        return features[0], features[1] if len(features) > 1 else None

    def _glyph_tokenizer(self, folder):
        """ByT5's tokenizer, plus the official Glyph-SDXL-v2 colour/font tokens when their assets are there
        (official folder: text_encoder/Glyph-SDXL-v2/assets; converted: text_encoder_2/)."""
        tokenizer = load_tokenizer(folder)
        color, font = (self.source.read_json(f"{d}/{f}", component="text_encoder_2") for f in GLYPH_FILES
                       for d in (["text_encoder_2"] if self.source.kind == "converted" else [GLYPH_ASSETS]))
        if color is None or font is None:
            return tokenizer
        return tokenizer.with_added_tokens(glyph_tokens(color, font))

    def _check_image(self, options: GenerateOptions) -> np.ndarray | None:
        if options.image is None:
            if self.i2v:
                raise PipelineError(f"{self.name} is an image-to-video model: give --image PATH")
            return None
        if not self.i2v:
            raise PipelineError(f"{self.name} is text-to-video only and takes no --image")
        return read_image(options.image)

    def encode_image(self, image: np.ndarray, s: SampleSettings, vae_cfg: VAEConfig, shape: tuple[int, ...],
                     dtype: str | None) -> ImageCondition:
        """The frame resized and cropped to the video size, its SigLIP tokens and VAE latents."""
        siglip_json = self.source.read_json("image_encoder/config.json", "vision_encoder/siglip/image_encoder/config.json",
                                            component="image_encoder")
        if siglip_json is None:
            raise PipelineError(f"{self.source.root or self.source.repo}: needs image_encoder/ (SigLIP) for "
                                "image-to-video, as the diffusers-layout I2V repos ship it")
        proc = self.source.read_json("feature_extractor/preprocessor_config.json",
                                     "vision_encoder/siglip/feature_extractor/preprocessor_config.json",
                                     component="image_encoder") or {}
        config = siglip_vision_config(siglip_json)
        size = proc.get("size", {}).get("height", config.image_size)
        frame = resize_and_crop(image, s.height, s.width)
        pixels = siglip_preprocess(frame, size=size, mean=proc.get("image_mean", SIGLIP_MEAN),
                                   std=proc.get("image_std", SIGLIP_STD))
        params = _place(self.load("image_encoder", "encoders/siglip_vision",
                                  ("image_encoder", "vision_encoder/siglip/image_encoder", None), dtype))
        tokens = SiglipVisionModel(config).apply({"params": params}, jnp.asarray(pixels)).last_hidden_state
        release(params)
        vae_params = _place(self.load("vae", "hunyuan_video15/vae", ("vae", None)))
        condition = image_condition(HunyuanVideo15VAE(vae_cfg), vae_params, frame, tokens, shape)
        jax.block_until_ready(condition)
        release(vae_params)
        return condition

    def denoise(self, s: SampleSettings, noise: np.ndarray, prompt, negative, condition: ImageCondition | None,
                timer: StageTimer, dtype: str | None, mesh: Mesh, offload_chunk: int | None = None):
        """Sampling; on a multi-device mesh the DiT runs tensor / sequence parallel (CFG branches on "data");
        with `offload_chunk` its blocks stream from host memory that many at a time."""
        tree = self.load("transformer", "hunyuan_video15/transformer", (self.subfolder, None), dtype)
        cfg = TransformerConfig.from_param_shapes({p: tuple(a.shape) for p, a in tree.items()}, **self._rope())
        check_heads(cfg.num_attention_heads, mesh.shape["tensor"], mesh.shape["sequence"])
        dit = HunyuanVideo15Transformer(cfg)
        parallel = mesh.size > 1
        streamed = host_blocks = None
        if offload_chunk is not None:  # embed and head resident, blocks streamed from host memory
            params, streamed, host_blocks = stream_blocks(dit, tree, offload_chunk, DIT_RULES, mesh if parallel else None)
        else:
            params = place_transformer(dit, tree, mesh) if parallel else _place(tree)
        if parallel:  # small inputs: whole on every device; the DiT's constraints split what it splits
            replicated = NamedSharding(mesh, PartitionSpec())
            noise, prompt, negative, condition = jax.device_put((noise, prompt, negative, condition), replicated)
        pipe = HunyuanVideo15Pipeline(dit, params, None, None, vae_scaling=1.0, streamed=streamed,
                                      host_blocks=host_blocks)
        last = [time.perf_counter()]

        def on_step(i: int, latents: Any) -> None:
            latents.block_until_ready()
            now = time.perf_counter()
            timer.progress.advance("denoise", 1, f"{now - last[0]:.2f} s/step")
            last[0] = now

        with use_mesh(mesh, DIT_RULES) if parallel else contextlib.nullcontext():
            latents = pipe.sample(prompt, jnp.asarray(noise), s, negative=negative, image=condition, callback=on_step)
            latents = np.asarray(latents)
        release(params)
        if host_blocks is not None:
            release(host_blocks)
        return jnp.asarray(latents)

    def _rope(self) -> dict:
        """RoPE settings, the only sizes not visible in the weights: diffusers or official config.json names."""
        names = ["transformer/config.json"] + self._dit_configs()
        config = self.source.read_json(*names, component="transformer") or {}
        axes = config.get("rope_axes_dim") or config.get("rope_dim_list")
        theta = config.get("rope_theta")
        return {**({"rope_axes_dim": tuple(axes)} if axes else {}), **({"rope_theta": float(theta)} if theta else {})}

    def decode(self, latents: jax.Array, cfg: VAEConfig) -> np.ndarray:
        vae = HunyuanVideo15VAE(cfg)
        params = _place(self.load("vae", "hunyuan_video15/vae", ("vae", None)))
        frames = HunyuanVideo15Pipeline(None, None, vae, params).decode(latents.astype(jnp.float32))
        release(params)
        return frames


def _factory(name: str, options: GenerateOptions) -> HunyuanVideo15Generator:
    return HunyuanVideo15Generator(name, options)


for _name, _entry in load_registry().items():
    if _entry.family == FAMILY:
        registry.register(_name, FAMILY, _entry.description, _factory)
