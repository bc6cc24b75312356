#!/usr/bin/env bash
# Build (or reuse a cached wheel of) Horovod 0.28.1 with PyTorch + Gloo + MPI into a venv;
# with a CUDA build of torch, also with NCCL GPU operations (needs nvcc and NCCL).
# Usage: scripts/build_horovod.sh [VENV_DIR]   (default: .venv)
# AVGBENCH_HOROVOD_DRY_RUN=1: print the build environment and command instead of building
# (skips the "already installed" check and installs nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${1:-.venv}
PY=$VENV/bin/python
HVD_VERSION=0.28.1
DRY_RUN=${AVGBENCH_HOROVOD_DRY_RUN:-0}
log() { echo "[build_horovod] $*"; }

# torch's version and CUDA version ("None" for a CPU build).
TORCH_INFO=$("$PY" -c "import torch; print(torch.__version__, torch.version.cuda)")
read -r TORCH_VER TORCH_CUDA <<<"$TORCH_INFO"
if [[ $TORCH_CUDA == None ]]; then
  NEEDED=(PyTorch MPI Gloo)
else
  NEEDED=(PyTorch MPI Gloo NCCL)
fi

check_build() {
  local out
  out=$("$VENV/bin/horovodrun" --check-build 2>&1) || { echo "$out"; return 1; }
  for x in "${NEEDED[@]}"; do
    grep -q "\[X\] $x" <<<"$out" || { echo "$out"; return 1; }
  done
}

# Already installed and importable (an ABI mismatch with torch fails the import)?
# A cheap check here; the full `horovodrun --check-build` (~13 s) runs after an install.
if [[ $DRY_RUN != 1 ]] && "$PY" -c "import horovod, horovod.torch as h
assert horovod.__version__ == '$HVD_VERSION' and h.mpi_built() and h.gloo_built()
assert '$TORCH_CUDA' == 'None' or h.nccl_built()" 2>/dev/null; then
  log "horovod $HVD_VERSION already installed with ${NEEDED[*]}"
  exit 0
fi

if [[ $DRY_RUN != 1 ]]; then
  log "installing build prerequisites"
  "$PY" -m pip install -q -c constraints.txt packaging cloudpickle psutil pyyaml cffi mpi4py setuptools wheel
fi

# The wheel is specific to torch's ABI and CUDA variant, Python, and the build CPU's flags (-mavx -mfma ...).
PY_TAG=$("$PY" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
CPU_KEY=$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-12)
CACHE=${AVGBENCH_WHEEL_CACHE:-$HOME/.cache/avgbench/wheels}/horovod-$HVD_VERSION-torch$TORCH_VER-$PY_TAG-cpu$CPU_KEY
[[ $TORCH_CUDA == None ]] || CACHE+=-cuda$TORCH_CUDA
WHL=$(ls "$CACHE"/horovod-$HVD_VERSION-*.whl 2>/dev/null | head -n1 || true)

# Finds the CUDA toolkit and NCCL for a CUDA torch, and adds the GPU build settings to BUILD_ENV;
# stops with what to install when one is missing.
add_gpu_build_env() {
  local cuda_home=${HOROVOD_CUDA_HOME:-} missing=() d
  if [[ -z $cuda_home ]]; then
    if command -v nvcc >/dev/null; then
      cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
    else
      cuda_home=/usr/local/cuda
    fi
  fi
  [[ -x $cuda_home/bin/nvcc ]] || missing+=("nvcc (no $cuda_home/bin/nvcc): install the CUDA toolkit $TORCH_CUDA, or set HOROVOD_CUDA_HOME")
  # NCCL: the user's HOROVOD_NCCL_* settings win; else look where Horovod's CMake looks by default.
  if [[ -z ${HOROVOD_NCCL_HOME:-}${HOROVOD_NCCL_INCLUDE:-}${HOROVOD_NCCL_LIB:-} ]]; then
    local inc='' lib='' arch
    arch=/usr/lib/$(uname -m)-linux-gnu
    for d in "$cuda_home/include" /usr/include /usr/local/include; do
      [[ -f $d/nccl.h ]] && { inc=$d; break; }
    done
    for d in "$cuda_home/lib64" "$cuda_home/lib" "$arch" /usr/lib64 /usr/local/lib; do
      [[ -e $d/libnccl.so ]] && { lib=$d; break; }
    done
    [[ -n $inc && -n $lib ]] || missing+=("NCCL 2 (nccl.h and libnccl.so): install libnccl2 and libnccl-dev, or set HOROVOD_NCCL_HOME")
  fi
  if ((${#missing[@]})); then
    log "ERROR: torch $TORCH_VER is a CUDA $TORCH_CUDA build, so Horovod must be built with NCCL GPU operations. Missing:"
    for d in "${missing[@]}"; do log "  - $d"; done
    log "(or install the CPU build of torch)"
    exit 1
  fi
  local nvcc_ver
  nvcc_ver=$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
  [[ ${nvcc_ver%%.*} == "${TORCH_CUDA%%.*}" ]] \
    || log "WARNING: nvcc is CUDA $nvcc_ver but torch was built with CUDA $TORCH_CUDA"
  # Shared NCCL: at run time Horovod then uses the libnccl.so.2 that torch has loaded.
  BUILD_ENV+=(HOROVOD_GPU_OPERATIONS=NCCL "HOROVOD_NCCL_LINK=${HOROVOD_NCCL_LINK:-SHARED}"
              "HOROVOD_CUDA_HOME=$cuda_home")
}

if [[ -n "$WHL" ]]; then
  log "using cached wheel $WHL"
  [[ $DRY_RUN != 1 ]] || exit 0
else
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  # CXX: C++17 and forced <string>/<stdexcept> (GCC 13); CMAKE_POLICY_VERSION_MINIMUM: cmake >= 4
  # refuses third_party/ projects that ask for cmake < 3.5 without it (older cmake ignores it).
  BUILD_ENV=(CXX="$ROOT/scripts/cxx17-wrapper.sh" CMAKE_POLICY_VERSION_MINIMUM=3.5
             HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
             HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS=-j2)
  [[ $TORCH_CUDA == None ]] || add_gpu_build_env
  BUILD_CMD=("$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir --no-binary horovod
             -c constraints.txt -w "$TMP" "horovod==$HVD_VERSION")
  if [[ $DRY_RUN == 1 ]]; then
    log "dry run: would build into $CACHE with"
    printf '%s\n' "${BUILD_ENV[@]}"
    printf '%q ' "${BUILD_CMD[@]}"; echo
    exit 0
  fi
  log "building horovod $HVD_VERSION from source for ${NEEDED[*]} (C++17 via scripts/cxx17-wrapper.sh); takes minutes"
  start=$SECONDS
  env "${BUILD_ENV[@]}" "${BUILD_CMD[@]}"
  mkdir -p "$CACHE"
  cp "$TMP"/horovod-*.whl "$CACHE"/
  WHL=$(ls "$CACHE"/horovod-$HVD_VERSION-*.whl | head -n1)
  log "built $WHL in $((SECONDS - start))s"
fi

"$PY" -m pip install -q --force-reinstall --no-deps "$WHL"
"$PY" -m pip install -q -c constraints.txt "$WHL"   # its runtime deps, pinned

if ! check_build; then
  log "ERROR: horovodrun --check-build does not list ${NEEDED[*]}; delete $CACHE and rerun"
  exit 1
fi
log "horovod $HVD_VERSION OK (${NEEDED[*]})"
