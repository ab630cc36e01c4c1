#!/usr/bin/env python3
"""The Nature CNN forward and backward in JAX: `jax.jit(jax.value_and_grad(loss))` on the
same network, loss and batch as bench/nature_cnn.pod (84x84x4 NHWC frames; 32 8x8/4,
64 4x4/2, 64 3x3/1 convolutions, dense 512, a scalar value head, ReLU, squared error).

Prints one JSON line: `{"compile_s", "median_s", "runs_s", "batch"}`; `median_s` is the
median wall time of `--runs` calls after one warm-up call, each ended by
`block_until_ready`.
"""
import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def value(p, xs):
    dn = ("NHWC", "HWIO", "NHWC")
    h = xs
    for k, s in [("1", 4), ("2", 2), ("3", 1)]:
        h = lax.conv_general_dilated(h, p["c" + k], (s, s), "VALID", dimension_numbers=dn)
        h = jnp.maximum(h + p["b" + k], 0.0)
    h = jnp.maximum(h.reshape(h.shape[0], -1) @ p["w4"] + p["b4"], 0.0)
    return h @ p["w5"] + p["b5"]


def loss(p, xs, ys):
    return jnp.mean((value(p, xs) - ys) ** 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shapes = {
        "c1": (8, 8, 4, 32), "b1": (32,), "c2": (4, 4, 32, 64), "b2": (64,), "c3": (3, 3, 64, 64), "b3": (64,),
        "w4": (3136, 512), "b4": (512,), "w5": (512,), "b5": (),
    }
    p = {k: jnp.asarray(rng.uniform(-1, 1, s).astype(np.float32)) for k, s in shapes.items()}
    xs = jnp.asarray(rng.uniform(-1, 1, (args.batch, 84, 84, 4)).astype(np.float32))
    ys = jnp.asarray(rng.uniform(-1, 1, (args.batch,)).astype(np.float32))
    t0 = time.perf_counter()
    f = jax.jit(jax.value_and_grad(loss)).lower(p, xs, ys).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(f(p, xs, ys))
    runs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        jax.block_until_ready(f(p, xs, ys))
        runs.append(time.perf_counter() - t0)
    print(json.dumps({"compile_s": compile_s, "median_s": statistics.median(runs), "runs_s": runs, "batch": args.batch}))


if __name__ == "__main__":
    main()
