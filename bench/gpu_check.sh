#!/usr/bin/env bash
# Run the one-shot GPU check from the repository root; the JSON report goes to $OUT (or .).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec timeout 480 "$PY" bench/gpu_check.py "$@"
