"""`python -m bench <family>` selects each family's own benches, and the accelerator benchmark's family
table names only what exists (no bench is run: selection and names only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `bench` is a top-level folder, not an installed package

from bench.__main__ import bench_names, select
from bench.accelerator import families

FAMILIES = ("wan", "hunyuan_video", "hunyuan_video15", "cogvideox", "cosmos", "cosmos3", "ltx_video", "ltx2")


def test_every_family_with_a_generator_is_listed_here():
    from vidax.zoo.registry import registered_models

    assert {m.family for m in registered_models().values()} == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_name_selects_its_own_dit_bench(family):
    picked = select(bench_names(), [family])
    assert f"bench_{family}_dit" in picked
    assert all(family in name for name in picked)


def test_select_takes_every_bench_without_patterns_and_none_for_a_stranger():
    names = bench_names()
    assert select(names, []) == names and select(names, ["no-such-bench"]) == []


def test_list_prints_the_selection_without_running_it():
    done = subprocess.run([sys.executable, "-m", "bench", "--list", "hunyuan_video15"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["bench_hunyuan_video15_dit"]
    done = subprocess.run([sys.executable, "-m", "bench", "--list", "no-such-bench"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "no benchmark matches" in done.stderr


@pytest.mark.parametrize("name", sorted(families.FAMILIES))
def test_each_accelerator_row_names_a_family_and_classes_that_exist(name):
    import diffusers
    from vidax.zoo.registry import family_class

    row = families.FAMILIES[name]
    assert family_class(row.zoo).name == row.zoo == name
    for path in (row.dit, row.dit_config, row.vae, row.vae_config):
        assert callable(families.resolve(path)), path
    for cls in (row.diffusers_dit, row.diffusers_vae):
        assert hasattr(diffusers, cls), cls


def test_a_case_may_name_a_registered_model():
    assert families.row("wan2.1-t2v-14b") is families.FAMILIES["wan"]
    assert families.row("hunyuanvideo-1.5-480p-t2v") is families.FAMILIES["hunyuan_video15"]
    with pytest.raises(KeyError, match="no row"):
        families.row("cogvideox-2b")
