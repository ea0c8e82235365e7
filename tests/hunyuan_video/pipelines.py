"""Tiny HunyuanVideo 1.0 pipelines for the generator tests: diffusers' `HunyuanVideoPipeline` and
`HunyuanVideoImageToVideoPipeline` with every tower tiny and perturbed, tokenizers built locally, saved
with `save_pretrained`; and the official `ckpts/` folder of the same weights.

Tokenizers. The Llama-3 stand-in is word-level over Llama-3's own pre-tokenizer pieces (its split regex,
the special tokens whole), one id per piece: the reference templates then take exactly Llama-3's token
counts (crop_start 95 for T2V, 103 for I2V, `<image>` at position 5), so both sides run the default
`prompt_template` unchanged. The CLIP stand-in is a byte-level BPE with CLIP's normaliser, split and `</w>`
suffix, its end token the largest id (CLIP-L's legacy argmax pooling finds it), stored as the diffusers
mirror's `tokenizer_2/` is: `vocab.json` + `merges.txt`, no `tokenizer.json`.

Sizes. The DiT has head_dim 128 so that the released RoPE axes (16, 56, 56) apply: the official layout
ships no config, and vidax then takes RoPE from the registry as for the real checkpoint. The I2V Llava's
vision tower sees 336 px in 14 px patches: 576 image tokens, the template's `image_emb_len`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np

from tests.oracle import perturb

from .hunyuan_video_spec_fixtures import save_official_dit, save_official_vae, vae_reference

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<pad>", "<image>", "<unk>"]
PROMPT = "a red kite over a grey sea at dusk, waves breaking on the rocks"
NEGATIVE = "blurry, low quality, static"
CORPUS_EXTRA = ("Aerial view, aerial view, overexposed, low quality, deformation, a poor composition, bad hands, bad "
                "teeth, bad eyes, bad limbs, distortion. deformation, a poor composition and deformed video")
DIT = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=128, num_layers=2,
           num_single_layers=2, num_refiner_layers=1, patch_size=2, patch_size_t=1, text_embed_dim=32,
           pooled_projection_dim=16, rope_axes_dim=(16, 56, 56))
LLAMA = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
CLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=77, eos_token_id=2)
HEIGHT, WIDTH, FRAMES, STEPS = 32, 48, 5, 2
LATENT_SHAPE = (1, 4, 2, 4, 6)


def corpus() -> list[str]:
    from vidax.zoo.hunyuan_video.text import I2V_TEMPLATE, T2V_TEMPLATE

    return [T2V_TEMPLATE.template, I2V_TEMPLATE.template, PROMPT, NEGATIVE, CORPUS_EXTRA]


def llama3_tokenizer(folder: Path):
    """Word-level over Llama-3's pre-tokenizer pieces (see the module docstring); right padding with <pad>."""
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated")
    specials = re.compile("(" + "|".join(map(re.escape, LLAMA_SPECIALS)) + ")")
    words = set()
    for text in corpus():
        for part in specials.split(text):
            if part and part not in LLAMA_SPECIALS:
                words.update(piece for piece, _ in split.pre_tokenize_str(part))
    vocab = {token: i for i, token in enumerate(LLAMA_SPECIALS + sorted(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = split
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(LLAMA_SPECIALS)
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", 0)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                                eos_token="<|eot_id|>", pad_token="<pad>", unk_token="<unk>",
                                                padding_side="right")
    fast.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def clip_tokenizer_files(folder: Path, texts=None) -> int:
    """CLIP's BPE as `vocab.json` + `merges.txt` + configs (no tokenizer.json); returns the vocabulary size.
    `<|startoftext|>` and `<|endoftext|>` take the last two ids, as in CLIP's vocabulary."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    from vidax.zoo.parts.encoders.tokenizer import _CLIP_SPLIT

    tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = trainers.BpeTrainer(vocab_size=420, end_of_word_suffix="</w>",
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts or corpus()) * 3, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # every byte, alone and ending a word, as CLIP's
    for symbol in alphabet + [a + "</w>" for a in alphabet]:
        vocab.setdefault(symbol, len(vocab))
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
               "pad_token": "<|endoftext|>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    (folder / "tokenizer_config.json").write_text(json.dumps({**special, "tokenizer_class": "CLIPTokenizer",
                                                              "model_max_length": 77, "do_lower_case": True}))
    return len(vocab)


def towers(root: Path):
    """(llama tokenizer, CLIP tokenizer, Llama, CLIP text, Llava) and the CLIP tokenizer's slow-file folder."""
    import torch
    import transformers

    tokenizer = llama3_tokenizer(root / "llama_tokenizer")
    vocab_2 = clip_tokenizer_files(root / "clip_tokenizer")
    tokenizer_2 = transformers.CLIPTokenizer.from_pretrained(root / "clip_tokenizer")
    torch.manual_seed(0)
    llama = perturb(transformers.LlamaModel(transformers.LlamaConfig(vocab_size=len(tokenizer), **LLAMA)), 11)
    clip = perturb(transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=vocab_2, bos_token_id=vocab_2 - 2, pad_token_id=vocab_2 - 1, **CLIP)), 12)
    vision = transformers.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, image_size=336, patch_size=14)
    config = transformers.LlavaConfig(vision_config=vision,
                                      text_config=transformers.LlamaConfig(vocab_size=len(tokenizer), **LLAMA),
                                      image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                                      pad_token_id=tokenizer.pad_token_id)
    llava = perturb(transformers.LlavaForConditionalGeneration(config), 13)
    return tokenizer, tokenizer_2, llama, clip, llava


def dit(seed: int = 0, **overrides):
    import torch
    from diffusers import HunyuanVideoTransformer3DModel

    torch.manual_seed(seed)
    return perturb(HunyuanVideoTransformer3DModel(**{**DIT, **overrides}), seed + 20)


def slow_clip_tokenizer(saved: Path, source: Path) -> None:
    """The diffusers mirror's `tokenizer_2/`: vocab.json + merges.txt + configs, no tokenizer.json."""
    shutil.rmtree(saved)
    shutil.copytree(source, saved)


def t2v_pipeline(root: Path, parts):
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline

    tokenizer, tokenizer_2, llama, clip, _ = parts
    pipe = HunyuanVideoPipeline(text_encoder=llama, tokenizer=tokenizer, transformer=dit(), vae=vae_reference(),
                                scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=clip,
                                tokenizer_2=tokenizer_2)
    pipe.save_pretrained(root / "model")
    slow_clip_tokenizer(root / "model" / "tokenizer_2", root / "clip_tokenizer")
    return pipe


def i2v_pipeline(root: Path, parts):
    import transformers
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoImageToVideoPipeline

    tokenizer, tokenizer_2, _, clip, llava = parts
    processor = transformers.CLIPImageProcessor(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    pipe = HunyuanVideoImageToVideoPipeline(text_encoder=llava, tokenizer=tokenizer,
                                            transformer=dit(1, image_condition_type="token_replace"),
                                            vae=vae_reference(4), scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
                                            text_encoder_2=clip, tokenizer_2=tokenizer_2, image_processor=processor)
    pipe.save_pretrained(root / "model")
    slow_clip_tokenizer(root / "model" / "tokenizer_2", root / "clip_tokenizer")
    return pipe


def official_t2v_folder(root: Path, pipe) -> Path:
    """tencent/HunyuanVideo's ckpts/ (ckpts/README.md): the DiT as a DeepSpeed `.pt`, the VAE `.pt` with its
    config, the Llama text tower and its tokenizer in text_encoder/, CLIP-L (and its tokenizer) in
    text_encoder_2/."""
    model = root / "hunyuan-video-t2v-720p"
    save_official_dit(pipe.transformer.state_dict(), model)
    save_official_vae(pipe.vae.state_dict(), model)
    vae_config = {k: v for k, v in dict(pipe.vae.config).items() if not k.startswith("_")}
    vae_config["time_compression_ratio"] = vae_config.pop("temporal_compression_ratio")  # hyvideo's name
    (model / "vae" / "config.json").write_text(json.dumps(vae_config, default=list))
    pipe.text_encoder.save_pretrained(root / "text_encoder")
    pipe.tokenizer.save_pretrained(root / "text_encoder")
    pipe.text_encoder_2.save_pretrained(root / "text_encoder_2")
    pipe.tokenizer_2.save_pretrained(root / "text_encoder_2")
    return root


def latents(seed: int, shape=LATENT_SHAPE) -> np.ndarray:
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).numpy()


def official_i2v_folder(root: Path, pipe) -> Path:
    """tencent/HunyuanVideo-I2V's ckpts/: the DiT and VAE under hunyuan-video-i2v-720p/, the whole Llava
    (xtuner/llava-llama-3-8b-v1_1-transformers: weights, tokenizer, image processor) in text_encoder_i2v/,
    CLIP-L in text_encoder_2/."""
    model = root / "hunyuan-video-i2v-720p"
    save_official_dit(pipe.transformer.state_dict(), model)
    save_official_vae(pipe.vae.state_dict(), model)
    vae_config = {k: v for k, v in dict(pipe.vae.config).items() if not k.startswith("_")}
    vae_config["time_compression_ratio"] = vae_config.pop("temporal_compression_ratio")
    (model / "vae" / "config.json").write_text(json.dumps(vae_config, default=list))
    for part in (pipe.text_encoder, pipe.tokenizer, pipe.image_processor):
        part.save_pretrained(root / "text_encoder_i2v")
    pipe.text_encoder_2.save_pretrained(root / "text_encoder_2")
    pipe.tokenizer_2.save_pretrained(root / "text_encoder_2")
    return root
