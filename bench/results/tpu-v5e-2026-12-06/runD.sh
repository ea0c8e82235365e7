#!/usr/bin/env bash
# run D: every registered family's DiT at its native size on the chip (bench.accelerator.every_dit: depth 1 and
# 2, attention alone, memory beside the dry run's, cold and warm compile), then vidax-train's LoRA step on the
# real-size Wan2.1-1.3B (vidax.train.bench). The device tool runs `bash bench/results/tpu-v5e-2026-12-06/runD.sh`.
set -u
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1 VIDAX_NO_TPU_TUNING=1
start=$(date +%s); el() { echo "[runD] $1 at $(( $(date +%s) - start )) s" | tee -a $OUT/run.log; }
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml optax orbax-checkpoint requests > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs train; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
el deps; { uptime; df -h /tmp | tail -1; free -g | head -2; python3 -c 'import jax; print(jax.__version__, jax.devices())'; } 2>&1 | tee -a $OUT/run.log
MODELS=${MODELS:-wan2.1-t2v-1.3b,wan2.1-t2v-14b@832x480x81,hunyuanvideo-1.5,wan2.1-vace-1.3b,cogvideox-5b,ltx-video-13b,ltx-2,cosmos3-nano}
timeout ${ED_BUDGET:-420} python3 -m bench.accelerator.every_dit all --out-dir /tmp/ed --models "$MODELS" --budget $(( ${ED_BUDGET:-420} - 10 )) --per-model ${PER_MODEL:-150} > $OUT/every_dit.log 2>&1
cp /tmp/ed/every_dit.md $OUT/ 2>/dev/null; tar czf $OUT/every_dit.tgz -C /tmp ed; el every_dit
if [ "${TRAIN:-1}" = 1 ]; then
  timeout 100 python3 -m vidax.train.bench wan2.1-t2v-1.3b --height 480 --width 832 --frames 81 --rank 32 --steps 3 --out $OUT/train.json > $OUT/train.log 2>&1
  tail -3 $OUT/train.log; el train
fi
