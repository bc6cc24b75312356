#!/usr/bin/env bash
# Set up avgbench from nothing (Debian, as root): system packages, .venv, Python deps, Horovod.
# Idempotent: finished steps are skipped. Usage: scripts/setup.sh [VENV_DIR]  (default: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
PY=$VENV/bin/python
T0=$SECONDS
log() { echo "[setup +$((SECONDS - T0))s] $*"; }

# 1. System packages (only those missing).
# munge + slurm-wlm: the SLURM test's own one-node cluster (about 15 s to install)
APT_PKGS=(openmpi-bin libopenmpi-dev iproute2 chromium fonts-dejavu-core g++ cmake make munge slurm-wlm)
python3 -c "import ensurepip, sysconfig, os; assert os.path.exists(sysconfig.get_paths()['include'] + '/Python.h')" 2>/dev/null \
  || APT_PKGS+=(python3-venv python3-dev)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || { echo "setup: need root to apt-get install: ${missing[*]}" >&2; exit 1; }
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "system packages present"
fi

# 2. Virtual environment.
if [[ ! -x $PY ]]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi

# 3. Python packages, pinned by constraints.txt; skipped when the stamp matches.
STAMP=$VENV/.avgbench-deps
want=$(cat constraints.txt requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [[ -f $STAMP && $(cat "$STAMP") == "$want" ]]; then
  log "python packages up to date"
else
  log "pip install (torch first, from the local CPU wheel when PIP_FIND_LINKS has it)"
  "$PY" -m pip install -q -c constraints.txt pip setuptools wheel
  "$PY" -m pip install -c constraints.txt torch==2.13.0
  "$PY" -m pip install -c constraints.txt -r requirements.txt -r requirements-dev.txt
  "$PY" -m pip check
  echo "$want" >"$STAMP"
  log "python packages installed"
fi

# 4. Horovod (cached wheel or source build).
log "horovod"
scripts/build_horovod.sh "$VENV"
log "done: $VENV ready"
