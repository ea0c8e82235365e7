"""A trained LoRA as the files LoRA loaders read (docs/LORA.md, "Formats"), and read back.

- `peft` (default): diffusers/PEFT names, `transformer.<block list>.{i}.<diffusers module>.lora_A.weight` `[r, in]`
  and `.lora_B.weight` `[out, r]` (the block list as the family's diffusers transformer names it: Wan's `blocks`,
  `transformer_blocks` for HunyuanVideo-1.5, LTX-2 and CogVideoX), with the LoraConfig (`r`, `lora_alpha`,
  `target_modules`) in the file's `lora_adapter_metadata`, keyed `transformer.<field>` as diffusers'
  `save_lora_weights` writes it: what the pipelines' `load_lora_weights` read, alpha included.
- `comfy`: the official module names under `diffusion_model.`, `.lora_down.weight` `[r, in]`, `.lora_up.weight`
  `[out, r]` and `.alpha` (a 0-d tensor), as ComfyUI, musubi-tuner and diffusion-pipe write them; the official
  names come from the family's pairs in `conversion_specs/<family>/lora.toml` (a module without a pair has one
  name in both layouts: LTX-2's attentions, CogVideoX's diffusers-named DiT).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from vidax.train.lora import Lora, LoraConfig, diffusers_name
from vidax.translator import VidaxError
from vidax.translator.lora import PEFT_METADATA, Mapping, load_mapping
from vidax.translator.output import write_file
from vidax.translator.formats.safetensors_io import SafetensorsFile, header_bytes

FORMATS = ("peft", "comfy")
PEFT_PREFIX = "transformer."
COMFY_PREFIX = "diffusion_model."
TRAINING_METADATA = "vidax_training"  # the settings the file was trained with (JSON)


class LoraFileError(VidaxError, ValueError):
    """A LoRA file that does not hold what `read_peft` expects."""


def _official(module: str, mapping: Mapping) -> str:
    """A block module's official name (`blocks.0.attn1.to_q` -> `blocks.0.self_attn.q`; itself without a pair)."""
    names = mapping.other_names(module)
    if len(names) > 1:
        raise LoraFileError(f"{module} has several official names in the LoRA pairs of conversion_specs/*/lora.toml")
    return names[0] if names else module


def lora_tensors(lora: Lora, config: LoraConfig, fmt: str, spec: str = "wan/transformer",
                 group: str = "blocks") -> dict[str, np.ndarray]:
    """Flat `{key: float32 array}` of `lora` in format `fmt` (module docstring)."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    mapping = load_mapping(spec) if fmt == "comfy" else None
    out = {}
    for module, pair in sorted(lora.items()):
        a, b = np.asarray(pair["A"], np.float32), np.asarray(pair["B"], np.float32)  # [L, in, r], [L, r, out]
        for i in range(a.shape[0]):
            name = f"{group}.{i}.{diffusers_name(module)}"
            down, up = np.ascontiguousarray(a[i].T), np.ascontiguousarray(b[i].T)  # [r, in], [out, r]
            if fmt == "peft":
                out[f"{PEFT_PREFIX}{name}.lora_A.weight"], out[f"{PEFT_PREFIX}{name}.lora_B.weight"] = down, up
            else:
                key = COMFY_PREFIX + _official(name, mapping)
                out[f"{key}.lora_down.weight"], out[f"{key}.lora_up.weight"] = down, up
                out[f"{key}.alpha"] = np.asarray(config.lora_alpha, np.float32)
    return out


def peft_metadata(config: LoraConfig, modules: list[str]) -> str:
    """diffusers' `lora_adapter_metadata` for the transformer's LoraConfig. Its `target_modules` are the full names
    of the layers the file holds (`transformer_blocks.0.attn.to_q`): PEFT's matching of a short name (`to_q`) would
    also reach layers outside the blocks (HunyuanVideo-1.5's token refiner), which vidax does not train."""
    fields = {"r": config.rank, "lora_alpha": config.lora_alpha, "target_modules": sorted(modules),
              "lora_dropout": 0.0, "bias": "none"}
    return json.dumps({f"{PEFT_PREFIX}{k}": v for k, v in fields.items()}, indent=2, sort_keys=True)


def save_lora(path: str | Path, lora: Lora, config: LoraConfig, fmt: str = "peft", settings: dict | None = None,
              spec: str = "wan/transformer", group: str = "blocks") -> Path:
    """Write `lora` to `path` (whole or not at all) in format `fmt`; `settings` go to the metadata.

    Args:
      spec: the DiT's conversion spec (its `lora.toml` pairs name the official modules of `comfy`).
      group: the diffusers name of the stacked blocks (`blocks`, `transformer_blocks`).
    """
    tensors = lora_tensors(lora, config, fmt, spec, group)
    metadata = {"format": "pt"}
    if fmt == "peft":
        names = sorted({k[len(PEFT_PREFIX):].rsplit(".lora_", 1)[0] for k in tensors})
        metadata[PEFT_METADATA] = peft_metadata(config, names)
    if settings is not None:
        metadata[TRAINING_METADATA] = json.dumps(settings, sort_keys=True)
    entries = [(k, v.dtype, tuple(v.shape)) for k, v in tensors.items()]
    data = header_bytes(entries, metadata) + b"".join(v.tobytes() for v in tensors.values())
    return write_file(path, data)


PEFT_KEY = re.compile(r"transformer\.(?P<group>[a-z_]+)\.(?P<i>\d+)\.(?P<module>.+)\.lora_(?P<role>[AB])\.weight")


def read_peft(path: str | Path, module_paths: dict[str, str]) -> tuple[Lora, LoraConfig]:
    """A PEFT-format LoRA file (as `save_lora` writes it) back as `Lora` params and its config.

    Args:
      module_paths: diffusers module name -> param path of the block layers (`attn1.to_out.0` -> `attn1/to_out_0`).
    """
    file = SafetensorsFile(path)
    layers: dict[str, dict[str, dict[int, np.ndarray]]] = {}
    for key in file.tensors:
        found = PEFT_KEY.fullmatch(key)
        if not found or found["module"] not in module_paths:
            raise LoraFileError(f"{path}: {key} is not a PEFT LoRA tensor of a block layer")
        role = "A" if found["role"] == "A" else "B"
        layers.setdefault(module_paths[found["module"]], {}).setdefault(role, {})[int(found["i"])] = \
            np.asarray(file.array(key), np.float32).T
    meta = json.loads(file.metadata.get(PEFT_METADATA, "{}"))
    fields = {k.rsplit(".", 1)[-1]: v for k, v in meta.items()}
    lora = {m: {role: np.stack([by_layer[i] for i in sorted(by_layer)]) for role, by_layer in pair.items()}
            for m, pair in layers.items()}
    rank = next(iter(lora.values()))["A"].shape[-1]
    config = LoraConfig(rank=rank, alpha=fields.get("lora_alpha"), targets=tuple(sorted({diffusers_name(m) for m in lora})))
    return lora, config
