"""podracer's env worker: steps a batch of Gymnasium, EnvPool or ALE envs for podc.

podc ships this file inside its binary and runs it as
`python worker.py CONFIG_JSON`. The protocol (docs/sebulba.md):

- fd 0 is a memfd that podc maps too; fd 1 is a Unix socket to podc. Both are moved
  away at start, so that prints (from Python or C) go to stderr and cannot corrupt the
  protocol.
- The worker writes one JSON line: the spaces, or {"error": ...} if it cannot make the env.
- podc answers one JSON line: the size of the shared memory and the offset of each
  section (actions, obs, final_obs, reward, terminated, truncated, seed).
- Then, per command byte: b"R" resets with the seed in shared memory, b"S" steps with
  the actions in shared memory; the worker answers b"r" / b"s" once the results are in
  shared memory. A worker started with "render" (`podc play`) also takes b"F": it
  answers b"f", a JSON line {"shape": [H, W, 3]} and the H*W*3 bytes of env 0's RGB
  frame where the last reset or step left it (a step's frame is drawn before its
  auto-reset, so an episode's last state is seen). End of file on the socket (podc
  closed it, or died) ends the worker, and so does podc's death (PR_SET_PDEATHSIG). An exception prints its traceback to stderr
  and exits, which podc sees as end of file.
"""

import importlib
import importlib.util
import json
import mmap
import os
import socket
import sys
import traceback


def die_with_parent(ppid):
    """SIGKILL when podc dies; if it already died before prctl, leave now."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except Exception:
        pass  # not Linux: end of file on the socket still ends the worker
    if os.getppid() != ppid:
        os._exit(0)


def import_user_module(name):
    """A dotted module name (the working directory is on sys.path) or a .py file."""
    if name.endswith(".py"):
        mod_name = os.path.splitext(os.path.basename(name))[0]
        spec = importlib.util.spec_from_file_location(mod_name, name)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {name}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod
        spec.loader.exec_module(mod)
    else:
        importlib.import_module(name)


def space_spec(np, obs_space, act_space):
    """The spaces as podc's types: (dtype, shape, action, action_start), `action` being
    {"discrete": n}, or {"box": n} with "low" and "high" lists when the Box is bounded."""
    kind = type(obs_space).__name__
    if kind == "Box":
        dt = np.dtype(obs_space.dtype)
        if dt.kind == "f":
            dtype = "f32"
        elif dt.kind == "b":
            dtype = "bool"
        elif dt == np.uint8:
            dtype = "u8"
        elif dt == np.uint32:
            dtype = "u32"
        elif dt.kind in "iu":
            dtype = "i32"
        else:
            raise ValueError(f"unsupported observation dtype {dt}")
        shape = [int(d) for d in obs_space.shape]
    elif kind == "Discrete":
        dtype, shape = "i32", []
    else:
        raise ValueError(f"unsupported observation space {obs_space}; podracer supports Box and Discrete")
    kind = type(act_space).__name__
    if kind == "Discrete":
        return dtype, shape, {"discrete": int(act_space.n)}, int(getattr(act_space, "start", 0))
    if kind == "Box" and len(act_space.shape) == 1 and np.dtype(act_space.dtype).kind == "f":
        action = {"box": int(act_space.shape[0])}
        low, high = np.asarray(act_space.low, np.float64), np.asarray(act_space.high, np.float64)
        if np.all(np.isfinite(low)) and np.all(np.isfinite(high)):
            action["low"], action["high"] = low.tolist(), high.tolist()
        elif not (np.all(low == -np.inf) and np.all(high == np.inf)):
            raise ValueError(f"unsupported action space {act_space}: bounds partly infinite")
        return dtype, shape, action, 0
    raise ValueError(f"unsupported action space {act_space}; podracer supports Discrete and one-dimensional float Box")


def package_versions():
    """Python's version and those of the packages that decide a host env's numbers, of
    those the env has imported (a run's fingerprint records them)."""
    import platform
    from importlib import metadata
    out = {"python": platform.python_version()}
    for dist, module in (("numpy", "numpy"), ("gymnasium", "gymnasium"), ("envpool", "envpool"),
                         ("ale-py", "ale_py"), ("box2d", "Box2D"), ("mujoco", "mujoco")):
        if module in sys.modules:
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
    return out


def render_error(e, what):
    """A failure to draw as the worker's start-up error: a missing drawing package (such
    as pygame, which Gymnasium raises as DependencyNotInstalled from an ImportError) is
    `missing_module`, so that podc names the pip command."""
    cause = e if isinstance(e, ImportError) else e.__cause__
    if isinstance(cause, ImportError) and cause.name:
        return {"error": "missing_module", "module": cause.name, "message": str(e)}
    return {"error": "make", "message": f"{what} cannot draw frames: {type(e).__name__}: {e}"}


def as_frame(np, frame):
    """A drawn frame as podc takes it: uint8 RGB, (H, W, 3), contiguous."""
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"it draws frames of {frame.dtype} {frame.shape}, not uint8 (H, W, 3) RGB")
    return np.ascontiguousarray(frame)


def drawing(gym):
    """A wrapper for gymnasium.make_vec's sub-envs that draws each one's frame after its
    reset and after its step, before the vector env's auto-reset (`podc play`)."""

    class Draw(gym.Wrapper):
        def reset(self, **kw):
            out = self.env.reset(**kw)
            self.frame = self.env.render()
            return out

        def step(self, action):
            out = self.env.step(action)
            self.step_frame = self.env.render()
            return out

    return Draw


class Gymnasium:
    """gymnasium.make_vec, synchronous, with same-step auto-reset (final obs in info)."""

    def __init__(self, np, env_id, kwargs, n, render=False):
        import gymnasium as gym

        self.np = np
        more = {}
        if render:
            more = {"render_mode": "rgb_array", "wrappers": [drawing(gym)]}
        self.envs = gym.make_vec(
            env_id,
            num_envs=n,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            **more,
            **kwargs,
        )
        sub = getattr(self.envs, "envs", None)
        spec = sub[0].spec if sub else self.envs.spec
        self.time_limit = getattr(spec, "max_episode_steps", None)
        self.obs_space = self.envs.single_observation_space
        self.act_space = self.envs.single_action_space
        self.stepped = False
        if render:
            modes = sub[0].metadata.get("render_modes", [])
            if "rgb_array" not in modes:
                raise ValueError(f"`{env_id}` has no `rgb_array` rendering (its render modes: {modes})")

    def probe(self):
        """Draws once, so that an env that cannot fails at start-up."""
        self.envs.reset(seed=0)
        as_frame(self.np, self.frame())

    def frame(self):
        env = self.envs.envs[0]
        return env.step_frame if self.stepped else env.frame

    def reset(self, seed, obs):
        o, _ = self.envs.reset(seed=seed)
        self.np.copyto(obs, o, casting="unsafe")
        self.stepped = False

    def step(self, actions, obs, reward, terminated, truncated, final_obs):
        o, r, te, tr, info = self.envs.step(actions)
        self.stepped = True
        self.np.copyto(obs, o, casting="unsafe")
        if "final_obs" in info:
            for i in self.np.nonzero(info["_final_obs"])[0]:
                self.np.copyto(final_obs[i], info["final_obs"][i], casting="unsafe")
        reward[:] = r
        terminated[:] = te
        truncated[:] = tr


class EnvPool:
    """envpool.make, synchronous. EnvPool resets an env on the step after its episode ends
    (that step ignores the action); resetting just the finished envs at once (`_reset` of
    their ids, EnvPool's own reset with force, drawing from each env's own generator as the
    auto-reset would) turns this into a same-step reset. Truncation is recomputed from the
    elapsed steps, since some EnvPool versions end episodes at the time limit with neither
    flag set (as Cleanba and Stoix do).

    Each step is one or two calls into EnvPool's C++ core (`_send`/`_recv`, the calls its
    own `step` and `reset` make), skipping the Python layer that builds Gymnasium's tuple
    and info dict: that layer costs about as much as the reset call, so leaving it out is
    what keeps the conversion cheap (docs/sebulba.md). EnvPool builds whose spec has other
    keys go through the public `step`/`reset` instead."""

    STATE = ("info:env_id", "elapsed_step", "done", "reward", "trunc")

    def __init__(self, np, env_id, kwargs, n, render=False):
        import envpool

        # Atari tasks get the sticky actions of Machado et al. (2018), as `ale:` envs do;
        # EnvPool's other Atari defaults are already the standard ones (docs/sebulba.md#atari).
        config = envpool.make_spec(env_id).config
        if "repeat_action_probability" in getattr(config, "_fields", ()):
            kwargs = {"repeat_action_probability": 0.25, **kwargs}
        if render:
            kwargs = {**kwargs, "render_mode": "rgb_array"}
        self.np, self.envpool, self.id, self.kwargs, self.n = np, envpool, env_id, kwargs, n
        self.render, self.last_frame = render, None
        self.seed = 0
        self.ids = np.arange(n, dtype=np.int32)
        self.ended = np.zeros(n, dtype=np.bool_)
        self.env = self.make(0)
        config = getattr(self.env.spec, "config", None)
        self.time_limit = getattr(config, "max_episode_steps", None)
        self.obs_space = self.env.observation_space
        self.act_space = self.env.action_space
        self.fast = self.core_layout()

    def core_layout(self):
        """The positions of the state arrays `_recv` returns, and the action dtype, when
        this EnvPool has the single-player layout the fast path knows; else None."""
        env = self.env
        try:
            state = list(env._state_keys)
            action_keys = list(env._action_keys)
            action_dtype = self.np.dtype(env._spec._action_spec[-1][0])
            players = env.config.get("max_num_players", 1)
        except Exception:
            return None
        obs_keys = [k for k in state if k == "obs" or k.startswith("obs:")]
        if (
            not all(k in state for k in self.STATE)
            or len(obs_keys) != 1
            or action_keys != ["env_id", "players.env_id", "action"]
            or players != 1
            or env.config.get("batch_size", self.n) not in (0, self.n)
            or not all(hasattr(env, f) for f in ("_send", "_recv", "_reset"))
        ):
            return None
        at = {k: state.index(k) for k in self.STATE}
        return at["info:env_id"], at["elapsed_step"], at["done"], at["reward"], at["trunc"], state.index(obs_keys[0]), action_dtype

    def probe(self):
        """Draws once on a pool of its own, so that an env EnvPool cannot draw fails at
        start-up and the batch's episodes stay those of its seed."""
        env = self.make(self.seed)
        try:
            env.reset()
            as_frame(self.np, env.render(env_ids=[0])[0])
        except Exception as e:
            raise ValueError(
                f"EnvPool {self.envpool.__version__} cannot draw `{self.id}` ({type(e).__name__}: {e}); "
                f"`gymnasium:` envs with `rgb_array` rendering and `ale:` games can be played"
            ) from e
        finally:
            env.close()

    def draw(self):
        if self.render:
            self.last_frame = self.env.render(env_ids=[0])[0]

    def frame(self):
        return self.last_frame

    def make(self, seed):
        # EnvPool takes int32 seeds (env i gets seed + i); podc's are 64-bit, and a
        # restarted worker's are past 2**32. Seeds below 2**31 - n are kept as they are.
        seed = int(seed) % (2**31 - self.n)
        return self.envpool.make(self.id, env_type="gymnasium", num_envs=self.n, seed=seed, **self.kwargs)

    def reset(self, seed, obs):
        # EnvPool seeds env i with seed + i when it is made, so a new seed needs a new pool.
        if seed != self.seed:
            self.env.close()
            self.env = self.make(seed)
            self.seed = seed
            self.fast = self.core_layout()
        o, info = self.env.reset()
        obs[info["env_id"]] = o
        self.draw()

    def step(self, actions, obs, reward, terminated, truncated, final_obs):
        if self.fast is None:
            return self.step_public(actions, obs, reward, terminated, truncated, final_obs)
        np, env, ids = self.np, self.env, self.ids
        i_id, i_elapsed, i_done, i_reward, i_trunc, i_obs, dtype = self.fast
        if actions.dtype != dtype:
            actions = actions.astype(dtype)
        env._send([ids, ids, actions])
        s = env._recv()
        # A sync pool returns the envs in the order sent (EnvPool writes row i of a sync
        # batch for the i-th id), so rows are env ids; the flags go straight to podc's
        # shared memory.
        trunc = s[i_trunc]
        if self.time_limit:
            np.greater_equal(s[i_elapsed], self.time_limit, out=truncated)
            np.logical_or(truncated, trunc, out=truncated)
        else:
            truncated[:] = trunc
        np.greater(s[i_done], trunc, out=terminated)  # done and not EnvPool's truncation
        done = np.flatnonzero(np.logical_or(terminated, truncated, out=self.ended))
        self.draw()  # before the resets
        if len(done):
            # Start the resets now; copy this step's results while EnvPool works.
            done = ids[done]
            env._reset(done)
        o = s[i_obs]
        obs[:] = o
        reward[:] = s[i_reward]
        if len(done):
            final_obs[done] = o[done]
            obs[done] = env._recv()[i_obs]

    def step_public(self, actions, obs, reward, terminated, truncated, final_obs):
        np = self.np
        o, r, te, tr, info = self.env.step(actions, self.ids)
        ids = info["env_id"]
        if self.time_limit:
            tr = tr | (info["elapsed_step"] >= self.time_limit)
        if np.array_equal(ids, self.ids):  # the usual order: whole-slice copies are cheapest
            ids = slice(None)
        obs[ids] = o
        reward[ids] = r
        terminated[ids] = te
        truncated[ids] = tr
        done = self.ids[ids][te | tr]
        self.draw()
        if len(done):
            final_obs[done] = obs[done]
            o2, info2 = self.env.reset(done)
            obs[info2["env_id"]] = o2


class Ale:
    """ale-py's `AtariVectorEnv` (the ALE's C++ vector env, its own thread pool and the
    standard preprocessing), with same-step auto-reset. podc sends every setting, defaults
    included (`src/host/atari.rs`); they are renamed here to ale-py's arguments.

    `recv` returns new arrays, so a step's observations are copied once, into shared
    memory; final observations (a full batch that ale-py fills only for the envs whose
    episode ended) are copied for those envs alone."""

    RENAME = {"reward_clip": "reward_clipping"}

    def __init__(self, np, game, kwargs, n, render=False):
        import ale_py
        from ale_py import roms
        from ale_py.registration import rom_id_to_name
        from ale_py.vector_env import AtariVectorEnv

        ids = roms.get_all_rom_ids()
        by_name = {rom_id_to_name(r): r for r in ids}
        rom = game if game in ids else by_name.get(game)
        if rom is None:
            import difflib

            close = difflib.get_close_matches(game, ids if game.islower() else list(by_name), n=3)
            hint = f"; did you mean {' or '.join(f'`{c}`' for c in close)}?" if close else ""
            raise ValueError(f"ale-py {ale_py.__version__} has no game `{game}`{hint}")
        args = {self.RENAME.get(k, k): v for k, v in kwargs.items()}
        # podc's episodic life is the usual one (a life lost terminates, the game goes on,
        # as EnvPool's): ale-py's `life_loss_info`. ale-py's own `episodic_life` restarts
        # the whole game at every life lost (0.12.1).
        self.episodic_life = args.pop("episodic_life")
        args["life_loss_info"] = self.episodic_life
        # ale-py limits an episode in emulator frames; podc counts agent steps.
        steps = args.pop("max_episode_steps")
        args["max_num_frames_per_episode"] = steps * args["frameskip"]
        self.np, self.n = np, n
        self.envs = AtariVectorEnv(rom, n, autoreset_mode="SameStep", **args)
        self.ale = self.envs.ale
        self.time_limit = steps
        self.obs_space = self.envs.single_observation_space
        self.act_space = self.envs.single_action_space
        self.paddle = np.ones(n, dtype=np.float32)  # paddle strength: full, as ale-py's own step
        # ale-py's vector env gives no screen. Drawing runs a twin with the same settings
        # and seeds, so the same emulation, whose observation is the full-colour screen
        # (one frame, not resized, not max-pooled); `step` checks the two stay in step.
        self.twin = None
        if render:
            screen = {"img_height": 210, "img_width": 160, "grayscale": False, "stack_num": 1, "maxpool": False}
            self.twin = AtariVectorEnv(rom, n, autoreset_mode="SameStep", **{**args, **screen})
            self.screen = None

    def reset(self, seed, obs):
        # ale-py takes int32 seeds (env i gets seed + i), as EnvPool does.
        o, info = self.envs.reset(seed=int(seed) % (2**31 - self.n))
        obs[:] = o
        self.lives = info["lives"]
        if self.twin is not None:
            self.screen = self.twin.reset(seed=int(seed) % (2**31 - self.n))[0][0, 0]

    def step(self, actions, obs, reward, terminated, truncated, final_obs):
        # `send` and `recv` of ale-py's C++ interface, as its own `step` calls them.
        self.ale.send(actions, self.paddle)
        o, r, te, tr, info = self.ale.recv()
        obs[:] = o
        reward[:] = r
        terminated[:] = te
        truncated[:] = tr
        ended = te | tr
        if self.episodic_life:
            # A life lost without a game over: the game goes on, nothing was reset, and the
            # episode's last observation is `o` (ale-py's `final_obs` rows of those envs are
            # not written). Only a reset gives a game its full lives back.
            lost = self.np.flatnonzero(ended & (info["lives"] < self.lives))
            final_obs[lost] = o[lost]
            ended[lost] = False
        self.lives = info["lives"]
        if "final_obs" in info:
            done = self.np.flatnonzero(ended)
            final_obs[done] = info["final_obs"][done]
        if self.twin is not None:
            self.twin_step(actions, r, te, ended)

    def twin_step(self, actions, reward, terminated, ended):
        self.twin.ale.send(actions, self.paddle)
        o, r, te, _, info = self.twin.ale.recv()
        if not (self.np.array_equal(r, reward) and self.np.array_equal(te, terminated)):
            raise RuntimeError("the drawing twin of the ALE envs went out of step with them")
        # Env 0's screen where the step ended: before the game's reset, if it had one.
        self.screen = (info["final_obs"] if ended[0] else o)[0, 0]

    def probe(self):
        pass

    def frame(self):
        return self.screen


def main():
    config = json.loads(sys.argv[1])
    die_with_parent(config["ppid"])
    chan = socket.socket(fileno=os.dup(1))
    os.dup2(2, 1)
    shm_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)

    def send_line(obj):
        chan.sendall((json.dumps(obj) + "\n").encode())

    def read_line():
        data = b""
        while not data.endswith(b"\n"):
            c = chan.recv(1)
            if not c:
                sys.exit(0)
            data += c
        return json.loads(data)

    backend = config["backend"]
    render = config.get("render", False)
    module = {"gymnasium": "gymnasium", "envpool": "envpool", "ale": "ale_py"}[backend]
    try:
        import numpy as np

        importlib.import_module(module)
    except ImportError as e:
        send_line({"error": "missing_module", "module": e.name or module, "message": str(e)})
        return
    try:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        for name in config["env_import"]:
            import_user_module(name)
        cls = {"gymnasium": Gymnasium, "envpool": EnvPool, "ale": Ale}[backend]
        env = cls(np, config["id"], config["kwargs"], config["num_envs"], render)
        dtype, shape, action, start = space_spec(np, env.obs_space, env.act_space)
    except Exception as e:
        traceback.print_exc()
        # Gymnasium raises DependencyNotInstalled from the ImportError of what an env needs
        # (Box2D for LunarLander): podc names the package to install.
        cause = e if isinstance(e, ImportError) else e.__cause__
        if isinstance(cause, ImportError) and cause.name:
            send_line({"error": "missing_module", "module": cause.name, "message": str(e)})
        else:
            send_line({"error": "make", "message": f"{type(e).__name__}: {e}"})
        return
    if render:
        # Some renderers abort the process (MuJoCo without an OpenGL context): this line
        # then heads the stderr tail that podc reports.
        print(f"podc worker: drawing `{backend}:{config['id']}` once to check that it can be drawn",
              file=sys.stderr, flush=True)
        try:
            env.probe()
        except Exception as e:
            traceback.print_exc()
            send_line(render_error(e, f"`{backend}:{config['id']}`"))
            return
    limit = env.time_limit
    send_line({"obs_dtype": dtype, "obs_shape": shape, "action": action,
               "time_limit": int(limit) if limit else None, "packages": package_versions()})

    layout = read_line()
    mm = mmap.mmap(shm_fd, layout["size"])
    os.close(shm_fd)
    n = config["num_envs"]
    np_dtype = {"f32": np.float32, "i32": np.int32, "u32": np.uint32, "u8": np.uint8, "bool": np.bool_}[dtype]
    numel = int(np.prod(shape)) if shape else 1

    def view(name, dt, count, shp):
        return np.frombuffer(mm, dtype=dt, count=count, offset=layout[name]).reshape(shp)

    # What the env is given: the view itself when it can be (podc does not write while the
    # worker steps), else a copy in the space's dtype or with its `start` added.
    if "box" in action:
        k = action["box"]
        actions = view("actions", np.float32, n * k, (n, k))
        act_dtype = np.dtype(env.act_space.dtype)
        to_env = (lambda a: a) if act_dtype == np.float32 else (lambda a: a.astype(act_dtype))
    else:
        actions = view("actions", np.int32, n, (n,))
        to_env = (lambda a: a + start) if start else (lambda a: a)
    obs = view("obs", np_dtype, n * numel, (n, *shape))
    final_obs = view("final_obs", np_dtype, n * numel, (n, *shape))
    reward = view("reward", np.float32, n, (n,))
    terminated = view("terminated", np.bool_, n, (n,))
    truncated = view("truncated", np.bool_, n, (n,))
    seed = view("seed", np.uint64, 1, (1,))

    while True:
        cmd = chan.recv(1)
        if cmd == b"S":
            env.step(to_env(actions), obs, reward, terminated, truncated, final_obs)
            chan.sendall(b"s")
        elif cmd == b"R":
            env.reset(int(seed[0]), obs)
            reward[:] = 0
            terminated[:] = False
            truncated[:] = False
            chan.sendall(b"r")
        elif cmd == b"F" and render:
            frame = as_frame(np, env.frame())
            header = json.dumps({"shape": list(frame.shape)}) + "\n"
            chan.sendall(b"f" + header.encode() + frame.tobytes())
        else:  # end of file (podc is gone or done with us), or b"Q"
            return


if __name__ == "__main__":
    main()
