#!/usr/bin/env bash
# Idempotent set-up for zerolm: installs the Debian packages the tools need
# (through sudo when not root) and a project-local Python environment (.venv/)
# holding the pinned torch wheel (our LibTorch; libgloo-dev gives its c10d Gloo
# backend the headers the wheel lacks) and the reference packages that
# tests and benchmarks compare against. Safe to run again: it only installs
# what is missing.
#
#   scripts/setup.sh            # everything
#   ZLM_SETUP_PYTHON=0 scripts/setup.sh   # Debian packages only
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-venv
  libsimdjson-dev libicu-dev libtbb-dev libxxhash-dev libzstd-dev liblzma-dev zlib1g-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libpsl-dev publicsuffix libcld2-dev
  clang libclang-rt-14-dev
  libgloo-dev libhwy-dev time
  libcurl4-openssl-dev libmodest-dev openssl
  openmpi-bin
  slurmd slurmctld slurm-client munge
)

log() { echo "[setup] $*" >&2; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  log "Debian packages: all present"
fi

if [[ "${ZLM_SETUP_PYTHON:-1}" == "1" ]]; then
  REQ=scripts/requirements.txt
  STAMP=.venv/.zlm-requirements.sha256
  want=$(sha256sum "$REQ" | cut -d' ' -f1)
  if [[ -x .venv/bin/python && -f $STAMP && "$(cat $STAMP)" == "$want" ]]; then
    log "Python environment .venv: up to date"
  else
    PY=python3
    [[ -x .venv/bin/python ]] || { log "creating .venv"; $PY -m venv .venv; }
    log "installing Python packages from $REQ into .venv (torch is large: first run takes minutes)"
    # pip 23's resolver fails on lxml[html_clean] asked for under two spellings (readability-lxml, jusText)
    .venv/bin/pip install -q --disable-pip-version-check pip==25.3 >&2
    .venv/bin/pip install -q --disable-pip-version-check -r "$REQ" >&2
    echo "$want" > "$STAMP"
  fi
fi
log "done"
