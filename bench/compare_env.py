#!/usr/bin/env python3
"""Side-by-side env throughput: `podc bench env` and the gymnax baseline, interleaved.

These machines are noisy, so the two are run alternately, ROUNDS times each, in one
process, and the report gives each side's median and the ratio of the medians.

    python3 bench/compare_env.py [--rounds 3] [--envs 1024] [--steps 128] [--only CartPole-v1,Catch-bsuite]

Needs a release build of podc (`cargo build --release`) and the venv of bench/setup.sh
(`$VENV`, default /tmp/venv-bench).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PAIRS = [
    ("examples/envs/cartpole.pod", "CartPole-v1"),
    ("examples/envs/catch.pod", "Catch-bsuite"),
    ("examples/envs/fourrooms.pod", "FourRooms-misc"),
    ("examples/envs/breakout.pod", "Breakout-MinAtar"),
    ("examples/envs/acrobot.pod", "Acrobot-v1"),
    ("examples/envs/mountain_car.pod", "MountainCar-v0"),
    ("examples/envs/mountain_car_continuous.pod", "MountainCarContinuous-v0"),
    ("examples/envs/asterix.pod", "Asterix-MinAtar"),
    ("examples/envs/freeway.pod", "Freeway-MinAtar"),
    ("examples/envs/seaquest.pod", "Seaquest-MinAtar"),
    ("examples/envs/space_invaders.pod", "SpaceInvaders-MinAtar"),
    ("examples/envs/deep_sea.pod", "DeepSea-bsuite"),
    ("examples/envs/discounting_chain.pod", "DiscountingChain-bsuite"),
    ("examples/envs/memory_chain.pod", "MemoryChain-bsuite"),
    ("examples/envs/umbrella_chain.pod", "UmbrellaChain-bsuite"),
    ("examples/envs/simple_bandit.pod", "SimpleBandit-bsuite"),
    ("examples/envs/bernoulli_bandit.pod", "BernoulliBandit-misc"),
    ("examples/envs/gaussian_bandit.pod", "GaussianBandit-misc"),
    ("examples/envs/meta_maze.pod", "MetaMaze-misc"),
    ("examples/envs/point_robot.pod", "PointRobot-misc"),
    ("examples/envs/reacher.pod", "Reacher-misc"),
    ("examples/envs/swimmer.pod", "Swimmer-misc"),
    ("examples/envs/pong.pod", "Pong-misc"),
    ("examples/envs/frozen_lake.pod", "FrozenLake-misc"),
]


def run_json(cmd):
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--devices", type=int, default=1, help="devices for podc (the baseline uses one)")
    ap.add_argument("--only", help="comma-separated gymnax ids (default: every pair)")
    args = ap.parse_args()
    python = os.path.join(os.environ.get("VENV", "/tmp/venv-bench"), "bin", "python")
    podc = os.path.join(ROOT, "target", "release", "podc")
    size = ["--envs", str(args.envs), "--steps", str(args.steps), "--runs", str(args.runs)]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; B={args.envs} T={args.steps}, "
          f"{args.rounds} interleaved rounds of median-of-{args.runs} runs")
    for pod, gym_id in [p for p in PAIRS if not args.only or p[1] in args.only.split(",")]:
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(run_json([podc, "bench", "env", pod, *size, "--devices", str(args.devices), "--json"]))
            theirs.append(run_json([python, os.path.join(HERE, "gymnax_env.py"), "--env", gym_id, *size, "--json"]))
        med = lambda xs, k: statistics.median(x[k] for x in xs)
        sp, sg = med(ours, "steps_per_sec"), med(theirs, "steps_per_sec")
        cp, cg = med(ours, "compile_s"), med(theirs, "compile_s")
        print(f"{gym_id:16s} podc {sp:12,.0f} steps/s (compile {cp:.2f} s) | "
              f"gymnax {sg:12,.0f} steps/s (compile {cg:.2f} s) | throughput x{sp / sg:.2f}, compile x{cp / cg:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
