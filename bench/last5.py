#!/usr/bin/env python3
"""The "last 5%" of a run that docs/training.md quotes: the mean return of the episodes
that ended in the last 5% of the run's env steps (the reports covering them, weighted by
their episode counts), one line per run directory.

    python3 bench/last5.py runs/latest [RUN_DIR..]
"""
import json
import sys
from pathlib import Path


def last5(run: Path) -> float:
    reports = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    end = reports[-1]["env_steps"]
    tail = [r for r in reports if r["env_steps"] > 0.95 * end and r.get("episodes", 0) > 0] or reports[-1:]
    episodes = sum(r["episodes"] for r in tail)
    return sum(r["episode_return"] * r["episodes"] for r in tail) / episodes


if __name__ == "__main__":
    for d in sys.argv[1:]:
        print(f"{d}\t{last5(Path(d)):.1f}")
