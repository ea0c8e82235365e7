"""Every flag README.md and the docs pages name exists (issue 51; the docs since issue 65): a page that names a
renamed or removed flag sends a new user to an error. The vidax commands' flags come from their Typer apps and the families' own `Flag`s; the
few other commands README shows (the setup script, two benches, SLURM's `srun`) are listed with where their
flag is defined. Each example command line of a vidax CLI must also use only that command's flags (for
`vidax-gen MODEL`, the common ones and MODEL's family's own)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from vidax.cli.convert import app as convert_app
from vidax.cli.eval import app as eval_app
from vidax.cli.gen import app as gen_app
from vidax.cli.serve import app as serve_app
from vidax.cli.train import app as train_app
from vidax.zoo.registry import family_class, lookup, registered_models

ROOT = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# flags of commands that are not vidax CLIs: the file whose source defines each (checked to still do)
OTHER = {"--test": "scripts/setup.sh", "--warm": "bench/bench_dry_run.py",
         "--profile": "bench/accelerator/run.py", "--torch-device": "bench/accelerator/run.py"}
EXTERNAL = {"--ntasks": "SLURM's srun", "--durations": "pytest"}


def _options(app) -> set[str]:
    command = typer.main.get_command(app)
    commands = [command, *getattr(command, "commands", {}).values()]  # vidax-train: its subcommands' (lora)
    return {o for c in commands for p in c.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


def _family_flags(family: str) -> set[str]:
    names = set()
    for flag in family_class(family).flags:
        names.add(flag.name)
        if flag.kind is bool:  # a `--x/--no-x` pair
            names.add("--no-" + flag.name[2:])
    return names


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _docs() -> str:
    return "\n".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))


def test_every_flag_readme_names_exists():
    families = {m.family for m in registered_models().values()}
    known = _options(gen_app) | _options(convert_app) | _options(serve_app) | _options(train_app) | _options(eval_app)
    known |= set().union(*(_family_flags(f) for f in families))
    named = set(FLAG.findall(_readme()))
    for flag, path in OTHER.items():
        assert f'"{flag}"' in (ROOT / path).read_text(), f"{flag} is no longer defined in {path}"
    unknown = sorted(named - known - OTHER.keys() - EXTERNAL.keys())
    assert unknown == [], f"README names flags no command has: {unknown}"
    assert {"--transformer", "--transformer-2", "--weights-dtype", "--guidance-2", "--check"} <= named  # the scan sees them


def test_every_example_command_in_the_docs_uses_its_own_flags():
    """The docs pages' vidax command lines, checked as README's are below."""
    lines = _command_lines(_docs())
    assert len(lines) >= 20
    assert _misused_flags(lines) == []


def _command_lines(text: str) -> list[str]:
    """vidax CLI invocations: lines of fenced code blocks and inline `code` spans that run one."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    lines = [line for block in blocks for line in re.sub(r"\\\n\s*", " ", block).splitlines()]  # `\` continues
    prose = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    lines += [span for span in re.findall(r"`([^`\n]*)`", prose)  # code spans, paired in order
              if re.search(r"vidax-(?:gen|convert|serve|train|eval) ", span)]
    lines = [line.split(" #")[0] for line in lines]  # a shell comment after the command
    lines = [part for line in lines for part in re.split(r" (?:&&|\|\||\||;) ", line)]  # one command each
    return [line for line in lines if re.search(r"(?:^|[\s/])vidax-(?:gen|convert|serve|train|eval) ", line)]


def _tokens(line: str) -> list[str]:
    return shlex.split(line.replace('"$(openssl rand -hex 16)"', "TOKEN"), posix=True)


def test_each_example_command_uses_its_own_flags():
    lines = _command_lines(_readme())
    assert len(lines) >= 20  # the Use section's examples, the serving and several-host ones
    assert _misused_flags(lines) == []


def _misused_flags(lines: list[str]) -> list[str]:
    """Each line that passes its command a flag the command (for `vidax-gen MODEL`: the common ones and MODEL's
    family's own) does not have, with those flags."""
    common = {"gen": _options(gen_app), "convert": _options(convert_app), "serve": _options(serve_app),
              "train": _options(train_app), "eval": _options(eval_app)}
    problems = []
    for line in lines:
        words = _tokens(line)
        at = next(i for i, w in enumerate(words) if re.fullmatch(r"(?:.*/)?vidax-(gen|convert|serve|train|eval)", w))
        tool = words[at].rsplit("-", 1)[1]
        model = words[at + 1] if len(words) > at + 1 and not words[at + 1].startswith("-") else None
        allowed = set(common[tool])
        if tool == "gen" and model not in (None, "MODEL"):
            allowed |= _family_flags(lookup(model).family)
        if tool == "gen" and model == "MODEL":  # a placeholder: any family's flags
            allowed |= set().union(*(_family_flags(m.family) for m in registered_models().values()))
        bad = [w.split("=")[0] for w in words[at + 1:] if FLAG.fullmatch(w.split("=")[0]) and w.split("=")[0] not in allowed]
        if bad:
            problems.append(f"{line.strip()}: {bad}")
    return problems
