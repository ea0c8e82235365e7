"""MaxDiffusion's Wan forward compiled for a v5e without a chip: XLA's temporaries and its preallocated temp.

    PYTHONPATH=<libtpu folder>:<checkout> python md_forward_memory.py wan14b_480p 8 2048,4096,1024 [DUMP]

Its WanModel built abstractly (`nnx.eval_shape`) as `bench.accelerator.maxdiffusion_side` builds it (the yml's
settings, fp32 norms and tables, bf16 elsewhere), its forward lowered from abstract arguments on a one-chip mesh of
the v5e topology and compiled; MD_ATTENTION picks its attention kind (default flash, its splash path)."""
import os, sys, json, time, types, glob, re
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
dump = sys.argv[4] if len(sys.argv) > 4 else "/tmp/k62/md_dump"
os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump}"
os.environ["LIBTPU_INIT_ARGS"] = "--xla_tpu_scoped_vmem_limit_kib=65536"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.."))
from bench.accelerator import maxdiffusion_side as md
md.setup_imports()
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from flax import linen as nn
from flax.linen import partitioning as nn_partitioning
from maxdiffusion import max_utils
from maxdiffusion.models.wan.transformers.transformer_wan import WanModel
from bench.accelerator.chip import memory_720p
dev = memory_720p._aot_device("v5e")
shape = md.SHAPES[sys.argv[1]]; layers = int(sys.argv[2]); blocks = tuple(int(x) for x in sys.argv[3].split(","))
attention = os.environ.get("MD_ATTENTION", "flash")
yml = md.load_yml(shape.yml)
sizes, fbs = md.block_sizes_for(yml, attention, blocks)
axes = tuple(yml["mesh_axes"])
mesh = jax.sharding.Mesh(np.array([dev]).reshape((1,) * len(axes)), axes)
weights_dtype = jnp.dtype(yml["weights_dtype"])
config = dict(shape.model_kwargs())
config.update(num_layers=layers, mesh=mesh, dtype=jnp.dtype(yml["activations_dtype"]), weights_dtype=weights_dtype,
              attention=attention, precision=max_utils.get_precision(types.SimpleNamespace(precision=yml["precision"])),
              flash_block_sizes=fbs, remat_policy=yml["remat_policy"], names_which_can_be_saved=yml["names_which_can_be_saved"],
              names_which_can_be_offloaded=yml["names_which_can_be_offloaded"], flash_min_seq_length=yml["flash_min_seq_length"],
              dropout=yml["dropout"], mask_padding_tokens=yml["mask_padding_tokens"], scan_layers=yml["scan_layers"],
              enable_jax_named_scopes=False,
              attention_config={"use_base2_exp": yml["use_base2_exp"], "use_experimental_scheduler": yml["use_experimental_scheduler"],
                                "ulysses_shards": yml.get("ulysses_shards", -1), "ulysses_attention_chunks": yml.get("ulysses_attention_chunks", 1)})
abstract = nnx.eval_shape(lambda: WanModel(**config, rngs=nnx.Rngs(params=0)))
graphdef, params, rest = nnx.split(abstract, nnx.Param, ...)
sh = jax.sharding.SingleDeviceSharding(dev)
def cast(path, x):
    text = ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path).lower()
    dt = jnp.float32 if any(w in text for w in md.FP32_KEYWORDS) else weights_dtype
    return jax.ShapeDtypeStruct(x.shape, dt if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype, sharding=sh)
params = jax.tree_util.tree_map_with_path(cast, params)
rest = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh) if hasattr(x, "shape") else x, rest)
act = jnp.bfloat16; batch = 2
latents = jax.ShapeDtypeStruct((batch, shape.in_channels, *shape.latent), act, sharding=sh)
text = jax.ShapeDtypeStruct((batch, shape.text_tokens, shape.text_dim), act, sharding=sh)
timestep = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=sh)
rules = yml["logical_axis_rules"]
with jax.sharding.use_mesh(mesh) if hasattr(jax.sharding, "use_mesh") else mesh, nn_partitioning.axis_rules(rules):
    rope = jax.eval_shape(lambda p, r: nnx.merge(graphdef, p, r).rope(jnp.zeros((batch, *shape.latent, shape.in_channels))), params, rest)
    rope = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), rope)
    def forward(params, rest, latents, timestep, text, rotary_emb):
        model = nnx.merge(graphdef, params, rest)
        return model(hidden_states=latents, timestep=timestep, encoder_hidden_states=text, encoder_hidden_states_image=None,
                     deterministic=True, rngs=None, rotary_emb=rotary_emb)
    t = time.perf_counter()
    c = jax.jit(forward).lower(params, rest, latents, timestep, text, rope).compile()
m = c.memory_analysis()
pre = [int(re.match(r"allocation \d+: size (\d+)", l).group(1)) for f in glob.glob(f"{dump}/*forward*buffer-assignment.txt") for l in open(f) if l.startswith("allocation") and "preallocated-temp" in l and "color" not in l]
print(json.dumps({"shape": shape.name, "layers": layers, "attention": attention, "blocks": blocks, "compile_s": time.perf_counter() - t,
                  "temp_gib": m.temp_size_in_bytes / 2**30, "arg_gib": m.argument_size_in_bytes / 2**30, "prealloc_gib": [p / 2**30 for p in pre]}))
