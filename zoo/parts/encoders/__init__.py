"""Text and image encoders shared by the families, each with its conversion spec in
conversion_specs/encoders/ and its sharding rules table (`SHARDING_RULES`) in its module.

| module | reference (transformers) | spec |
|---|---|---|
| `t5` | `T5EncoderModel` (T5 v1.0/v1.1, ByT5), `UMT5EncoderModel` | `encoders/t5`, `encoders/umt5` (+ official Wan .pth) |
| `decoder` | `LlamaModel`, `Qwen2Model`, `Qwen2_5_VLTextModel` | `encoders/decoder` |
| `llava` | `LlavaForConditionalGeneration` as a text tower that sees an image (HunyuanVideo-I2V) | `encoders/llava` |
| `clip` | `CLIPVisionModelWithProjection` + `CLIPImageProcessor` | `encoders/clip_vision` (+ official Wan .pth) |
| `clip_text` | `CLIPTextModel` (pooled output; HunyuanVideo 1.0's CLIP-L) | `encoders/clip_text` |
| `siglip` | `SiglipVisionModel` + `SiglipImageProcessor` | `encoders/siglip_vision` |
| `tokenizer` | `AutoTokenizer` on a repo folder (tokenizer.json, CLIP vocab.json + merges.txt, ByT5, sentencepiece) | |
| `gemma` | `Gemma3TextModel`, `Gemma4UnifiedTextModel` (every hidden state; LTX-2.x) | `encoders/gemma` |
| `vision` | the ViT tower `clip` and `siglip` share | |
| `common` | embedding tables, activations, short-sequence attention | |

A family's prompt handling (templates, cleaning, cropping) is its own: `zoo/<family>/text.py`.
"""

from vidax.zoo.parts.encoders.clip import CLIPVisionModelWithProjection, clip_preprocess, clip_vision_config
from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.llava import LlavaConfig, LlavaTextEncoder
from vidax.zoo.parts.encoders.siglip import SiglipVisionModel, siglip_preprocess, siglip_vision_config
from vidax.zoo.parts.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.parts.encoders.vision import VisionConfig

__all__ = [
    "CLIPTextConfig",
    "CLIPTextModel",
    "CLIPVisionModelWithProjection",
    "DecoderConfig",
    "DecoderTextModel",
    "LlavaConfig",
    "LlavaTextEncoder",
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
