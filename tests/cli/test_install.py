"""`scripts/setup.sh` is quiet: building vidax (the wheel, and the editable wheel `pip install -e` makes)
prints no setuptools warnings. The spec folders and the server's page are data folders; left out of
`packages` they drew ~400 lines of "Package would be ignored" on a fresh machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("setup.py", "pyproject.toml", "README.md", "translator", "zoo", "cli", "serve", "train", "eval", "conversion_specs")

BUILD = """
import sys
import setuptools.build_meta as backend
backend.build_wheel(sys.argv[1])
backend.build_editable(sys.argv[1])
"""


def test_building_the_package_prints_no_warnings(tmp_path):
    source = tmp_path / "src"
    for name in SOURCES:  # a copy: the build writes build/ and *.egg-info beside the sources
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / name).is_file():
            source.mkdir(exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / "wheels")], cwd=source, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "Warning" in line]
    assert warnings == [], "\n".join(warnings[:20])
    wheel = next((tmp_path / "wheels").glob("vidax-*-py3-none-any.whl"))
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True).stdout
    assert "vidax/conversion_specs/wan/transformer.toml" in names  # the data still ships
