"""ComfyUI's `model.diffusion_model.` prefix on a denoiser's keys, read the same way by every single-file source.

ComfyUI saves a DiT with every key under `model.diffusion_model.` (`model.diffusion_model.blocks.0.self_attn.q.weight`
for Wan's official `blocks.0.self_attn.q.weight`), and many fine-tunes and quantized files ship so: fp32 or bf16
safetensors, 8-bit files with scales, GGUFs. This module is the one place that reads the prefix:

- `unprefixed(keys, where)` maps each key without the prefix to the file's own key (the others unchanged); a
  tensor present both with and without it is refused.
- `Unprefixed(reader)` is a reader (`path`, `metadata`, `tensors`, `array`, `release`) over those keys.

A GGUF's keys are always the original checkpoint's, so `gguf_io` drops the prefix as it reads. Any other
checkpoint is read as its keys are spelled first, since some layouts spell the prefix in their own rules (the
LTX-Video and LTX-2 release files, where the DiT sits beside `vae.` keys; CogVideoX's SAT checkpoints); only when
no layout of the spec matches them does `sources` read the same file without the prefix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from vidax.translator.errors import FormatError, brief

COMFY_PREFIX = "model.diffusion_model."


def unprefixed(keys: Iterable[str], where: object) -> dict[str, str] | None:
    """{key without the prefix: the file's key} for every key, or None when no key carries the prefix.

    Raises:
      FormatError: a tensor appears both with and without the prefix.
    """
    keys = list(keys)
    if not any(key.startswith(COMFY_PREFIX) for key in keys):
        return None
    names: dict[str, str] = {}
    for key in keys:
        bare = key[len(COMFY_PREFIX):] if key.startswith(COMFY_PREFIX) else key
        if bare in names:
            raise FormatError(f"{where}: tensor {brief(bare, 120)} appears twice (with and without {COMFY_PREFIX})")
        names[bare] = key
    return names


class Unprefixed:
    """`reader`'s tensors under their keys without ComfyUI's prefix (`names`: `unprefixed`'s map)."""

    def __init__(self, reader, names: dict[str, str]):
        self.path, self.metadata, self._reader = reader.path, getattr(reader, "metadata", {}), reader
        self._names = {bare: key for bare, key in names.items() if key in reader.tensors}
        self.tensors = {bare: dataclasses.replace(reader.tensors[key], name=bare) for bare, key in self._names.items()}

    def array(self, name: str):
        return self._reader.array(self._names[name])

    def release(self, name: str) -> None:
        self._reader.release(self._names[name])
