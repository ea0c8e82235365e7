"""The public face (`vidax.zoo`): the generation docs/ARCHITECTURE.md shows ("A generation from a program")
runs as written, on the built-in wan-tiny (no download), and every name the face promises is there."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### A generation from a program"


def snippet(text: str) -> str:
    """The first python block of the section."""
    section = text.partition(SECTION)[2]
    assert section, f"docs/ARCHITECTURE.md has no {SECTION!r}"
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "the section shows no python block"
    return block.group(1)


def test_the_documented_generation_runs_as_written(tmp_path, monkeypatch):
    code = snippet((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert len(code.strip().splitlines()) <= 15
    assert "vidax.zoo." not in code  # through the face, not the rooms behind it
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "ARCHITECTURE.md", "exec"), namespace)
    assert namespace["result"].frames.shape == (17, 64, 64, 3)
    assert (tmp_path / "circle.mp4").stat().st_size > 0 and (tmp_path / "circle.json").is_file()


def test_every_public_name_is_the_defining_module_s():
    import vidax.zoo

    assert vidax.zoo.__all__ == sorted(vidax.zoo.PUBLIC)
    for name, module in vidax.zoo.PUBLIC.items():
        assert getattr(vidax.zoo, name) is getattr(importlib.import_module(module), name), name
    tree = ast.parse((ROOT / "zoo" / "__init__.py").read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    imported = {(a.name, n.module) for n in block.body for a in n.names}
    assert imported == {(name, module) for name, module in vidax.zoo.PUBLIC.items()}  # what readers and the
    # house's import check see


def test_the_face_loads_nothing_until_asked():
    code = "import sys, vidax.zoo; print(sorted(m for m in ('jax', 'flax', 'vidax.zoo.api') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
