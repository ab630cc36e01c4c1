#!/usr/bin/env python3
"""gymnax throughput baseline for `podc bench env`.

B environments x T steps of gymnax's auto-reset `env.step` with uniformly random
actions, as one `jax.jit` of `lax.scan` over T of `vmap(step)`.  Reports the
compile time (wall time of `jit(f).lower(...).compile()`) and env steps/s =
B*T / t, t being the median wall time of `--runs` timed calls made after one
warm-up call (each call ends with `block_until_ready`).

    python bench/gymnax_env.py --env CartPole-v1 --envs 1024 --steps 128 --runs 5 --json
"""

import argparse
import json
import statistics
import sys
import time


def build(env_id, num_envs, num_steps):
    import jax
    import jax.numpy as jnp
    import gymnax

    env, params = gymnax.make(env_id)
    space = env.action_space(params)

    def random_actions(k):
        # Discrete: randint over the actions; a box: uniform within its bounds, as
        # `podc bench env` draws them.
        if hasattr(space, "n"):
            return jax.random.randint(k, (num_envs,), 0, space.n)
        shape = (num_envs, *space.shape)
        return jax.random.uniform(k, shape, minval=space.low, maxval=space.high).astype(space.dtype)

    def rollout(key, state):
        def one_step(carry, _):
            state, key, ret = carry
            key, k_act, k_step = jax.random.split(key, 3)
            actions = random_actions(k_act)
            step_keys = jax.random.split(k_step, num_envs)
            _, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                step_keys, state, actions, params)
            return (state, key, ret + reward), None

        ret0 = jnp.zeros((num_envs,), jnp.float32)
        (state, _, ret), _ = jax.lax.scan(one_step, (state, key, ret0), None, length=num_steps)
        return state, ret

    key = jax.random.key(0)
    k_reset, k_run = jax.random.split(key)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_envs), params)
    return jax.jit(rollout), (k_run, state)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="CartPole-v1", help="gymnax env id (CartPole-v1, Catch-bsuite, ...)")
    ap.add_argument("--envs", type=int, default=1024, help="number of parallel environments B")
    ap.add_argument("--steps", type=int, default=128, help="steps per rollout T")
    ap.add_argument("--runs", type=int, default=5, help="timed runs (median is reported); at least 1")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args(argv)
    if a.runs < 1 or a.envs < 1 or a.steps < 1:
        ap.error("--envs, --steps and --runs must be >= 1")

    import jax
    from importlib import metadata

    f, args = build(a.env, a.envs, a.steps)
    t0 = time.perf_counter()
    compiled = f.lower(*args).compile()
    compile_s = time.perf_counter() - t0

    jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    run_s = statistics.median(times)
    sps = a.envs * a.steps / run_s

    out = {"steps_per_sec": sps, "compile_s": compile_s, "envs": a.envs, "steps": a.steps,
           "env": a.env, "runs": a.runs, "run_s": run_s, "backend": jax.default_backend(),
           "jax": jax.__version__, "gymnax": metadata.version("gymnax")}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.env}: B={a.envs} T={a.steps} backend={out['backend']} jax={out['jax']} gymnax={out['gymnax']}")
        print(f"  compile      {compile_s:.3f} s")
        print(f"  run (median of {a.runs}) {run_s * 1e3:.2f} ms  [{', '.join(f'{t * 1e3:.2f}' for t in times)}]")
        print(f"  throughput   {sps:,.0f} env steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
