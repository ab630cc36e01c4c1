"""Checks that two podc binaries train bit for bit alike: the same commands give the same
metrics (timings aside) and the same checkpoint bytes. For refactors that must not change
behaviour (issue 19's run loop).

    python3 bench/same_runs.py OLD_PODC NEW_PODC

Runs, each with both binaries, from the repository root: Anakin on one device, on two,
with `--seeds 3`, and a run resumed from its checkpoint; Sebulba on the agent's own `pod:`
env, and resumed. Exits 1 on any difference, naming the file.
"""

import filecmp
import json
import os
import subprocess
import sys
import tempfile

CATCH = "examples/catch_a2c.pod"
POD_ENV = "pod:examples/envs/catch.pod?env=Catch"
# name: (flags, the run it resumes or None)
RUNS = {
    "one_device": ("--total-steps 30000 --seed 3", None),
    "two_devices": ("--total-steps 30000 --seed 3 --devices 2 --envs 64", None),
    "seeds": ("--total-steps 30000 --seed 5 --seeds 3 --checkpoint-every 2", None),
    "half": ("--total-steps 15000 --seed 3 --checkpoint-every 1", None),
    "resumed": ("--total-steps 30000 --seed 3", "half"),
    "sebulba": (f"--env {POD_ENV} --total-steps 20000 --seed 2 --checkpoint-every 2", None),
    "sebulba_half": (f"--env {POD_ENV} --total-steps 10000 --seed 2", None),
    "sebulba_resumed": (f"--env {POD_ENV} --total-steps 20000 --seed 2", "sebulba_half"),
}
TIMING = {"steps_per_sec", "wall_s", "actor_idle", "learner_idle"}


def train(podc, out):
    for name, (flags, resume) in RUNS.items():
        cmd = [podc, "train", CATCH, *flags.split(), "-q", "--out", os.path.join(out, name)]
        if resume:
            cmd += ["--resume", os.path.join(out, resume)]
        subprocess.run(cmd, check=True)


def records(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    # Keys in order, values without the timings.
    return [[(k, v) for k, v in r.items() if k not in TIMING] for r in lines]


def main():
    old, new = (os.path.abspath(p) for p in sys.argv[1:3])
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "old"), os.path.join(tmp, "new")
        train(old, a)
        train(new, b)
        differ = []
        for name in RUNS:
            for f in sorted(os.listdir(os.path.join(a, name))):
                pa, pb = os.path.join(a, name, f), os.path.join(b, name, f)
                # The curve is drawn, and TensorBoard's files are named and stamped, per run.
                if f == "curve.png" or f.startswith("events.out.tfevents."):
                    continue
                same = records(pa) == records(pb) if f.endswith(".jsonl") else filecmp.cmp(pa, pb, shallow=False)
                if not same:
                    differ.append(f"{name}/{f}")
        print("differ: " + ", ".join(differ) if differ else f"same metrics and checkpoints in {len(RUNS)} runs")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
