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

# Seconds a unit took in a full run (setup + call + teardown summed, `--durations=0 -n 3` on 2 cores, 2026-12-07,
# with this scheduling and the shared compile cache): the units of 20 s or more.
ESTIMATES: dict[str, float] = {
    "tests/multihost/test_multihost.py": 227,
    "tests/serve/": 224,
    "tests/embedded/test_semantic.py": 123,
    "tests/step_cache/test_easycache_families.py": 112,
    "tests/dryrun/test_dry_run.py": 103,
    "tests/ltx2/test_generate.py": 83,
    "tests/step_cache/test_offload.py": 75,
    "tests/train/test_run.py": 69,
    "tests/train/families/test_learns.py": 68,
    "tests/hunyuan_video15/test_generate.py": 67,
    "tests/wan_vae/test_vae.py": 61,
    "tests/bench/test_accelerator_bench.py": 59,
    "tests/realscale/test_registry_realscale.py": 57,
    "tests/wan/test_pipeline.py": 55,
    "tests/embedded/test_vace_extension.py": 53,
    "tests/ltx2/test_vae.py": 49,
    "tests/runtime/kernels/test_attention.py": 48,
    "tests/cosmos3/test_generate.py": 47,
    "tests/dryrun/test_vae_decodes.py": 45,
    "tests/ltx_video/test_vae.py": 45,
    "tests/dryrun/test_target.py": 44,
    "tests/cosmos/test_generate.py": 43,
    "tests/quantized/test_weights_dtype_families.py": 43,
    "tests/wan_vace/test_pipeline.py": 42,
    "tests/step_cache/families/test_wan.py": 42,
    "tests/cogvideox/test_generate.py": 42,
    "tests/step_cache/test_teacache_families.py": 39,
    "tests/cogvideox/test_vae.py": 38,
    "tests/ltx_video/test_condition.py": 37,
    "tests/train/families/test_image_conditioned.py": 35,
    "tests/multihost/test_join.py": 34,
    "tests/dryrun/test_dry_run_cli.py": 33,
    "tests/multihost/test_serve.py": 32,
    "tests/step_cache/families/test_hunyuan_video15.py": 32,
    "tests/multihost/test_vace_uploads.py": 31,
    "tests/translator/test_translator_only_install.py": 31,
    "tests/hunyuan_video15/test_vae.py": 30,
    "tests/runtime/kernels/test_heads_major.py": 29,
    "tests/train/test_bench.py": 29,
    "tests/translator/test_translator_mutations.py": 27,
    "tests/hunyuan_video/test_vae.py": 26,
    "tests/hunyuan_video/test_generate.py": 25,
    "tests/hunyuan_video15/test_convert_cli.py": 25,
    "tests/runtime/kernels/test_exp2.py": 25,
    "tests/step_cache/families/test_ltx2.py": 24,
    "tests/cli/test_interrupt.py": 24,
    "tests/ltx2/test_transformer.py": 24,
    "tests/hunyuan_video/test_transformer.py": 23,
    "tests/cogvideox/test_generate_10.py": 22,
    "tests/hunyuan_video/test_generate_i2v.py": 22,
    "tests/runtime/mesh/test_parallel.py": 21,
    "tests/wan/test_transformer.py": 20,
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
