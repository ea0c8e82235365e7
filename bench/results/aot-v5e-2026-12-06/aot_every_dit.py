"""Deviceless v5e compile of every_dit's depth-1 program for one model: XLA temporaries + buffer report."""
import os, sys, time, json
os.environ.setdefault("VIDAX_TPU_ATTENTION", "splash:2048,4096,1024")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("VIDAX_NO_CPU_TUNING", "1")
dump = sys.argv[3] if len(sys.argv) > 3 else "/tmp/aotw/dump"
os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump} --xla_dump_hlo_as_text"
import jax
from vidax.zoo.compute import runtime  # noqa
from bench.accelerator.chip import every_dit, memory_720p
from vidax.zoo.compute import planner
planner.device_memory_bytes = lambda: (1, int(15.75 * 2**30))
from vidax.zoo.registry import make_pipeline
spec = sys.argv[1]; depth = int(sys.argv[2])
model, size = every_dit._split(spec)
dev = memory_720p._aot_device("v5e")
sh = jax.sharding.SingleDeviceSharding(dev)
with memory_720p._traced_as_tpu(True):
    family = make_pipeline(model, every_dit._options(model, size))
    s = family.resolve_settings(every_dit._options(model, size))
    fn, args, dit = every_dit._program(family, s, depth)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), args)
    t = time.perf_counter()
    try:
        c = jax.jit(fn).lower(*args).compile()
        m = c.memory_analysis()
        print(json.dumps({"spec": spec, "depth": depth, "compile_s": time.perf_counter() - t,
                          "temp_gib": m.temp_size_in_bytes / 2**30, "arg_gib": m.argument_size_in_bytes / 2**30,
                          "pallas": c.as_text().count("tpu_custom_call")}))
    except Exception as e:
        print("ERROR", str(e)[:600])
