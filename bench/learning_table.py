#!/usr/bin/env python3
"""Trains every example with the command in its file's header on seeds 0-4 and writes the
learning table of docs/training.md (between its `learning-table` markers): the "last 5%"
return of each seed (bench/last5.py), the bar, the env steps, the mean wall time per seed,
the podc commit of each run, and whether the runs are current. Results accumulate in
docs/learning-runs.json, so rows can be re-run one at a time (`--only`), and seeds too
(`--seeds 3,4` replaces those two seeds' runs and keeps the others); the table is rewritten
from that file each time.

    python3 bench/learning_table.py [--only dqn,catch_a2c] [--seeds 0,1,2,3,4] [--podc target/release/podc]
    python3 bench/learning_table.py --adopt asterix_ppo:0:runs/asterix   # a run already made with the row's command
    python3 bench/learning_table.py --stale [--run]        # rows whose programs changed since their runs
    python3 bench/learning_table.py --keep ROW --why "..."  # a stale row keeps its figures, saying why

Each row's command must appear, word for word, in its example's header comment (which is
what a user runs); the script refuses to run a row whose header says otherwise.

**Stale rows.** Every run records its fingerprint (`podc train --fingerprint`, see
src/train/fingerprint.rs): the hashes of the StableHLO of every program its command
compiles, the PJRT plugin, and a host env's package versions. `--stale` computes the
fingerprint of each row's command from the current build (front end and lowering only,
under a second a row), lists the rows with a run whose fingerprint differs, and exits 1
if there is one; `--stale --run` re-runs exactly those runs. A row whose figures are kept
though its programs changed says why (`--keep`), for the fingerprint it was kept at. The
CPU is recorded too, and named where it differs, but does not make a row stale.
"""
import argparse
import concurrent.futures
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
     "train examples/ppo_continuous.pod --env gymnasium:LunarLanderContinuous-v3 --total-steps 3000000", (">=", 100)),
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


def merge(entry, command, runs, parts):
    """The row's runs with `runs` replacing those of the same seeds (a changed command
    drops the rest), and the fingerprint `parts` of the newest. A row kept stale is no
    longer kept once it is re-run."""
    kept = [r for r in entry["runs"] if r["seed"] not in {x["seed"] for x in runs}] if entry.get("command") == command else []
    return {"command": command, "runs": sorted(kept + runs, key=lambda r: r["seed"]), "fingerprint": parts}


def setup(podc, command):
    """Installs what the row's env needs (SETUP), once per process."""
    for needle, args in SETUP.items():
        if needle in command and needle not in setup.done:
            p = subprocess.run([podc, *args], cwd=ROOT, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"podc {' '.join(args)} failed:\n{p.stderr}")
            setup.done.add(needle)


setup.done = set()


def fingerprint(podc, command):
    """The fingerprint of the row's command on the current build; nothing is compiled."""
    setup(podc, command)
    args = [podc, *shlex.split(command), "--seed", "0", "--fingerprint"]
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{p.stderr}")
    return json.loads(p.stdout)


def recorded(run_dir):
    """A finished run's record of its fingerprint: the hash and the CPU per run, and the
    parts (for naming what changed) per row."""
    fp = json.loads((run_dir / "fingerprint.json").read_text())
    return {"fingerprint": fp["sha256"], "cpu": fp["cpu"]}, {k: v for k, v in fp.items() if k != "cpu"}


def run(podc, command, seed, out):
    args = [podc, *shlex.split(command), "--seed", str(seed), "--out", str(out), "-q"]
    t0 = time.time()
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{p.stderr}")
    steps = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"]
    rec, parts = recorded(out)
    return {"seed": seed, "last5": last5(out), "env_steps": steps, "wall_s": round(wall, 1), "commit": commit(),
            **rec}, parts


def changed(old, new):
    """What differs between two fingerprints' parts, in words."""
    out = []
    for name in sorted(set(old.get("programs", {})) | set(new["programs"])):
        if old.get("programs", {}).get(name) != new["programs"].get(name):
            out.append(f"program `{name}`")
    for part in ("plugin", "host", "xla_flags"):
        if old.get(part) != new.get(part):
            out.append(f"{part} {old.get(part)} -> {new.get(part)}")
    return ", ".join(out) or "the fingerprint"


def staleness(entry, current):
    """Why a row's figures may not be what its command gives on the current build: None
    when every run has the current fingerprint, or the row was kept at it."""
    if not entry or not entry.get("runs"):
        return "not run"
    kept = entry.get("kept")
    if kept and kept["fingerprint"] == current["sha256"]:
        return None
    old = [r for r in entry["runs"] if r.get("fingerprint") != current["sha256"]]
    if not old:
        return None
    commits = ", ".join(dict.fromkeys(r["commit"] for r in old))
    what = f"{changed(entry['fingerprint'], current)} changed" if entry.get("fingerprint") else "no fingerprint recorded"
    return f"seeds {', '.join(str(r['seed']) for r in old)} (run at {commits}): {what}"


def adopt(row, seed, run_dir):
    """The record of a run made by hand with the row's command and `--seed seed`, checked
    against the config its checkpoint records; its wall time is the training's own."""
    name, _, command, _ = row
    config = json.loads((run_dir / "checkpoint.json").read_text())["meta"]["config"]
    words = shlex.split(command)
    flag = lambda f, default: words[words.index(f) + 1] if f in words else default
    want = {"file": words[1], "seed": seed, "agent": flag("--agent", config.get("agent")),
            "envs": int(flag("--envs", config.get("envs"))), "env": flag("--env", config.get("env"))}
    got = {k: config.get(k) for k in want}
    if got != want:
        raise SystemExit(f"{run_dir} is not a run of row {name} with seed {seed}: {got} != {want}")
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    if last["env_steps"] < int(flag("--total-steps", 0)):
        raise SystemExit(f"{run_dir} stopped at {last['env_steps']} env steps")
    rec, parts = recorded(run_dir)
    return {"seed": seed, "last5": last5(run_dir), "env_steps": last["env_steps"], "wall_s": round(last["wall_s"], 1),
            "commit": commit(), **rec}, parts


def table(results, current):
    """The table; `current` has each row's fingerprint on the current build."""
    lines = ["| run | command (`podc ...`, then `--seed S`) | bar | seeds 0-4: last 5% | all pass | env steps | "
             "wall time per seed | commit | current |", "| --- | --- | --- | --- | --- | ---: | ---: | --- | --- |"]
    for name, what, command, bar in ROWS:
        r = results.get(name)
        if not r:
            lines.append(f"| {what} | `{command}` | {bar_text(bar)} | not run | | | | | |")
            continue
        why = staleness(r, current[name])
        if why is None and r.get("kept", {}).get("fingerprint") == current[name]["sha256"]:
            now = f"kept: {r['kept']['why']}"
        else:
            now = "yes" if why is None else "**no**"
        runs = sorted(r["runs"], key=lambda x: x["seed"])
        vals = ", ".join(f"{x['last5']:.3g}" if abs(x["last5"]) < 10 else f"{x['last5']:.1f}" for x in runs)
        if [x["seed"] for x in runs] != list(range(5)):
            vals += f" (seeds {', '.join(str(x['seed']) for x in runs)} only)"
        ok = "yes" if all(passes(bar, x["last5"]) for x in runs) else "**no**"
        wall = sum(x["wall_s"] for x in runs) / len(runs)
        lines.append(f"| {what} | `{command}` | {bar_text(bar)} | {vals} | {ok} | {runs[0]['env_steps']:,} | "
                     f"{wall:.0f} s | {', '.join(dict.fromkeys(x['commit'] for x in runs))} | {now} |")
    return "\n".join(lines)


def save(results):
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")


def stale_rows(podc, rows, results):
    """Each row's current fingerprint, and the stale ones with why; says where a row's
    runs were made on another CPU."""
    for row in rows:
        setup(podc, row[2])
    # A podc process a row, a few at a time: most of each is Python starting an env worker.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        current = dict(zip([r[0] for r in rows], pool.map(lambda r: fingerprint(podc, r[2]), rows)))
    stale = {}
    for name, _, command, _ in rows:
        why = staleness(results.get(name), current[name])
        if why:
            stale[name] = why
        cpus = {r["cpu"] for r in results.get(name, {}).get("runs", []) if r.get("cpu")} - {current[name]["cpu"]}
        if cpus:
            print(f"note: {name} was run on {', '.join(sorted(cpus))}; this machine is {current[name]['cpu']}")
    return current, stale


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated row names (default: all)")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--podc", default=str(ROOT / "target" / "release" / "podc"))
    ap.add_argument("--table-only", action="store_true", help="rewrite the table from the results file")
    ap.add_argument("--adopt", action="append", default=[], metavar="NAME:SEED:DIR",
                    help="record a finished run of row NAME's command with --seed SEED (repeatable)")
    ap.add_argument("--stale", action="store_true",
                    help="list the rows whose programs changed since their runs; exit status 1 if any")
    ap.add_argument("--run", action="store_true", help="with --stale: re-run exactly the stale rows' runs")
    ap.add_argument("--keep", metavar="NAME", help="row NAME keeps its figures at the current fingerprint")
    ap.add_argument("--why", help="with --keep: why the figures still stand (shown in the table)")
    a = ap.parse_args()
    if a.run and not a.stale:
        ap.error("--run goes with --stale")
    if bool(a.keep) != bool(a.why):
        ap.error("--keep and --why go together")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    names = a.only.split(",") if a.only else [r[0] for r in ROWS]
    if a.keep:
        names = [a.keep]
    unknown = set(names) - {r[0] for r in ROWS}
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}")
    rows = [r for r in ROWS if r[0] in names]
    for spec in a.adopt:
        name, seed, run_dir = spec.split(":", 2)
        row = next(r for r in ROWS if r[0] == name)
        rec, parts = adopt(row, int(seed), Path(run_dir))
        results[name] = merge(results.get(name, {}), row[2], [rec], parts)
        save(results)
    if a.keep:
        command = rows[0][2]
        results[a.keep]["kept"] = {"fingerprint": fingerprint(a.podc, command)["sha256"], "why": a.why,
                                   "commit": commit()}
        save(results)
    todo = [] if a.adopt or a.keep or a.table_only else [(r, [int(s) for s in a.seeds.split(",")]) for r in rows]
    if a.stale:
        _, stale = stale_rows(a.podc, rows, results)
        for name, why in stale.items():
            print(f"stale: {name}: {why}")
        if not a.run:
            print(f"{len(stale)} of {len(rows)} rows stale" if stale else f"every row of {len(rows)} is current")
            sys.exit(1 if stale else 0)
        todo = [(r, stale_seeds(results.get(r[0]), fingerprint(a.podc, r[2]))) for r in rows if r[0] in stale]
    for (name, what, command, bar), seeds in todo:
        file = ROOT / shlex.split(command)[1]
        if command not in header_commands(file):
            raise SystemExit(f"{file}'s header does not give `podc {command} --seed 0`: {header_commands(file)}")
        setup(a.podc, command)
        with tempfile.TemporaryDirectory() as tmp:
            for seed in seeds:
                r, parts = run(a.podc, command, seed, Path(tmp) / f"seed{seed}")
                print(f"{name} seed {seed}: last 5% {r['last5']:.3f} ({r['wall_s']} s)", flush=True)
                # Each seed is kept as it finishes: a stopped row loses only the run under way.
                results[name] = merge(results.get(name, {}), command, [r], parts)
                save(results)
    text = DOC.read_text()
    begin, end = "<!-- learning-table:begin -->", "<!-- learning-table:end -->"
    if begin not in text:
        raise SystemExit(f"{DOC} has no {begin} marker")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    current, _ = stale_rows(a.podc, ROWS, results)
    DOC.write_text(head + begin + "\n" + table(results, current) + "\n" + end + tail)
    print(table(results, current))


def stale_seeds(entry, current):
    """The seeds to re-run for a stale row: those whose runs have another fingerprint (all
    five when the command changed or the row was never run)."""
    runs = (entry or {}).get("runs", [])
    seeds = [r["seed"] for r in runs if r.get("fingerprint") != current["sha256"]]
    return seeds if runs else list(range(5))


if __name__ == "__main__":
    main()
