"""`wan-tiny`: an embedded Wan2.1-architecture T2V model that needs no download.

Its weights are random, drawn deterministically with NumPy from the shapes of the real modules
(DiT, VAE, UMT5), and its tokenizer is built on the spot with the `tokenizers` library. Both are
written once, in the same form as a `vidax-convert` output (one folder per component with a
manifest, plus the diffusers-style configs and tokenizer folder), under the vidax cache, so the
ordinary Wan pipeline runs it through the ordinary loading path. The video it makes is structured
noise: it shows the whole stack works end to end on any machine, in seconds.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from vidax.translator import save_tree
from vidax.translator import is_complete
from vidax.zoo.encoders.t5 import T5Config, T5EncoderModel
from vidax.zoo.pipeline import WeightsSource
from vidax.zoo.runtime import default_cache_dir
from vidax.zoo.wan.config import WanTransformerConfig
from vidax.zoo.wan.transformer import WanTransformer
from vidax.zoo.wan_vae import WanVAE, WanVAEConfig

NAME = "wan-tiny"
VERSION = 1  # bump when the recipe changes: the cached folder is keyed by it
SEED = 20240229

TRANSFORMER = {
    "_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2], "num_attention_heads": 2,
    "attention_head_dim": 16, "in_channels": 16, "out_channels": 16, "text_dim": 32, "freq_dim": 32,
    "ffn_dim": 64, "num_layers": 2, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6,
    "image_dim": None, "added_kv_proj_dim": None, "rope_max_seq_len": 1024, "pos_embed_seq_len": None,
}
VAE = {"_class_name": "AutoencoderKLWan", "base_dim": 8, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 1,
       "attn_scales": [], "temperal_downsample": [False, True, True]}
TEXT_ENCODER = {"model_type": "umt5", "vocab_size": 0, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2,
                "num_heads": 4, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 32,
                "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-6}
SCHEDULER = {"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction", "use_flow_sigmas": True,
             "flow_shift": 3.0, "solver_order": 2, "solver_type": "bh2", "lower_order_final": True}

SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2


# --- tokenizer ---------------------------------------------------------------------------------


def build_tokenizer(folder: Path) -> int:
    """A character-level Unigram tokenizer with T5's specials and metaspace splitting; returns the vocab size."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    pieces = SPECIALS + ["▁"] + [f"▁{c}" for c in string.ascii_lowercase] + list(string.ascii_lowercase + string.digits)
    pieces += list(".,!?'-:;()")
    vocab = [(p, 0.0 if p in SPECIALS else -float(len(p) == 1)) for p in pieces]
    tok = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
              "padding_side": "right", "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return tok.get_vocab_size()


# --- weights -----------------------------------------------------------------------------------


def _shapes(abstract: Any) -> dict[str, tuple[int, ...]]:
    flat = traverse_util.flatten_dict(nn.unbox(abstract), sep="/")
    return {path: tuple(leaf.shape) for path, leaf in flat.items()}


def random_tree(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Deterministic weights: norm scales near 1, everything else N(0, 1/fan_in) (kept small)."""
    rng = np.random.default_rng(seed)
    tree = {}
    for path in sorted(shapes):
        shape = shapes[path]
        name = path.rsplit("/", 1)[-1]
        if name in ("scale", "gamma"):
            tree[path] = (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
            continue
        fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        std = 0.02 if name in ("bias", "scale_shift_table", "embedding") else 1.0 / np.sqrt(max(fan_in, 1))
        tree[path] = (std * rng.standard_normal(shape)).astype(np.float32)
    return tree


def dit_shapes(config: WanTransformerConfig) -> dict[str, tuple[int, ...]]:
    return WanTransformer(config).param_shapes()


def t5_shapes(config: T5Config) -> dict[str, tuple[int, ...]]:
    ids = jnp.zeros((1, 8), jnp.int32)
    abstract = jax.eval_shape(lambda: T5EncoderModel(config).init(jax.random.key(0), ids, jnp.ones_like(ids)))
    return _shapes(abstract["params"])


def _write_component(root: Path, name: str, tree: dict[str, np.ndarray], config: dict | None) -> None:
    save_tree(tree, root / name, {"model": NAME, "component": name, "recipe": VERSION, "seed": SEED,
                                  "source": {"origin": f"embedded:{NAME}"}})
    if config is not None:
        (root / name / "config.json").write_text(json.dumps(config, indent=1))


def build(root: Path) -> Path:
    """Write the tiny model's folder (idempotent: a complete folder of this recipe is left alone)."""
    if all(is_complete(root / c) for c in ("transformer", "vae", "text_encoder")) and (root / "model_index.json").is_file():
        return root
    vocab = build_tokenizer(root / "tokenizer")
    text_cfg = {**TEXT_ENCODER, "vocab_size": vocab}
    _write_component(root, "text_encoder", random_tree(t5_shapes(T5Config.from_hf_config(text_cfg)), SEED + 1), text_cfg)
    _write_component(root, "vae", random_tree(WanVAE(WanVAEConfig.from_hf_config(VAE)).param_shapes(), SEED + 2), VAE)
    dit_cfg = WanTransformerConfig.from_hf_config(TRANSFORMER)
    _write_component(root, "transformer", random_tree(dit_shapes(dit_cfg), SEED + 3), TRANSFORMER)
    (root / "scheduler").mkdir(exist_ok=True)
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER, indent=1))
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline", "boundary_ratio": None,
                                                       "expand_timesteps": False}, indent=1))
    return root


def default_root() -> Path:
    """`$VIDAX_CACHE_DIR/../models/wan-tiny-vN` (next to the compile cache)."""
    return default_cache_dir().parent / "models" / f"{NAME}-v{VERSION}"


def source() -> WeightsSource:
    """The tiny model's folder as a weights source (built on first use; `VIDAX_TINY_DIR` overrides where)."""
    return WeightsSource("converted", build(Path(os.environ.get("VIDAX_TINY_DIR") or default_root())))
