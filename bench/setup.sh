#!/usr/bin/env bash
# Creates the Python venv for bench/gymnax_env.py and bench/purejaxrl.py from bench/requirements.txt.
#   bash bench/setup.sh [VENV_DIR]        (default: $VENV or /tmp/venv-bench)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${1:-${VENV:-/tmp/venv-bench}}"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -r "$here/requirements.txt"
"$venv/bin/python" -c 'import jax, gymnax, flax, optax; print("jax", jax.__version__, "gymnax flax optax ok, backend", jax.default_backend())'
echo "venv ready: $venv  (run: $venv/bin/python $here/gymnax_env.py --help, or purejaxrl.py --help)"
