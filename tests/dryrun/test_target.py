"""`vidax-gen MODEL --dry-run --target CHIP[:TOPOLOGY]`: every stage compiled on XLA's TPU compiler without a chip
(libtpu from the folder `VIDAX_LIBTPU` names: scripts/setup.sh --test installs it in .venv/libtpu), and `--plan
--target` from the chips' figures alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vidax.zoo.compute.target import CHIPS, LIBTPU_ENV, parse_target
from vidax.zoo.errors import PipelineError

ROOT = Path(__file__).resolve().parents[2]
LIBTPU = ROOT / ".venv" / "libtpu"
GEN = [sys.executable, "-c", "from vidax.cli import gen_main; gen_main()"]


def _gen(*args: str, libtpu: Path = LIBTPU) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update({"VIDAX_NO_COMPILE_CACHE": "1", "COLUMNS": "200", LIBTPU_ENV: str(libtpu)})
    return subprocess.run([*GEN, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("text, chips, topology", [("v5e", 1, "1x1"), ("v5e:2x2", 4, "2x2"), ("V5P:2x2x1", 4, "2x2x1"),
                                                   ("v6e:2x4", 8, "2x4"), ("v4:2x2x1", 4, "2x2x1")])
def test_targets_parse(text, chips, topology):
    target = parse_target(text)
    assert (target.chips, target.topology) == (chips, topology) and target.chip is CHIPS[text.split(":")[0].lower()]


@pytest.mark.parametrize("text, said", [("v7", "unknown chip 'v7'"), ("v5e:2", "2 or 3 of them"),
                                        ("v5e:2xa", "2 or 3 of them"), ("v5e:0x2", "2 or 3 of them")])
def test_a_wrong_target_is_one_line(text, said):
    with pytest.raises(PipelineError, match=said):
        parse_target(text)


def test_plan_for_a_target_takes_its_chips_and_memory():
    planned = _gen("wan-tiny", "--plan", "--target", "v5e:2x2")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "GiB per device on 4 x 15.8 GiB" in planned.stdout and "sp=4" in planned.stdout
    both = _gen("wan-tiny", "--plan", "--target", "v5e:2x2", "--devices", "2")
    assert both.returncode == 1 and both.stderr.strip().splitlines() == [
        "error: --target names its devices (v5e:2x2 is 4 chips); give --target or --devices, not both"]


def test_dry_run_compiles_every_stage_for_four_v5e_chips_without_one():
    """The TPU's forms, not the CPU's: the text encoder as one program (a CPU run loops over one compiled layer),
    the attention and RoPE as a TPU traces them; XLA's TPU figures per device of the four."""
    result = _gen("wan-tiny", "--dry-run", "--target", "v5e:2x2", "--sp", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    head = result.stdout.splitlines()[0]
    assert "dp=1 tp=1 sp=4 resident" in head and "4 x 15.75 GiB (TPU v5 lite, v5e:2x2, XLA's TPU compiler" in head
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    names = [row.split("│")[1].strip() for row in rows]
    assert names[:2] == ["text encoder", "dit step"] and len(names) == 14, names
    assert result.stdout.rstrip().endswith("fits")
    assert "WARNING" not in result.stderr and "Error" not in result.stderr, result.stderr  # libtpu kept quiet


def test_dry_run_for_a_target_without_libtpu_says_how_to_get_it(tmp_path):
    result = _gen("wan-tiny", "--dry-run", "--target", "v5e", libtpu=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: --target v5e:1x1: compiling for a TPU without one needs libtpu: pip install --target DIR libtpu, then "
        f"{LIBTPU_ENV}=DIR (or pip install libtpu)"]
