#!/usr/bin/env python3
"""The mean return of a uniformly random policy on gymnax envs: whole episodes of
gymnax's auto-resetting `env.step` (until terminated or truncated) with actions from
`randint`, vmapped over `--episodes` keys. docs/training.md quotes it as each game's
random baseline.

    python bench/gymnax_random.py Asterix-MinAtar SpaceInvaders-MinAtar [--episodes 256]
"""
import argparse

import jax
import jax.numpy as jnp
import gymnax


def random_return(env_id, episodes, seed=0):
    env, params = gymnax.make(env_id)
    n = env.action_space(params).n

    def episode(key):
        k_reset, key = jax.random.split(key)
        _, state = env.reset(k_reset, params)

        def body(c):
            state, key, ret, done = c
            key, k_act, k_step = jax.random.split(key, 3)
            a = jax.random.randint(k_act, (), 0, n)
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
    a = ap.parse_args()
    for e in a.envs:
        mean, std = random_return(e, a.episodes)
        print(f"{e}: {mean:.3f} ± {std:.3f} over {a.episodes} episodes")
