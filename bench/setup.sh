#!/usr/bin/env bash
# Creates a Python venv for the JAX baselines in bench/.
#   bash bench/setup.sh [VENV_DIR]          bench/requirements.txt: gymnax_env.py, purejaxrl.py (default: $VENV or /tmp/venv-bench)
#   bash bench/setup.sh --atari [VENV_DIR]  bench/requirements-atari.txt: cleanba_impala_atari.py (default: /tmp/venv-cleanba-atari)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "${1:-}" = "--atari" ]; then
    venv="${2:-${VENV:-/tmp/venv-cleanba-atari}}"
    reqs="$here/requirements-atari.txt"
    check='import jax, flax, optax, ale_py; from ale_py.vector_env import AtariVectorEnv; print("jax", jax.__version__, "ale-py", ale_py.__version__, "backend", jax.default_backend())'
    use="$venv/bin/python $here/cleanba_impala_atari.py --help"
else
    venv="${1:-${VENV:-/tmp/venv-bench}}"
    reqs="$here/requirements.txt"
    check='import jax, gymnax, flax, optax; print("jax", jax.__version__, "gymnax flax optax ok, backend", jax.default_backend())'
    use="$venv/bin/python $here/gymnax_env.py --help, or purejaxrl.py --help"
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -r "$reqs"
"$venv/bin/python" -c "$check"
echo "venv ready: $venv  (run: $use)"
