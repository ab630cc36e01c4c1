#!/usr/bin/env python3
"""JAX baseline for `podc bench train --env envpool:...`: Cleanba-style Sebulba PPO and IMPALA.

Layout, as Cleanba's (cleanba_ppo.py / cleanba_impala.py) on one device:
- `--actor-threads` actor threads, each with its own EnvPool (`--envs` envs, `send`/`recv`)
  and a jitted `act` (sample an action and its log-probability from the policy);
  rollouts of `--rollout` steps go to the learner through a queue of size 1 per thread;
- a learner thread takes one rollout from every actor thread, concatenates them along
  the env axis and runs the jitted update; the new parameters go back through a queue of
  size 1 per actor, which skips its first fetch, so actors are exactly one version behind.

The network and updates are the examples' (`examples/cartpole_ppo.pod`,
`examples/cartpole_impala.pod`): separate 2x64 tanh actor and critic, orthogonal init,
Adam (eps 1e-5) after global-norm clipping to 0.5, gamma 0.99; PPO with GAE 0.95, 4
epochs of 4 minibatches, clip 0.2, lr 2.5e-4; IMPALA with V-trace (rho-bar = c-bar = 1),
lr 1e-3. EnvPool's next-step auto-reset is used as Cleanba uses it (the step after an
episode's end resets it); for throughput this changes nothing.

Reports env steps/s = steps of all actor threads per update x updates / time, over
`--updates` updates after `--warmup` updates, and the fractions of that time the actors
(on average) and the learner waited on their queues.

    python bench/cleanba_ppo.py --algo ppo --envs 64 --actor-threads 2 --json
"""

import argparse
import json
import os
import queue
import threading
import time

import envpool
import jax
import jax.numpy as jnp
import numpy as np
import optax

GAMMA, LAMBDA, CLIP, VF, ENT = 0.99, 0.95, 0.2, 0.5, 0.01


def mlp_init(key, sizes, out_gain):
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        gain = out_gain if i == len(sizes) - 2 else np.sqrt(2)
        w = jax.nn.initializers.orthogonal(gain)(k, (n_in, n_out))
        params.append((w, jnp.zeros(n_out)))
    return params


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def act(params, obs, key):
    """The next key, and an action and its log-probability per env: one dispatch a step,
    the key split inside as Cleanba's `get_action` does."""
    key, k = jax.random.split(key)
    logits = mlp(params["actor"], obs)
    a = jax.random.categorical(k, logits)
    return key, a, jax.nn.log_softmax(logits)[jnp.arange(a.shape[0]), a]


def log_probs(params, obs, a):
    logits = mlp(params["actor"], obs)
    lp = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(lp, a[..., None], -1)[..., 0], -(jnp.exp(lp) * lp).sum(-1)


def value(params, obs):
    return mlp(params["critic"], obs)[..., 0]


def gae(rewards, values, discounts, last):
    def step(acc, x):
        r, v, nv, d = x
        acc = r + d * nv - v + d * LAMBDA * acc
        return acc, acc
    next_values = jnp.concatenate([values[1:], last[None]], 0)
    _, adv = jax.lax.scan(step, jnp.zeros_like(last), (rewards, values, next_values, discounts), reverse=True)
    return adv


def vtrace(log_rhos, discounts, rewards, values, last):
    rhos = jnp.minimum(jnp.exp(log_rhos), 1.0)
    next_values = jnp.concatenate([values[1:], last[None]], 0)
    deltas = rhos * (rewards + discounts * next_values - values)

    def step(acc, x):
        d, disc, c = x
        acc = d + disc * c * acc
        return acc, acc
    _, errs = jax.lax.scan(step, jnp.zeros_like(last), (deltas, discounts, rhos), reverse=True)
    vs = errs + values
    next_vs = jnp.concatenate([vs[1:], last[None]], 0)
    return vs, rhos * (rewards + discounts * next_vs - values)


def make_update(algo, opt):
    def ppo(params, opt_state, traj, key):
        obs, action, old_lp, reward, done, last_obs = traj
        v = value(params, obs)
        adv = gae(reward, v, GAMMA * (1 - done), value(params, last_obs))
        target = adv + v
        t, b = action.shape
        flat = lambda x: x.reshape((t * b,) + x.shape[2:])

        def loss(p, o, a, olp, ov, ad, tg):
            lp, ent = log_probs(p, o, a)
            ad = (ad - ad.mean()) / (ad.std() + 1e-8)
            ratio = jnp.exp(lp - olp)
            pg = -jnp.minimum(ratio * ad, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * ad).mean()
            nv = value(p, o)
            vc = ov + jnp.clip(nv - ov, -CLIP, CLIP)
            vl = 0.5 * jnp.maximum((nv - tg) ** 2, (vc - tg) ** 2).mean()
            return pg + VF * vl - ENT * ent.mean()

        data = tuple(map(flat, (obs, action, old_lp, v, adv, target)))

        def epoch(carry, k):
            p, s = carry
            order = jax.random.permutation(k, t * b).reshape(4, -1)

            def minibatch(carry, idx):
                p, s = carry
                g = jax.grad(loss)(p, *(x[idx] for x in data))
                u, s = opt.update(g, s, p)
                return (optax.apply_updates(p, u), s), None
            return jax.lax.scan(minibatch, (p, s), order)[0], None
        (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, 4))
        return params, opt_state

    def impala(params, opt_state, traj, key):
        obs, action, old_lp, reward, done, last_obs = traj

        def loss(p):
            lp, ent = log_probs(p, obs, action)
            v = value(p, obs)
            vs, pg = jax.vmap(vtrace, (1, 1, 1, 1, 0), 1)(jax.lax.stop_gradient(lp - old_lp), GAMMA * (1 - done), reward,
                                            jax.lax.stop_gradient(v), value(p, last_obs))
            vs, pg = jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg)
            return -(lp * pg).mean() + VF * ((v - vs) ** 2).mean() - ENT * ent.mean()
        u, opt_state = opt.update(jax.grad(loss)(params), opt_state, params)
        return optax.apply_updates(params, u), opt_state

    return jax.jit(ppo if algo == "ppo" else impala)


def actor(i, args, params_q, rollout_q, params, stop, idle):
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=args.envs, seed=args.seed + i * args.envs)
    act_fn = jax.jit(act)
    key = jax.random.PRNGKey(args.seed + 1000 + i)
    obs, _ = envs.reset()
    t_len, n = args.rollout, args.envs
    r = 0
    while not stop.is_set():
        if r >= 2:  # rollouts 0 and 1 use the initial parameters: one version behind
            t0 = time.perf_counter()
            params = params_q.get()
            idle[i] += time.perf_counter() - t0
        buf = [np.zeros((t_len, n, 4), np.float32), np.zeros((t_len, n), np.int32), np.zeros((t_len, n), np.float32),
               np.zeros((t_len, n), np.float32), np.zeros((t_len, n), np.float32)]
        for t in range(t_len):
            key, a, lp = act_fn(params, obs, key)
            a, lp = jax.device_get((a, lp))
            envs.send(a)
            buf[0][t], buf[1][t], buf[2][t] = obs, a, lp
            obs, reward, term, trunc, _ = envs.recv()
            buf[3][t], buf[4][t] = reward, np.logical_or(term, trunc)
        t0 = time.perf_counter()
        rollout_q.put((*buf, obs.copy()))
        idle[i] += time.perf_counter() - t0
        r += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", choices=["ppo", "impala"], default="ppo")
    ap.add_argument("--envs", type=int, default=64, help="envs per actor thread")
    ap.add_argument("--actor-threads", type=int, default=2)
    ap.add_argument("--rollout", type=int, help="default: 128 (PPO), 64 (IMPALA), as the examples")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.rollout = args.rollout or (128 if args.algo == "ppo" else 64)
    lr = 2.5e-4 if args.algo == "ppo" else 1e-3
    opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(lr, eps=1e-5))
    k_a, k_c = jax.random.split(jax.random.PRNGKey(args.seed))
    params = {"actor": mlp_init(k_a, [4, 64, 64, 2], 0.01), "critic": mlp_init(k_c, [4, 64, 64, 1], 1.0)}
    opt_state = opt.init(params)
    update = make_update(args.algo, opt)
    n = args.actor_threads
    params_qs = [queue.Queue(1) for _ in range(n)]
    rollout_qs = [queue.Queue(1) for _ in range(n)]
    stop, idle = threading.Event(), [0.0] * n
    threads = [threading.Thread(target=actor, args=(i, args, params_qs[i], rollout_qs[i], params, stop, idle), daemon=True)
               for i in range(n)]
    for t in threads:
        t.start()
    key = jax.random.PRNGKey(args.seed + 7)
    learner_idle, start = 0.0, None
    for u in range(args.warmup + args.updates):
        if u == args.warmup:
            start, learner_idle, idle[:] = time.perf_counter(), 0.0, [0.0] * n
        t0 = time.perf_counter()
        parts = [q.get() for q in rollout_qs]
        learner_idle += time.perf_counter() - t0
        traj = tuple(jnp.asarray(np.concatenate([p[f] for p in parts], axis=1 if f < 5 else 0)) for f in range(6))
        key, k = jax.random.split(key)
        params, opt_state = update(params, opt_state, traj, k)
        jax.block_until_ready(params)
        for q in params_qs:
            q.put(params)
    wall = time.perf_counter() - start
    stop.set()
    sps = args.updates * n * args.envs * args.rollout / wall
    out = {"steps_per_sec": sps, "envs": n * args.envs, "rollout": args.rollout, "actor_threads": n,
           "actor_idle": sum(idle) / (n * wall), "learner_idle": learner_idle / wall, "algo": args.algo}
    print(json.dumps(out) if args.json else f"{sps:.0f} env steps/s; actors idle {out['actor_idle']:.0%}, learner idle {out['learner_idle']:.0%}",
          flush=True)
    # The actor threads may be blocked on their queues or inside EnvPool, whose threads
    # abort when the interpreter tears them down: leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
