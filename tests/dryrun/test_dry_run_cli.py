"""`vidax-gen MODEL --dry-run`: a fresh process (no device count in XLA_FLAGS) compiles on the fake host devices it
asks for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.backend_level import xla_flags

GEN = [sys.executable, "-c", "from vidax.cli import gen_main; gen_main()"]


def _gen(*args: str) -> subprocess.CompletedProcess:
    # the command alone asks for its devices (added to the flags it finds); the test processes' backend level
    # kept, as every process a test starts compiles (tests/backend_level.py): LLVM's passes were most of its time
    env = {**os.environ, "XLA_FLAGS": xla_flags(None), "VIDAX_NO_COMPILE_CACHE": "1", "COLUMNS": "200"}
    return subprocess.run([*GEN, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def fits():
    return _gen("wan-tiny", "--dry-run", "--devices", "4", "--device-memory", "1", "--sp", "4")


def test_dry_run_prints_every_stage_on_four_fake_devices(fits):
    assert fits.returncode == 0, fits.stdout + fits.stderr
    for stage in ("text encoder", "dit step"):
        assert stage in fits.stdout
    for kind in ("first frame", "next frames"):  # the Wan VAE's decode: six compiled units per chunk kind
        for unit in range(1, 7):
            assert f"vae decode ({kind}, unit {unit})" in fits.stdout
    assert "dp=1 tp=1 sp=4 resident" in fits.stdout and "on 4 x 1.00 GiB" in fits.stdout
    assert fits.stdout.rstrip().endswith("fits")


def test_dry_run_exits_one_when_a_stage_does_not_fit():
    """In this process (its 8 fake devices hold the 2 asked for; the fresh process's own devices are the test
    above): a second process compiled every stage again at XLA's default level, ~10 s, for the same exit path."""
    from typer.testing import CliRunner

    from vidax.cli.gen import app

    result = CliRunner().invoke(app, ["wan-tiny", "--dry-run", "--devices", "2", "--device-memory", "0.0001",
                                      "--sp", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "dit step" in result.stdout and "dit step" in result.stderr.split("does not fit: ")[1]


def test_the_planner_figure_of_a_stage_stands_beside_its_largest_unit_alone(fits):
    """The planner predicts a stage's peak: a stage run as several units (the VAE's twelve) shows the figure and its
    ratio to XLA's on the largest unit only, and says so, so that no smaller unit reads as a misprediction."""
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in fits.stdout.splitlines() if line.startswith("│ vae decode")}
    assert len(rows) == 12
    shown = [unit for unit, cells in rows.items() if cells[4] != "-"]
    totals = {unit: float(cells[3].replace(",", "")) for unit, cells in rows.items()}
    assert len(shown) == 1 and totals[shown[0]] == max(totals.values()) and rows[shown[0]][5] != "-"
    assert "beside the largest of them" in fits.stdout
