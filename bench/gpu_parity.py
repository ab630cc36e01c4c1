#!/usr/bin/env python3
"""Compiled results on a backend against podc's reference interpreter and the env
fixtures: the numbers a new backend (a GPU changes rounding) must be checked with first.

    python3 bench/gpu_parity.py [--podc target/release/podc] [--backend cuda] [--json]

1. Every program of `tests/pass/`: `podc --backend B run FILE --json` (compiled) against
   `podc eval FILE --json` (the interpreter), output by output; the largest absolute and
   relative errors. Integers and booleans must be equal.
2. The continuous env fixtures (`tests/fixtures/envs/{cartpole,pendulum}.json`, Gymnasium's
   own steps): `podc --backend B sim` from each case's state with its actions, against the
   fixture's observations up to where float32 leaves float64's path (the fixture's
   `f32_check`); the largest absolute error (f32 rounding is expected).

Exit status 1 when an integer differs, a relative error passes 1e-3, or a command fails.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Arguments for the `main`s that take parameters (podc run --args).
ARGS = {
    "bytes.pod": [[[0, 7, 128, 255], [1, 2, 3, 250]], 3],
    "size-roots.pod": [[float(i) for i in range(9)], [float(i) / 2 for i in range(8)], [[1.0, 2.0], [3.0, 4.0]]],
}

# Env fixture -> (.pod env, the fields of its State in the fixture's `init_state` order).
ENVS = {
    "cartpole": ("examples/envs/cartpole.pod", ["x", "x_dot", "theta", "theta_dot"]),
    "pendulum": ("examples/envs/pendulum.pod", ["theta", "theta_dot"]),
}


def podc(args, cmd):
    out = subprocess.run([args.podc, *cmd], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()[-400:]}")
    return out.stdout


def leaves(v):
    if isinstance(v, list):
        for x in v:
            yield from leaves(x)
    else:
        yield v


def compare(got, want):
    """(max abs error, max relative error, integers equal) over paired leaves."""
    abs_err = rel_err = 0.0
    exact = True
    for g, w in zip(leaves(got), leaves(want), strict=True):
        if isinstance(w, bool) or isinstance(w, int):
            exact &= g == w
            continue
        e = abs(float(g) - float(w))
        abs_err = max(abs_err, e)
        rel_err = max(rel_err, e / max(abs(float(w)), 1e-6))
    return abs_err, rel_err, exact


def programs(args):
    rows = []
    for f in sorted((ROOT / "tests" / "pass").glob("*.pod")):
        extra = ["--args", json.dumps(ARGS[f.name])] if f.name in ARGS else []
        rel = str(f.relative_to(ROOT))
        try:
            dev = json.loads(podc(args, ["--backend", args.backend, "run", rel, "--json", *extra]))
            ref = json.loads(podc(args, ["eval", rel, "--json", *extra]))
            errs = [compare(d["data"], r["data"]) for d, r in zip(dev["outputs"], ref["outputs"], strict=True)]
            a, r, exact = max(e[0] for e in errs), max(e[1] for e in errs), all(e[2] for e in errs)
            rows.append({"program": rel, "max_abs": a, "max_rel": r, "ints_equal": exact, "ok": exact and r <= 1e-3})
        except Exception as e:  # noqa: BLE001 - a failing program is a row, not the end
            rows.append({"program": rel, "error": str(e), "ok": False})
    return rows


def envs(args):
    rows = []
    for name, (pod, fields) in ENVS.items():
        fixture = json.loads((ROOT / "tests" / "fixtures" / "envs" / f"{name}.json").read_text())
        worst = 0.0
        try:
            for case in fixture["step_cases"]:
                state = json.dumps(dict(zip(fields, case["init_state"])))
                actions = [s["action"] for s in case["steps"]]
                flag = json.dumps(actions) if isinstance(actions[0], list) else ",".join(map(str, actions))
                lines = podc(args, ["--backend", args.backend, "sim", pod, "--state", state, "--actions", flag]).splitlines()
                # A long open loop is chaotic: float32 leaves Gymnasium's float64 path where the
                # fixture says numpy's float32 does; only the steps before that are compared.
                horizon = case.get("f32_check", {}).get("open_loop_first_step_over_1e-4") or len(lines)
                for line, step in list(zip(lines, case["steps"], strict=True))[:horizon]:
                    worst = max(worst, compare(json.loads(line)["obs"], step["obs"])[0])
            rows.append({"env": name, "cases": len(fixture["step_cases"]), "max_abs": worst, "ok": worst <= 1e-3})
        except Exception as e:  # noqa: BLE001
            rows.append({"env": name, "error": str(e), "ok": False})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--podc", default=str(ROOT / "target" / "release" / "podc"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = {"programs": programs(args), "envs": envs(args)}
    rows = result["programs"] + result["envs"]
    result["worst_rel_program"] = max((r.get("max_rel", 0.0) for r in result["programs"]), default=0.0)
    result["worst_abs_env"] = max((r.get("max_abs", 0.0) for r in result["envs"]), default=0.0)
    result["ok"] = all(r["ok"] for r in rows)
    if args.json:
        print(json.dumps(result))
    else:
        for r in rows:
            print(r)
        print(f"worst relative error (programs): {result['worst_rel_program']:.3g}; "
              f"worst absolute error (envs): {result['worst_abs_env']:.3g}")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
