"""HunyuanVideo 1.0 prompt encoding against diffusers' own `encode_prompt`: the Llama tower behind the T2V
template (crop, hidden_states[-3]), CLIP-L's pooled output (legacy argmax pooling), and the I2V Llava
path (image placeholders expanded, image tokens every 4th, the assistant header cut out). Tiny towers
converted through the real specs (`encoders/decoder`, `encoders/clip_text`, `encoders/llava`); tokenizer
folders built locally with Llama-3's special tokens."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from vidax.translator import convert
from vidax.zoo.parts.encoders.clip import clip_preprocess
from vidax.zoo.parts.encoders.clip_text import CLIPTextConfig, CLIPTextModel
from vidax.zoo.parts.encoders.decoder import DecoderConfig, DecoderTextModel
from vidax.zoo.parts.encoders.llava import LlavaConfig, LlavaTextEncoder
from vidax.zoo.parts.encoders.tokenizer import load_tokenizer
from vidax.zoo.hunyuan_video import text as hv_text

from tests.oracle import perturb, to_np, unflatten

PROMPTS = ["a red kite over a grey sea at dusk", "waves"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<image>", "<pad>"]
MAX_LENGTH = 32  # both prompts fit: each row ends with its <|eot_id|>
ATOL = 2e-5


def llama_tokenizer(folder):
    """Byte-level BPE with Llama-3's specials; the post-processor adds <|begin_of_text|> (as Llama-3's does)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [hv_text.T2V_TEMPLATE.template, hv_text.I2V_TEMPLATE.template, *PROMPTS] * 5
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=LLAMA_SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                                pad_token="<pad>", padding_side="right")
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def clip_tokenizer(folder):
    """A CLIP-like tokenizer whose end token has the largest id and pads (legacy argmax pooling finds it)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(PROMPTS * 5, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|startoftext|>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])
    end = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                       special_tokens=[("<|startoftext|>", 0), ("<|endoftext|>", end)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>",
                                                eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder), end + 1


def prefix_tokens(tokenizer, template: str) -> int:
    """Tokens of the template before the prompt (BOS included): this tokenizer's `crop_start`."""
    return len(tokenizer(template.split("{}")[0]).input_ids)


LLAMA = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    root = tmp_path_factory.mktemp("hv_text")
    tokenizer = llama_tokenizer(root / "tokenizer")
    tokenizer_2, clip_vocab = clip_tokenizer(root / "tokenizer_2")
    torch.manual_seed(0)
    llama = perturb(transformers.LlamaModel(transformers.LlamaConfig(vocab_size=len(tokenizer), **LLAMA)), 1)
    clip = perturb(transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=clip_vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=77, eos_token_id=2, bos_token_id=0, pad_token_id=clip_vocab - 1)), 2)
    llama.save_pretrained(root / "text_encoder")
    clip.save_pretrained(root / "text_encoder_2")
    return root, tokenizer, tokenizer_2, llama, clip


def test_t2v_prompt_features_match_reference(towers):
    from diffusers import HunyuanVideoPipeline

    root, tokenizer, tokenizer_2, llama, clip = towers
    template = hv_text.PromptTemplate(hv_text.T2V_TEMPLATE.template, prefix_tokens(tokenizer, hv_text.T2V_TEMPLATE.template))
    pipe = HunyuanVideoPipeline(text_encoder=llama, tokenizer=tokenizer, transformer=None, vae=None, scheduler=None,
                                text_encoder_2=clip, tokenizer_2=tokenizer_2)
    with torch.no_grad():
        embeds, pooled, mask = pipe.encode_prompt(PROMPTS, prompt_template=dataclasses.asdict(template), device="cpu",
                                                  dtype=torch.float32, max_sequence_length=MAX_LENGTH)

    decoder = DecoderTextModel(DecoderConfig.from_hf_config(llama.config.to_dict()))
    llama_params = unflatten(convert("encoders/decoder", root / "text_encoder", dtype="float32"))
    ours, our_mask = hv_text.llama_text_features(decoder, llama_params, load_tokenizer(root / "tokenizer"), PROMPTS,
                                                 template=template, max_length=MAX_LENGTH)
    np.testing.assert_array_equal(np.asarray(our_mask), to_np(mask))
    valid = to_np(mask).astype(bool)  # padded rows carry no meaning in either implementation
    np.testing.assert_allclose(np.asarray(ours)[valid], to_np(embeds)[valid], atol=ATOL, rtol=1e-5)

    # The crop keeps the prompt's closing <|eot_id|>: it is the last valid text token of each row.
    ids = tokenizer([template.template.format(p) for p in PROMPTS], padding="max_length", truncation=True,
                    max_length=MAX_LENGTH + template.crop_start).input_ids
    last = [row[template.crop_start:][m.astype(bool)][-1] for row, m in zip(np.asarray(ids), to_np(mask))]
    assert last == [tokenizer.convert_tokens_to_ids("<|eot_id|>")] * 2

    clip_model = CLIPTextModel(CLIPTextConfig.from_hf_config(clip.config.to_dict()))
    clip_params = unflatten(convert("encoders/clip_text", root / "text_encoder_2", dtype="float32"))
    our_pooled = hv_text.clip_pooled(clip_model, clip_params, load_tokenizer(root / "tokenizer_2"), PROMPTS)
    np.testing.assert_allclose(np.asarray(our_pooled), to_np(pooled), atol=ATOL, rtol=1e-5)


def test_clip_pooling_by_eos_id(towers):
    """A config whose eos_token_id is not the legacy 2 pools at the first end token, as transformers does."""
    root, _, tokenizer_2, _, clip = towers
    end = tokenizer_2.convert_tokens_to_ids("<|endoftext|>")
    ref = perturb(transformers.CLIPTextModel(transformers.CLIPTextConfig(**{**clip.config.to_dict(), "eos_token_id": end})), 3)
    ids = torch.tensor([[0, 5, 9, end, end, end], [0, 7, end, 4, end, end]])
    with torch.no_grad():
        expected = ref(ids).pooler_output
    ref.save_pretrained(root / "clip_eos")
    model = CLIPTextModel(CLIPTextConfig.from_hf_config(ref.config.to_dict()))
    params = unflatten(convert("encoders/clip_text", root / "clip_eos", dtype="float32"))
    ours = model.apply({"params": params}, jnp.asarray(ids.numpy())).pooler_output
    np.testing.assert_allclose(np.asarray(ours), to_np(expected), atol=ATOL, rtol=1e-5)


def test_i2v_llava_prompt_features_match_reference(towers):
    from diffusers import HunyuanVideoImageToVideoPipeline

    root, tokenizer, tokenizer_2, _, clip = towers
    image_id, pad_id = tokenizer.convert_tokens_to_ids("<image>"), tokenizer.pad_token_id
    vision = transformers.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                                           image_size=32, patch_size=8)
    config = transformers.LlavaConfig(vision_config=vision, text_config=transformers.LlamaConfig(vocab_size=len(tokenizer), **LLAMA),
                                      image_token_index=image_id, pad_token_id=pad_id)
    torch.manual_seed(0)
    llava = perturb(transformers.LlavaForConditionalGeneration(config), 4)
    llava.save_pretrained(root / "llava")
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})

    base = hv_text.I2V_TEMPLATE.template
    ids = tokenizer(base).input_ids
    start = ids.index(image_id)
    template = hv_text.PromptTemplate(base, prefix_tokens(tokenizer, base), start, start + 16, 16)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)) for _ in PROMPTS]  # one per prompt
    pipe = HunyuanVideoImageToVideoPipeline(text_encoder=llava, tokenizer=tokenizer, transformer=None, vae=None,
                                            scheduler=None, text_encoder_2=clip, tokenizer_2=tokenizer_2,
                                            image_processor=processor)
    with torch.no_grad():
        embeds, _, mask = pipe.encode_prompt(image=images, prompt=PROMPTS, prompt_template=dataclasses.asdict(template),
                                             device="cpu", dtype=torch.float32, max_sequence_length=MAX_LENGTH,
                                             image_embed_interleave=4)

    pixels = clip_preprocess([np.asarray(i) for i in images], size=32)
    np.testing.assert_allclose(pixels, processor(images, return_tensors="np").pixel_values, atol=1e-5)
    model = LlavaTextEncoder(LlavaConfig.from_hf_config(llava.config.to_dict()))
    params = unflatten(convert("encoders/llava", root / "llava", dtype="float32"))
    ours, our_mask = hv_text.llava_text_features(
        model, params, load_tokenizer(root / "tokenizer"), PROMPTS, pixels,
        end_header_id=tokenizer.convert_tokens_to_ids("<|end_header_id|>"), template=template, max_length=MAX_LENGTH)
    assert ours.shape[1] == 4 + MAX_LENGTH - 4  # 16 image tokens every 4th, the text less the assistant header
    np.testing.assert_array_equal(np.asarray(our_mask), to_np(mask))
    valid = to_np(mask).astype(bool)
    np.testing.assert_allclose(np.asarray(ours)[valid], to_np(embeds)[valid], atol=ATOL, rtol=1e-5)
