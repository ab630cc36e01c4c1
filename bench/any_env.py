#!/usr/bin/env python3
"""Trains examples/ppo.pod and examples/ppo_continuous.pod, unedited, on every env that
docs/training.md quotes them for, and prints the table it gives: the return over the last 5%
of the run (bench/last5.py), the bar, the wall time, the seed and the podc commit.

    cargo build --release
    python3 bench/any_env.py [--seeds 0,1] [--runs DIR]

Runs go to DIR (default runs/any_env) as `<env>__<seed>`; an existing one is reused, not
trained again, so an interrupted sweep goes on where it stopped.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from last5 import last5  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PODC = ROOT / "target" / "release" / "podc"

# (agent, env, total steps, the bar over the last 5%, or None where the issue asks only that it runs)
RUNS = [
    ("examples/ppo.pod", "gymnasium:Acrobot-v1", 1_000_000, -100),
    ("examples/ppo.pod", "gymnasium:CartPole-v1", 2_000_000, 475),
    ("examples/ppo.pod", "gymnasium:LunarLander-v3", 3_000_000, 100),
    ("examples/ppo.pod", "pod:examples/envs/cartpole.pod", 2_000_000, 475),
    ("examples/ppo.pod", "gymnasium:MountainCar-v0", 1_000_000, None),
    ("examples/ppo_continuous.pod", "gymnasium:Pendulum-v1", 2_000_000, -250),
    ("examples/ppo_continuous.pod", "gymnasium:LunarLanderContinuous-v3", 3_000_000, 0),
    ("examples/ppo_continuous.pod", "gymnasium:MountainCarContinuous-v0", 1_000_000, None),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--runs", default=str(ROOT / "runs" / "any_env"))
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"podc {commit}")
    print("| agent | env | steps | seed | last 5% | bar | wall |")
    print("|---|---|---|---|---|---|---|")
    for agent, env, steps, bar in RUNS:
        for seed in args.seeds.split(","):
            out = Path(args.runs) / f"{env.replace(':', '_').replace('/', '_')}__{seed}"
            if not (out / "metrics.jsonl").exists():
                cmd = [str(PODC), "train", agent, "--env", env, "--total-steps", str(steps), "--seed", seed, "-q", "--out", str(out)]
                subprocess.run(cmd, cwd=ROOT, check=True)
            reports = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
            ret = last5(out)
            verdict = "runs" if bar is None else f"≥ {bar} {'✓' if ret >= bar else '✗'}"
            name = Path(agent).name
            print(f"| `{name}` | `{env}` | {reports[-1]['env_steps']} | {seed} | {ret:.1f} | {verdict} | {reports[-1]['wall_s']:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
