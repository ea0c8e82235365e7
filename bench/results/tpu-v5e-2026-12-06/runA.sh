#!/usr/bin/env bash
# run A (2026-12-06): the TPU tier with its failures printed, vidax and MaxDiffusion interleaved in one
# process (Wan2.1-14B 480p, 1 and 2 layers, two block settings, op-time traces), the Wan 720p
# program's buffer report, and the attention sweep with the scoped VMEM limit raised.
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[runA] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - start) )); }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml optax orbax-checkpoint requests pytest > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs train; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps
timeout 60 python3 - > $OUT/diag.log 2>&1 <<'PY'
import traceback, jax, jax.numpy as jnp, numpy as np
from vidax.zoo.kernels.pallas_tpu import TpuAttention, tpu_attention
x = np.random.default_rng(0).standard_normal((2, 2304, 3, 128)).astype(np.float32)
for dtype in (jnp.bfloat16, jnp.float32):
    for prec in ("default", "highest"):
        try:
            with jax.default_matmul_precision(prec):
                out = jax.jit(lambda a: tpu_attention(a, a, a, None, 0.088, TpuAttention()))(jnp.asarray(x, dtype))
            print(dtype.__name__, prec, "ok", float(jnp.abs(out.astype(jnp.float32)).mean()))
        except Exception:
            print(dtype.__name__, prec, "FAILED"); traceback.print_exc()
PY
el diag
VIDAX_TEST_TPU=1 timeout 200 python3 -u -m pytest -m tpu tests/tpu -s -p no:cacheprovider --tb=short -rA -x > $OUT/tier.log 2>&1
tail -5 $OUT/tier.log; el tier
timeout $(( $(left) - 150 )) python3 -m bench.accelerator.side_by_side --shape wan14b_480p --layers 1,2 --blocks 1024,2048,1024 --blocks 512,512,512 --rounds 7 --trace --out $OUT/side.json > $OUT/side.log 2>&1
tail -6 $OUT/side.log; el side
XLA_FLAGS="--xla_dump_to=/tmp/dump --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*dit_forward.*" timeout 80 python3 -m bench.accelerator --profile real --torch-device none --only dit --cases wan-720p --budget 60 --out /tmp/w720.md --json /tmp/w720.json --cache-dir /tmp/vc > /tmp/w720.log 2>&1
tail -3 /tmp/w720.log; ls /tmp/dump | head -30
(cd /tmp/dump && tar czf $OUT/dump720.tar.gz $(ls | grep -E "memory-usage|buffer-assignment|after_optimizations.txt" | head -12)) ; el dump
LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=65536 timeout $(( $(left) )) python3 -m vidax.zoo.kernels.tpu_blocks 2,40,32760,32760,128 splash:2048,2048,1024 splash:2048,4096,1024 splash:1024,4096,1024 splash:1024,2048,2048 > $OUT/sweep_vmem64.log 2>&1
tail -8 $OUT/sweep_vmem64.log; el sweep
