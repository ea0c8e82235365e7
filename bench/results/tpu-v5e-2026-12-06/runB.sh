#!/usr/bin/env bash
# run B (2026-12-06): after the RoPE and scoped-VMEM commits. vidax (its own blocks) and MaxDiffusion
# (its shipped 512-blocks, and 2048/4096/1024) interleaved in one process at Wan2.1-14B 480p, 1 and 2
# layers, with op traces; then vidax's Wan2.1-1.3B step and HunyuanVideo-1.5 block at 480p and the
# Wan2.1-14B / HunyuanVideo-1.5 720p blocks, each in a process of its own.
set -u
export PYTHONUNBUFFERED=1 VIDAX_CACHE_DIR=/tmp/vc TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[runB] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - start) )); }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml optax orbax-checkpoint requests pytest > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=$PYTHONPATH:/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs train; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps; uptime | tee -a $OUT/run.log
timeout 230 python3 -m bench.accelerator.side_by_side --shape wan14b_480p --layers 1,2 --blocks 2048,4096,1024 --blocks 512,512,512 --vidax-always-own --rounds 5 --trace --out $OUT/side.json > $OUT/side.log 2>&1
tail -6 $OUT/side.log; el side
timeout 120 python3 -m bench.accelerator --profile real --torch-device none --only dit --cases wan13-480p,hv15-480p --budget 100 --out /tmp/v480.md --json $OUT/vidax480.json --cache-dir /tmp/vc > /tmp/v480.log 2>&1
grep "^| " /tmp/v480.md | grep -v diffusers | head -8; el 480p
for c in wan-720p hv15-720p; do
  [ "$(left)" -lt 40 ] && { el "skipped $c"; continue; }
  timeout $(( $(left) > 90 ? 90 : $(left) )) python3 -m bench.accelerator --profile real --torch-device none --only dit --cases $c --budget 70 --out /tmp/v-$c.md --json $OUT/vidax-$c.json --cache-dir /tmp/vc > /tmp/v-$c.log 2>&1
  grep "^| " /tmp/v-$c.md | grep -v diffusers | head -4; el $c
done
uptime | tee -a $OUT/run.log
