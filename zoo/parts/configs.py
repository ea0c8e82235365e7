"""Reading a released `config.json` into a family's frozen config dataclass, field by field.

Reading is as strict as the translator: every key of a config is a field of the dataclass, a key its
reader renames or reads itself, a library's bookkeeping key (`LIBRARY_BOOKKEEPING`), or a key the
class ignores by name with the reason (its `IGNORED` table). Anything else is a `ConfigError` naming
every such key at once, so a config from a newer release that adds a switch vidax does not implement
fails loudly instead of running a different model.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property
from typing import Any, Collection, Mapping

from vidax.translator import VidaxError

_GENERATION = "transformers generation default (text generation only; vidax runs the tower as an encoder)"
_HEADS = "transformers task-head bookkeeping (vidax builds no task head)"
_RUNTIME = "transformers runtime switch (how a torch forward returns or caches; vidax decides its own)"

# Keys the libraries write into every config they save, whatever the model. diffusers' four are its
# `ConfigMixin` bookkeeping. The transformers ones are `PretrainedConfig().to_dict()` of transformers 5
# plus what `PretrainedConfig.__init__` of transformers 4 wrote (the released text encoders were saved
# with 4.x: generation defaults, task heads and torch runtime switches at the top level).
LIBRARY_BOOKKEEPING: Mapping[str, str] = {
    "_class_name": "diffusers bookkeeping: the class that wrote the config",
    "_diffusers_version": "diffusers bookkeeping: the version that wrote the config",
    "_name_or_path": "library bookkeeping: where the config was loaded from",
    "_use_default_values": "diffusers bookkeeping: which arguments were left at their defaults",
    "_commit_hash": "transformers bookkeeping: the Hub revision it was loaded from",
    "_attn_implementation_autoset": "transformers bookkeeping: torch attention backend",
    "transformers_version": "transformers bookkeeping: the version that wrote the config",
    "architectures": "transformers bookkeeping: the torch classes the weights were saved from",
    "model_type": "transformers bookkeeping: the config class (readers that branch on it read it themselves)",
    "dtype": "transformers bookkeeping: the torch dtype of the saved weights (vidax reads the tensors' own)",
    "torch_dtype": "transformers bookkeeping: the torch dtype of the saved weights (vidax reads the tensors' own)",
    "use_bfloat16": "transformers bookkeeping: a TPU training switch of transformers 4",
    "torchscript": _RUNTIME, "return_dict": _RUNTIME, "output_hidden_states": _RUNTIME,
    "output_attentions": _RUNTIME, "chunk_size_feed_forward": _RUNTIME, "pruned_heads": _RUNTIME,
    "tf_legacy_loss": "transformers 4 training-loss switch", "problem_type": _HEADS,
    "id2label": _HEADS, "label2id": _HEADS, "num_labels": _HEADS, "finetuning_task": _HEADS,
    "task_specific_params": _HEADS, "prefix": _HEADS, "tokenizer_class": "transformers bookkeeping: "
    "the tokenizer class (vidax reads the tokenizer files themselves)",
    "is_encoder_decoder": "transformers bookkeeping: the model class's shape (the reader knows it)",
    "is_decoder": "transformers bookkeeping: the model class's shape (the reader knows it)",
    "add_cross_attention": "transformers bookkeeping: decoder cross-attention of seq2seq wrappers (none here)",
    "cross_attention_hidden_size": "transformers bookkeeping: decoder cross-attention of seq2seq wrappers",
    "tie_encoder_decoder": "transformers bookkeeping: weight tying of seq2seq wrappers",
    "decoder_start_token_id": _GENERATION, "bos_token_id": _GENERATION, "sep_token_id": _GENERATION,
    "max_length": _GENERATION, "min_length": _GENERATION, "do_sample": _GENERATION,
    "early_stopping": _GENERATION, "num_beams": _GENERATION, "num_beam_groups": _GENERATION,
    "diversity_penalty": _GENERATION, "temperature": _GENERATION, "top_k": _GENERATION, "top_p": _GENERATION,
    "typical_p": _GENERATION, "repetition_penalty": _GENERATION, "length_penalty": _GENERATION,
    "no_repeat_ngram_size": _GENERATION, "encoder_no_repeat_ngram_size": _GENERATION,
    "bad_words_ids": _GENERATION, "num_return_sequences": _GENERATION, "output_scores": _GENERATION,
    "return_dict_in_generate": _GENERATION, "forced_bos_token_id": _GENERATION,
    "forced_eos_token_id": _GENERATION, "remove_invalid_values": _GENERATION,
    "exponential_decay_length_penalty": _GENERATION, "suppress_tokens": _GENERATION,
    "begin_suppress_tokens": _GENERATION, "pad_token_id": _GENERATION, "eos_token_id": _GENERATION,
    "tie_word_embeddings": "transformers bookkeeping: ties the LM head to the embeddings (vidax runs no LM head)",
}


class ConfigError(VidaxError, ValueError):
    """A config.json carries keys vidax neither reads nor ignores by name (one line, every key named)."""


def check_known(owner: str, hf: Mapping[str, Any], known: Collection[str],
                ignored: Mapping[str, str] | None = None) -> None:
    """Raise `ConfigError` naming every key of `hf` that is neither in `known` (what the reader uses),
    `ignored` (the owner's keys that do not matter to vidax, with why) nor `LIBRARY_BOOKKEEPING`."""
    unknown = [k for k in hf if k not in known and k not in (ignored or {}) and k not in LIBRARY_BOOKKEEPING]
    if unknown:
        origin = hf.get("_class_name") or hf.get("model_type")
        where = f"{owner} ({origin})" if origin else owner
        raise ConfigError(f"{where}: config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                          "not supported (vidax reads no such setting; a key that does not change the model "
                          "belongs in the class's IGNORED table with the reason)")


def pick_fields(cls, hf: Mapping[str, Any], renames: Mapping[str, str] | None = None, *,
                read: Collection[str] = (), ignored: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The entries of a config.json that dataclass `cls` declares (renamed where asked; lists, nested
    ones too, as tuples, so the config stays hashable), after `check_known`: `read` names keys the
    caller reads itself, `ignored` replaces `cls.IGNORED` (a reader of another library's layout)."""
    renames = renames or {}
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    ignored = getattr(cls, "IGNORED", {}) if ignored is None else ignored
    check_known(cls.__name__, hf, names | set(renames) | set(read), ignored)
    out = {}
    for key, value in hf.items():
        key = renames.get(key, key)
        if key in names:
            out[key] = _frozen(value)
    return out


def _frozen(value: Any) -> Any:
    """JSON lists as tuples, nested ones too (per-stage kernel lists: `[[3, 3, 3], ...]`)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


class HeadsConfig:
    """Widths derived from `num_attention_heads`, `attention_head_dim` and `mlp_ratio`, the fields
    of a diffusers DiT config that counts its width in heads (a mixin for frozen config dataclasses)."""

    num_attention_heads: int
    attention_head_dim: int
    mlp_ratio: float

    @cached_property
    def inner_dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @cached_property
    def mlp_dim(self) -> int:
        return int(self.inner_dim * self.mlp_ratio)
