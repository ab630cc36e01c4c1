#!/usr/bin/env python3
"""Trains every example with the command in its file's header on seeds 0-4 and writes the
learning table of docs/training.md (between its `learning-table` markers): the "last 5%"
return of each seed (bench/last5.py), the bar, the env steps, the mean wall time per seed,
and the podc commit of each run. Results accumulate in docs/learning-runs.json, so rows can
be re-run one at a time (`--only`), and seeds too (`--seeds 3,4` replaces those two seeds'
runs and keeps the others); the table is rewritten from that file each time.

    python3 bench/learning_table.py [--only dqn,catch_a2c] [--seeds 0,1,2,3,4] [--podc target/release/podc]
    python3 bench/learning_table.py --adopt asterix_ppo:0:runs/asterix   # a run already made with the row's command

Each row's command must appear, word for word, in its example's header comment (which is
what a user runs); the script refuses to run a row whose header says otherwise.
"""
import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from last5 import last5  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "learning-runs.json"
DOC = ROOT / "docs" / "training.md"

# name, what, the header's command (without --seed and --out), the bar: (">=", x), ("abs<=", x),
# or ("runs", None) for a command whose header says it runs without learning.
ROWS = [
    ("catch_a2c", "A2C, Catch", "train examples/catch_a2c.pod --total-steps 500000", (">=", 0.9)),
    ("cartpole_a2c", "A2C, CartPole-v1", "train examples/cartpole_a2c.pod --total-steps 2000000", (">=", 475)),
    ("cartpole_ppo", "PPO, CartPole-v1", "train examples/cartpole_ppo.pod --total-steps 2000000", (">=", 475)),
    ("dqn", "DQN, CartPole-v1", "train examples/dqn.pod --envs 10 --updates-per-call 500 --total-steps 500000",
     (">=", 475)),
    ("cartpole_impala", "IMPALA, CartPole-v1 (Anakin)", "train examples/cartpole_impala.pod --total-steps 2000000",
     (">=", 475)),
    ("cartpole_impala_sebulba", "IMPALA, Gymnasium CartPole-v1 (Sebulba)",
     "train examples/cartpole_impala.pod --env gymnasium:CartPole-v1 --total-steps 2000000", (">=", 475)),
    ("memory_recurrent", "recurrent PPO, MemoryChain",
     "train examples/memory_ppo.pod --agent RecurrentPPO --total-steps 1000000", (">=", 0.9)),
    ("memory_feedforward", "the same without memory (chance: 0)",
     "train examples/memory_ppo.pod --agent FeedForwardPPO --total-steps 1000000", ("abs<=", 0.2)),
    ("sac", "SAC, Pendulum-v1", "train examples/sac.pod --envs 1 --updates-per-call 1000 --total-steps 100000",
     (">=", -250)),
    ("pendulum_ppo", "PPO (continuous), Pendulum-v1", "train examples/pendulum_ppo.pod --total-steps 5000000",
     (">=", -300)),
    ("breakout_minatar_ppo", "PPO (conv), Breakout-MinAtar (gymnax-blines' PPO: 22 at 5M)",
     "train examples/breakout_minatar_ppo.pod --total-steps 5000000 --envs 64", (">=", 10)),
    ("asterix_ppo", "PPO (conv), Asterix-MinAtar (random: 0.48; gymnax-blines' PPO: 15)",
     "train examples/minatar_ppo.pod --agent AsterixPPO --total-steps 5000000 --envs 128", (">=", 5)),
    ("space_invaders_ppo", "PPO (conv), SpaceInvaders-MinAtar (random: 4.0; gymnax-blines' PPO: 131)",
     "train examples/minatar_ppo.pod --agent SpaceInvadersPPO --total-steps 5000000 --envs 128", (">=", 40)),
    ("freeway_ppo", "PPO (conv), Freeway-MinAtar (random: 0.42; always up: 18.3)",
     "train examples/minatar_ppo.pod --agent FreewayPPO --total-steps 5000000 --envs 128", (">=", 20)),
    # One agent for any env, on host envs (Sebulba); the MountainCars show that it runs, not that it learns.
    ("ppo_acrobot", "PPO for any env, Gymnasium Acrobot-v1",
     "train examples/ppo.pod --env gymnasium:Acrobot-v1 --total-steps 1000000", (">=", -100)),
    ("ppo_cartpole_gym", "PPO for any env, Gymnasium CartPole-v1",
     "train examples/ppo.pod --env gymnasium:CartPole-v1 --total-steps 2000000", (">=", 475)),
    ("ppo_lunarlander", "PPO for any env, Gymnasium LunarLander-v3",
     "train examples/ppo.pod --env gymnasium:LunarLander-v3 --total-steps 3000000", (">=", 100)),
    ("ppo_cartpole_pod", "PPO for any env, the .pod CartPole",
     "train examples/ppo.pod --env pod:examples/envs/cartpole.pod --total-steps 2000000", (">=", 475)),
    ("ppo_mountaincar", "PPO for any env, Gymnasium MountainCar-v0 (not solved: no exploration bonus)",
     "train examples/ppo.pod --env gymnasium:MountainCar-v0 --total-steps 1000000", ("runs", None)),
    ("ppoc_pendulum", "continuous PPO for any env, Gymnasium Pendulum-v1",
     "train examples/ppo_continuous.pod --env gymnasium:Pendulum-v1 --total-steps 2000000", (">=", -250)),
    ("ppoc_lunarlander", "continuous PPO for any env, Gymnasium LunarLanderContinuous-v3",
     "train examples/ppo_continuous.pod --env gymnasium:LunarLanderContinuous-v3 --total-steps 3000000", (">=", 0)),
    ("ppoc_mountaincar", "continuous PPO for any env, Gymnasium MountainCarContinuous-v0 (not solved)",
     "train examples/ppo_continuous.pod --env gymnasium:MountainCarContinuous-v0 --total-steps 1000000",
     ("runs", None)),
]

# What a row's env needs in podc's own Python beyond Gymnasium (docs/sebulba.md), installed
# before the first row whose command names it.
SETUP = {"LunarLander": ["env", "install", "box2d==2.3.10", "pygame==2.6.1"]}


def header_commands(path):
    """The `podc ...` commands in a file's header comment, with --seed/--out dropped."""
    out = []
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        m = re.match(r"//\s+podc (train .*?)(\s+#.*)?$", line)
        if m:
            words = shlex.split(m.group(1))
            kept, skip = [], False
            for w in words:
                if skip:
                    skip = False
                elif w in ("--seed", "--out"):
                    skip = True
                else:
                    kept.append(w)
            out.append(" ".join(kept))
    return out


def passes(bar, x):
    op, v = bar
    return op == "runs" or (x >= v if op == ">=" else abs(x) <= v)


def bar_text(bar):
    op, v = bar
    return {">=": f"≥ {v}", "abs<=": f"\\|x\\| ≤ {v}", "runs": "none: it runs"}[op]


def commit():
    """HEAD, with `+` when a tracked file other than this script's own outputs differs."""
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    ours = [str(f.relative_to(ROOT)) for f in (RESULTS, DOC)]
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            *(f":(exclude){f}" for f in ours)], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return sha.strip() + ("+" if dirty else "")


def merge(entry, command, runs):
    """The row's runs with `runs` replacing those of the same seeds; a changed command drops the rest."""
    kept = [r for r in entry["runs"] if r["seed"] not in {x["seed"] for x in runs}] if entry.get("command") == command else []
    return {"command": command, "runs": sorted(kept + runs, key=lambda r: r["seed"])}


def run(podc, command, seed, out):
    args = [podc, *shlex.split(command), "--seed", str(seed), "--out", str(out), "-q"]
    t0 = time.time()
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{p.stderr}")
    steps = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"]
    return {"seed": seed, "last5": last5(out), "env_steps": steps, "wall_s": round(wall, 1), "commit": commit()}


def adopt(row, seed, run_dir):
    """The record of a run made by hand with the row's command and `--seed seed`, checked
    against the config its checkpoint records; its wall time is the training's own."""
    name, _, command, _ = row
    config = json.loads((run_dir / "checkpoint.json").read_text())["meta"]["config"]
    words = shlex.split(command)
    flag = lambda f, default: words[words.index(f) + 1] if f in words else default
    want = {"file": words[1], "seed": seed, "agent": flag("--agent", config.get("agent")),
            "envs": int(flag("--envs", config.get("envs")))}
    got = {k: config.get(k) for k in want}
    if got != want:
        raise SystemExit(f"{run_dir} is not a run of row {name} with seed {seed}: {got} != {want}")
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    if last["env_steps"] < int(flag("--total-steps", 0)):
        raise SystemExit(f"{run_dir} stopped at {last['env_steps']} env steps")
    return {"seed": seed, "last5": last5(run_dir), "env_steps": last["env_steps"], "wall_s": round(last["wall_s"], 1),
            "commit": commit()}


def table(results):
    lines = ["| run | command (`podc ...`, then `--seed S`) | bar | seeds 0-4: last 5% | all pass | env steps | "
             "wall time per seed | commit |", "| --- | --- | --- | --- | --- | ---: | ---: | --- |"]
    for name, what, command, bar in ROWS:
        r = results.get(name)
        if not r:
            lines.append(f"| {what} | `{command}` | {bar_text(bar)} | not run | | | | |")
            continue
        runs = sorted(r["runs"], key=lambda x: x["seed"])
        vals = ", ".join(f"{x['last5']:.3g}" if abs(x["last5"]) < 10 else f"{x['last5']:.1f}" for x in runs)
        if [x["seed"] for x in runs] != list(range(5)):
            vals += f" (seeds {', '.join(str(x['seed']) for x in runs)} only)"
        ok = "yes" if all(passes(bar, x["last5"]) for x in runs) else "**no**"
        wall = sum(x["wall_s"] for x in runs) / len(runs)
        lines.append(f"| {what} | `{command}` | {bar_text(bar)} | {vals} | {ok} | {runs[0]['env_steps']:,} | "
                     f"{wall:.0f} s | {', '.join(dict.fromkeys(x['commit'] for x in runs))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated row names (default: all)")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--podc", default=str(ROOT / "target" / "release" / "podc"))
    ap.add_argument("--table-only", action="store_true", help="rewrite the table from the results file")
    ap.add_argument("--adopt", action="append", default=[], metavar="NAME:SEED:DIR",
                    help="record a finished run of row NAME's command with --seed SEED (repeatable)")
    a = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for spec in a.adopt:
        name, seed, run_dir = spec.split(":", 2)
        row = next(r for r in ROWS if r[0] == name)
        results[name] = merge(results.get(name, {}), row[2], [adopt(row, int(seed), Path(run_dir))])
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    if a.adopt:
        a.table_only = True
    names = a.only.split(",") if a.only else [r[0] for r in ROWS]
    unknown = set(names) - {r[0] for r in ROWS}
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}")
    for name, what, command, bar in [] if a.table_only else [r for r in ROWS if r[0] in names]:
        file = ROOT / shlex.split(command)[1]
        if command not in header_commands(file):
            raise SystemExit(f"{file}'s header does not give `podc {command} --seed 0`: {header_commands(file)}")
        for needle, args in SETUP.items():
            if needle in command:
                subprocess.run([a.podc, *args], cwd=ROOT, check=True)
        with tempfile.TemporaryDirectory() as tmp:
            for seed in [int(s) for s in a.seeds.split(",")]:
                r = run(a.podc, command, seed, Path(tmp) / f"seed{seed}")
                print(f"{name} seed {seed}: last 5% {r['last5']:.3f} ({r['wall_s']} s)", flush=True)
                # Each seed is kept as it finishes: a stopped row loses only the run under way.
                results[name] = merge(results.get(name, {}), command, [r])
                RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    text = DOC.read_text()
    begin, end = "<!-- learning-table:begin -->", "<!-- learning-table:end -->"
    if begin not in text:
        raise SystemExit(f"{DOC} has no {begin} marker")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    DOC.write_text(head + begin + "\n" + table(results) + "\n" + end + tail)
    print(table(results))


if __name__ == "__main__":
    main()
