"""The house (docs/ARCHITECTURE.md, "Floors and rooms"): every import points down a floor, no import
cycles, at most 15 files at the top of any folder of the repository, and the rooms the page names are
the packages there are.

Imports are read from the source (every `import` and `from ... import`, those inside functions too),
not by importing: a lazy import that closes a circle is a circle all the same.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
# folder -> the dotted name it is installed as (setup.py; bench runs from the checkout)
TREES = {"translator": "vidax.translator", "zoo": "vidax.zoo", "cli": "vidax.cli", "serve": "vidax.serve",
         "train": "vidax.train", "eval": "vidax.eval", "bench": "bench"}
MAX_FILES = 15
SKIPPED = {"__pycache__"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the checked trees: dotted name -> file (a package is its `__init__.py`)."""
    found = {}
    for folder, name in TREES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if SKIPPED & set(parts):
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules of `known` that module `name` imports (the longest known prefix of each imported name);
    `from pkg import submodule` is an import of the submodule, `from pkg import value` one of the package."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str | None) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [owner(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            subs = [f"{module}.{a.name}" for a in node.names]
            targets = [s for s in subs if s in known]
            if len(targets) < len(subs):
                targets.append(owner(module))
        else:
            continue
        found |= {t for t in targets if t and t != name}
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def repository_files(root: Path = ROOT) -> list[Path]:
    """The repository's files: those git tracks, or in a tree that is no checkout every file outside
    hidden folders and caches (what `git ls-files` would list of a clean tree)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        listed = b""
    if listed:
        return [root / name for name in listed.decode().split("\0") if name]
    return [p for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"
            and not any(part.startswith(".") or part in SKIPPED for part in p.relative_to(root).parts[:-1])]


def crowded_folders(root: Path = ROOT) -> list[str]:
    """Folders of the repository (the code trees, tests, training, docs, ...) with more than MAX_FILES
    files at their top."""
    counts: dict[Path, int] = {}
    for path in repository_files(root):
        counts[path.parent] = counts.get(path.parent, 0) + 1
    return [f"{folder.relative_to(root)}/ ({n} files)" for folder, n in sorted(counts.items()) if n > MAX_FILES]


FAMILIES = "zoo/<family>/"  # the row that holds every family folder (a folder of zoo/ with a family.py)


def family_folders(root: Path = ROOT) -> set[str]:
    return {f"zoo/{p.parent.name}/" for p in (root / "zoo").glob("*/family.py")}


def floors(text: str, root: Path = ROOT) -> dict[str, int]:
    """The floor table of ARCHITECTURE.md's "Floors and rooms": room path -> its floor. A row is
    `| floor | rooms |...`, each room a backticked path (`zoo/compute/`, `zoo/errors.py`); `zoo/<family>/`
    stands for every family folder, so that a new family is a room without naming it here."""
    section = text.partition("## Floors and rooms")[2].partition("\n## ")[0]
    rooms = {}
    for line in section.splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line)
        if row:
            for room in re.findall(r"`([\w/.<>]+)`", row.group(2)):
                for one in sorted(family_folders(root)) if room == FAMILIES else [room]:
                    assert one not in rooms, f"{one} is on two floors"
                    rooms[one] = int(row.group(1))
    return rooms


def room_of(path: Path, rooms: dict[str, int], root: Path = ROOT) -> str | None:
    """The room a module's file lives in: the longest room path that holds it."""
    rel = path.relative_to(root).as_posix()
    holding = [r for r in rooms if rel == r or (r.endswith("/") and rel.startswith(r))]
    return max(holding, key=len, default=None)


def upward_imports(root: Path = ROOT, text: str | None = None) -> list[str]:
    """Imports that do not point down a floor: into a room on the same floor or above (a room's own
    modules import each other freely, cycles aside)."""
    rooms = floors(ARCHITECTURE.read_text() if text is None else text, root)
    known = modules(root)
    edges = graph(root)
    wrong = []
    for name, targets in sorted(edges.items()):
        mine = room_of(known[name], rooms, root)
        for target in sorted(targets):
            theirs = room_of(known[target], rooms, root)
            if mine is None or theirs is None:
                continue  # test_every_module_is_in_a_room says so
            if mine != theirs and rooms[theirs] >= rooms[mine]:
                wrong.append(f"{name} ({mine}, floor {rooms[mine]}) imports {target} ({theirs}, floor {rooms[theirs]})")
    return wrong


def packages(root: Path = ROOT) -> set[str]:
    """Folders of the checked trees that hold Python modules besides their `__init__.py` (data-only
    packages such as wan-tiny's weights are not rooms), family folders and what they hold aside: the
    `zoo/<family>/` row names them."""
    families = tuple(family_folders(root))
    found = set()
    for folder in TREES:
        for init in (root / folder).rglob("__init__.py"):
            path = init.parent.relative_to(root).as_posix() + "/"
            if path.startswith(families):
                continue
            if any(p.suffix == ".py" and p.name != "__init__.py" for p in init.parent.iterdir()):
                found.add(path)
    return found


def named_paths(text: str) -> set[str]:
    """Every backticked path into a checked tree that ARCHITECTURE.md names (`zoo/compute/`, `zoo/api.py`)."""
    trees = "|".join(TREES)
    return set(re.findall(rf"`((?:{trees})/[\w/]*(?:\.py)?)`", text))


# --- the house as it is ------------------------------------------------------------------------------------


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_no_folder_holds_more_than_15_files():
    assert crowded_folders() == []


def test_every_import_points_down_a_floor():
    assert floors(ARCHITECTURE.read_text())  # the table is there to check against
    assert upward_imports() == []


def test_every_module_is_in_a_room():
    rooms = floors(ARCHITECTURE.read_text())
    assert FAMILIES in ARCHITECTURE.read_text() and set(family_folders()) <= set(rooms)
    assert [name for name, path in modules().items() if room_of(path, rooms) is None] == []


def test_architecture_names_every_package_and_only_packages_there_are():
    text = ARCHITECTURE.read_text()
    named = named_paths(text)
    assert sorted(packages() - named) == []  # a package the page does not describe
    assert sorted(p for p in named if not (ROOT / p).exists()) == []  # a path the page names that is gone
    assert sorted(r for r in floors(text) if not (ROOT / r).exists()) == []
    assert packages() >= {"zoo/compute/", "zoo/compute/kernels/", "translator/formats/"}  # the check sees rooms


# --- the checks can fail ----------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, source in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    for folder in TREES:
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def test_a_lazy_import_that_closes_a_circle_is_found(tmp_path):
    root = _tree(tmp_path, {
        "zoo/__init__.py": "", "zoo/a.py": "from vidax.zoo.b import x\n",
        "zoo/b.py": "def x():\n    from vidax.zoo import a\n",
        "zoo/c.py": "from vidax.zoo.a import y\n"})
    assert cycles(graph(root)) == [["vidax.zoo.a", "vidax.zoo.b"]]


def test_a_relative_import_and_a_package_reexport_are_edges(tmp_path):
    root = _tree(tmp_path, {
        "translator/__init__.py": "from vidax.translator.api import convert\n",
        "translator/api.py": "from . import spec\n", "translator/spec.py": "from vidax.translator import convert\n"})
    edges = graph(root)
    assert edges["vidax.translator.api"] == {"vidax.translator.spec"}
    assert cycles(edges) == [["vidax.translator", "vidax.translator.api", "vidax.translator.spec"]]


def test_an_upward_import_and_a_same_floor_import_are_found(tmp_path):
    root = _tree(tmp_path, {
        "zoo/__init__.py": "", "zoo/low/__init__.py": "", "zoo/low/a.py": "from vidax.zoo.high import b\n",
        "zoo/high/__init__.py": "", "zoo/high/b.py": "", "zoo/side/__init__.py": "",
        "zoo/side/c.py": "import vidax.zoo.high.b\n"})
    page = ("## Floors and rooms\n\n| floor | rooms |\n|---|---|\n| 1 | `zoo/low/` |\n"
            "| 2 | `zoo/high/` `zoo/side/` |\n| 3 | `zoo/__init__.py` |\n")
    assert upward_imports(root, page) == [
        "vidax.zoo.low.a (zoo/low/, floor 1) imports vidax.zoo.high.b (zoo/high/, floor 2)",
        "vidax.zoo.side.c (zoo/side/, floor 2) imports vidax.zoo.high.b (zoo/high/, floor 2)"]


def test_the_family_row_holds_every_family_folder_and_one_family_may_not_import_another(tmp_path):
    root = _tree(tmp_path, {
        "zoo/__init__.py": "", "zoo/low/__init__.py": "", "zoo/low/a.py": "",
        "zoo/wan/__init__.py": "", "zoo/wan/family.py": "from vidax.zoo.low import a\n",
        "zoo/ltx2/__init__.py": "", "zoo/ltx2/family.py": "from vidax.zoo.wan.family import FAMILY\n",
        "zoo/ltx2/decoding/__init__.py": "", "zoo/ltx2/decoding/vae.py": ""})
    page = "## Floors and rooms\n\n| floor | rooms |\n|---|---|\n| 1 | `zoo/low/` |\n| 2 | `zoo/<family>/` |\n"
    assert floors(page, root) == {"zoo/low/": 1, "zoo/ltx2/": 2, "zoo/wan/": 2}
    assert upward_imports(root, page) == [
        "vidax.zoo.ltx2.family (zoo/ltx2/, floor 2) imports vidax.zoo.wan.family (zoo/wan/, floor 2)"]
    assert packages(root) == {"zoo/low/"}  # a family's own sub-packages are the family row's


def test_a_crowded_folder_is_found(tmp_path):
    root = _tree(tmp_path, {**{f"bench/sub/m{i}.py": "" for i in range(MAX_FILES + 1)},
                            **{f"tests/data/f{i}.json": "" for i in range(MAX_FILES + 1)},
                            **{f"tests/ok/f{i}.json": "" for i in range(MAX_FILES)}})
    assert crowded_folders(root) == [f"bench/sub/ ({MAX_FILES + 1} files)", f"tests/data/ ({MAX_FILES + 1} files)"]


def test_a_package_the_page_leaves_out_is_found(tmp_path):
    root = _tree(tmp_path, {"zoo/__init__.py": "", "zoo/new_room/__init__.py": "", "zoo/new_room/m.py": "",
                            "zoo/wan/tiny_model/__init__.py": ""})
    assert packages(root) == {"zoo/new_room/"}
    assert named_paths("`zoo/compute/` holds `zoo/compute/mesh.py`; `zoo/<family>/` is a pattern") == {
        "zoo/compute/", "zoo/compute/mesh.py"}


@pytest.mark.parametrize("room, expected", [("zoo/parts/dit.py", "zoo/parts/"), ("zoo/api.py", "zoo/api.py"),
                                            ("zoo/__init__.py", "zoo/__init__.py"), ("zoo/wan/family.py", "zoo/wan/")])
def test_a_module_is_in_the_narrowest_room_that_holds_it(room, expected):
    rooms = {"zoo/": 1, "zoo/parts/": 2, "zoo/api.py": 3, "zoo/__init__.py": 4, "zoo/wan/": 5}
    assert room_of(ROOT / room, rooms) == expected
