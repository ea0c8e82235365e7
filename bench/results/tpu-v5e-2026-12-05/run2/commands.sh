#!/usr/bin/env bash
# second TPU run: vidax DiTs (480p trio, 720p each in its own process), MaxDiffusion peer, TPU tier
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[run2] $1 at $(( $(date +%s) - start )) s"; }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps
timeout 170 python3 -m bench.accelerator --profile real --torch-device none --only dit,compile --cases wan-480p,wan13-480p,hv15-480p --budget 150 --out /tmp/vidax480.md --json $OUT/vidax480.json --cache-dir /tmp/vc > $OUT/vidax480.log 2>&1
el vidax480
timeout 85 python3 -m bench.accelerator.maxdiffusion_side --shape wan14b_480p --layers 1,8 --blocks 512,512,512 --blocks 1024,2048,1024 --out $OUT/md14.json > $OUT/md.log 2>&1
el md14
timeout 70 python3 -m bench.accelerator.maxdiffusion_side --shape wan1.3b_480p --layers 30 --blocks 512,512,512 --blocks 1024,2048,1024 --out $OUT/md13.json >> $OUT/md.log 2>&1
el md13
VIDAX_TEST_TPU=1 timeout 70 python3 -m pytest -m tpu tests/tpu -q -s -p no:cacheprovider 2>&1 > $OUT/tier.log
grep -E "max|passed|failed" $OUT/tier.log | tail -40
el tier
for c in wan-720p hv15-720p; do
  left=$(( 585 - ($(date +%s) - start) )); [ $left -lt 40 ] && break
  timeout $(( left < 75 ? left : 75 )) python3 -m bench.accelerator --profile real --torch-device none --only dit --cases $c --budget 60 --out /tmp/vidax-$c.md --json $OUT/vidax-$c.json --cache-dir /tmp/vc > /tmp/$c.log 2>&1; tail -3 /tmp/$c.log
  el $c
done
grep -h "^| " /tmp/vidax480.md /tmp/vidax-*.md | grep -v diffusers
python3 - <<'PY'
import json, os
for f in ("md14.json", "md13.json"):
    p = os.path.join(os.environ["OUT"], f)
    if os.path.exists(p):
        d = json.load(open(p)); print(f, json.dumps(d)[:1500])
PY
