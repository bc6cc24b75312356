#!/usr/bin/env bash
# Build (or reuse a cached wheel of) Horovod 0.28.1 with PyTorch + Gloo + MPI into a venv.
# Usage: scripts/build_horovod.sh [VENV_DIR]   (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${1:-.venv}
PY=$VENV/bin/python
HVD_VERSION=0.28.1
log() { echo "[build_horovod] $*"; }

check_build() {
  local out
  out=$("$VENV/bin/horovodrun" --check-build 2>&1) || { echo "$out"; return 1; }
  for x in PyTorch MPI Gloo; do
    grep -q "\[X\] $x" <<<"$out" || { echo "$out"; return 1; }
  done
}

# Already installed and importable (an ABI mismatch with torch fails the import)?
# A cheap check here; the full `horovodrun --check-build` (~13 s) runs after an install.
if "$PY" -c "import horovod, horovod.torch as h
assert horovod.__version__ == '$HVD_VERSION' and h.mpi_built() and h.gloo_built()" 2>/dev/null; then
  log "horovod $HVD_VERSION already installed with PyTorch, MPI and Gloo"
  exit 0
fi

log "installing build prerequisites"
"$PY" -m pip install -q -c constraints.txt packaging cloudpickle psutil pyyaml cffi mpi4py setuptools wheel

# The wheel is specific to torch's ABI, Python, and the build CPU's flags (-mavx -mfma ...).
TORCH_VER=$("$PY" -c "import torch; print(torch.__version__)")
PY_TAG=$("$PY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
CPU_KEY=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-12)
CACHE=${AVGBENCH_WHEEL_CACHE:-$HOME/.cache/avgbench/wheels}/horovod-$HVD_VERSION-torch$TORCH_VER-$PY_TAG-cpu$CPU_KEY
WHL=$(ls "$CACHE"/horovod-$HVD_VERSION-*.whl 2>/dev/null | head -n1 || true)

if [[ -n "$WHL" ]]; then
  log "using cached wheel $WHL"
else
  log "building horovod $HVD_VERSION from source (C++17 via scripts/cxx17-wrapper.sh); takes minutes"
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  start=$SECONDS
  CXX=$ROOT/scripts/cxx17-wrapper.sh \
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS=-j2 \
    "$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir --no-binary horovod \
      -c constraints.txt -w "$TMP" "horovod==$HVD_VERSION"
  mkdir -p "$CACHE"
  cp "$TMP"/horovod-*.whl "$CACHE"/
  WHL=$(ls "$CACHE"/horovod-$HVD_VERSION-*.whl | head -n1)
  log "built $WHL in $((SECONDS - start))s"
fi

"$PY" -m pip install -q --force-reinstall --no-deps "$WHL"
"$PY" -m pip install -q -c constraints.txt "$WHL"   # its runtime deps, pinned

if ! check_build; then
  log "ERROR: horovodrun --check-build does not list PyTorch, MPI and Gloo; delete $CACHE and rerun"
  exit 1
fi
log "horovod $HVD_VERSION OK (PyTorch, MPI, Gloo)"
