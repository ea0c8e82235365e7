"""vidax.translator: PyTorch checkpoints -> host NumPy trees, driven by declarative specs.

    from vidax.translator import load_spec, convert, save_tree, load
    tree = convert(load_spec("wan/transformer"), "path/or/org/repo")   # {"blocks/attn1/to_q/kernel": array}

Imports no jax, flax or torch.
"""

from vidax.translator.api import LazyTree, convert, read_metadata
from vidax.translator.errors import (
    AccountingError,
    FormatError,
    GatedRepoError,
    OutputError,
    SourceError,
    SpecError,
    TranslatorError,
    VidaxError,
)
from vidax.translator.models import MODEL_FILE, ConversionHooks, ConvertedModel, ConvertOptions, convert_model
from vidax.translator.output import MANIFEST, is_complete, load, read_manifest, save_tree
from vidax.translator.registry import ModelEntry, get_model, load_registry
from vidax.translator.fetch.sources import looks_like_repo
from vidax.translator.spec import Spec, load_spec

__all__ = [
    "AccountingError", "ConversionHooks", "ConvertOptions", "ConvertedModel", "FormatError", "GatedRepoError", "LazyTree", "ModelEntry",
    "OutputError", "SourceError", "Spec", "SpecError", "TranslatorError", "VidaxError", "convert", "convert_model",
    "MANIFEST", "MODEL_FILE", "get_model", "is_complete", "load", "load_registry", "load_spec", "looks_like_repo",
    "read_manifest", "read_metadata", "save_tree",
]
