#!/usr/bin/env bash
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[run3] $1 at $(( $(date +%s) - start )) s"; }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps
VIDAX_TEST_TPU=1 timeout 130 python3 -u -m pytest -m tpu tests/tpu -s -p no:cacheprovider --tb=short -rA > $OUT/tier.log 2>&1
grep -E "max|error|passed|failed|Error|^FAILED|^PASSED" $OUT/tier.log | cut -c1-250 | tail -40
el tier
timeout 75 python3 -m bench.accelerator --profile real --torch-device none --only dit --cases wan13-480p --budget 60 --out /tmp/v13.md --json $OUT/vidax13.json --cache-dir /tmp/vc > $OUT/vidax13.log 2>&1
grep "^| Wan" /tmp/v13.md
el vidax13
left=$(( 300 - ($(date +%s) - start) ))
[ $left -gt 40 ] && timeout $left python3 -m bench.accelerator.maxdiffusion_side --shape wan1.3b_480p --layers 30 --blocks 512,512,512 --blocks 1024,2048,1024 --out $OUT/md13.json > $OUT/md13.log 2>&1
python3 -c "
import json,os
p=os.environ['OUT']+'/md13.json'
if os.path.exists(p):
    d=json.load(open(p)); print(json.dumps(d)[:1200])
"
grep -E '"ms_per_forward"' $OUT/md13.log | cut -c1-400 | head
el md13
