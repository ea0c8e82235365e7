"""Plumbing every family's parity tests share: perturb a tiny reference, save it as diffusers does (or
serve the folder as a Hub repo from an offline cache), and compute the tree it must convert to from its
state dict alone (CONTRIBUTING.md's naming), never from the spec under test.

Imported as `tests.oracle` (the spec fixtures too, which the translator loads by file path).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch


def perturb(model: torch.nn.Module, seed: int | torch.Generator | None = 0, std: float = 0.02) -> torch.nn.Module:
    """Add N(0, std) to every float parameter so zero-initialised biases, tables and unit scales matter.

    Draws from a generator seeded with `seed`, from `seed` itself when it is a generator (the caller
    draws on from it), or from torch's global generator when `seed` is None (the caller seeded it
    before building the model)."""
    gen = seed if seed is None or isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point():
                param.add_(torch.randn(param.shape, generator=gen) * std)
    return model.eval()


def build_perturbed(cls, config: dict, seed: int | None, init_seed: int | None = None) -> torch.nn.Module:
    """`cls(**config)` initialised after `torch.manual_seed(init_seed)` (default `seed`), then perturbed from
    `seed` (None: from the global generator, on from where the initialisation left it)."""
    torch.manual_seed(seed if init_seed is None else init_seed)
    return perturb(cls(**config), seed)


def state_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in module.state_dict().items()}


@contextlib.contextmanager
def recorded(module: torch.nn.Module) -> Iterator[dict]:
    """What `module` receives (`args`, `kwargs`) and returns (`out`) while the block runs (its last call)."""
    seen = {}
    pre = module.register_forward_pre_hook(lambda m, args, kwargs: seen.update(args=args, kwargs=kwargs),
                                           with_kwargs=True)
    post = module.register_forward_hook(lambda m, args, out: seen.__setitem__("out", out))
    try:
        yield seen
    finally:
        pre.remove(), post.remove()


def save_state(state: dict, folder: Path, config: dict | None = None,
               filename: str = "diffusion_pytorch_model.safetensors") -> Path:
    """A `save_pretrained`-style folder: the state dict as `filename` (+ config.json)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in state.items()}, folder / filename)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, default=list))
    return folder


def save_diffusers(module, folder: Path, state: dict | None = None) -> Path:
    """`module` saved as `save_pretrained` does (its config.json), with `state` in place of its own if given."""
    return save_state(state_of(module) if state is None else state, folder, dict(module.config))


def rename(key: str, table) -> str:
    """`key` renamed by the one `(pattern, replacement)` of `table` whose pattern full-matches it."""
    hits = [re.sub(pattern, repl, key) for pattern, repl in table if re.fullmatch(pattern, key)]
    if len(hits) != 1:
        raise KeyError(f"{key}: {len(hits)} names")
    return hits[0]


def tree_path(module: str) -> str:
    """Torch module path -> tree path: `ffn.net.0.proj` -> `ffn/net_0/proj`."""
    return re.sub(r"\.(\d+)", r"_\1", module).replace(".", "/")


def torch_leaf(key: str, value: np.ndarray, tables: tuple[str, ...] = ()) -> tuple[str, np.ndarray]:
    """(tree path, array) of one state-dict entry: Linear weight -> `kernel` transposed, Conv weight
    `[O, I, *k]` -> `kernel` `[*k, I, O]`, 1-D weight -> `scale`, a table's weight (module named in
    `tables`) -> `embedding`, `bias` kept, bare parameters keep their name."""
    module, _, param = key.rpartition(".")
    if param == "weight" and module.rpartition(".")[2] in tables:
        return f"{tree_path(module)}/embedding", value
    if param == "weight" and value.ndim == 2:
        return f"{tree_path(module)}/kernel", value.T
    if param == "weight" and value.ndim > 2:
        return f"{tree_path(module)}/kernel", np.moveaxis(value, (0, 1), (-1, -2))
    if param == "weight":
        return f"{tree_path(module)}/scale", value
    if param == "bias":
        return f"{tree_path(module)}/bias", value
    return tree_path(key), value


def split_leaves(module: str, value: np.ndarray, parts: tuple[str, ...]) -> list[tuple[str, np.ndarray]]:
    """A Linear cut along its output features into equal `parts`, each its own module `{module}_{part}`."""
    name = "kernel" if value.ndim == 2 else "bias"
    chunks = np.split(value.T if value.ndim == 2 else value, len(parts), axis=-1)
    return [(f"{tree_path(module)}_{part}/{name}", chunk) for part, chunk in zip(parts, chunks)]


def stack_layers(leaves: Iterable[tuple[str, np.ndarray]], stacks: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """A flat tree of `(path, array)` leaves with each repeated block's leaves stacked on a leading layer axis.

    `stacks` maps the tree path of a ModuleList (a regex, full match) to the name its layers stack
    under (a template of that match): with `{"transformer_blocks": "blocks"}` every
    `transformer_blocks_{i}/attn/kernel` becomes one `blocks/attn/kernel` of shape `[L, ...]`."""
    flat, layers = {}, {}
    for path, value in leaves:
        for source, target in (stacks or {}).items():
            m = re.fullmatch(rf"(?P<list>{source})_(?P<layer>\d+)/(?P<rest>.+)", path)
            if m:
                name = f"{re.fullmatch(source, m['list']).expand(target)}/{m['rest']}"
                layers.setdefault(name, {})[int(m["layer"])] = value
                break
        else:
            flat[path] = np.asarray(value, order="C")
    for path, by_layer in layers.items():
        flat[path] = np.stack([by_layer[i] for i in range(len(by_layer))])
    return flat


def to_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().numpy()


def expected_tree(state: dict, stacks: dict[str, str] | None = None, prefix: str = "",
                  tables: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The fp32 host tree a state dict must convert to (`torch_leaf` per entry, `stacks` as in
    `stack_layers`), every path under `prefix`."""
    tree = stack_layers((torch_leaf(key, to_np(value), tables) for key, value in state.items()), stacks)
    return {prefix + path: value for path, value in tree.items()}


def unflatten(tree: dict) -> dict:
    """A flat `{"a/b": array}` tree as the nested params a linen module takes."""
    from flax.traverse_util import unflatten_dict

    return unflatten_dict({k: np.asarray(v) for k, v in dict(tree).items()}, sep="/")


def repo_files(folder: Path, prefix: str = "") -> dict[str, Path]:
    """`{path in the repo: file}` of every file under `folder`, the paths under `prefix`."""
    return {f"{prefix}{p.relative_to(folder)}": p for p in sorted(folder.rglob("*")) if p.is_file()}


def hub_cached(monkeypatch, cache: Path, repo: str, folder: Path, commit: str = "0" * 40) -> Path:
    """`folder` as the Hub repo `repo` in the Hugging Face cache `cache`, which the test then reads
    (offline: conftest sets HF_HUB_OFFLINE). Returns the snapshot folder."""
    import huggingface_hub.constants
    from vidax.translator.testing import make_hub_cache

    snapshot = make_hub_cache(cache, repo, repo_files(folder), commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return snapshot


_RULE = "[[layouts.diffusers.rules]]"


def spec_without_rule(spec: str, anchor: str, folder: Path) -> Path:
    """The shipped `spec` with the `[[layouts.diffusers.rules]]` entry containing `anchor` cut out, written
    to `folder` (for tests that a spec missing one rule fails loudly)."""
    from vidax.translator import load_spec

    text = load_spec(spec).path.read_text()
    start = text.rindex(_RULE, 0, text.index(anchor) + len(anchor))
    end = text.index(_RULE, start + len(_RULE))
    broken = folder / "broken.toml"
    broken.write_text(text[:start] + text[end:])
    return broken
