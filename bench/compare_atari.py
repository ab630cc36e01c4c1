#!/usr/bin/env python3
"""Atari IMPALA throughput side by side: `podc bench train examples/atari_impala.pod --env
ale:Pong` against the Cleanba-style JAX baseline (`bench/cleanba_impala_atari.py`),
interleaved in rounds.

Both sides: `--actor-threads` actor threads of `--envs` ale-py Pong envs each (podc's
`--envs` is the total), rollouts of `--rollout` steps, the IMPALA CNN, V-trace, actors one
version behind, podc's `ale:` defaults (frame-skip 4, stack 4, sticky actions 0.25, ...).
Frames/s = env steps/s x 4 (the frame-skip). podc's side counts the median of `--runs`
reports of `--updates-per-call` updates after a warm-up report; the JAX side `--updates`
updates after `--warmup`. If podc fails (the example or its conv/u8 support missing), its
side is skipped with the reason and the JAX side still runs.

    python3 bench/compare_atari.py --python /tmp/venv-cleanba-atari/bin/python --rounds 2
"""

import argparse
import json
import statistics
import subprocess
import sys

FRAMESKIP = 4


def run(cmd):
    """The last line of the command's stdout as JSON, or the reason it failed."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return None, f"cannot run `{cmd[0]}`: {e}"
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        why = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return None, f"`{' '.join(cmd)}` failed: {why}"
    try:
        return json.loads(lines[-1]), None
    except json.JSONDecodeError:
        return None, f"`{' '.join(cmd)}` printed no JSON: {lines[-1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="a Python with jax, flax, optax and ale-py (bench/setup.sh --atari)")
    ap.add_argument("--podc", default="target/release/podc")
    ap.add_argument("--pod", default="examples/atari_impala.pod")
    ap.add_argument("--game", default="Pong", help="podc's `ale:GAME` (the JAX side takes it lower-cased)")
    ap.add_argument("--envs", type=int, default=64, help="envs per actor thread")
    ap.add_argument("--actor-threads", type=int, default=2)
    ap.add_argument("--rollout", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--updates", type=int, default=8, help="timed updates per measurement")
    ap.add_argument("--updates-per-call", type=int, default=2, help="podc's updates per report")
    ap.add_argument("--jax-flag", action="append", default=[], help="an extra flag for the JAX side (repeatable)")
    ap.add_argument("--podc-flag", action="append", default=[], help="an extra flag for podc (repeatable)")
    args = ap.parse_args()
    k, t = args.actor_threads, args.rollout
    podc = [args.podc, "bench", "train", args.pod, "--env", f"ale:{args.game}", "--envs", str(k * args.envs),
            "--actor-threads", str(k), "--rollout", str(t), "--updates-per-call", str(args.updates_per_call),
            "--runs", str(max(1, args.updates // args.updates_per_call)), "--json", *args.podc_flag]
    jax = [args.python, "bench/cleanba_impala_atari.py", "--game", args.game.lower(), "--envs", str(args.envs),
           "--actor-threads", str(k), "--rollout", str(t), "--updates", str(args.updates), "--json", *args.jax_flag]
    results = {"podc": [], "jax": []}
    skipped = None
    for _ in range(args.rounds):
        if skipped is None:
            r, skipped = run(podc)
            if r is not None:
                r.setdefault("frames_per_sec", r["steps_per_sec"] * FRAMESKIP)
                results["podc"].append(r)
            else:
                print(f"skipping podc: {skipped}", file=sys.stderr)
        r, err = run(jax)
        if r is None:
            sys.exit(err)
        results["jax"].append(r)
    print(f"ale:{args.game}, {k} actor threads x {args.envs} envs, T = {t}; medians of {args.rounds} rounds")
    print("| side | frames/s | env steps/s | compile s | actor idle | learner idle |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for side, rs in results.items():
        if not rs:
            print(f"| {side} | skipped | | | | |")
            continue
        med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
        sps = med("env_steps_per_sec" if side == "jax" else "steps_per_sec")
        print(f"| {side} | {med('frames_per_sec'):.0f} | {sps:.0f} | {med('compile_s'):.1f} | "
              f"{med('actor_idle'):.2f} | {med('learner_idle'):.2f} |")
    if results["podc"]:
        ratio = statistics.median(r["frames_per_sec"] for r in results["podc"]) / statistics.median(
            r["frames_per_sec"] for r in results["jax"])
        print(f"| podc / jax | **{ratio:.2f}x** | | | | |")
    json.dump(results, sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    main()
