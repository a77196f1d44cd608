#!/usr/bin/env bash
# Reproduce every paper's experiments and check their claims.
#   ./reproduce.sh [PAPER ...] [--profile smoke|default|full] [--list] [--status] [--force] [--only EXP[,EXP]]
# On a fresh machine it creates .venv, installs the project, then runs everything in one process.
# Default-profile results land in results/<paper>/ (CSV + manifest, PNG, claims.md) and results/SUMMARY.md;
# smoke and full write to runs/<profile>/. --status says which stored results are fresh (exit 1 if any is not).
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import mlsys_repro.common, mlsys_repro.papers, jax, hydra" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.installed ] || [ requirements.lock -nt .venv/.installed ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c requirements.lock -e ".[dev]"
  touch .venv/.installed
fi

# Fashion-MNIST comes from a Debian package (never downloaded at run time by our code).
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ ! -d data/images/fashion_mnist ] && command -v apt-get >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || true
  elif command -v sudo >/dev/null; then sudo -n apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || true; fi
fi

# GPU runs: see README "Running on a GPU" for XLA_PYTHON_CLIENT_PREALLOCATE / MEM_FRACTION.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
export PYTHONUNBUFFERED=1
exec .venv/bin/python -m mlsys_repro.common.repro.run_all "$@"
