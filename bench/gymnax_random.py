#!/usr/bin/env python3
"""The mean return of a uniformly random policy on gymnax envs: whole episodes of
gymnax's auto-resetting `env.step` (until terminated or truncated) with actions from
`randint`, vmapped over `--episodes` keys; with `--action A`, of the policy that always
takes action A. docs/training.md quotes them as each game's baselines.

    python bench/gymnax_random.py Asterix-MinAtar SpaceInvaders-MinAtar Freeway-MinAtar [--episodes 256]
    python bench/gymnax_random.py Freeway-MinAtar --action 1     # always up
"""
import argparse

import jax
import jax.numpy as jnp
import gymnax


def random_return(env_id, episodes, seed=0, action=None):
    env, params = gymnax.make(env_id)
    n = env.action_space(params).n

    def episode(key):
        k_reset, key = jax.random.split(key)
        _, state = env.reset(k_reset, params)

        def body(c):
            state, key, ret, done = c
            key, k_act, k_step = jax.random.split(key, 3)
            a = jax.random.randint(k_act, (), 0, n) if action is None else jnp.int32(action)
            _, state, r, term, trunc, _ = env.step(k_step, state, a, params)
            return state, key, ret + r, jnp.logical_or(term, trunc)

        _, _, ret, _ = jax.lax.while_loop(lambda c: jnp.logical_not(c[3]), body, (state, key, 0.0, False))
        return ret

    rets = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.key(seed), episodes))
    return float(rets.mean()), float(rets.std())


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("envs", nargs="+")
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--action", type=int, help="always take this action instead")
    a = ap.parse_args()
    policy = "random" if a.action is None else f"always action {a.action}"
    for e in a.envs:
        mean, std = random_return(e, a.episodes, action=a.action)
        print(f"{e} ({policy}): {mean:.3f} ± {std:.3f} over {a.episodes} episodes")
