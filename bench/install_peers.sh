#!/usr/bin/env bash
# Installs the peer gateways and benchmark clients that `inferplane bench gateway_peers` and
# `inferplane bench serve` are compared with, each in a virtual environment of its own under
# DIR (default $INFERPLANE_PEERS_DIR or /work/peers-cache), outside the repository.
#
#   bash bench/install_peers.sh [DIR] [router] [litellm] [aiperf]   # default: all three
#
# Already-installed peers are kept. Needs a Python >= 3.12 for aiperf (found as python3.12,
# or under pyenv).
set -euo pipefail
DIR=${1:-${INFERPLANE_PEERS_DIR:-/work/peers-cache}}
shift || true
WANT=${*:-router litellm aiperf}
mkdir -p "$DIR"

py312() {
  for p in python3.12 /root/.pyenv/versions/3.12*/bin/python python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
      echo "$p"; return; fi
  done
  echo "no Python >= 3.12 found" >&2; exit 1
}

install() {  # name, marker binary, pip requirement
  local name=$1 bin=$2 req=$3
  if [ -x "$DIR/$name/bin/$bin" ]; then echo "==> $name already installed in $DIR/$name"; return; fi
  echo "==> installing $req into $DIR/$name"
  "$(py312)" -m venv "$DIR/$name"
  "$DIR/$name/bin/pip" install --progress-bar on "$req"
}

for peer in $WANT; do
  case $peer in
    router)  install router vllm-router "vllm-router==0.1.17" ;;
    litellm) install litellm litellm "litellm[proxy]==1.108.7" ;;
    aiperf)  install aiperf aiperf "aiperf==0.13.0" ;;
    *) echo "unknown peer $peer (router, litellm, aiperf)" >&2; exit 2 ;;
  esac
done
echo "==> peers in $DIR: $(ls "$DIR" | tr '\n' ' ')"
