"""The metrics' networks at tiny sizes, perturbed, written as the files their publishers ship.

- CLIP: the `clip` package's `CLIP` (what VBench runs), written both as a TorchScript archive (as OpenAI's
  `ViT-B-32.pt`) and as a `torch.save` state dict (open_clip's OpenAI models); 224 px, patch 32, 128 wide
  (two 64-wide heads, as OpenAI sizes them), 2 layers.
- DINO: transformers' `ViTModel` is the DINO ViT architecture (its DINO checkpoints are ViTModels); its weights
  are written under DINO's own names (`blocks.N.attn.qkv`, ...), the file torch.hub's `dino_vitb16` loads.
- I3D: cd-fvd's `InceptionI3d` at its real widths (they are fixed) with perturbed weights and batch statistics.
- The aesthetic head: `torch.nn.Linear(width, 1)`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from oracle import perturb, state_of  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standins import oracles  # noqa: E402

CLIP_SIZES = dict(embed_dim=32, image_resolution=224, vision_layers=2, vision_width=128, vision_patch_size=32,
                  context_length=16, vocab_size=120, transformer_width=128, transformer_heads=2, transformer_layers=2)
DINO_SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=1, intermediate_size=128, image_size=224,
                  patch_size=16, layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)


def tiny_clip(seed: int = 0, **sizes) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = oracles().clip_model.CLIP(**{**CLIP_SIZES, **sizes}).float()
    return perturb(model, seed)


def clip_tokens(batch: int, context: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """Start-text-end token rows padded with zeros, the end token the largest id (as CLIP's BPE vocabulary)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.zeros(batch, context, dtype=torch.long)
    for b in range(batch):
        n = 3 + b
        rows[b, 0] = vocab - 2
        rows[b, 1:n - 1] = torch.randint(1, vocab - 2, (n - 2,), generator=gen)
        rows[b, n - 1] = vocab - 1
    return rows


def save_clip(model: torch.nn.Module, folder: Path, torchscript: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ViT-B-32.pt"
    if torchscript:
        image = torch.zeros(1, 3, 224, 224)
        text = clip_tokens(1, model.context_length, model.vocab_size)
        torch.jit.trace(model, (image, text), check_trace=False).save(str(path))
    else:
        torch.save(state_of(model), path)
    return path


def tiny_dino(seed: int = 0, **sizes):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    return perturb(ViTModel(ViTConfig(**{**DINO_SIZES, **sizes}), add_pooling_layer=False), seed)


def dino_hub_state(model) -> dict[str, torch.Tensor]:
    """A transformers ViTModel's weights under DINO's module names (q, k, v fused in that order)."""
    s, out = state_of(model), {}
    out["cls_token"] = s["embeddings.cls_token"]
    out["pos_embed"] = s["embeddings.position_embeddings"]
    for p in ("weight", "bias"):
        out[f"patch_embed.proj.{p}"] = s[f"embeddings.patch_embeddings.projection.{p}"]
        out[f"norm.{p}"] = s[f"layernorm.{p}"]
        for i in range(model.config.num_hidden_layers):
            a = f"layers.{i}."
            out[f"blocks.{i}.attn.qkv.{p}"] = torch.cat([s[f"{a}attention.{n}_proj.{p}"] for n in "qkv"])
            out[f"blocks.{i}.attn.proj.{p}"] = s[f"{a}attention.o_proj.{p}"]
            out[f"blocks.{i}.norm1.{p}"] = s[f"{a}layernorm_before.{p}"]
            out[f"blocks.{i}.norm2.{p}"] = s[f"{a}layernorm_after.{p}"]
            for fc in ("fc1", "fc2"):
                out[f"blocks.{i}.mlp.{fc}.{p}"] = s[f"{a}mlp.{fc}.{p}"]
    return out


def save_dino(model, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(dino_hub_state(model), folder / "dino_vitbase16_pretrain.pth")
    return folder / "dino_vitbase16_pretrain.pth"


def tiny_i3d(seed: int = 0) -> torch.nn.Module:
    from cdfvd.third_party.i3d.pytorch_i3d import InceptionI3d

    torch.manual_seed(seed)
    model = InceptionI3d(400, in_channels=3)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm3d):  # batch statistics away from 0 and 1
                module.running_mean.normal_(0, 0.1, generator=gen)
                module.running_var.uniform_(0.5, 1.5, generator=gen)
    return perturb(model, seed)


def save_i3d(model, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state_of(model), folder / "i3d_pretrained_400.pt")
    return folder / "i3d_pretrained_400.pt"


def tiny_aesthetic(width: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return perturb(torch.nn.Linear(width, 1), seed)


def save_aesthetic(model, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state_of(model), folder / "sa_0_4_vit_l_14_linear.pth")
    return folder / "sa_0_4_vit_l_14_linear.pth"


def clip_tokenizer_folder(folder: Path) -> int:
    """CLIP's BPE files at the smallest size: every byte alone and ending a word, no merges, the start and end
    tokens last (as in CLIP's vocabulary, so the end token has the largest id). Returns the vocabulary size."""
    import json

    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {s: i for i, s in enumerate(alphabet + [a + "</w>" for a in alphabet])}
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
               "pad_token": "<|endoftext|>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(special))
    (folder / "tokenizer_config.json").write_text(json.dumps({**special, "tokenizer_class": "CLIPTokenizer",
                                                              "model_max_length": 77}))
    return len(vocab)


def tiny_raft(seed: int = 0) -> torch.nn.Module:
    """VBench's RAFT (the large model, real widths: they are fixed), perturbed, batch statistics moved off 0 and 1."""
    from easydict import EasyDict

    from standins import installed

    with installed():
        from vbench.third_party.RAFT.core.raft import RAFT

    torch.manual_seed(seed)
    model = RAFT(EasyDict(small=False, mixed_precision=False, alternate_corr=False))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1, generator=gen)
                module.running_var.uniform_(0.5, 1.5, generator=gen)
    return perturb(model, seed)


def save_raft(model, folder: Path) -> Path:
    """As `raft-things.pth` ships: saved from DataParallel, every key under `module.`."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({f"module.{k}": v for k, v in state_of(model).items()}, folder / "raft-things.pth")
    return folder / "raft-things.pth"
