#!/usr/bin/env python3
"""Side-by-side training throughput: `podc bench train` and bench/purejaxrl.py, interleaved.

A round runs every configuration once on each side, the two sides of a configuration one
after the other (which goes first alternates from round to round), so that the noise of
a shared machine hits both, and a round's configurations lie close in time. Each side's
figure is the median over the rounds (each round's steps/s is itself the median of
`--runs` timed calls, each call waited for on both sides). Compile times are cold on both
sides: every run is a fresh process, podc with `PODC_NO_CACHE=1`, purejaxrl.py with JAX's
persistent compilation cache off. Prints a markdown table, the ratios podc / JAX
(compile: below 1 is podc faster; throughput: above 1 is), then per workload each side's
best D and the ratio of the two: of the medians, and round by round (each round's best D
against its best D, so that a machine that slows down or speeds up between rounds moves
both sides), with the median and range of the rounds' ratios.

    python3 bench/compare_train.py [--rounds 3] [--runs 5] [--podc target/release/podc]
        [--configs a2c:catch:1024:16:10:1 ppo:cartpole:1024:128:1:2 ...]

A configuration is ALGO:ENV:B:T:K:D (envs, rollout, updates per call, devices). Needs a
release build of podc (`cargo build --release`) and the venv of bench/setup.sh (`$VENV`,
default /tmp/venv-bench).
"""
import argparse
import os
import statistics
import subprocess
import sys

from compare_env import ROOT, HERE, cpu_model, run_json

# The podc side's program per (algo, env); PPO's epochs and minibatches are constants in it.
PROGRAMS = {
    ("a2c", "catch"): "examples/catch_a2c.pod",
    ("a2c", "cartpole"): "examples/cartpole_a2c.pod",
    ("ppo", "cartpole"): "examples/cartpole_ppo.pod",
}
DEFAULT_CONFIGS = [
    "a2c:catch:1024:16:10:1", "a2c:catch:1024:16:10:2",
    "a2c:cartpole:1024:16:10:1", "a2c:cartpole:1024:16:10:2",
    # PureJaxRL's PPO update shape (T=128, 4 epochs x 4 minibatches) at the same B as A2C: one
    # call (K=1) is 131k env steps and 16 gradient steps on 32k-step minibatches.
    "ppo:cartpole:1024:128:1:1", "ppo:cartpole:1024:128:1:2",
]


def parse_config(text):
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"config {text!r}: expected ALGO:ENV:B:T:K:D, e.g. a2c:catch:1024:16:10:1")
    algo, env = parts[:2]
    if (algo, env) not in PROGRAMS:
        known = ", ".join(f"{a}:{e}" for a, e in PROGRAMS)
        raise ValueError(f"config {text!r}: no program for {algo}:{env} (known: {known})")
    try:
        envs, rollout, updates, devices = (int(p) for p in parts[2:])
    except ValueError:
        raise ValueError(f"config {text!r}: B, T, K and D must be integers") from None
    if min(envs, rollout, updates, devices) < 1 or envs % devices:
        raise ValueError(f"config {text!r}: B, T, K, D must be >= 1 and B a multiple of D")
    return algo, env, envs, rollout, updates, devices


def measure(cmd):
    """One side's JSON report; exits with the command and its stderr if it fails."""
    try:
        out = run_json(cmd)
        return {key: float(out[key]) for key in ("compile_s", "steps_per_sec")}
    except subprocess.CalledProcessError as e:
        sys.exit(f"failed (exit {e.returncode}): {' '.join(e.cmd)}\n{e.stderr.strip()}")
    except (ValueError, IndexError, KeyError, TypeError) as e:
        sys.exit(f"no JSON with compile_s and steps_per_sec from: {' '.join(cmd)} ({e!r})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="timed calls per round, on each side")
    ap.add_argument("--podc", default=os.path.join("target", "release", "podc"),
                    help="podc binary (relative paths are from the repository root)")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, metavar="ALGO:ENV:B:T:K:D")
    args = ap.parse_args()
    if args.rounds < 1 or args.runs < 1:
        ap.error("--rounds and --runs must be >= 1")
    try:
        configs = [parse_config(c) for c in args.configs]
    except ValueError as e:
        ap.error(str(e))
    os.environ["PODC_NO_CACHE"] = "1"  # podc's compile is cold, as JAX's is in a fresh process
    podc = os.path.join(ROOT, args.podc)
    if not os.access(podc, os.X_OK):
        ap.error(f"no podc binary at {podc}: run `cargo build --release` or pass --podc")
    python = os.path.join(os.environ.get("VENV", "/tmp/venv-bench"), "bin", "python")
    if not os.access(python, os.X_OK):
        ap.error(f"no python at {python}: run `bash bench/setup.sh` or set VENV")

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; {args.rounds} interleaved rounds "
          f"of median-of-{args.runs} calls; ratios are podc / JAX\n")
    print("| config | podc compile s | JAX compile s | compile ratio | podc steps/s | JAX steps/s | throughput ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    runs = {c: ([], []) for c in configs}  # per configuration, podc's rounds and JAX's
    for r in range(args.rounds):
        for c in configs:
            algo, env, b, t, k, d = c
            size = ["--envs", str(b), "--rollout", str(t), "--updates-per-call", str(k), "--devices", str(d),
                    "--runs", str(args.runs), "--json"]
            sides = [[podc, "bench", "train", PROGRAMS[(algo, env)], *size],
                     [python, os.path.join(HERE, "purejaxrl.py"), "--algo", algo, "--env", env, *size]]
            for side in (0, 1) if r % 2 == 0 else (1, 0):
                runs[c][side].append(measure(sides[side]))
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)

    med = lambda xs, key: statistics.median(x[key] for x in xs)
    best = {}  # workload -> per side, the best (steps/s, D) of the medians
    for c, (ours, theirs) in runs.items():
        algo, env, b, t, k, d = c
        cp, cj = med(ours, "compile_s"), med(theirs, "compile_s")
        sp, sj = med(ours, "steps_per_sec"), med(theirs, "steps_per_sec")
        print(f"| {algo} {env} B={b} T={t} K={k} D={d} | {cp:.2f} | {cj:.2f} | {cp / cj:.2f} "
              f"| {sp:,.0f} | {sj:,.0f} | {sp / sj:.2f} |")
        sides = best.setdefault(c[:5], [(0, 0), (0, 0)])
        sides[0], sides[1] = max(sides[0], (sp, d)), max(sides[1], (sj, d))
    print("\n| workload | podc best (D) | JAX best (D) | ratio of medians | round by round: median (range) |")
    print("|---|---:|---:|---:|---:|")
    for w, ((sp, dp), (sj, dj)) in best.items():
        per_round = [max(runs[c][0][r]["steps_per_sec"] for c in configs if c[:5] == w)
                     / max(runs[c][1][r]["steps_per_sec"] for c in configs if c[:5] == w) for r in range(args.rounds)]
        algo, env, b, t, k = w
        print(f"| {algo} {env} B={b} T={t} K={k} | {sp:,.0f} ({dp}) | {sj:,.0f} ({dj}) | {sp / sj:.2f} "
              f"| {statistics.median(per_round):.2f} ({min(per_round):.2f}-{max(per_round):.2f}) |")


if __name__ == "__main__":
    main()
