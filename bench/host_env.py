#!/usr/bin/env python3
"""Host env stepping, side by side: `podc bench env URI` against the backend alone.

For each pair, the same workload on both sides: B envs (`--envs`, default 64), runs of T
batch steps (`--steps`, default 128) with uniformly random actions drawn beforehand into a
table that is cycled, one untimed warm-up run, then the median of `--runs` runs (default
5); steps/s = B * T / median.

- `envpool:CartPole-v1`: podc steps EnvPool in its worker process, through shared memory,
  with same-step auto-reset; the baseline is EnvPool alone, in this process, stepped the
  plain way: `envpool.make(ID, env_type="gymnasium", num_envs=B, seed=0)`, then
  `env.step(actions)` (EnvPool's own next-step auto-reset, no conversion).
- `ale:Pong`: podc's worker runs ale-py's `AtariVectorEnv` with same-step auto-reset and
  podc's Atari defaults (docs/sebulba.md#atari); the baseline is ale-py's vector env alone,
  in this process, with the same settings (`AtariVectorEnv("pong", B,
  repeat_action_probability=0.25, reward_clipping=False)`, ale-py's defaults otherwise)
  and its default next-step auto-reset, stepped with `env.step(actions)`. Run it with
  `--envs 16 --only ale` (and `--env-workers 2` for a split).
- `gymnasium:CartPole-v1`: podc's worker runs `gymnasium.make_vec(..., "sync")` with
  same-step auto-reset; the baseline is `gymnasium.make_vec(ID, num_envs=B,
  vectorization_mode="sync")` (Gymnasium's `SyncVectorEnv`, its default next-step
  auto-reset) in this process.

The two sides alternate (`--rounds`, default 5, the order swapped every round), since these
machines are noisy; the report gives each side's median over rounds, the ratio of the
medians, and the median of the per-round ratios.

Run it with a Python that has the backends, e.g. podc's cache venv, which podc then uses
for its workers too (`--python` is passed through):

    cargo build --release
    PY=~/.cache/podracer/python-envs-gymnasium1.2.2-numpy2.2.6/bin/python
    $PY bench/host_env.py [--rounds 5] [--envs 64] [--steps 128] [--runs 5] [--only envpool]
    $PY bench/host_env.py --breakdown 40     # where the worker's EnvPool time goes, in-process
    $PY bench/host_env.py --only ale --envs 16 [--env-workers 2]      # ale:Pong against ale-py alone
    $PY bench/host_env.py --only ale --envs 16 --breakdown 20         # the worker's Atari path, in-process
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed_runs(step, actions, steps, runs):
    """Median steps/s over `runs` runs of `steps` steps, after one warm-up run; and steps
    per CPU second of this process (all its threads) over all the runs."""
    envs = actions.shape[1]
    times, t = [], 0
    cpu0 = time.process_time()
    for run in range(runs + 1):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(actions[t % len(actions)])
            t += 1
        if run > 0:
            times.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    times.sort()
    return envs * steps / times[len(times) // 2], envs * t / cpu


def action_table(np, envs, steps, n_actions):
    rng = np.random.default_rng(0)
    return rng.integers(0, n_actions, size=(min(steps, 256), envs), dtype=np.int32)


def parse_kwargs(query):
    """`k=v&k2=v2` as podc types URI keywords: bools, then ints, then floats, else strings."""
    out = {}
    for pair in filter(None, (query or "").split("&")):
        k, v = pair.split("=", 1)
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        else:
            for cast in (int, float, str):
                try:
                    out[k] = cast(v)
                    break
                except ValueError:
                    pass
    return out


def envpool_alone(env_id, envs, steps, runs, kwargs):
    import envpool
    import numpy as np

    t0 = time.perf_counter()
    env = envpool.make(env_id, env_type="gymnasium", num_envs=envs, seed=0, **kwargs)
    env.reset()
    start_s = time.perf_counter() - t0
    rate, cpu_rate = timed_runs(env.step, action_table(np, envs, steps, env.action_space.n), steps, runs)
    env.close()
    return {"steps_per_sec": rate, "compile_s": start_s, "steps_per_cpu_sec": cpu_rate}


def ale_alone(game, envs, steps, runs, kwargs):
    import numpy as np
    from ale_py import roms
    from ale_py.registration import rom_id_to_name
    from ale_py.vector_env import AtariVectorEnv

    rom = {rom_id_to_name(r): r for r in roms.get_all_rom_ids()}.get(game, game)
    # podc's Atari defaults where they differ from ale-py's, and podc's keys renamed.
    args = {"repeat_action_probability": 0.25, "reward_clipping": False}
    for k, v in kwargs.items():
        if k == "max_episode_steps":
            args["max_num_frames_per_episode"] = v * kwargs.get("frameskip", 4)
        else:
            args[{"reward_clip": "reward_clipping", "episodic_life": "life_loss_info"}.get(k, k)] = v
    t0 = time.perf_counter()
    env = AtariVectorEnv(rom, envs, **args)
    env.reset(seed=0)
    start_s = time.perf_counter() - t0
    rate, cpu_rate = timed_runs(env.step, action_table(np, envs, steps, env.single_action_space.n), steps, runs)
    env.close()
    return {"steps_per_sec": rate, "compile_s": start_s, "steps_per_cpu_sec": cpu_rate}


def gymnasium_alone(env_id, envs, steps, runs, kwargs):
    import gymnasium as gym
    import numpy as np

    t0 = time.perf_counter()
    env = gym.make_vec(env_id, num_envs=envs, vectorization_mode="sync", **kwargs)
    env.reset(seed=0)
    start_s = time.perf_counter() - t0
    rate, cpu_rate = timed_runs(env.step, action_table(np, envs, steps, env.single_action_space.n), steps, runs)
    env.close()
    return {"steps_per_sec": rate, "compile_s": start_s, "steps_per_cpu_sec": cpu_rate}


PAIRS = {
    "envpool": ("envpool:CartPole-v1", envpool_alone, "EnvPool alone (env.step, next-step reset)"),
    "gymnasium": ("gymnasium:CartPole-v1", gymnasium_alone, "Gymnasium SyncVectorEnv in-process"),
    "ale": ("ale:Pong", ale_alone, "ale-py AtariVectorEnv alone (env.step, next-step reset)"),
}


def envpool_breakdown(env_id, envs, steps, rounds):
    """Where the worker's time goes, in this process, interleaved: EnvPool's public `step`
    (the baseline), one call into its core (`_send`/`_recv`, no conversion), podc's worker
    class (src/host/worker.py, same-step reset through the core calls) and the same
    conversion through the public API (`step`, then `reset` of the finished envs)."""
    import importlib.util

    import envpool
    import numpy as np

    spec = importlib.util.spec_from_file_location("podc_worker", os.path.join(ROOT, "src", "host", "worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    actions = action_table(np, envs, steps, 2)
    raw = envpool.make(env_id, env_type="gymnasium", num_envs=envs, seed=0)
    raw.reset()
    core = envpool.make(env_id, env_type="gymnasium", num_envs=envs, seed=0)
    core.reset()
    ids = np.arange(envs, dtype=np.int32)

    def core_step(a):
        core._send([ids, ids, a])
        core._recv()

    def worker_class(public):
        env = worker.EnvPool(np, env_id, {}, envs)
        obs = np.zeros((envs, *env.obs_space.shape), np.float32)
        final_obs, reward = obs.copy(), np.zeros(envs, np.float32)
        terminated, truncated = np.zeros(envs, np.bool_), np.zeros(envs, np.bool_)
        env.reset(0, obs)
        step = env.step_public if public else env.step
        return lambda a: step(a, obs, reward, terminated, truncated, final_obs)

    variants = [("EnvPool env.step (baseline)", raw.step), ("one core call (_send/_recv)", core_step),
                ("podc worker class, same-step", worker_class(False)),
                ("same conversion via public API", worker_class(True))]
    rates = {name: [] for name, _ in variants}
    t = 0
    for r in range(rounds):
        for name, step in variants if r % 2 else variants[::-1]:
            t0 = time.perf_counter()
            for _ in range(steps):
                step(actions[t % len(actions)])
                t += 1
            rates[name].append(envs * steps / (time.perf_counter() - t0))
    base = statistics.median(rates[variants[0][0]])
    print(f"{env_id} in-process, {envs} envs, median of {rounds} interleaved runs of {steps} steps:")
    for name, _ in variants:
        m = statistics.median(rates[name])
        print(f"  {name:32s} {m:9.0f} steps/s  {m / base:.3f}x")


def ale_breakdown(game, envs, steps, rounds):
    """The worker's Atari path in this process, interleaved: ale-py's vector env alone
    (`env.step`, next-step reset: the baseline), the same with same-step reset, and podc's
    worker class (src/host/worker.py: same-step reset, the observations copied into numpy
    arrays as into shared memory), all with podc's default settings."""
    import importlib.util

    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    spec = importlib.util.spec_from_file_location("podc_worker", os.path.join(ROOT, "src", "host", "worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    args = {"repeat_action_probability": 0.25, "reward_clipping": False}
    actions = action_table(np, envs, steps, 6)
    alone = AtariVectorEnv(game.lower(), envs, **args)
    alone.reset(seed=0)
    same = AtariVectorEnv(game.lower(), envs, autoreset_mode="SameStep", **args)
    same.reset(seed=0)
    defaults = {"frameskip": 4, "maxpool": True, "stack_num": 4, "img_height": 84, "img_width": 84,
                "grayscale": True, "noop_max": 30, "repeat_action_probability": 0.25, "full_action_space": False,
                "episodic_life": False, "reward_clip": False, "use_fire_reset": True, "max_episode_steps": 27000,
                "num_threads": 0}
    env = worker.Ale(np, game, defaults, envs)
    obs = np.zeros((envs, *env.obs_space.shape), np.uint8)
    final_obs, reward = obs.copy(), np.zeros(envs, np.float32)
    terminated, truncated = np.zeros(envs, np.bool_), np.zeros(envs, np.bool_)
    env.reset(0, obs)
    variants = [("ale-py env.step (baseline)", alone.step), ("ale-py env.step, same-step reset", same.step),
                ("podc worker class, same-step", lambda a: env.step(a, obs, reward, terminated, truncated, final_obs))]
    rates = {name: [] for name, _ in variants}
    cpu_rates = {name: [] for name, _ in variants}
    t = 0
    for r in range(rounds):
        for name, step in variants if r % 2 else variants[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step(actions[t % len(actions)])
                t += 1
            rates[name].append(envs * steps / (time.perf_counter() - t0))
            cpu_rates[name].append(envs * steps / (time.process_time() - c0))
    base, cpu_base = statistics.median(rates[variants[0][0]]), statistics.median(cpu_rates[variants[0][0]])
    print(f"ale:{game} in-process, {envs} envs, median of {rounds} interleaved runs of {steps} steps:")
    for name, _ in variants:
        m, c = statistics.median(rates[name]), statistics.median(cpu_rates[name])
        print(f"  {name:34s} {m:9.0f} steps/s  {m / base:.3f}x   {c:7.0f} steps/CPU-s  {c / cpu_base:.3f}x")


def podc_bench(podc, uri, args, steps=None):
    cmd = [podc, "bench", "env", uri, "--envs", str(args.envs), "--steps", str(steps or args.steps),
           "--runs", str(args.runs), "--env-workers", str(args.env_workers), "--json", "--python", sys.executable]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def podc_cpu(podc, uri, args):
    """`podc bench env` with its CPU time (podc and its workers, reaped children of this
    process): run twice, with T and 3T steps per run, so that the difference is stepping
    alone (start-up cancels); steps per CPU second of that difference."""
    def cpu_of(steps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        got = podc_bench(podc, uri, args, steps)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return got, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    got, short = cpu_of(args.steps)
    _, long = cpu_of(3 * args.steps)
    extra_steps = (args.runs + 1) * 2 * args.steps * args.envs
    got["steps_per_cpu_sec"] = extra_steps / (long - short)
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--env-workers", type=int, default=1, help="podc's worker processes (`--env-workers`)")
    ap.add_argument("--podc", default=os.path.join(ROOT, "target", "release", "podc"))
    ap.add_argument("--only", choices=sorted(PAIRS), action="append", help="run only this pair (repeatable)")
    ap.add_argument("--json", action="store_true", help="also print one JSON line per pair")
    ap.add_argument("--query", default="", metavar="K=V&...",
                    help="keyword arguments for both sides: appended to podc's URI, passed to make")
    ap.add_argument("--cpu", action="store_true",
                    help="also compare steps per CPU second (podc run twice per round, see podc_cpu): "
                         "steadier than wall time on a loaded machine")
    ap.add_argument("--breakdown", type=int, metavar="ROUNDS", default=0,
                    help="instead, time EnvPool's variants in this process (see envpool_breakdown; "
                         "with --only ale, ale_breakdown)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    if args.breakdown:
        if args.only == ["ale"]:
            ale_breakdown("Pong", args.envs, args.steps, args.breakdown)
        else:
            envpool_breakdown("CartPole-v1", args.envs, args.steps, args.breakdown)
        return
    if not os.path.exists(args.podc):
        sys.exit(f"no podc at {args.podc}: run `cargo build --release` or pass --podc PATH")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores (nproc), load average "
          f"{os.getloadavg()[0]:.1f}; python {sys.executable}")
    print(f"B={args.envs} envs, T={args.steps} steps per run, median of {args.runs} runs after a warm-up; "
          f"{args.rounds} interleaved rounds; podc --env-workers {args.env_workers}")
    for name in args.only or ["envpool", "gymnasium"]:
        uri, alone, what = PAIRS[name]
        env_id = uri.split(":", 1)[1]
        kwargs = parse_kwargs(args.query)
        if args.query:
            uri = f"{uri}?{args.query}"
        ours, theirs, cpu_ours, cpu_theirs = [], [], [], []
        for r in range(args.rounds):
            ours_fn = podc_cpu if args.cpu else podc_bench
            sides = [("podc", lambda: ours_fn(args.podc, uri, args)),
                     ("alone", lambda: alone(env_id, args.envs, args.steps, args.runs, kwargs))]
            if r % 2:
                sides.reverse()
            got = {side: fn() for side, fn in sides}
            ours.append(got["podc"]["steps_per_sec"])
            theirs.append(got["alone"]["steps_per_sec"])
            line = (f"  round {r + 1}: podc bench env {uri} {ours[-1]:9.0f} steps/s, "
                    f"{what} {theirs[-1]:9.0f} steps/s, ratio {ours[-1] / theirs[-1]:.3f}")
            if args.cpu:
                cpu_ours.append(got["podc"]["steps_per_cpu_sec"])
                cpu_theirs.append(got["alone"]["steps_per_cpu_sec"])
                line += (f"; per CPU second {cpu_ours[-1]:.0f} vs {cpu_theirs[-1]:.0f}, "
                         f"ratio {cpu_ours[-1] / cpu_theirs[-1]:.3f}")
            print(line, flush=True)
        m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
        ratios = [o / t for o, t in zip(ours, theirs)]
        print(f"{uri}: podc {m_ours:.0f} steps/s, {what} {m_theirs:.0f} steps/s; ratio of medians "
              f"{m_ours / m_theirs:.3f}, median per-round ratio {statistics.median(ratios):.3f}")
        result = {"uri": uri, "envs": args.envs, "steps": args.steps, "env_workers": args.env_workers,
                  "podc_steps_per_sec": m_ours, "alone_steps_per_sec": m_theirs, "ratio": m_ours / m_theirs,
                  "per_round_ratios": ratios}
        if args.cpu:
            c_ours, c_theirs = statistics.median(cpu_ours), statistics.median(cpu_theirs)
            print(f"{uri}: per CPU second, podc {c_ours:.0f} steps, alone {c_theirs:.0f} steps; ratio of medians "
                  f"{c_ours / c_theirs:.3f}")
            result.update(podc_steps_per_cpu_sec=c_ours, alone_steps_per_cpu_sec=c_theirs,
                          cpu_ratio=c_ours / c_theirs)
        if args.json:
            print(json.dumps(result))


if __name__ == "__main__":
    main()
