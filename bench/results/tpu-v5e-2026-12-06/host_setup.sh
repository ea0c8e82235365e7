# Sourced by the run scripts prepared after run D (runE.sh, runH.sh): the project's runtime packages from the chip
# host's own index into /tmp/site (once per machine), `vidax.*` from this checkout through /tmp/shim. /tmp/site is
# appended to PYTHONPATH: the host's jax must stay first (a jax in /tmp/site has no TPU backend).
if [ ! -d /tmp/site/flax ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 safetensors ftfy av gguf einops pyyaml optax orbax-checkpoint requests pytest > /tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site
mkdir -p /tmp/shim/vidax; for d in translator zoo cli conversion_specs train; do ln -sfn $PWD/$d /tmp/shim/vidax/$d; done
export PYTHONPATH=$PYTHONPATH:/tmp/shim:$PWD
