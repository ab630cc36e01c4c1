#!/usr/bin/env python3
"""Sebulba throughput side by side: `podc bench train --env envpool:CartPole-v1` against the
Cleanba-style JAX baseline (`bench/cleanba_ppo.py`), PPO and IMPALA, interleaved in rounds.

Both sides: 2 actor threads of `--envs` EnvPool CartPoles each (B per actor), the
examples' networks and rollouts (PPO T = 128, IMPALA T = 64), actors one version behind.

    python3 bench/compare_sebulba.py --python /tmp/venv-cleanba/bin/python --rounds 2
"""

import argparse
import json
import statistics
import subprocess
import sys

AGENTS = {"ppo": "examples/cartpole_ppo.pod", "impala": "examples/cartpole_impala.pod"}


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="a Python with jax, optax and envpool")
    ap.add_argument("--podc", default="target/release/podc")
    ap.add_argument("--envs", type=int, default=64, help="envs per actor thread (B)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--updates", type=int, default=20, help="timed updates per measurement")
    ap.add_argument("--podc-flag", action="append", default=[], help="an extra flag for podc (repeatable), e.g. --single-buffer")
    args = ap.parse_args()
    results = {a: {"podc": [], "jax": []} for a in AGENTS}
    for _ in range(args.rounds):
        for algo, file in AGENTS.items():
            # podc: reports of 4 updates; the median of updates/4 reports after a warm-up one.
            podc = [args.podc, "bench", "train", file, "--env", "envpool:CartPole-v1", "--envs", str(2 * args.envs),
                    "--actor-threads", "2", "--updates-per-call", "4", "--runs", str(args.updates // 4), "--json",
                    *args.podc_flag]
            results[algo]["podc"].append(run(podc))
            jax = [args.python, "bench/cleanba_ppo.py", "--algo", algo, "--envs", str(args.envs), "--actor-threads",
                   "2", "--updates", str(args.updates), "--json"]
            results[algo]["jax"].append(run(jax))
    print(f"| algo | side | env steps/s (median of {args.rounds}) | actor idle | learner idle |")
    print("| --- | --- | ---: | ---: | ---: |")
    for algo, sides in results.items():
        for side, rs in sides.items():
            med = lambda k: statistics.median(r[k] for r in rs)
            print(f"| {algo} | {side} | {med('steps_per_sec'):.0f} | {med('actor_idle'):.2f} | {med('learner_idle'):.2f} |")
        ratio = statistics.median(r["steps_per_sec"] for r in sides["podc"]) / statistics.median(
            r["steps_per_sec"] for r in sides["jax"])
        print(f"| {algo} | podc / jax | {ratio:.2f}x | | |")
    json.dump(results, sys.stderr)


if __name__ == "__main__":
    main()
