# Sourced by the TPU scripts (`source scripts/tpu_setup.sh OUT`): vidax runnable from this checkout on a TPU host
# where jax with libtpu is installed and vidax is not. Defines $python, `step MESSAGE` (a timestamped line in
# OUT/run.log) and `left` (seconds of $BUDGET, default 560, still to go).
# Runtime packages the host lacks are installed into /tmp/vidax-site and appended to PYTHONPATH (appended: the
# host's jax stays first), from $VIDAX_BENCH_PIP_ARGS (default: the host's own index at /opt/pypi/simple when it
# exists); `vidax.*` imports from a folder of links to this checkout's packages.
setup_out=${1:?source scripts/tpu_setup.sh OUT}
python=${PYTHON:-python3}
budget=${BUDGET:-560}
setup_start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - setup_start) )); }
step() { echo "[$(basename "$0") $(( $(date +%s) - setup_start )) s] $1" | tee -a "$setup_out/run.log"; }
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=1

site=/tmp/vidax-site
# a caller needing more names them: VIDAX_SETUP_EXTRA (pip names) and VIDAX_SETUP_CHECK (their import names)
if ! "$python" -c "import flax, typer, rich, psutil, av, tokenizers, ftfy, einops, yaml${VIDAX_SETUP_CHECK:+, $VIDAX_SETUP_CHECK}" 2>/dev/null; then
  pip_args=${VIDAX_BENCH_PIP_ARGS:-}
  [ -z "$pip_args" ] && [ -d /opt/pypi/simple ] && pip_args="--index-url file:///opt/pypi/simple"
  # shellcheck disable=SC2086  # pip_args is a list of pip options
  PIP_CONFIG_FILE=${PIP_CONFIG_FILE:-/dev/null} "$python" -m pip install -q --isolated --only-binary=:all: \
    --target "$site" $pip_args flax typer rich huggingface-hub psutil pillow tokenizers sentencepiece jinja2 \
    safetensors ftfy av gguf einops pyyaml optax requests ${VIDAX_SETUP_EXTRA:-} > /tmp/vidax-pip.log 2>&1 \
    || tail -5 /tmp/vidax-pip.log
fi
[ -d "$site" ] && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$site
shim=$(mktemp -d /tmp/vidax-shim.XXXX)
mkdir -p "$shim/vidax"
for d in translator zoo cli serve train eval conversion_specs; do [ -d "$d" ] && ln -s "$PWD/$d" "$shim/vidax/$d"; done
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$shim:$PWD
{ date -u; uptime; "$python" -c 'import jax; print("jax", jax.__version__)' 2>&1 | tail -1
  git log -1 --format=%h 2>/dev/null; } >> "$setup_out/run.log"
step "set up"
