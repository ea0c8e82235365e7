"""An API request -> the `GenerateOptions` vidax-gen would build, checked the way vidax-gen checks it.

One code path with the CLI: the family's own fields go through `vidax.cli.gen.family_options` (the
parser behind vidax-gen's family flags), and the whole request through `vidax.zoo.generator.generation.prepare`
(the validation `generate` runs before any device work), so a bad request is refused with the line
vidax-gen would print, before it is queued.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vidax.translator import VidaxError

# The common request fields and their JSON types (vidax-gen's common flags a request may set).
COMMON_FIELDS: dict[str, tuple[type, ...]] = {
    "prompt": (str,), "negative_prompt": (str,), "height": (int,), "width": (int,), "frames": (int,),
    "steps": (int,), "guidance": (int, float), "shift": (int, float), "sampler": (str,), "fps": (int, float),
    "seed": (int,),
}
# A request's strengths for the server's --lora LoRAs: a number (all of them) or one number per LoRA, in
# order; 0 switches a LoRA off. Absent: the strengths the server was started with.
LORA_FIELD = "lora_strength"
FORMATS = {"mp4": ".mp4", "npy": ".npy"}  # "format": the MP4 (H.264), or the float32 frames (vidax-gen --out x.npy)
MAX_PROMPT_CHARS = 4000
IMAGE, FILE = "image", "file"  # upload kinds: one image (`image`, `last_image`), or a family flag's file(s)


class RequestError(VidaxError, ValueError):
    """A request the server refuses before queueing it (HTTP 400), with the one line vidax-gen would print."""


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """What the server fixes for every job (vidax-gen's model-level flags)."""

    model: str
    weights: str | None = None
    dtype: str | None = None
    tp: int | None = None
    sp: int | None = None
    dp: int | None = None
    offload_chunk: int | None = None
    release_stages: bool = True
    compile_cache: bool | None = None
    lora: tuple[str, ...] = ()  # `--lora SOURCE[=STRENGTH]`s; a request may change their strengths

    def cli_flags(self, lora: tuple[str, ...] | None = None) -> list[str]:
        """vidax-gen's flags for these settings (`lora`: the LoRAs at a request's strengths)."""
        flags = []
        for text in self.lora if lora is None else lora:
            flags += ["--lora", text]
        for name in ("weights", "dtype", "tp", "sp", "dp", "offload_chunk"):
            value = getattr(self, name)
            if value is not None:
                flags += [f"--{name.replace('_', '-')}", str(value)]
        if not self.release_stages:
            flags.append("--keep-stages")
        if self.compile_cache is False:
            flags.append("--no-compile-cache")
        return flags


@functools.cache  # the registry is read once per server: the status of every job names the flags
def family_flags(model: str):
    from vidax.zoo.registry import family_class, lookup

    return family_class(lookup(model).family).flags


@functools.cache
def upload_roles(server: ServerOptions) -> dict[str, dict]:
    """Request fields that take files (multipart uploads; never a path in JSON) -> how they are read:
    `{"flag": vidax-gen's flag, "kind": "image" or "file", "multiple": bool}`.

    Every image role of the model (`image`, `last_image`) takes one image. Every family flag that takes a
    path is an upload of kind "file": one file (a video, a `.npy`, an image, what the flag reads); a repeatable
    one (`multiple`) takes several, each one value in the order sent; any other takes several images as the
    frames of a folder, in the order of their file names (vidax-gen reads a frame folder sorted by name).
    """
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.generator.options import GenerateOptions

    pipeline = make_pipeline(server.model, GenerateOptions(model=server.model, prompt="", weights=server.weights))
    roles = {role: {"flag": f"--{role.replace('_', '-')}", "kind": IMAGE, "multiple": False}
             for role in pipeline.image_roles()}
    for flag in family_flags(server.model):
        if flag.kind is Path and not flag.image:
            roles[flag.field] = {"flag": flag.name, "kind": FILE, "multiple": flag.multiple}
    return roles


def split_request(model: str, fields: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """The request's common fields (type-checked) and its family fields as vidax-gen arguments."""
    flags = {flag.field: flag for flag in family_flags(model)}
    common, args = {}, []
    for name, value in fields.items():
        if value is None or name in ("model", "format", LORA_FIELD):
            continue
        if name in COMMON_FIELDS:
            common[name] = _checked(name, value, COMMON_FIELDS[name])
        elif name in flags and flags[name].kind is not Path:
            args += _as_args(flags[name], value)
        elif name in flags or name in ("image", "latents", "out", "weights"):
            raise RequestError(f"{name} is a file the server does not read from a path: "
                               + ("send it as a multipart upload" if name in flags or name == "image" else
                                  "requests name no path on the server"))
        else:
            have = ", ".join(sorted(set(COMMON_FIELDS) | {f for f, flag in flags.items() if flag.kind is not Path}))
            raise RequestError(f"unknown field {name!r} for {model} (fields: {have})")
    if not isinstance(common.get("prompt"), str):
        raise RequestError("give a prompt")
    if len(common["prompt"]) > MAX_PROMPT_CHARS:
        raise RequestError(f"prompt is longer than {MAX_PROMPT_CHARS} characters")
    return common, args


def job_loras(server: ServerOptions, strengths: Any) -> tuple[str, ...]:
    """The server's LoRAs (`SOURCE=STRENGTH`) at the strengths a request's `lora_strength` gives."""
    from vidax.translator.lora import parse_request

    if strengths is None:
        return server.lora
    if not server.lora:
        raise RequestError(f"{LORA_FIELD}: the server was started without --lora")
    values = strengths if isinstance(strengths, list) else [strengths] * len(server.lora)
    if len(values) != len(server.lora) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise RequestError(f"{LORA_FIELD} must be a number or a list of {len(server.lora)} numbers (one per --lora, "
                           f"in order), got {strengths!r}")
    return tuple(f"{parse_request(text)[0]}={float(value)}" for text, value in zip(server.lora, values))


def output_suffix(fields: Mapping[str, Any]) -> str:
    """The output file's suffix the request's `format` asks for (default: MP4)."""
    kind = fields.get("format") or "mp4"
    if kind not in FORMATS:
        raise RequestError(f"format must be one of {', '.join(FORMATS)}, got {kind!r}")
    return FORMATS[kind]


def _checked(name: str, value: Any, kinds: tuple[type, ...]) -> Any:
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = {str: "a string", int: "an integer", float: "a number"}[kinds[-1]]
        raise RequestError(f"{name} must be {wanted}, got {value!r}")
    return value


def _as_args(flag, value: Any) -> list[str]:
    """A JSON value as the vidax-gen arguments of a family flag (bools as --x / --no-x)."""
    if flag.kind is bool:
        if not isinstance(value, bool):
            raise RequestError(f"{flag.field} must be true or false, got {value!r}")
        return [flag.name if value else f"--no-{flag.name[2:]}"]
    values = value if flag.multiple and isinstance(value, list) else [value]
    args = []
    for one in values:
        if isinstance(one, (dict, list, bool)) or one is None:
            raise RequestError(f"{flag.field} must be {flag.kind.__name__}, got {one!r}")
        args += [flag.name, str(one)]
    return args


def build_options(server: ServerOptions, fields: Mapping[str, Any], uploads: Mapping[str, Path | tuple[Path, ...]],
                  out: Path):
    """The job's `GenerateOptions`: the server's settings, the request's, uploads by role (a repeatable flag's:
    a tuple of files; a set of frames: their folder), `out`."""
    from vidax.cli.gen import family_options
    from vidax.zoo.generator.options import GenerateOptions

    common, args = split_request(server.model, fields)
    extra, images = family_options(server.model, args)
    flags = {flag.field: flag for flag in family_flags(server.model)}
    for role, path in uploads.items():
        flag = flags.get(role)
        if flag is not None and flag.kind is Path and not flag.image:  # a family flag's file(s)
            extra[role] = tuple(path) if flag.multiple else path
        elif role != "image":
            images[role] = path
    settings = {**dataclasses.asdict(server), "lora": job_loras(server, fields.get(LORA_FIELD))}
    return GenerateOptions(**settings, **common, image=uploads.get("image"), images=images, extra=extra, out=out)


def check(options) -> dict:
    """`vidax.zoo.generator.generation.prepare`, the validation `generate` itself runs before any device work: the
    resolved settings."""
    from vidax.zoo.generator.generation import prepare
    from vidax.zoo.registry import make_pipeline

    request = prepare(make_pipeline(options.model, options), options)
    return {**{k: file_names(v) for k, v in dataclasses.asdict(request.settings).items()}, "seed": options.seed}


def file_names(value: Any) -> Any:
    """A setting with its files (a path, or several) by their names: an upload by its role's file name."""
    if isinstance(value, Path):
        return value.name
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, Path) for v in value):
        return [v.name for v in value]
    return value


def command_line(server: ServerOptions, request: Mapping[str, Any], uploads: Mapping[str, str | list[str]]) -> str:
    """The vidax-gen command that makes the same video (uploads by their file names in the job's upload folder:
    a set of frames by its folder's)."""
    flags = {flag.field: flag for flag in family_flags(server.model)}
    words = ["vidax-gen", server.model]
    for name, value in request.items():
        if value is None or name in ("model", "format", LORA_FIELD):
            continue
        if name in flags:
            words += _as_args(flags[name], value)
        else:
            words += [f"--{name.replace('_', '-')}", str(value)]
    for role, names in uploads.items():  # a repeatable flag's files: the flag once per file
        flag = flags[role].name if role in flags else f"--{role.replace('_', '-')}"
        for name in names if isinstance(names, list) else [names]:
            words += [flag, name]
    words += server.cli_flags(job_loras(server, request.get(LORA_FIELD))) + ["--out", f"video{output_suffix(request)}"]
    return shlex.join(words)
