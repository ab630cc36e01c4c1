#!/usr/bin/env python3
"""Side-by-side convolution throughput: the Nature CNN forward and backward at batch 256,
`podc bench run bench/nature_cnn.pod` against `jax.jit(jax.value_and_grad(...))` of the
same network (bench/nature_cnn_jax.py), interleaved.

The two are run alternately, ROUNDS times each, so that the noise of a shared machine hits
both; each side's figure is the median over the rounds of its median-of-`--runs` call
time. Prints both and the ratio podc / JAX (time per call: below 1 is podc faster).

    python3 bench/compare_conv.py [--rounds 3] [--runs 10] [--podc target/release/podc]

The JAX side needs a venv with jax (`$VENV`, default /tmp/venv-bench). Only the timed calls
count, so a debug build of podc measures the same executable as a release one.
"""
import argparse
import os
import statistics

from compare_env import ROOT, HERE, cpu_model, run_json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--podc", default=os.path.join(ROOT, "target", "release", "podc"))
    args = ap.parse_args()
    python = os.path.join(os.environ.get("VENV", "/tmp/venv-bench"), "bin", "python")
    podc_cmd = [args.podc, "--no-cache", "bench", "run", "bench/nature_cnn.pod", "--entry", "main",
                "--runs", str(args.runs), "--json"]
    jax_cmd = [python, os.path.join(HERE, "nature_cnn_jax.py"), "--runs", str(args.runs)]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; Nature CNN forward+backward, B=256, "
          f"{args.rounds} interleaved rounds of median-of-{args.runs} calls")
    podc, jax = [], []
    for r in range(args.rounds):
        p, j = run_json(podc_cmd), run_json(jax_cmd)
        podc.append(p["median_s"])
        jax.append(j["median_s"])
        print(f"round {r + 1}: podc {p['median_s'] * 1e3:.1f} ms (compile {p['compile_s']:.1f} s), "
              f"jax {j['median_s'] * 1e3:.1f} ms (compile {j['compile_s']:.1f} s)")
    pm, jm = statistics.median(podc), statistics.median(jax)
    print(f"median: podc {pm * 1e3:.1f} ms, jax {jm * 1e3:.1f} ms per call; podc / jax = {pm / jm:.3f}")


if __name__ == "__main__":
    main()
