#!/usr/bin/env bash
# first TPU run: deps, TPU tier, block sweeps, DiT bench
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1
start=$(date +%s)
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
echo "[run1] deps $(( $(date +%s) - start )) s"; python3 -c "import jax, flax; print(jax.__version__, jax.devices(), flax.__version__)"
VIDAX_TEST_TPU=1 timeout 170 python3 -m pytest -m tpu tests/tpu -q -s -p no:cacheprovider -x 2>&1 | tee $OUT/tpu_tier.log | grep -E "max|error|passed|failed|Error" | tail -60
echo "[run1] tier done $(( $(date +%s) - start )) s"
timeout 130 python3 -m vidax.zoo.kernels.tpu_blocks 2,40,32760,32760,128 2,40,32760,512,128 2,16,51275,51275,128,masked 2>&1 | tee $OUT/sweep.log | grep -v Warning
echo "[run1] sweep done $(( $(date +%s) - start )) s"
left=$(( 560 - ($(date +%s) - start) ))
timeout $left python3 -m bench.accelerator --profile real --torch-device none --only dit --budget $(( left - 30 )) --out $OUT/accelerator.md --cache-dir /tmp/vc > $OUT/bench.log 2>&1
cat $OUT/accelerator.md | head -80
grep -E "Error|error" $OUT/bench.log | tail -20
echo "[run1] end $(( $(date +%s) - start )) s"
