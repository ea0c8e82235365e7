"""LoRA and full-delta adapters merged into a base checkpoint, in the checkpoint's own key space.

    adapters = [resolve_adapter("style.safetensors=0.8"), resolve_adapter("owner/name")]
    tree = convert("wan/transformer", "/models/Wan2.1-T2V-1.3B-Diffusers", loras=adapters)

An adapter file is read with the translator's own safetensors reader. Each tensor's name says its role
(`lora_A`/`lora_down`, `lora_B`/`lora_up`, `lora_B.bias`, `alpha`, `diff`, `diff_b`, `diff_m`) and its
module; the module is found in the base checkpoint under its own name or its other layout's name (the
pairs of `conversion_specs/<family>/lora.toml`, official and diffusers), kohya's underscored names
included. Reading a base tensor an adapter touches then yields

    base + Σ scale·(B @ A) + Σ strength·diff            in float32, scale = strength × alpha / rank

tensor by tensor from the memory-mapped base, before the spec's ops (transposes, fusions, splits) and its
dtype policy run, unchanged. Accounting is strict: every adapter tensor is applied or ignored by name
(`ignore` patterns), and an adapter for another model or size is one error listing what does not fit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from vidax.translator.formats.checkpoint import Checkpoint
from vidax.translator.errors import TranslatorError, brief
from vidax.translator.formats.safetensors_io import SafetensorsFile
from vidax.translator.spec import SPECS_ROOT

_BF16 = np.dtype(ml_dtypes.bfloat16)
# tensor-name endings and the role each gives its tensor (longest first, so `.diff_b` is not `.diff`)
ROLES = (
    (".lora_A.weight", "down"), (".lora_down.weight", "down"),
    (".lora_B.weight", "up"), (".lora_up.weight", "up"),
    (".lora_B.bias", "bias"), (".alpha", "alpha"),
    (".diff_b", "diff_b"), (".diff_m", "diff_m"), (".diff", "diff"),
)
# adapter kinds that are not a plain low-rank product: refused by name rather than merged wrongly
REFUSED = {".dora_scale": "DoRA", ".lora_mid.weight": "LoCon (mid weight)", ".hada_": "LoHa", ".lokr_": "LoKr"}
PEFT_METADATA = "lora_adapter_metadata"  # diffusers/PEFT save their LoraConfig (lora_alpha, r) here
# the components a LoRA merges into, and the option (`vidax-gen`/`vidax-convert` flag) that names its LoRAs
DENOISER_OPTIONS = {"transformer": "lora", "transformer_2": "lora_2"}
_HUB_FILE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w./-]+\.safetensors)?")


class LoraError(TranslatorError):
    """A LoRA cannot be used: missing, malformed, of an unsupported kind, or for another model."""


# ----------------------------------------------------------------------------- requests and files


@dataclass(frozen=True)
class Adapter:
    """One adapter to merge: where the user named it, the file it resolved to, its strength and content hash."""

    source: str
    path: Path
    strength: float
    sha256: str

    def record(self) -> dict:
        """What a manifest or a video's sidecar keeps of it."""
        return {"source": self.source, "strength": self.strength, "sha256": self.sha256, "file": self.path.name}


def parse_request(text: str) -> tuple[str, float]:
    """`SOURCE[=STRENGTH]` -> (source, strength); strength defaults to 1.0 and may be negative."""
    source, strength = str(text), 1.0
    if "=" in source:
        head, tail = source.rsplit("=", 1)
        try:
            strength = float(tail)
        except ValueError:
            raise LoraError(f"--lora {brief(text)}: the strength after '=' must be a number") from None
        source = head
    if not source:
        raise LoraError(f"--lora {brief(text)}: no LoRA file, folder or Hub repo given")
    if not math.isfinite(strength):
        raise LoraError(f"--lora {brief(text)}: the strength must be a finite number")
    return source, strength


def resolve_adapter(text: str) -> Adapter:
    """An `Adapter` from `SOURCE[=STRENGTH]`: a `.safetensors` file, a folder holding one, or a Hub repo
    (`owner/name` holding one, or `owner/name/path/file.safetensors`), downloaded into the Hub cache."""
    source, strength = parse_request(text)
    path = _local_or_hub(source)
    return Adapter(source, path, strength, file_sha256(path))


def resolve_for(model: str, components, requests: dict) -> dict[str, tuple[Adapter, ...]]:
    """The adapters of each denoiser component of `model` from `requests` (option -> `SOURCE[=STRENGTH]`s:
    `{"lora": [...], "lora_2": [...]}`); a request for a component the model lacks is an error."""
    out = {}
    for component, option in DENOISER_OPTIONS.items():
        texts = tuple(requests.get(option) or ())
        if texts and component not in components:
            raise LoraError(f"--{option.replace('_', '-')}: {model} has no {component} to merge a LoRA into")
        if texts:
            out[component] = tuple(resolve_adapter(text) for text in texts)
    return out


def _local_or_hub(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        return _only_safetensors(path, source)
    if _HUB_FILE.fullmatch(source):
        from vidax.translator.fetch.sources import download

        owner, name, *rest = source.split("/")
        file = "/".join(rest)
        root, _ = download(f"{owner}/{name}", [file] if file else ["*.safetensors"])
        return root / file if file else _only_safetensors(root, source)
    raise LoraError(f"LoRA {brief(source)}: no such file or folder, and not a Hub repo (owner/name[/file.safetensors])")


def _only_safetensors(folder: Path, source: str) -> Path:
    found = sorted(folder.glob("*.safetensors"))
    if len(found) != 1:
        names = ", ".join(p.name for p in found[:6]) or "none"
        raise LoraError(f"LoRA {brief(source)}: a folder must hold exactly one .safetensors file (found {names}); "
                        "name the file")
    return found[0]


_HASHES: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content (cached per path, size and modification time)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


# ----------------------------------------------------------------------------- the family's mapping


@dataclass(frozen=True)
class Mapping:
    """One spec's adapter mapping (`[lora."<spec>"]` of its family's lora.toml)."""

    prefixes: tuple[str, ...]
    kohya_prefixes: tuple[str, ...]
    ignore: tuple[re.Pattern, ...]
    pairs: tuple[tuple[str, str], ...]
    diff_m: str | None = None
    # (official fused module, its diffusers parts): the fused output rows are the parts' rows in order, each
    # part as wide as the fused layer's input, the last one the rest (q, k, v [, mlp])
    fused: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # prefixes some base layouts put before every module (LTX-Video's single files: `model.diffusion_model.`)
    base_prefixes: tuple[str, ...] = ()

    def unprefixed(self, module: str) -> str:
        return next((module[len(p):] for p in self.base_prefixes if module.startswith(p)), module)

    def other_names(self, module: str) -> list[str]:
        """`module`'s name in the other layout(s) (official <-> diffusers), from the pairs."""
        out = []
        for pair in self.pairs:
            for mine, theirs in (pair, pair[::-1]):
                found = _template_regex(mine).fullmatch(module)
                if found:
                    out.append(theirs.format(**found.groupdict()))
        return out


@functools.lru_cache(maxsize=None)
def _template_regex(template: str) -> re.Pattern:
    return re.compile(re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)"))


def load_mapping(spec_name: str) -> Mapping:
    """The mapping of `spec_name` (`wan/transformer`) from `conversion_specs/<family>/lora.toml`."""
    family = spec_name.split("/", 1)[0]
    path = SPECS_ROOT / family / "lora.toml"
    table = tomllib.loads(path.read_text()).get("lora", {}).get(spec_name) if path.is_file() else None
    if table is None:
        raise LoraError(f"LoRAs are not supported for {spec_name} yet (no [lora.\"{spec_name}\"] in "
                        f"conversion_specs/{family}/lora.toml)")
    return Mapping(tuple(table.get("prefixes", ())), tuple(table.get("kohya_prefixes", ())),
                   tuple(re.compile(p) for p in table.get("ignore", ())),
                   tuple(tuple(p) for p in table.get("modules", ())), table.get("diff_m"),
                   tuple((f, tuple(parts)) for f, parts in table.get("fused", ())), tuple(table.get("base_prefixes", ())))


# ----------------------------------------------------------------------------- planning a merge


@dataclass(frozen=True)
class Delta:
    """One addition to a base tensor: `scale·(up @ down)` (low rank) or `scale·full`, read from `file`."""

    file: SafetensorsFile
    scale: float
    full: str | None = None
    up: str | None = None
    down: str | None = None
    src: tuple[int, int] | None = None  # the rows of up (or full) that apply (a fused LoRA on split layers)
    dst: tuple[int, int] | None = None  # the rows of the base they add to (a split LoRA on a fused layer)

    def add_to(self, out: np.ndarray) -> None:
        region = out[slice(*self.dst)] if self.dst else out
        if self.full is not None:
            rows = slice(*self.src) if self.src else slice(None)
            region += self.scale * self.file.array(self.full)[rows].astype(np.float32).reshape(region.shape)
            return
        region += self.product(region.shape)

    def product(self, shape: tuple[int, ...]) -> np.ndarray:
        """`scale·(up @ down)` of a low-rank delta as a fresh float32 array of `shape` (BLAS, the scale on the
        small factor: one full-size array in all)."""
        up = self.file.array(self.up)[slice(*self.src) if self.src else slice(None)].astype(np.float32)
        up = up.reshape(up.shape[0], -1)  # a conv LoRA's up is [out, rank, 1, 1, 1]
        down = self.file.array(self.down).astype(np.float32)
        up *= np.float32(self.scale)
        return (up @ down.reshape(down.shape[0], -1)).reshape(shape)


@dataclass
class Plan:
    """What one adapter does to the base: deltas by base key, and the adapter tensors it ignores."""

    deltas: dict[str, list[Delta]] = field(default_factory=lambda: defaultdict(list))
    ignored: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _split_role(key: str) -> tuple[str | None, str]:
    for suffix, role in ROLES:
        if key.endswith(suffix):
            return role, key[: -len(suffix)]
    return None, key


@dataclass(frozen=True)
class Target:
    """Where an adapter module lands in the base: `module` itself; or, for a fused adapter module on a base
    with its parts split, the base `parts` in row order; or part `part` of `count` of a fused base `module`."""

    module: str
    parts: tuple[str, ...] = ()
    part: int | None = None
    count: int = 0


def _aliases(base_keys: list[str], mapping: Mapping) -> dict[str, Target]:
    """Every name a module may have in an adapter (dotted or kohya-underscored, either layout) -> where it
    lands in the base (base modules: a base key less `.weight`/`.bias`, or a parameter's own key)."""
    modules = list(dict.fromkeys(k.rsplit(".", 1)[0] if k.endswith((".weight", ".bias")) else k for k in base_keys))
    found: dict[str, Target] = {}
    for module in modules:
        bare = mapping.unprefixed(module)
        for name in [module, bare, *mapping.other_names(bare)]:
            found.setdefault(name, Target(module))
    present = set(modules)
    for fused, parts in mapping.fused:
        for module in modules:
            whole = _template_regex(fused).fullmatch(module)
            if whole:  # a fused base layer: each part name lands in its rows
                for j, part in enumerate(parts):
                    found.setdefault(part.format(**whole.groupdict()), Target(module, part=j, count=len(parts)))
            first = _template_regex(parts[0]).fullmatch(module)
            named = [p.format(**first.groupdict()) for p in parts] if first else []
            if named and all(p in present for p in named):  # split base layers: the fused name spans them
                found.setdefault(fused.format(**first.groupdict()), Target(named[0], parts=tuple(named)))
    return {**found, **{name.replace(".", "_"): t for name, t in found.items()}}


def _module_name(key: str, mapping: Mapping) -> str:
    for prefix in mapping.kohya_prefixes + mapping.prefixes:
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def _group(lora: SafetensorsFile, mapping: Mapping, aliases: dict[str, Target], plan: Plan) -> dict[Target, dict[str, str]]:
    """Adapter tensors by target and role; unknown names and refused kinds go to `plan.problems`."""
    groups: dict[Target, dict[str, str]] = defaultdict(dict)
    for key in lora.tensors:
        if any(p.fullmatch(key) for p in mapping.ignore):
            plan.ignored.append(key)
            continue
        refused = next((kind for mark, kind in REFUSED.items() if mark in key), None)
        role, name = _split_role(_module_name(key, mapping))
        if refused or role is None:
            plan.problems.append(f"{key} {list(lora.tensors[key].shape)} ({refused + ' is not supported' if refused else 'not a LoRA or delta tensor name'})")
            continue
        if role == "diff_m" and mapping.diff_m:
            role, name = "diff", f"{name}.{mapping.diff_m}"
        target = aliases.get(name)
        if target is None:
            plan.problems.append(f"{key} {list(lora.tensors[key].shape)} (no module {name} in the base)")
            continue
        if role in groups[target]:  # the same module named twice (both namings, or two prefixes)
            plan.problems.append(f"{key} {list(lora.tensors[key].shape)} (the same tensor as {groups[target][role]})")
            continue
        groups[target][role] = key
    return groups


def _target(module: str, what: str, base: set[str]) -> str | None:
    if f"{module}.{what}" in base:
        return f"{module}.{what}"
    return module if what == "weight" and module in base else None


def plan_merge(lora: SafetensorsFile, strength: float, base: Checkpoint, mapping: Mapping) -> Plan:
    """The deltas one adapter adds to `base` (keys of `base`), strictly accounted."""
    plan = Plan()
    base_keys = set(base.keys())
    peft_alpha = _peft_alpha(lora, plan)
    groups = _group(lora, mapping, _aliases(sorted(base_keys), mapping), plan)
    for target, roles in groups.items():
        for module, src, dst in _placements(target, base, base_keys):
            _plan_module(lora, module, roles, strength, peft_alpha, base, base_keys, plan, src, dst)
    return plan


def _placements(target: Target, base: Checkpoint, base_keys: set[str]) -> list[tuple[str, tuple | None, tuple | None]]:
    """(base module, adapter rows, base rows) for each base layer `target` touches."""
    if target.parts:
        out, start = [], 0
        for part in target.parts:
            rows = base.info(_target(part, "weight", base_keys)).shape[0]
            out.append((part, (start, start + rows), None))
            start += rows
        return out
    if target.part is not None:
        rows, width = base.info(_target(target.module, "weight", base_keys)).shape[:2]
        start = target.part * width
        stop = rows if target.part == target.count - 1 else start + width
        return [(target.module, None, (start, stop))]
    return [(target.module, None, None)]


def _peft_alpha(lora: SafetensorsFile, plan: Plan) -> float | None:
    """`lora_alpha` of a diffusers/PEFT file's saved LoraConfig (None: alpha = rank, scale 1)."""
    raw = lora.metadata.get(PEFT_METADATA)
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except ValueError:
        plan.problems.append(f"metadata {PEFT_METADATA} is not JSON")
        return None
    values = {k.rsplit(".", 1)[-1]: v for k, v in config.items()} if isinstance(config, dict) else {}
    if values.get("use_dora") or values.get("alpha_pattern") or values.get("rank_pattern"):
        plan.problems.append(f"metadata {PEFT_METADATA}: DoRA or per-module alpha/rank patterns are not supported")
    alpha = values.get("lora_alpha")
    return float(alpha) if isinstance(alpha, (int, float)) else None


@dataclass(frozen=True)
class Slot:
    """One base layer an adapter module lands on: its weight and bias keys, the adapter rows that apply
    (`src`) and the base rows they add to (`dst`)."""

    module: str
    weight: str | None
    bias: str | None
    src: tuple[int, int] | None
    dst: tuple[int, int] | None

    def fitted(self, base: Checkpoint, key: str) -> tuple[int, ...]:
        """The shape a delta for base tensor `key` must have here (rows `dst` when given)."""
        shape = tuple(base.info(key).shape)
        return (self.dst[1] - self.dst[0], *shape[1:]) if self.dst else shape

    def rows(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """An adapter tensor's shape with only the rows `src` counted."""
        return (self.src[1] - self.src[0], *shape[1:]) if self.src else shape

    def where(self, key: str | None) -> str:
        return f"{key or self.module}" + (f" rows {self.dst[0]}:{self.dst[1]}" if self.dst else "")


def _plan_module(lora, module, roles, strength, peft_alpha, base, base_keys, plan, src=None, dst=None) -> None:
    """The deltas of one adapter module's tensors (`roles`) on base `module` (adapter rows `src`, base rows `dst`)."""
    slot = Slot(module, _target(module, "weight", base_keys), _target(module, "bias", base_keys), src, dst)
    bias_scale = strength
    if "down" in roles or "up" in roles:
        bias_scale = _plan_low_rank(lora, slot, roles, strength, peft_alpha, base, plan)
        if bias_scale is None:
            return
    elif "alpha" in roles:
        _unfit(plan, lora, roles["alpha"], "an alpha without its LoRA tensors")
    for role, target in (("diff", slot.weight), ("diff_b", slot.bias), ("bias", slot.bias)):
        if role in roles:
            _plan_full(lora, slot, roles, role, target, bias_scale if role == "bias" else strength, base, plan)


def _unfit(plan: Plan, lora: SafetensorsFile, key: str, why: str) -> None:
    plan.problems.append(f"{key} {list(lora.tensors[key].shape)} ({why})")


def _plan_low_rank(lora, slot: Slot, roles, strength, peft_alpha, base, plan) -> float | None:
    """`scale·(B @ A)` on the slot's weight; returns the scale of the pair's `lora_B.bias` (None: unfit)."""
    if not ("down" in roles and "up" in roles):
        for key in roles.values():
            _unfit(plan, lora, key, "a LoRA needs both its down (A) and up (B) tensors")
        return None
    down, up = roles["down"], roles["up"]
    down_shape, up_shape = tuple(lora.tensors[down].shape), tuple(lora.tensors[up].shape)
    rank = down_shape[0]
    alpha = float(lora.array(roles["alpha"]).reshape(-1)[0]) if "alpha" in roles else (peft_alpha or rank)
    fits = slot.weight is not None and up_shape[1:] in ((rank,), (rank,) + (1,) * (len(down_shape) - 2)) \
        and (slot.rows(up_shape)[0], *down_shape[1:]) == slot.fitted(base, slot.weight) \
        and (not slot.src or slot.src[1] <= up_shape[0])
    if not fits:
        shape = list(slot.fitted(base, slot.weight)) if slot.weight else "(no weight)"
        _unfit(plan, lora, down, f"with up {list(up_shape)}: does not fit {slot.where(slot.weight)} {shape}")
        return None
    plan.deltas[slot.weight].append(Delta(lora, strength * alpha / rank, up=up, down=down, src=slot.src, dst=slot.dst))
    return strength * (peft_alpha / rank if peft_alpha and "alpha" not in roles else 1.0)


def _plan_full(lora, slot: Slot, roles, role: str, target: str | None, scale: float, base, plan) -> None:
    """A full delta (`diff`, `diff_b`, `lora_B.bias`) on `target`, the slot's weight or bias."""
    key = roles[role]
    shape = tuple(lora.tensors[key].shape)
    if role == "bias" and "up" not in roles:
        _unfit(plan, lora, key, "lora_B.bias without its LoRA tensors")
        return
    same_size = target is not None and not slot.src and not slot.dst \
        and math.prod(shape) == math.prod(base.info(target).shape)  # e.g. a [1, 6, D] table given as [6, D]
    if target is None or (slot.rows(shape) != slot.fitted(base, target) and not same_size):
        _unfit(plan, lora, key, f"does not fit {slot.where(target)}" + (f" {list(slot.fitted(base, target))}" if target else ""))
        return
    plan.deltas[target].append(Delta(lora, scale, full=key, src=slot.src, dst=slot.dst))


# ----------------------------------------------------------------------------- the merged checkpoint


class ZeroCheckpoint:
    """A checkpoint's key space with every tensor read as float32 zeros: merged with adapters, it reads the
    deltas alone (for a converted folder, whose base tensors are already in the target layout)."""

    def __init__(self, base: Checkpoint):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)

    def array(self, key: str) -> np.ndarray:
        return np.zeros(self.base.info(key).shape, np.float32)

    def release(self, key: str) -> None:
        pass


class MergedCheckpoint:
    """A base checkpoint whose tensors read with every adapter's deltas added (float32 where touched);
    everything else (keys, headers, files) is the base's."""

    def __init__(self, base: Checkpoint, deltas: dict[str, list[Delta]], records: list[dict]):
        self.base, self.deltas, self.records = base, deltas, records
        self.narrow: set[str] = set()  # touched keys every leaf of which is bf16: read back as bf16

    def __getattr__(self, name):  # keys, info, path_of, paths, metadata, nbytes: the base's
        return getattr(self.base, name)

    def narrow_for(self, leaves) -> None:
        """Planned leaves (`executor.LeafPlan`s): a touched tensor that feeds bf16 leaves only is read back
        narrowed to bf16 (the same round-to-nearest-even cast the executor would do), so the executor
        moves its raw bits as for an untouched tensor."""
        dtypes = defaultdict(set)
        for leaf in leaves:
            for piece in leaf.pieces:
                if piece.key in self.deltas:
                    dtypes[piece.key].add(np.dtype(leaf.dtype))
        self.narrow = {key for key, found in dtypes.items() if found == {_BF16}}

    def array(self, key: str) -> np.ndarray:
        deltas = self.deltas.get(key)
        if not deltas:
            return self.base.array(key)
        base, first = self.base.array(key), deltas[0]
        if first.full is not None or first.dst is not None:
            out = _widened(base)
            for delta in deltas:
                delta.add_to(out)
            return _narrowed(out) if key in self.narrow else out
        out = first.product(base.shape)  # the first product is the output: one full-size array in all
        for delta in deltas[1:]:
            delta.add_to(out)
        if key in self.narrow:  # base added, and the sum narrowed, block by block in cache
            return _narrowed(out, base)
        np.add(out, base, out=out)  # base + deltas (float addition commutes: the same sum bit for bit)
        return out


def _narrowed(array: np.ndarray, addend: np.ndarray | None = None, block: int = 1 << 15) -> np.ndarray:
    """(`array` + `addend`) float32 -> bf16 rounded to nearest even, as ml_dtypes casts, by the bits in
    cache-sized blocks (about twice as fast as its generic loop; `array` takes the sum); a block holding a
    NaN is cast by ml_dtypes (the bit trick could round a NaN's payload to infinity)."""
    flat = array.reshape(-1)
    bits, out = flat.view(np.uint32), np.empty(flat.shape, np.uint16)
    work = np.empty(min(block, flat.size), np.uint32)
    extra = None if addend is None else np.ascontiguousarray(addend).reshape(-1)
    for start in range(0, flat.size, block):
        stop = min(start + block, flat.size)
        if extra is not None:
            flat[start:stop] += _widened(extra[start:stop]) if extra.dtype == _BF16 else extra[start:stop]
        if np.isnan(flat[start:stop]).any():
            out[start:stop] = flat[start:stop].astype(_BF16).view(np.uint16)
            continue
        rounding = work[:stop - start]
        np.right_shift(bits[start:stop], 16, out=rounding)
        rounding &= 1  # ties to even: round up by 0x8000 only when the kept part is odd
        rounding += 0x7FFF
        rounding += bits[start:stop]
        rounding >>= 16
        out[start:stop] = rounding
    return out.view(_BF16).reshape(array.shape)


def _widened(array: np.ndarray) -> np.ndarray:
    """A fresh float32 copy; bf16 by its bits (the high half of each float32 word: exact, and several
    times faster than ml_dtypes' generic cast loop)."""
    if array.dtype == _BF16:
        return np.left_shift(array.view(np.uint16), np.uint32(16), dtype=np.uint32).view(np.float32)
    return array.astype(np.float32)


def merge(base: Checkpoint, spec_name: str, adapters: list[Adapter]) -> MergedCheckpoint:
    """`base` with `adapters` merged (planned from headers now, applied when each tensor is read).

    Raises LoraError naming every adapter tensor that fits no module of the base (one line per adapter)."""
    mapping = load_mapping(spec_name)
    deltas: dict[str, list[Delta]] = defaultdict(list)
    records = []
    for adapter in adapters:
        lora = SafetensorsFile(adapter.path)
        plan = plan_merge(lora, adapter.strength, base, mapping)
        if plan.problems:
            shown = "; ".join(plan.problems[:12]) + (f"; and {len(plan.problems) - 12} more" if len(plan.problems) > 12 else "")
            raise LoraError(f"LoRA {adapter.source} does not fit {spec_name} ({len(plan.problems)} tensor(s)): {shown}")
        if not plan.deltas:
            raise LoraError(f"LoRA {adapter.source}: no tensor of it applies to {spec_name}")
        for key, found in plan.deltas.items():
            deltas[key] += found
        records.append({**adapter.record(), "applied": sum(len(d) for d in plan.deltas.values()),
                        "ignored": plan.ignored})
    return MergedCheckpoint(base, dict(deltas), records)


def target_deltas(manifest: dict, adapters: list[Adapter]) -> dict[str, np.ndarray]:
    """The adapters' deltas in a converted component's target layout (float32, by leaf path): the spec's ops
    are linear (transposes, reshapes, splits, fusions, stacks), so they carry a delta as they carry a weight.
    The source checkpoint the manifest records is read for its headers only (a Hub repo's by range requests
    where the Hub answers); only the leaves an adapter touches are computed."""
    from vidax.translator import executor
    from vidax.translator.fetch import sources
    from vidax.translator.spec import load_spec

    spec = load_spec(manifest["spec"])
    recorded = manifest.get("source", {})
    origin = str(recorded.get("origin", "")).removesuffix(" (headers only)")
    where = recorded.get("repo") or origin.removeprefix("hf://")
    if not where:
        raise LoraError(f"a converted {manifest.get('component', 'component')} records no source to plan a LoRA's deltas from")
    opened = sources.resolve(spec, where, revision=recorded.get("revision"), layout=manifest.get("layout"),
                             headers_only=True)
    merged = merge(ZeroCheckpoint(opened.checkpoint), spec.name, adapters)
    leaves = executor.plan(spec, opened.layout, merged, None, np.dtype(np.float32))
    touched = [leaf for leaf in leaves if any(piece.key in merged.deltas for piece in leaf.pieces)]
    return {leaf.path: executor.materialize(leaf, merged) for leaf in touched}


def merge_converted(tree, manifest: dict, adapters: list[Adapter]) -> dict[str, np.ndarray]:
    """A converted component's tree with `adapters` merged: each touched leaf in float32, base + delta, cast
    back to the leaf's dtype (a bf16 folder merges its bf16 weights: bake with `vidax-convert --lora` to merge
    before the cast)."""
    deltas = target_deltas(manifest, adapters)
    out = dict(tree)
    for path, delta in deltas.items():
        out[path] = (np.asarray(out[path], np.float32) + delta).astype(out[path].dtype)
    return out
