"""How `pytest -n N` hands the suite to its workers: whole test files, the costliest first.

pytest-xdist's default (`--dist load`) deals tests out in small batches, so one file's tests end up on
both workers and each worker builds that file's module fixtures (tiny PyTorch references, converted
folders, compiled programs) again: the same work twice. Here every file is one unit, given whole to
one worker (xdist's `loadscope` scheduler with a file as the scope), and a few folders whose
session fixtures are expensive (a vidax-serve process) are one unit each, so one worker pays for them.

Units go out longest first (the estimates below, from `--durations=0` of a full run; a unit not listed
counts a second per test, up to 19), so the run does not end waiting for one long file that started last. The
table is only an order: a stale one costs balance, never coverage.
"""

from __future__ import annotations

# Folders whose tests share an expensive session fixture: one unit each (one worker pays for it).
FOLDER_UNITS = ("tests/serve/",)

# Seconds a unit took in a full run (setup + call + teardown summed, `--durations=0 -n 2` on 2 cores shared with
# other work, with this scheduling and the shared compile cache): the units of 20 s or more.
ESTIMATES: dict[str, float] = {
    "tests/multihost/test_multihost.py": 192,
    "tests/dryrun/test_dry_run.py": 186,
    "tests/serve/": 156,
    "tests/embedded/test_semantic.py": 92,
    "tests/step_cache/test_easycache_families.py": 92,
    "tests/ltx2/test_generate.py": 81,
    "tests/realscale/test_registry_realscale.py": 77,
    "tests/wan_vae/test_vae.py": 59,
    "tests/ltx2/test_vae.py": 55,
    "tests/step_cache/test_offload.py": 54,
    "tests/hunyuan_video15/test_generate.py": 48,
    "tests/dryrun/test_vae_decodes.py": 48,
    "tests/wan/test_pipeline.py": 45,
    "tests/train/test_run.py": 42,
    "tests/bench/test_accelerator_bench.py": 42,
    "tests/ltx_video/test_vae.py": 41,
    "tests/cosmos3/test_generate.py": 40,
    "tests/cogvideox/test_vae.py": 40,
    "tests/ltx_video/test_condition.py": 36,
    "tests/quantized/test_weights_dtype_families.py": 35,
    "tests/cosmos/test_generate.py": 35,
    "tests/wan_vace/test_pipeline.py": 32,
    "tests/runtime/kernels/test_attention.py": 29,
    "tests/multihost/test_join.py": 28,
    "tests/hunyuan_video/test_vae.py": 28,
    "tests/cogvideox/test_generate.py": 27,
    "tests/multihost/test_vace_uploads.py": 27,
    "tests/step_cache/test_teacache_families.py": 26,
    "tests/multihost/test_serve.py": 25,
    "tests/step_cache/families/test_wan.py": 25,
    "tests/hunyuan_video15/test_vae.py": 25,
    "tests/hunyuan_video/test_generate.py": 24,
    "tests/step_cache/families/test_hunyuan_video15.py": 23,
    "tests/translator/test_translator_only_install.py": 23,
    "tests/ltx2/test_transformer.py": 21,
    # added since that run, from single-file runs: Pallas' interpreter, the three-fold VACE extension, every_dit
    "tests/runtime/kernels/test_heads_major.py": 60,
    "tests/embedded/test_vace_extension.py": 50,
    "tests/bench/test_every_dit.py": 20,
    "tests/wan/test_transformer.py": 21,
}

# A unit not listed: a second per test, below the listed ones.
SECONDS_PER_TEST = 1.0
UNLISTED_AT_MOST = 19.0


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: its folder when listed in `FOLDER_UNITS`, else its file."""
    path = nodeid.split("::", 1)[0]
    for folder in FOLDER_UNITS:
        if path.startswith(folder):
            return folder
    return path


def estimate(unit: str, tests: int) -> float:
    return ESTIMATES.get(unit, min(SECONDS_PER_TEST * tests, UNLISTED_AT_MOST))


def make_scheduler(config, log):
    """xdist's `loadscope` scheduler with `unit_of` as the scope, handing out the longest unit left first."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            longest = max(self.workqueue, key=lambda unit: estimate(unit, len(self.workqueue[unit])))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return ByFile(config, log)
