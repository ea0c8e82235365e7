"""Benches reach families only through the contract: no file under bench/ imports (or names by its
module path) a family folder of zoo/; the pieces they measure come from `bench/families.py`, which
finds each family's package through the registry. `python -m bench <family>` selects exactly that
family's benches, and `--help` names every family."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a top-level folder, not an installed package

from bench import families as bench_families
from bench.__main__ import bench_names, family_names, select

FAMILY_FOLDERS = sorted(p.parent.name for p in (ROOT / "zoo").glob("*/family.py"))


def _family_references(path: Path) -> list[str]:
    """Imports of `vidax.zoo.<family folder>` and strings naming such a module, in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "vidax.zoo" else [])
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            modules = [node.value.partition(":")[0]]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {m}" for m in modules
                  if any(m == f"vidax.zoo.{f}" or m.startswith(f"vidax.zoo.{f}.") for f in FAMILY_FOLDERS)]
    return found


def test_no_bench_imports_a_family_folder():
    assert FAMILY_FOLDERS  # the check has folders to look for
    offenders = [hit for path in sorted((ROOT / "bench").rglob("*.py")) for hit in _family_references(path)]
    assert offenders == []


def test_the_check_sees_an_import_and_a_module_path(tmp_path):
    sample = tmp_path / "bench_x.py"
    sample.write_text('from vidax.zoo.wan.transformer import WanTransformer\nfrom vidax.zoo import ltx2\n'
                      'X = "vidax.zoo.cosmos.config:CosmosTransformerConfig"\nfrom vidax.zoo.parts.wan_vae import WanVAE\n')
    assert sorted(hit.rpartition(": ")[2] for hit in _family_references(sample)) == [
        "vidax.zoo.cosmos.config", "vidax.zoo.ltx2", "vidax.zoo.wan.transformer"]


def test_the_table_covers_every_family_and_each_piece_exists():
    assert set(bench_families.PIECES) == set(family_names()) == set(FAMILY_FOLDERS)
    for family, table in bench_families.PIECES.items():
        for name in table:
            assert bench_families.piece(family, name) is not None, (family, name)
    with pytest.raises(KeyError, match="no piece 'Nope' of wan"):
        bench_families.piece("wan", "Nope")


@pytest.mark.parametrize("family", FAMILY_FOLDERS)
def test_a_family_name_selects_exactly_its_own_benches(family):
    picked = select(bench_names(), [family], family_names())
    assert f"bench_{family}_dit" in picked
    assert all(name.startswith(f"bench_{family}_") for name in picked), picked


def test_help_names_every_family_with_its_benches():
    done = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.partition("families (")[2].splitlines()[1:]}
    assert set(rows) == set(FAMILY_FOLDERS)
    assert all(f"bench_{family}_dit" in benches for family, benches in rows.items())


def test_every_piece_a_bench_asks_for_is_in_the_table():
    asked = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("piece", "pieces"):
                if node.args and all(isinstance(a, ast.Constant) for a in node.args):  # not the table's own code
                    family, *names = [a.value for a in node.args]
                    asked += [(path.name, family, name) for name in names]
    assert len(asked) > 20  # the DiT and plan benches ask (the scan sees them)
    assert [a for a in asked if a[2] not in bench_families.PIECES.get(a[1], {})] == []
