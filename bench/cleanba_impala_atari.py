#!/usr/bin/env python3
"""JAX baseline for `podc bench train examples/atari_impala.pod --env ale:Pong`: Cleanba's
IMPALA on Atari (vwxyzjn/cleanba, `cleanba/cleanba_impala.py`), on one device.

Layout, as Cleanba's on one device (actor and learner devices both device 0):
- `--actor-threads` actor threads (Cleanba: 2), each with its own ale-py vector env of
  `--envs` envs (Cleanba's `local_num_envs`: 64) stepped with `send`/`recv`, and a jitted
  `act` (the network and a Gumbel-max sample from its logits, the key carried through);
  each step is recv -> act -> send, then the step is stored while the envs run;
- a rollout is `--rollout` (Cleanba's `num_steps`: 20) steps: T + 1 observations (the
  last one is the first of the next rollout: the bootstrap), T actions, behaviour logits,
  rewards and dones; it goes to the learner through a queue of size 1 per thread;
- the learner thread takes one rollout from every actor thread and runs the jitted update
  (its train state donated); the new parameters go back through a queue of size 1 per
  actor, which skips its second fetch, so actors are exactly one version behind and acting
  overlaps learning.

Environment: ale-py's `AtariVectorEnv` (C++ vector env with its own thread pool), as
podc's `ale:GAME` host env makes it (`src/host/worker.py`, `src/host/atari.rs`): 84x84
grayscale, frame-skip 4 with a max over the last two frames, a stack of 4 (observation
`u8[4, 84, 84]`), up to 30 no-op starts, sticky actions 0.25, the minimal action set,
FIRE on reset where the game needs it, full episodes (no episodic life), 108,000 frames
per episode at most, same-step auto-reset (the observation after an episode's end is the
reset one; its `done` masks the bootstrap), rewards unclipped (Pong's are already -1, 0 or
1; Cleanba clips them: `--reward-clip`).

Network (Cleanba's, Espeholt et al. 2018): `x / 255`, NCHW to NHWC, three ConvSequences of
16, 32, 32 channels, each a 3x3 SAME conv, a 3x3/2 SAME max-pool and two residual blocks
(relu, 3x3 conv, relu, 3x3 conv, + input); then relu, flatten, dense 256 (orthogonal
sqrt 2), relu; actor head dense |A| (orthogonal 0.01), critic head dense 1 (orthogonal 1);
convs with flax's default init (lecun normal), zero biases.

Update (Cleanba's defaults): the T x (threads x envs) batch is split along the env axis
into `--minibatches` (4) minibatches, one gradient step each. Cleanba runs them as a
`lax.scan` inside one jitted update; on XLA:CPU that while loop runs the convolutions
about 20x slower than the same step outside a loop (150 s against 8 s for a 160-step
update here), so the learner calls a jitted (and donated) minibatch step once per
minibatch instead: the same arithmetic, 4 dispatches per update. Loss per
minibatch, as Cleanba's rlax calls (sums over time and envs, not means):
  V-trace with rho-bar = c-bar = 1, lambda 1, gamma 0.99, discount gamma (1 - done);
  pg = -sum(log pi(a) * stop_grad(pg_adv)); baseline = 0.5 sum((vs - v)^2);
  entropy = -sum(H(pi)); loss = pg + 0.5 baseline + 0.01 entropy.
Optimiser: clip by global norm 40, then PyTorch-style RMSProp (g / (sqrt(nu) + eps)):
decay 0.99, eps 0.01, lr 6e-4 annealed linearly to 0 over `--total-steps` (50M) env
steps, as Cleanba's `linear_schedule`.

Reported: frames/s = env steps x frame-skip per second, where env steps = updates x
threads x envs x T over `--updates` timed updates after `--warmup` updates (wall time from
the end of the last warm-up update to the end of the last timed one); `compile_s`: the
ahead-of-time compilation of `act` and the minibatch step (`jit(...).lower(...).compile()`); the
fractions of the timed wall the actors (on average) and the learner waited on their queues.

    python bench/cleanba_impala_atari.py --game pong --envs 64 --actor-threads 2 --json
"""

import argparse
import json
import os
import queue
import sys
import threading
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="pong", help="an ale-py ROM id (pong, breakout, ...)")
    ap.add_argument("--envs", type=int, default=64, help="envs per actor thread (Cleanba's local_num_envs)")
    ap.add_argument("--actor-threads", type=int, default=2)
    ap.add_argument("--rollout", type=int, default=20, help="T, env steps per rollout (Cleanba's num_steps)")
    ap.add_argument("--minibatches", type=int, default=4, help="gradient steps per update, split along the env axis")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--total-steps", type=int, default=50_000_000, help="env steps the lr anneals over")
    ap.add_argument("--env-threads", type=int, default=0, help="ale-py's thread pool per vector env; 0: one a core")
    ap.add_argument("--reward-clip", action="store_true", help="clip rewards to their sign (Cleanba does; podc's default does not)")
    ap.add_argument("--xla-threads", choices=["multi", "single"], default="multi",
                    help="single: Cleanba's XLA_FLAGS (--xla_cpu_multi_thread_eigen=false "
                         "intra_op_parallelism_threads=1), each XLA call on one core; multi: XLA's default")
    ap.add_argument("--updates", type=int, default=10, help="timed updates")
    ap.add_argument("--warmup", type=int, default=2, help="updates before the timed ones")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


args = parse_args()
if args.xla_threads == "single":
    # Set before jax is imported, as Cleanba does.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from ale_py.vector_env import AtariVectorEnv  # noqa: E402

GAMMA, ENT, VF, MAX_GRAD_NORM = 0.99, 0.01, 0.5, 40.0
FRAMESKIP = 4


def make_envs(n, seed):
    """ale-py's vector env with podc's `ale:` defaults (src/host/atari.rs)."""
    envs = AtariVectorEnv(args.game, n, num_threads=args.env_threads, autoreset_mode="SameStep",
                          frameskip=FRAMESKIP, maxpool=True, stack_num=4, img_height=84, img_width=84,
                          grayscale=True, noop_max=30, repeat_action_probability=0.25, full_action_space=False,
                          episodic_life=False, reward_clipping=args.reward_clip, use_fire_reset=True,
                          max_num_frames_per_episode=27000 * FRAMESKIP)
    obs, _ = envs.reset(seed=seed)
    return envs, obs


class ResidualBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
        y = nn.Conv(self.channels, (3, 3))(nn.relu(x))
        y = nn.Conv(self.channels, (3, 3))(nn.relu(y))
        return x + y


class ConvSequence(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.channels, (3, 3))(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        return ResidualBlock(self.channels)(ResidualBlock(self.channels)(x))


class Agent(nn.Module):
    """impala_cnn torso with actor and critic heads: u8[N, 4, 84, 84] -> (logits [N, A], value [N])."""
    num_actions: int

    @nn.compact
    def __call__(self, obs):
        x = jnp.transpose(obs, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        for c in (16, 32, 32):
            x = ConvSequence(c)(x)
        x = nn.relu(x).reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(256, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        logits = nn.Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(0.01))(x)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(x)[:, 0]
        return logits, value


def vtrace(v_tm1, v_t, rewards, discounts, rhos):
    """rlax.vtrace_td_error_and_advantage with lambda 1 and both clips at 1, for [T] inputs:
    (vs - v_tm1, the policy-gradient advantage), targets without gradient."""
    c = jnp.minimum(rhos, 1.0)
    deltas = c * (rewards + discounts * v_t - v_tm1)

    def step(acc, x):
        d, disc, ci = x
        acc = d + disc * ci * acc
        return acc, acc

    _, acc = jax.lax.scan(step, jnp.zeros_like(v_t[-1]), (deltas, discounts, c), reverse=True)
    vs = jax.lax.stop_gradient(acc + v_tm1)
    q = jnp.concatenate([vs[1:], v_t[-1:]])
    pg_adv = jax.lax.stop_gradient(c * (rewards + discounts * q - v_tm1))
    return vs - v_tm1, pg_adv


def make_step(agent, opt):
    def loss_fn(params, obs, actions, mu_logits, rewards, dones):
        t1, b = obs.shape[:2]
        logits, values = agent.apply(params, obs.reshape((t1 * b,) + obs.shape[2:]))
        logits, values = logits.reshape(t1, b, -1)[:-1], values.reshape(t1, b)
        logp = jax.nn.log_softmax(logits)
        logp_a = jnp.take_along_axis(logp, actions[..., None], -1)[..., 0]
        mu_a = jnp.take_along_axis(jax.nn.log_softmax(mu_logits), actions[..., None], -1)[..., 0]
        rhos = jnp.exp(jax.lax.stop_gradient(logp_a) - mu_a)
        errors, pg_adv = jax.vmap(vtrace, 1, 1)(values[:-1], values[1:], rewards, GAMMA * (1.0 - dones), rhos)
        pg = -jnp.sum(logp_a * pg_adv)
        baseline = 0.5 * jnp.sum(errors ** 2)
        neg_entropy = jnp.sum(jnp.exp(logp) * logp)  # rlax's entropy_loss, summed
        return pg + VF * baseline + ENT * neg_entropy, (pg, baseline, neg_entropy)

    def step(params, opt_state, mb):
        # One minibatch: (obs [T+1, b], actions, logits, rewards, dones [T, b]).
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *mb)
        u, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, u), opt_state, (loss, *aux)

    return step


def actor(i, act, params_q, rollout_q, params, stop, stats):
    n, t_len = args.envs, args.rollout
    envs, obs = make_envs(n, args.seed + i * n)
    ale = envs.ale
    paddle = np.ones(n, np.float32)  # paddle strength, as AtariVectorEnv.step passes it
    key = jax.random.PRNGKey(args.seed + 1000 + i)
    ep_ret = np.zeros(n, np.float32)
    r = 0
    while not stop.is_set():
        if r >= 2:  # rollouts 0 and 1 use the initial parameters: one version behind
            t0 = time.perf_counter()
            params = params_q.get()
            stats["idle"][i] += time.perf_counter() - t0
        b_obs = np.empty((t_len + 1, n, *obs.shape[1:]), np.uint8)
        b_act = np.empty((t_len, n), np.int32)
        b_logits = np.empty((t_len, n, envs.single_action_space.n), np.float32)
        b_rew, b_done = np.empty((t_len, n), np.float32), np.empty((t_len, n), np.float32)
        b_obs[0] = obs
        for t in range(t_len):
            a, logits, key = act(params, obs, key)
            a = np.asarray(a)
            ale.send(a, paddle)
            b_act[t], b_logits[t] = a, logits
            obs, rew, term, trunc, _ = ale.recv()
            done = term | trunc
            b_obs[t + 1], b_rew[t], b_done[t] = obs, rew, done
            ep_ret += rew
            if done.any():
                stats["returns"].extend(ep_ret[done].tolist())
                ep_ret[done] = 0.0
        t0 = time.perf_counter()
        rollout_q.put((b_obs, b_act, b_logits, b_rew, b_done))
        stats["idle"][i] += time.perf_counter() - t0
        obs = b_obs[-1]
        r += 1


def main():
    k = args.actor_threads
    if (k * args.envs) % args.minibatches:
        sys.exit(f"threads x envs ({k * args.envs}) must be a multiple of --minibatches ({args.minibatches})")
    probe = AtariVectorEnv(args.game, 1, full_action_space=False)
    num_actions = int(probe.single_action_space.n)
    probe.close()
    agent = Agent(num_actions)
    batch = k * args.envs * args.rollout
    num_updates = max(1, args.total_steps // batch)
    # Cleanba's linear_schedule: counts optimiser steps, m of them per update.
    lr = lambda count: args.lr * (1.0 - (count // args.minibatches) / num_updates)  # noqa: E731
    opt = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM),
                      optax.rmsprop(lr, decay=0.99, eps=0.01, eps_in_sqrt=False))
    key = jax.random.PRNGKey(args.seed)
    obs_shape = (4, 84, 84)
    params = agent.init(key, np.zeros((1, *obs_shape), np.uint8))
    opt_state = opt.init(params)

    def act(params, obs, key):
        logits, _ = agent.apply(params, obs)
        key, k = jax.random.split(key)
        u = jax.random.uniform(k, logits.shape)
        return jnp.argmax(logits - jnp.log(-jnp.log(u)), axis=1).astype(jnp.int32), logits, key

    t0 = time.perf_counter()
    act_c = jax.jit(act).lower(params, np.zeros((args.envs, *obs_shape), np.uint8), key).compile()
    sd = jax.ShapeDtypeStruct
    t_len, b = args.rollout, k * args.envs // args.minibatches
    mb_shapes = (sd((t_len + 1, b, *obs_shape), np.uint8), sd((t_len, b), np.int32),
                 sd((t_len, b, num_actions), np.float32), sd((t_len, b), np.float32), sd((t_len, b), np.float32))
    step_c = jax.jit(make_step(agent, opt), donate_argnums=(0, 1)).lower(params, opt_state, mb_shapes).compile()
    compile_s = time.perf_counter() - t0

    params_qs = [queue.Queue(1) for _ in range(k)]
    rollout_qs = [queue.Queue(1) for _ in range(k)]
    stop = threading.Event()
    stats = {"idle": [0.0] * k, "returns": []}
    # The update donates the learner's parameters; actors get their own copies.
    copy = lambda p: jax.tree.map(lambda x: x.copy(), p)  # noqa: E731
    threads = [threading.Thread(target=actor, args=(i, act_c, params_qs[i], rollout_qs[i], copy(params), stop, stats),
                                daemon=True) for i in range(k)]
    for th in threads:
        th.start()
    learner_idle, start, losses = 0.0, None, None
    for u in range(args.warmup + args.updates):
        if u == args.warmup:
            start, learner_idle, stats["idle"][:] = time.perf_counter(), 0.0, [0.0] * k
        t0 = time.perf_counter()
        parts = [q.get() for q in rollout_qs]
        learner_idle += time.perf_counter() - t0
        data = [np.concatenate(xs, axis=1) for xs in zip(*parts)]
        for j in range(args.minibatches):
            params, opt_state, losses = step_c(params, opt_state, tuple(x[:, j * b:(j + 1) * b] for x in data))
        acting = copy(params)
        jax.block_until_ready(acting)
        for q in params_qs:
            q.put(acting)
        if not args.json:
            print(f"update {u + 1}{'*' if u < args.warmup else ''}: loss {float(losses[0]):.4g}, "
                  f"{len(stats['returns'])} episodes", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    stop.set()
    sps = args.updates * batch / wall
    rets = stats["returns"]
    out = {"frames_per_sec": sps * FRAMESKIP, "env_steps_per_sec": sps, "compile_s": compile_s,
           "envs": k * args.envs, "actor_threads": k, "rollout": args.rollout, "minibatches": args.minibatches,
           "updates": args.updates, "warmup": args.warmup, "wall_s": wall,
           "actor_idle": sum(stats["idle"]) / (k * wall), "learner_idle": learner_idle / wall,
           "loss": float(losses[0]), "episodes": len(rets), "mean_return": float(np.mean(rets)) if rets else None,
           "game": args.game, "xla_threads": args.xla_threads, "env_threads": args.env_threads,
           "backend": jax.default_backend(), "jax": jax.__version__}
    if args.json:
        print(json.dumps(out), flush=True)
    else:
        print(f"{out['frames_per_sec']:.0f} frames/s ({sps:.0f} env steps/s); compile {compile_s:.1f} s; "
              f"actors idle {out['actor_idle']:.0%}, learner idle {out['learner_idle']:.0%}", flush=True)
    # Actor threads may be blocked on their queues or inside ale-py: leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
