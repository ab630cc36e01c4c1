#!/usr/bin/env python3
"""JAX baseline for `podc bench train`: PureJaxRL-style Anakin A2C and PPO, tuned for XLA:CPU.

One call of the compiled function runs K updates (`lax.scan`). Each update rolls out
T steps of B auto-resetting gymnax envs (vmapped; B/D per device), computes the loss
and its gradient, averages the gradient over D devices (`lax.pmean`) and takes an Adam
step. The envs, episode bookkeeping and the optimiser state carry over from one call to
the next, so successive calls keep training. D = 1 is `jax.jit`; D > 1 is
`jax.jit(jax.shard_map(...))` over a mesh of D CPU devices (`--parallel pmap` for
`jax.pmap`). The training state is donated to each call.

What makes it fast on CPU (bench/README.md has the measurements): the loss runs on the
rollout flattened to [T*B, ...] rows (`--loss-layout rollout` keeps [T, B, ...], which
makes XLA copy every [T, B, 64] activation gradient to a transposed layout). No XLA
flag that was tried helped beyond the noise, so it sets none but the device count.

Reports the compile time (wall time of `lower(...).compile()`, in a fresh process with
JAX's persistent compilation cache off) and env steps/s = B*T*K / t over `--runs` timed
measurements after one warm-up call; `steps_per_sec` is their median. Each measurement
is one call ended by `block_until_ready`, as `podc bench train` times a call (it returns
once the call's metrics are downloaded); `--pipeline N` times N calls dispatched back to
back with one wait at the end instead.

    python bench/purejaxrl.py --algo a2c --env catch --envs 1024 --rollout 16 \\
        --updates-per-call 10 --devices 2 --runs 5 --json
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ENVS = {"catch": "Catch-bsuite", "cartpole": "CartPole-v1"}
GAMMA, GAE_LAMBDA = 0.99, 0.95
MAX_GRAD_NORM = 0.5
# Adam's eps: 1e-5, but 3e-3 for A2C on CartPole, as examples/cartpole_a2c.pod says why.
ADAM_EPS = {("a2c", "cartpole"): 3e-3}
VF_COEF, ENT_COEF = 0.5, 0.01
PPO_CLIP = 0.2
LR = {"a2c": 7e-4, "ppo": 2.5e-4}


def build(algo, env_name, num_envs, rollout, updates, devices, epochs, minibatches, seed, flatten):
    """Returns (fn, runner): fn(runner) -> (runner, metrics) for one device's share of
    the envs (collectives over axis "d" when D > 1), not yet jitted; the runner is
    stacked over a leading device axis when D > 1."""
    import jax
    import jax.numpy as jnp
    import optax
    import gymnax
    import flax.linen as nn
    from flax.linen.initializers import constant, orthogonal

    env, env_params = gymnax.make(ENVS[env_name])
    n_actions = env.action_space(env_params).n
    local = num_envs // devices
    axis = "d" if devices > 1 else None
    pmean = (lambda x: jax.lax.pmean(x, axis)) if axis else (lambda x: x)
    psum = (lambda x: jax.lax.psum(x, axis)) if axis else (lambda x: x)

    class ActorCritic(nn.Module):
        @nn.compact
        def __call__(self, obs):
            def mlp(out, gain):
                x = obs
                for _ in range(2):
                    x = nn.tanh(nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(x))
                return nn.Dense(out, kernel_init=orthogonal(gain), bias_init=constant(0.0))(x)

            return mlp(n_actions, 0.01), jnp.squeeze(mlp(1, 1.0), -1)

    net = ActorCritic()
    tx = optax.chain(optax.clip_by_global_norm(MAX_GRAD_NORM), optax.adam(LR[algo], eps=ADAM_EPS.get((algo, env_name), 1e-5)))

    def policy(params, obs, actions):
        """Log-prob of `actions`, entropy and value under `params`."""
        logits, value = net.apply(params, obs)
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, actions[..., None], -1)[..., 0]
        entropy = -jnp.sum(jnp.exp(logp_all) * logp_all, -1)
        return logp, entropy, value

    def env_step(carry, _):
        params, env_state, obs, ep_ret, ep_len, key = carry
        key, k_act, k_step = jax.random.split(key, 3)
        logits, value = net.apply(params, obs)
        action = jax.random.categorical(k_act, logits)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
        next_obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, local), env_state, action, env_params)
        done = terminated | truncated  # as PureJaxRL: a truncated episode is not bootstrapped either
        # LogWrapper-style bookkeeping: totals of the episodes that ended at this step.
        ep_ret, ep_len = ep_ret + reward, ep_len + 1
        ended = (jnp.sum(ep_ret * done), jnp.sum(ep_len * done), jnp.sum(done))
        ep_ret, ep_len = jnp.where(done, 0.0, ep_ret), jnp.where(done, 0, ep_len)
        traj = (obs, action, logp, value, reward, done.astype(jnp.float32))
        return (params, env_state, next_obs.reshape(local, -1), ep_ret, ep_len, key), (traj, ended)

    def gae(values, rewards, dones, last_value):
        def back(carry, x):
            adv, next_value = carry
            value, reward, done = x
            delta = reward + GAMMA * next_value * (1 - done) - value
            adv = delta + GAMMA * GAE_LAMBDA * (1 - done) * adv
            return (adv, value), adv

        _, advs = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), (values, rewards, dones), reverse=True)
        return advs, advs + values

    def a2c_loss(params, obs, actions, advs, targets):
        logp, entropy, value = policy(params, obs, actions)
        pg, vf, ent = -jnp.mean(logp * advs), jnp.mean((value - targets) ** 2), jnp.mean(entropy)
        return pg + VF_COEF * vf - ENT_COEF * ent, (pg, vf, ent)

    def ppo_loss(params, obs, actions, old_logp, old_value, advs, targets):
        logp, entropy, value = policy(params, obs, actions)
        value_clipped = old_value + jnp.clip(value - old_value, -PPO_CLIP, PPO_CLIP)
        vf = 0.5 * jnp.mean(jnp.maximum((value - targets) ** 2, (value_clipped - targets) ** 2))
        ratio = jnp.exp(logp - old_logp)
        advs = (advs - advs.mean()) / (advs.std() + 1e-8)
        pg = -jnp.mean(jnp.minimum(ratio * advs, jnp.clip(ratio, 1 - PPO_CLIP, 1 + PPO_CLIP) * advs))
        ent = jnp.mean(entropy)
        return pg + VF_COEF * vf - ENT_COEF * ent, (pg, vf, ent)

    def sgd_step(params, opt_state, loss_fn, *batch):
        """One gradient step on a batch of [N, M, ...] arrays (time-major rollout or
        env-major minibatch), flattened to [N*M, ...] rows first unless `flatten` is off."""
        if flatten:
            batch = [x.reshape(-1, *x.shape[2:]) for x in batch]
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, *batch)
        updates, opt_state = tx.update(pmean(grads), opt_state)
        return optax.apply_updates(params, updates), opt_state, (loss, *aux)

    def ppo_epochs(params, opt_state, key, batch):
        """As examples/cartpole_ppo.pod: every epoch the device's envs are shuffled and
        split into `minibatches` groups, each a minibatch of all T steps of its envs."""
        batch = [jnp.swapaxes(x, 0, 1) for x in batch]  # env-major [B, T, ...]: a minibatch is whole rows

        def epoch(carry, _):
            params, opt_state, key = carry
            key, k_perm = jax.random.split(key)
            order = jax.random.permutation(k_perm, local).reshape(minibatches, -1)
            mbs = [jnp.take(x, order, axis=0) for x in batch]  # [minibatches, B/minibatches, T, ...]

            def minibatch(carry, mb):
                params, opt_state = carry
                params, opt_state, losses = sgd_step(params, opt_state, ppo_loss, *mb)
                return (params, opt_state), losses

            (params, opt_state), losses = jax.lax.scan(minibatch, (params, opt_state), mbs)
            return (params, opt_state, key), losses

        (params, opt_state, key), losses = jax.lax.scan(epoch, (params, opt_state, key), None, length=epochs)
        return params, opt_state, key, [jnp.mean(x) for x in losses]

    def update(runner, _):
        params, opt_state, env_state, obs, ep_ret, ep_len, key = runner
        carry, (traj, ended) = jax.lax.scan(
            env_step, (params, env_state, obs, ep_ret, ep_len, key), None, length=rollout)
        _, env_state, obs, ep_ret, ep_len, key = carry
        t_obs, t_act, t_logp, t_value, t_reward, t_done = traj
        _, last_value = net.apply(params, obs)
        advs, targets = gae(t_value, t_reward, t_done, last_value)
        if algo == "a2c":
            params, opt_state, losses = sgd_step(params, opt_state, a2c_loss, t_obs, t_act, advs, targets)
        else:
            params, opt_state, key, losses = ppo_epochs(
                params, opt_state, key, (t_obs, t_act, t_logp, t_value, advs, targets))
        stats = tuple(jnp.sum(x) for x in ended)
        return (params, opt_state, env_state, obs, ep_ret, ep_len, key), (stats, losses)

    def call(runner):
        runner, ((ret_sum, len_sum, count), losses) = jax.lax.scan(update, runner, None, length=updates)
        metrics = {"return_sum": psum(jnp.sum(ret_sum)), "length_sum": psum(jnp.sum(len_sum)),
                   "episodes": psum(jnp.sum(count))}
        for name, x in zip(("loss", "actor_loss", "value_loss", "entropy"), losses):
            metrics[name] = pmean(jnp.mean(x))
        return runner, metrics

    def init_device(key):
        k_net, k_reset, k_run = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, local), env_params)
        obs = obs.reshape(local, -1)
        params = net.init(k_net, obs[0])
        return params, env_state, obs, k_run

    keys = jax.random.split(jax.random.key(seed), devices)
    parts = [init_device(k) for k in keys]
    params = parts[0][0]  # every device starts from the same parameters
    per_device = [(params, tx.init(params), s, o, jnp.zeros(local), jnp.zeros(local, jnp.int32), k)
                  for _, s, o, k in parts]
    if devices == 1:
        return call, per_device[0]
    return call, jax.tree.map(lambda *xs: jnp.stack(xs), *per_device)


def compile_for(fn, runner, devices, parallel, devs=None):
    """(compiled, runner on the devices, compile seconds): the jitted (D = 1) or
    device-parallel function compiled for `runner`, which it donates, on `devs` (default:
    the first D devices of the default backend)."""
    import jax

    devs = devs or jax.devices()[:devices]
    if devices == 1:
        wrapped, runner = jax.jit(fn, donate_argnums=0), jax.device_put(runner, devs[0])
    elif parallel == "pmap":
        wrapped = jax.pmap(fn, axis_name="d", devices=devs, donate_argnums=0)
    else:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        mesh = Mesh(np.array(devs), ("d",))

        def per_device(runner):  # each device's block has a leading axis of 1
            runner, metrics = fn(jax.tree.map(lambda x: x[0], runner))
            return jax.tree.map(lambda x: x[None], runner), metrics

        # The metrics are psum/pmean results, the same on every device: out spec P().
        wrapped = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("d"), out_specs=(P("d"), P())),
                          donate_argnums=0)
        runner = jax.device_put(runner, NamedSharding(mesh, P("d")))
    t0 = time.perf_counter()
    compiled = wrapped.lower(runner).compile()
    return compiled, runner, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", choices=["a2c", "ppo"], default="a2c")
    ap.add_argument("--env", choices=sorted(ENVS), default="catch")
    ap.add_argument("--envs", type=int, default=1024, help="environments B, over all devices")
    ap.add_argument("--rollout", type=int, default=16, help="steps per rollout T")
    ap.add_argument("--updates-per-call", type=int, default=10, help="updates K per compiled call")
    ap.add_argument("--devices", type=int, default=1, help="devices D (CPU: forced host devices)")
    ap.add_argument("--epochs", type=int, default=4, help="PPO epochs per update")
    ap.add_argument("--minibatches", type=int, default=4, help="PPO minibatches per epoch")
    ap.add_argument("--runs", type=int, default=5, help="timed measurements (median is reported); at least 1")
    ap.add_argument("--pipeline", type=int, default=1, metavar="N",
                    help="calls per timed measurement, dispatched back to back with one wait at the end "
                         "(1, the default: each call waited for, as podc bench train)")
    ap.add_argument("--parallel", choices=["shard_map", "pmap"], default="shard_map",
                    help="for D > 1: jax.jit(jax.shard_map(...)) over a device mesh, or jax.pmap")
    ap.add_argument("--loss-layout", choices=["flat", "rollout"], default="flat",
                    help="the loss on [T*B, ...] rows, or on the rollout's own [T, B, ...] (slower)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--expect-return", type=float, metavar="R",
                    help="exit with status 1 unless the last call's mean episode return is at least R")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args(argv)
    for flag in ("envs", "rollout", "updates_per_call", "devices", "epochs", "minibatches", "runs", "pipeline"):
        if getattr(a, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be >= 1")
    if a.envs % a.devices:
        ap.error(f"--envs {a.envs} is not a multiple of --devices {a.devices}")
    if a.algo == "ppo" and (a.envs // a.devices) % a.minibatches:
        ap.error(f"the per-device envs B/D = {a.envs // a.devices} do not split into {a.minibatches} minibatches")

    # Must precede the first import of jax: the CPU client reads it once.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={a.devices}"])
    import jax

    jax.config.update("jax_enable_compilation_cache", False)  # a cold compile, as podc's is measured
    if len(jax.devices()) < a.devices:
        ap.error(f"--devices {a.devices}: only {len(jax.devices())} {jax.default_backend()} devices")
    fn, runner = build(a.algo, a.env, a.envs, a.rollout, a.updates_per_call, a.devices, a.epochs, a.minibatches,
                       a.seed, a.loss_layout == "flat")
    compiled, runner, compile_s = compile_for(fn, runner, a.devices, a.parallel)

    def measure(runner, calls):
        """Runs `calls` calls back to back, then waits: (runner, their metrics, seconds)."""
        outs = []
        t0 = time.perf_counter()
        for _ in range(calls):
            runner, metrics = compiled(runner)
            outs.append(metrics)
        jax.block_until_ready((runner, outs))
        elapsed = time.perf_counter() - t0
        # Replicated over devices: the first element is every device's value.
        return runner, [{k: float(np.asarray(v).reshape(-1)[0]) for k, v in m.items()} for m in outs], elapsed

    steps = a.envs * a.rollout * a.updates_per_call
    runner, history, elapsed = measure(runner, 1)  # the untimed warm-up
    warmup_rate, rates = steps / elapsed, []
    for _ in range(a.runs):
        runner, metrics, elapsed = measure(runner, a.pipeline)
        rates.append(steps * a.pipeline / elapsed)
        history += metrics
    last = history[-1]
    mean_return = last["return_sum"] / last["episodes"] if last["episodes"] else float("nan")

    out = {"compile_s": compile_s, "steps_per_sec": statistics.median(rates), "runs": rates, "envs": a.envs,
           "rollout": a.rollout, "updates_per_call": a.updates_per_call, "devices": a.devices, "algo": a.algo,
           "env": a.env, "mean_return": mean_return, "pipeline": a.pipeline, "parallel": a.parallel,
           "loss_layout": a.loss_layout, "xla_flags": os.environ["XLA_FLAGS"], "backend": jax.default_backend(),
           "jax": jax.__version__}
    if a.algo == "ppo":
        out.update(epochs=a.epochs, minibatches=a.minibatches)
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{a.algo} on {ENVS[a.env]}: B={a.envs} T={a.rollout} K={a.updates_per_call} D={a.devices} "
              f"backend={out['backend']} jax={out['jax']} XLA_FLAGS={out['xla_flags']!r}")
        print(f"  compile      {compile_s:.3f} s")
        per_call = [warmup_rate] + [r for r in rates for _ in range(a.pipeline)]
        for i, (m, r) in enumerate(zip(history, per_call)):
            ret = m["return_sum"] / m["episodes"] if m["episodes"] else float("nan")
            length = m["length_sum"] / m["episodes"] if m["episodes"] else float("nan")
            print(f"  call {i:3d}{'*' if i == 0 else ' '}: {r:12,.0f} steps/s  episodes {m['episodes']:8.0f}  return {ret:8.3f}  "
                  f"length {length:6.1f}  loss {m['loss']:8.4f}  entropy {m['entropy']:.3f}")
        print(f"  throughput   {out['steps_per_sec']:,.0f} env steps/s (median of {a.runs} measurements of "
              f"{a.pipeline} call(s) each; *: warm-up)")
    if a.expect_return is not None and not mean_return >= a.expect_return:
        print(f"mean episode return {mean_return:.3f} of the last call is below --expect-return {a.expect_return}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
