"""`--transformer FILE` and `--transformer-2 FILE`: a denoiser's weights from one checkpoint file.

What users download to fit a DiT in memory is often the DiT alone, quantized: a GGUF (city96's,
QuantStack's) or a safetensors file, in the original or the diffusers key layout. The file replaces the
weights of that one component; everything else (VAE, encoders, scheduler, the DiT's config) still comes
from `--weights` or the Hub repo. The file goes through the component's own spec, whose layouts are told
apart by the file's keys as for any other source, and the translator dequantizes it (`vidax.translator.formats.gguf_io`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from vidax.translator import convert
from vidax.zoo.errors import PipelineError
from vidax.zoo.compute.progress import Progress
from vidax.zoo.weights.source import _materialize

# component -> the GenerateOptions field (and vidax-gen flag) that may name its file
DIT_FILE_FIELDS = {"transformer": "transformer", "transformer_2": "transformer_2"}
FILE_SUFFIXES = (".gguf", ".safetensors", ".pth", ".pt", ".bin", ".ckpt")


def dit_file(options, component: str) -> Path | None:
    """The file the request names for `component`, or None (its weights come from `--weights`)."""
    field = DIT_FILE_FIELDS.get(component)
    value = getattr(options, field, None) if field else None
    return None if value is None else Path(value).expanduser()


def check_dit_files(options, model: str, components: Mapping) -> None:
    """One line before any work: the file exists, is a checkpoint, and the model has that component."""
    for component, field in DIT_FILE_FIELDS.items():
        path = dit_file(options, component)
        flag = "--" + field.replace("_", "-")
        if path is None:
            continue
        if component not in components:
            raise PipelineError(f"{flag}: {model} has no {component} (its components: {', '.join(components)})")
        if not path.is_file():
            raise PipelineError(f"{flag} {path}: no such file")
        if not path.name.endswith(FILE_SUFFIXES):
            raise PipelineError(f"{flag} {path}: not a checkpoint file ({', '.join(FILE_SUFFIXES)})")


def load_dit_file(path: Path, component: str, spec: str, dtype: str | None,
                  progress: Progress | None = None, loras: tuple = ()) -> dict[str, np.ndarray]:
    """The component's host tree converted from `path` (layout from its keys, dequantized as read, `loras`
    merged into the dequantized float32 weights before the spec's dtype policy casts them)."""
    lazy = convert(spec, path, dtype=dtype, lazy=True, loras=loras)
    return _materialize(lazy, f"convert {component} ({path.name})", progress or Progress())
