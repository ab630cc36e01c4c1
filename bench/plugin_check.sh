#!/usr/bin/env bash
# Every example's training program, compiled afresh and trained for a few calls on a given
# PJRT CPU plugin, then every env's random-action rollout (`podc bench env`): one line per
# program with its compile time and env steps per second, failing when a program errors
# or takes longer than LIMIT seconds to compile. This is
# the check for a new XLA (issue 24: `lammps-jax-pjrt-cpu` 0.11.2's plugin):
#
#     bash bench/plugin_check.sh PLUGIN.so [--podc target/release/podc] [--limit 30]
#
# Anakin examples train on their `.pod` env; the host-env ones (`ppo.pod`,
# `ppo_continuous.pod`) on Gymnasium through Sebulba, which installs it on first use.
set -u
PLUGIN=$(realpath "$1"); shift
PODC=target/release/podc
LIMIT=30
while [ $# -gt 0 ]; do
    case "$1" in
        --podc) PODC=$2; shift 2 ;;
        --limit) LIMIT=$2; shift 2 ;;
        *) echo "plugin_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
PODC=$(realpath "$PODC")
cd "$(dirname "$0")/.."

# file, then the arguments that pick its agent and env.
PROGRAMS=(
    "examples/catch_a2c.pod"
    "examples/cartpole_a2c.pod"
    "examples/cartpole_ppo.pod"
    "examples/cartpole_impala.pod"
    "examples/dqn.pod"
    "examples/sac.pod"
    "examples/pendulum_ppo.pod"
    "examples/memory_ppo.pod --agent RecurrentPPO"
    "examples/memory_ppo.pod --agent FeedForwardPPO"
    "examples/breakout_minatar_ppo.pod"
    "examples/minatar_ppo.pod --agent AsterixPPO"
    "examples/minatar_ppo.pod --agent SpaceInvadersPPO"
    "examples/minatar_ppo.pod --agent FreewayPPO"
    "examples/ppo.pod --env gymnasium:CartPole-v1"
    "examples/ppo_continuous.pod --env gymnasium:Pendulum-v1"
)
failed=0
check() {
    local p=$1 log rc compile rate
    shift
    # shellcheck disable=SC2086
    log=$(timeout 300 "$PODC" bench "$@" $p --envs 16 --runs 2 --no-cache --json --plugin "$PLUGIN" 2>&1)
    rc=$?
    read -r compile rate < <(python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        j = json.loads(line); print(j.get("compile_s", ""), int(j["steps_per_sec"]))' <<< "$log" 2>/dev/null)
    if [ $rc -ne 0 ] || [ -z "$compile" ] || [ -z "$rate" ]; then
        echo "FAIL  $p (exit $rc)"; tail -5 <<< "$log" | sed 's/^/      /'; failed=1
    elif awk -v c="$compile" -v l="$LIMIT" 'BEGIN { exit !(c > l) }'; then
        echo "SLOW  $p: compile $compile s > $LIMIT s"; failed=1
    else
        printf 'ok    %-58s compile %6.2f s  %9d env steps/s\n' "$p" "$compile" "$rate"
    fi
}
for p in "${PROGRAMS[@]}"; do
    check "$p" train --updates-per-call 1
done
for p in examples/envs/*.pod examples/cartpole_normalized.pod examples/cartpole_stacked.pod; do
    check "$p" env
done
exit $failed
