"""Tiny HunyuanVideo-1.5 pipelines saved with `save_pretrained`, as module fixtures: the text towers and their
tokenizers (`towers`), and the whole text-to-video pipeline (`saved`). The multi-host tests run it too."""

from __future__ import annotations

import pytest
import torch
import transformers

from tests.oracle import perturb

from .hunyuan_spec_fixtures import dit_reference, vae_reference

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)  # Qwen2.5's template for plain-text system/user messages


def qwen_tokenizer(folder):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["describe the video in detail", "a red kite over a grey sea", "a neon sign above a door"] * 10
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    from diffusers import HunyuanVideo15Pipeline as Reference

    root = tmp_path_factory.mktemp("hv15_text")
    torch.manual_seed(0)
    qwen = perturb(transformers.Qwen2_5_VLTextModel(transformers.Qwen2_5_VLTextConfig(
        vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})), 1)
    byt5 = perturb(transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=384, d_model=20, d_kv=8, d_ff=32, num_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
        relative_attention_num_buckets=8, relative_attention_max_distance=16)), 2)
    qwen.save_pretrained(root / "text_encoder")
    byt5.save_pretrained(root / "text_encoder_2")
    tokenizer = qwen_tokenizer(root / "tokenizer")
    transformers.ByT5Tokenizer().save_pretrained(root / "tokenizer_2")
    ref = Reference(text_encoder=qwen, tokenizer=tokenizer, transformer=None, vae=vae_reference(), scheduler=None,
                    text_encoder_2=byt5, tokenizer_2=transformers.AutoTokenizer.from_pretrained(root / "tokenizer_2"),
                    guider=None)
    return ref, root


@pytest.fixture(scope="module")
def saved(towers, tmp_path_factory):
    from diffusers import ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline as Reference

    text_ref, _ = towers
    dit = dit_reference(in_channels=9, out_channels=4, text_embed_dim=32, use_meanflow=False)
    ref = Reference(text_encoder=text_ref.text_encoder, tokenizer=text_ref.tokenizer, transformer=dit, vae=vae_reference(),
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), text_encoder_2=text_ref.text_encoder_2,
                    tokenizer_2=text_ref.tokenizer_2, guider=ClassifierFreeGuidance(guidance_scale=6.0))
    root = tmp_path_factory.mktemp("hv15_generate")
    ref.save_pretrained(root)
    return ref, root
