#!/usr/bin/env bash
# Export the part of MaxDiffusion (github.com/AI-Hypercomputer/maxdiffusion) that its Wan 2.1
# transformer needs into .bench/maxdiffusion/, for bench/accelerator/maxdiffusion_side.py.
#
# MaxDiffusion is a peer in the TPU benchmark, never a dependency of vidax: the export is
# git-ignored (/.bench/) and is never committed. It is taken from a local git mirror, so nothing
# is downloaded here.
#
#   bash scripts/prepare_maxdiffusion.sh [--deps] /path/to/maxdiffusion.git [commit]
#   MAXDIFFUSION_GIT=/path/to/maxdiffusion.git bash scripts/prepare_maxdiffusion.sh [--deps]
#
# --deps also pip-installs, into .bench/pydeps (git-ignored; bench/accelerator/maxdiffusion_side.py
# appends it to sys.path), whichever of the model's needed packages this machine's Python
# ($PYTHON, else .venv/bin/python) lacks, for a CPU run here (`--toy`). On the TPU machine the
# packages come from its own index instead (see the runner's docstring, PIP_LINE).
#
# The mirror may be bare or a work tree's .git. The commit defaults to the mirror's HEAD and is
# recorded in .bench/maxdiffusion/COMMIT. Only the model's import closure is exported (about
# 1 MB), since the folder travels to the TPU machine with the working tree (64 MiB limit):
# the package __init__ files, its top-level helpers (common types, config mixin, logging,
# max_utils, tpu_utils), utils/, checkpointing/__init__ + checkpointing_utils (imported by
# max_utils), models/*.py, models/wan/, kernels/ (without tests) and the two Wan 2.1 configs.
set -euo pipefail

DEPS=0
if [[ "${1:-}" == "--deps" ]]; then DEPS=1; shift; fi
GIT_DIR_ARG="${1:-${MAXDIFFUSION_GIT:-}}"
REV="${2:-HEAD}"
if [[ -z "$GIT_DIR_ARG" ]]; then
  echo "usage: $0 <maxdiffusion git dir> [commit]   (or set MAXDIFFUSION_GIT)" >&2
  exit 2
fi
if ! git --git-dir="$GIT_DIR_ARG" rev-parse --verify -q "$REV^{commit}" >/dev/null; then
  # a work tree checkout: use its .git
  if [[ -d "$GIT_DIR_ARG/.git" ]]; then
    GIT_DIR_ARG="$GIT_DIR_ARG/.git"
  fi
fi
COMMIT="$(git --git-dir="$GIT_DIR_ARG" rev-parse --verify "$REV^{commit}")"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.bench/maxdiffusion"
PKG=src/maxdiffusion

# Top-level modules of the package that the transformer's import chain reaches.
TOP_FILES=(
  __init__.py common_types.py configuration_utils.py max_logging.py max_utils.py tpu_utils.py
  dependency_versions_check.py dependency_versions_table.py
)
PATHS=(LICENSE)
for f in "${TOP_FILES[@]}"; do PATHS+=("$PKG/$f"); done
PATHS+=(
  "$PKG/utils"
  "$PKG/checkpointing/__init__.py"
  "$PKG/checkpointing/checkpointing_utils.py"
  "$PKG/kernels"
  "$PKG/models/wan"
  "$PKG/configs/base_wan_14b.yml"
  "$PKG/configs/base_wan_1_3b.yml"
)
# models/*.py (not its other model families' folders)
while IFS= read -r p; do PATHS+=("$p"); done < <(
  git --git-dir="$GIT_DIR_ARG" ls-tree --name-only "$COMMIT" "$PKG/models/" |
    while IFS= read -r p; do [[ "$p" == *.py ]] && echo "$p"; done
)

# Keep only the paths that exist at this commit (older commits lack some), loudly.
KEEP=()
for p in "${PATHS[@]}"; do
  if [[ -n "$(git --git-dir="$GIT_DIR_ARG" ls-tree --name-only "$COMMIT" -- "$p")" ]]; then
    KEEP+=("$p")
  else
    echo "note: $p is not in $COMMIT; skipped" >&2
  fi
done

rm -rf "$DEST"
mkdir -p "$DEST"
git --git-dir="$GIT_DIR_ARG" archive --format=tar "$COMMIT" -- "${KEEP[@]}" | tar -x -C "$DEST"
# Tests, benchmarks of other families and stray data are not needed by the model.
find "$DEST" -name '*_test.py' -delete
find "$DEST" -name '*.png' -delete
echo "$COMMIT" > "$DEST/COMMIT"
git --git-dir="$GIT_DIR_ARG" log -1 --format='%H %cI %s' "$COMMIT" > "$DEST/COMMIT_INFO"

echo "maxdiffusion $COMMIT exported to $DEST ($(du -sh "$DEST" | cut -f1), $(find "$DEST" -type f | wc -l) files)"

if [[ "$DEPS" == 1 ]]; then
  PY="${PYTHON:-$ROOT/.venv/bin/python}"
  [[ -x "$PY" ]] || PY=python3
  # pip name:import name of what the model's import chain needs (REQUIRED_PACKAGES in the runner)
  MISSING=()
  for pair in flax:flax einops:einops pyyaml:yaml pillow:PIL.Image huggingface_hub:huggingface_hub; do
    PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT/.bench/pydeps" "$PY" -c "import ${pair#*:}" 2>/dev/null \
      || MISSING+=("${pair%%:*}")
  done
  if ((${#MISSING[@]})); then
    echo "installing into .bench/pydeps for $PY: ${MISSING[*]}"
    "$PY" -m pip install -q --target "$ROOT/.bench/pydeps" "${MISSING[@]}"
  else
    echo "$PY already has the packages the model needs"
  fi
fi
