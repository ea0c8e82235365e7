"""Deviceless v5e compile of vidax.train's LoRA step (Wan2.1-1.3B, rank 32, 480x832x81, batch 1)."""
import os, sys, time, json, math
os.environ.setdefault("VIDAX_TPU_ATTENTION", "splash:2048,4096,1024")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("VIDAX_NO_CPU_TUNING", "1")
os.environ["XLA_FLAGS"] = f"--xla_dump_to={sys.argv[1]}"
import jax, jax.numpy as jnp
from vidax.zoo.compute import runtime  # noqa
from bench.accelerator.chip import memory_720p
from vidax.zoo.compute import planner
planner.device_memory_bytes = lambda: (1, int(15.75 * 2**30))
from vidax.train.lora import LoraConfig, init_lora
from vidax.train.objective import AdamW, Objective, train_step
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.registry import make_pipeline
from vidax.zoo.wan.transformer import WanTransformer
dev = memory_720p._aot_device("v5e"); sh = jax.sharding.SingleDeviceSharding(dev)
with memory_720p._traced_as_tpu(True):
    family = make_pipeline("wan2.1-t2v-1.3b", GenerateOptions(model="wan2.1-t2v-1.3b", prompt=""))
    cfg, vae = family.model.transformer, family.model.vae
    model = WanTransformer(cfg, dtype=jnp.bfloat16)
    latent = (1, cfg.in_channels, 21, 60, 104)
    base = jax.eval_shape(lambda k: jax.tree.map(lambda x: x.astype(jnp.bfloat16), model.init_params(k)), jax.random.key(0))
    config = LoraConfig(rank=32)
    lora = jax.eval_shape(lambda k, b: init_lora(k, b, config), jax.random.key(1), base["blocks"])
    adamw, objective = AdamW(1e-4), Objective(scale=config.scale, carry_dtype="bfloat16")
    opt = jax.eval_shape(adamw.init, lora)
    A = lambda t: jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), t)
    args = (A(base), A(lora), A(opt), jax.ShapeDtypeStruct(latent, jnp.float32, sharding=sh),
            jax.ShapeDtypeStruct((1, 512, cfg.text_dim), jnp.float32, sharding=sh),
            A(jax.eval_shape(lambda: jax.random.key(4))))
    t = time.perf_counter()
    try:
        c = train_step.lower(model, objective, adamw, *args).compile()
        m = c.memory_analysis()
        print(json.dumps({"compile_s": time.perf_counter() - t, "temp_gib": m.temp_size_in_bytes / 2**30,
                          "arg_gib": m.argument_size_in_bytes / 2**30, "pallas": c.as_text().count("tpu_custom_call")}))
    except Exception as e:
        print("ERROR", str(e)[:800])
