"""Deviceless v5e compile of `vidax.train.bench`'s LoRA step (Wan2.1-1.3B, rank 32, 480x832x81, batch 1): XLA's
temporaries and arguments, and its buffer report under DUMP. `PYTHONPATH=<libtpu folder>:<checkout> python
bench/results/aot-v5e-2026-12-06/aot_train_step.py DUMP`."""
import json
import os
import sys
import time

os.environ.setdefault("VIDAX_TPU_ATTENTION", "splash:2048,4096,1024")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("VIDAX_NO_CPU_TUNING", "1")
os.environ["XLA_FLAGS"] = f"--xla_dump_to={sys.argv[1]}"
import jax  # noqa: E402

from vidax.zoo.compute import planner, runtime  # noqa: E402,F401 - runtime raises the scoped VMEM first
from bench.accelerator.chip import memory_720p  # noqa: E402
from vidax.train.bench import step_setup  # noqa: E402
from vidax.train.objective import train_step  # noqa: E402

planner.device_memory_bytes = lambda: (1, int(15.75 * 2**30))
device = memory_720p._aot_device("v5e")
on_chip = jax.sharding.SingleDeviceSharding(device)
with memory_720p._traced_as_tpu(True):
    setup = step_setup("wan2.1-t2v-1.3b", 480, 832, 81, 32)
    shapes = jax.eval_shape(setup.inputs) + (jax.eval_shape(lambda: jax.random.key(4)),)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on_chip), shapes)
    started = time.perf_counter()
    compiled = train_step.lower(setup.model, setup.objective, setup.adamw, *args).compile()
    memory = compiled.memory_analysis()
    print(json.dumps({"compile_s": time.perf_counter() - started, "temp_gib": memory.temp_size_in_bytes / 2**30,
                      "arg_gib": memory.argument_size_in_bytes / 2**30,
                      "pallas_calls": compiled.as_text().count("tpu_custom_call")}))
