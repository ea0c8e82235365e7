"""Text and image encoders shared by the families, each with its conversion spec in
conversion_specs/encoders/ and its sharding rules table (`SHARDING_RULES`) in its module.

| module | reference (transformers) | spec |
|---|---|---|
| `t5` | `T5EncoderModel` (T5 v1.0/v1.1, ByT5), `UMT5EncoderModel` | `encoders/t5`, `encoders/umt5` (+ official Wan .pth) |
| `decoder` | `LlamaModel`, `Qwen2Model`, `Qwen2_5_VLTextModel` | `encoders/decoder` |
| `clip` | `CLIPVisionModelWithProjection` + `CLIPImageProcessor` | `encoders/clip_vision` (+ official Wan .pth) |
| `siglip` | `SiglipVisionModel` + `SiglipImageProcessor` | `encoders/siglip_vision` |
| `tokenizer` | `AutoTokenizer` on a repo folder (tokenizer.json, ByT5, sentencepiece) | |
| `prompts` | the Wan and HunyuanVideo-1.5 pipelines' prompt handling | |
"""

from vidax.zoo.encoders.clip import CLIPVisionModelWithProjection, clip_preprocess, clip_vision_config
from vidax.zoo.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.encoders.siglip import SiglipVisionModel, siglip_preprocess, siglip_vision_config
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.encoders.tokenizer import load_tokenizer
from vidax.zoo.encoders.vision import VisionConfig

__all__ = [
    "CLIPVisionModelWithProjection",
    "DecoderConfig",
    "DecoderTextModel",
    "SiglipVisionModel",
    "T5Config",
    "T5EncoderModel",
    "VisionConfig",
    "clip_preprocess",
    "clip_vision_config",
    "load_tokenizer",
    "siglip_preprocess",
    "siglip_vision_config",
]
