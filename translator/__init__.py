"""vidax.translator: PyTorch checkpoints -> host NumPy trees, driven by declarative specs.

    from vidax.translator import load_spec, convert, save_tree, load
    tree = convert(load_spec("wan/transformer"), "path/or/org/repo")   # {"blocks/attn1/to_q/kernel": array}

Imports no jax, flax or torch.
"""

from vidax.translator.api import LazyTree, convert
from vidax.translator.errors import (
    AccountingError,
    FormatError,
    GatedRepoError,
    OutputError,
    SourceError,
    SpecError,
    TranslatorError,
)
from vidax.translator.output import load, save_tree
from vidax.translator.spec import Spec, load_spec

__all__ = [
    "AccountingError", "FormatError", "GatedRepoError", "LazyTree", "OutputError", "SourceError", "Spec", "SpecError",
    "TranslatorError", "convert", "load", "load_spec", "save_tree",
]
