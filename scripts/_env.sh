# Sourced by scripts/demo and scripts/test: create (or reuse) .venv and install fuser into it.
# On a machine whose python3 already has torch and triton (the GPU machine, where nothing can be
# downloaded), set FUSER_SYSTEM_PYTHON=1 to use that interpreter with the checkout on PYTHONPATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ "${FUSER_SYSTEM_PYTHON:-0}" = 1 ]; then
  PY=python3
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  return 0 2>/dev/null || exit 0
fi
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
STAMP="$VENV/.fuser-installed"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  "$PY" -m pip install -q --upgrade pip
  # torch first: a plain 'torch' requirement would pull a multi-GB CUDA build; the CPU build is
  # enough for the interpreter-backed tests. Any torch already importable is kept.
  if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0" || "$PY" -m pip install -q torch
  fi
  "$PY" -m pip install -q -e ".[test]"
  touch "$STAMP"
fi
