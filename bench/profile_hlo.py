#!/usr/bin/env python3
"""Where an XLA program's time goes, thunk by thunk, and A/B timing of programs.

podc's programs reach XLA as HLO; `XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_proto"`
makes the CPU plugin write them (`DIR/module_*.before_optimizations.hlo.pb`). This script
compiles such a dump with jaxlib and runs it under `jax.profiler`, whose trace has one
event per XLA thunk (a fusion, a dot, a while loop), and sums them by name; the same for
bench/purejaxrl.py's program, so that the two can be read side by side. Only jaxlib's CPU
client reports thunks to the profiler, so profiles are of jaxlib's XLA; `ab` times dumps
on podc's CPU plugin itself (loaded into jax as a PJRT plugin) or on jaxlib's, calls
interleaved, which is how a change to podc's lowering is measured; `vs` runs a podc dump
next to `purejaxrl.py`'s program (the same workload), call by call in one process.

    # podc's A2C program, dumped, then profiled
    XLA_FLAGS="--xla_dump_to=/tmp/d --xla_dump_hlo_as_proto --xla_dump_hlo_module_re=anakin_train" \\
        podc bench train examples/cartpole_a2c.pod --envs 1024 --runs 1 --no-cache
    python bench/profile_hlo.py hlo /tmp/d/module_0000.anakin_train.before_optimizations.hlo.pb
    python bench/profile_hlo.py purejaxrl --algo a2c --env cartpole     # the JAX side
    python bench/profile_hlo.py ab --backend plugin OLD.hlo.pb NEW.hlo.pb
    python bench/profile_hlo.py ab --backend plugin,jaxlib OLD.hlo.pb NEW.hlo.pb [--devices 2]
    python bench/profile_hlo.py vs DUMP.hlo.pb [DUMP2.hlo.pb ..] --backend plugin,jaxlib --algo a2c --env cartpole [--devices 2]
    python bench/profile_hlo.py split                                   # dot_general's split

Inputs are zeros (f32 0.01): the timing of these programs does not depend on the values.
The summary groups thunks by how often they run per call (T x K times: once per env step;
K times: once per update) and by kind (dot, copy/transpose, while, reduce, other); nested
thunks (a while loop's body) are counted in their loop too.
"""
import argparse
import collections
import glob
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = "~/.cache/podracer/fastatomstruct-xla-cpu-2026.6.23/fastatomstruct_xla_cpu/libpjrt_cpu.so"
DTYPES = {"f32": np.float32, "s32": np.int32, "u32": np.uint32, "pred": np.bool_, "u8": np.uint8}
SKIP = ("$", "Thunk", "end:", "Threadpool", "shard_args", "Common", "PjRt")


def hlo_module(path):
    """The HloModuleProto inside a dumped HloProto (field 1)."""
    pb = open(path, "rb").read()
    if pb[0] != 0x0A:
        sys.exit(f"{path}: not an XLA HloProto dump (--xla_dump_hlo_as_proto)")
    i, n, shift = 1, 0, 0
    while True:
        b = pb[i]
        n |= (b & 0x7F) << shift
        shift, i = shift + 7, i + 1
        if b < 0x80:
            return pb[i:i + n]


def load(path, devices):
    """(executable, argument arrays) for a dumped module on `devices`, one replica each
    (a podc program for D devices is one module replicated D times)."""
    from jax._src import compiler
    from jax._src.lib import xla_client as xc

    mlir = xc._xla.mlir.hlo_to_stablehlo(hlo_module(path))
    assignment = np.array([[d] for d in devices])
    options = compiler.get_compile_options(num_replicas=len(devices), num_partitions=1, device_assignment=assignment)
    exe = devices[0].client.compile_and_load(mlir, devices, options)
    layout = exe.hlo_modules()[0].to_string().split("entry_computation_layout={(")[1].split(")->")[0]
    args = []
    for m in re.finditer(r"(f32|s32|u32|pred|u8)\[([0-9,]*)\]", layout):
        shape = tuple(int(x) for x in m.group(2).split(",") if x)
        dtype = DTYPES[m.group(1)]
        args.append(np.full(shape, 0.01, dtype) if dtype == np.float32 else np.zeros(shape, dtype))
    return exe, args


def call_of(exe, args, devices):
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    # Each replica's arguments, as one array "replicated" over the devices.
    each = NamedSharding(Mesh(np.array(devices), ("r",)), PartitionSpec())

    def call():  # podc's programs donate their state: fresh buffers every call
        bufs = [jax.make_array_from_single_device_arrays(a.shape, each, [jax.device_put(a, d) for d in devices])
                for a in args]
        jax.block_until_ready(exe.execute_sharded(bufs).disassemble_into_single_device_arrays())

    return call


def profile(call, calls, top):
    """Runs `call` once, then `calls` times under the profiler; prints the thunks."""
    import jax

    call()
    trace = tempfile.mkdtemp(prefix="profile_hlo-")
    jax.profiler.start_trace(trace, create_perfetto_trace=True)
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    wall = (time.perf_counter() - t0) / calls
    jax.profiler.stop_trace()
    events = json.load(gzip.open(glob.glob(f"{trace}/**/*.trace.json.gz", recursive=True)[-1]))["traceEvents"]
    shutil.rmtree(trace)
    total, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(SKIP):
            total[e["name"]] += e["dur"] / 1000 / calls
            count[e["name"]] += 1
    print(f"{wall * 1e3:.1f} ms per call (profiled), {calls} calls")
    print(f"{'ms/call':>9} {'runs/call':>9}  thunk")
    for name, ms in total.most_common(top):
        print(f"{ms:9.2f} {count[name] / calls:9.0f}  {name}")
    groups = collections.Counter()
    for name, ms in total.items():
        base = re.sub(r"\.\d+$", "", name)
        kind = ("dot" if base.startswith(("ynn", "dot")) else "copy/transpose" if "copy" in base or "transpose" in base
                else "while" if base.startswith("while") else "reduce" if "reduce" in base else "other")
        groups[(count[name] / calls, kind)] += ms
    print("\nby runs per call and kind (ms/call):")
    for (runs, kind), ms in sorted(groups.items()):
        print(f"  {runs:7.0f} x  {kind:15s} {ms:9.2f}")


def split_bench(args):
    """`[N, M]ᵀ · [N, O]` (a weight gradient) as one dot and as N/c dots of c rows summed,
    which is how podc lowers it for c = 128 (`prims::dot`, `Dot::lower_split`)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax._src import xla_bridge

    xla_bridge.register_plugin("podc_cpu", library_path=os.path.expanduser(args.plugin))
    device = jax.devices("podc_cpu")[0]

    def pieces(n, c):
        return lambda x, g: lax.dot_general(x.reshape(n // c, c, -1), g.reshape(n // c, c, -1),
                                            (((1,), (1,)), ((0,), (0,)))).sum(0)

    cases = {}
    for n, m, o in [(16384, 64, 64), (16384, 4, 64), (16384, 50, 64), (32768, 64, 64), (16384, 64, 2), (2560, 256, 6)]:
        x, g = jax.device_put(jnp.ones((n, m)), device), jax.device_put(jnp.ones((n, o)), device)
        fns = {"whole": lambda x, g: lax.dot_general(x, g, (((0,), (0,)), ((), ())))}
        fns.update({f"c={c}": pieces(n, c) for c in (64, 128, 256, 512) if n % c == 0})
        for name, f in fns.items():
            cases[(f"{n}x{m}x{o}", name)] = (jax.jit(f).lower(x, g).compile(), x, g, [])
    for _ in range(args.rounds):
        for exe, x, g, ts in cases.values():
            exe(x, g).block_until_ready()
            t0 = time.perf_counter()
            for _ in range(20):
                out = exe(x, g)
            out.block_until_ready()
            ts.append((time.perf_counter() - t0) / 20)
    for (shape, name), (_, _, _, ts) in cases.items():
        print(f"{shape:>14s} {name:6s} {statistics.median(ts) * 1e3:8.3f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("hlo", help="profile a dumped module under jaxlib")
    h.add_argument("path")
    p = sub.add_parser("purejaxrl", help="profile bench/purejaxrl.py's program under jaxlib")
    a = sub.add_parser("ab", help="time dumped modules, calls interleaved")
    a.add_argument("paths", nargs="+")
    a.add_argument("--backend", default="plugin", choices=["plugin", "jaxlib", "plugin,jaxlib"],
                   help="where the dumps run; both: in one process, all calls interleaved")
    a.add_argument("--plugin", default=PLUGIN, help="the PJRT plugin (default: podc's cached CPU plugin)")
    a.add_argument("--rounds", type=int, default=10)
    a.add_argument("--devices", type=int, default=1,
                   help="D: the dumps must be of `podc bench train --devices D` (one replica per device)")
    v = sub.add_parser("vs", help="podc dumps on the plugin against purejaxrl.py's program on jaxlib, calls interleaved")
    v.add_argument("paths", nargs="+", help="one dump, or several (a change's before and after) to read in one run")
    v.add_argument("--plugin", default=PLUGIN)
    v.add_argument("--backend", default="plugin", choices=["plugin", "jaxlib", "plugin,jaxlib"],
                   help="where the dump runs (both: in one process, all calls interleaved)")
    v.add_argument("--rounds", type=int, default=20)
    v.add_argument("--devices", type=int, default=1,
                   help="D: the dump must be of `podc bench train --devices D`; JAX runs jit(shard_map) over D devices")
    sp = sub.add_parser("split", help="weight-gradient dots whole and split into pieces, on the plugin")
    sp.add_argument("--plugin", default=PLUGIN)
    sp.add_argument("--rounds", type=int, default=5)
    for s in (h, p):
        s.add_argument("--calls", type=int, default=3)
        s.add_argument("--top", type=int, default=30)
    for s in (p, v):
        s.add_argument("--algo", choices=["a2c", "ppo"], default="a2c")
        s.add_argument("--env", choices=["catch", "cartpole"], default="cartpole")
        s.add_argument("--envs", type=int, default=1024)
        s.add_argument("--rollout", type=int)
        s.add_argument("--updates-per-call", type=int)
    args = ap.parse_args()

    n = getattr(args, "devices", 1)
    if n > 1:  # jaxlib's CPU devices; the plugin's are asked for below
        os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n}"
    import jax

    if args.mode in ("ab", "vs"):
        backends = args.backend.split(",")
        if "plugin" in backends:
            from jax._src import xla_bridge

            xla_bridge.register_plugin("podc_cpu", library_path=os.path.expanduser(args.plugin),
                                       options={"cpu_device_count": n})
        runs = [(b, path) for b in backends for path in args.paths]
        calls = []
        for b, path in runs:
            devices = jax.devices("podc_cpu" if b == "plugin" else "cpu")[:n]
            calls.append(call_of(*load(path, devices), devices))
        if args.mode == "vs":
            runs.append(("jaxlib", f"purejaxrl.py --algo {args.algo} --env {args.env}"))
            calls.append(purejaxrl_call(args))
        times = [[] for _ in calls]
        for _ in range(args.rounds + 1):  # the first round warms up
            for call, ts in zip(calls, times):
                t0 = time.perf_counter()
                call()
                ts.append(time.perf_counter() - t0)
        base = statistics.median(times[0][1:])
        for (b, path), ts in zip(runs, times):
            med = statistics.median(ts[1:])
            print(f"{med * 1e3:9.1f} ms  {med / base:5.2f}x  {b:6s} {path}")
        if args.mode == "vs":
            jax_times = times[-1][1:]
            for (b, path), ts in zip(runs, times[:-1]):
                ratios = [j / p for p, j in zip(ts[1:], jax_times)]
                q = statistics.quantiles(ratios, n=4)
                name = f" ({path})" if len(args.paths) > 1 else ""
                print(f"podc on {b}{name} / JAX on jaxlib, throughput: {statistics.median(jax_times) / statistics.median(ts[1:]):.2f}x "
                      f"(ratio of medians); call by call: median {statistics.median(ratios):.2f}x, "
                      f"quartiles {q[0]:.2f}-{q[2]:.2f}x")
    elif args.mode == "split":
        split_bench(args)
    elif args.mode == "hlo":
        devices = jax.devices("cpu")[:1]
        profile(call_of(*load(args.path, devices), devices), args.calls, args.top)
    else:
        profile(purejaxrl_call(args), args.calls, args.top)


def purejaxrl_call(args):
    """One call of bench/purejaxrl.py's program (compiled by jaxlib; `jit(shard_map)` over
    D devices), its state donated."""
    import jax

    sys.path.insert(0, HERE)
    import purejaxrl

    t = args.rollout or (16 if args.algo == "a2c" else 128)
    k = args.updates_per_call or (10 if args.algo == "a2c" else 1)
    n = getattr(args, "devices", 1)
    cpus = jax.devices("cpu")[:n]  # not the plugin's, when it is registered
    with jax.default_device(cpus[0]):
        fn, runner = purejaxrl.build(args.algo, args.env, args.envs, t, k, n, 4, 4, 0, True)
        compiled, runner, _ = purejaxrl.compile_for(fn, runner, n, "shard_map", cpus)
    state = [runner]

    def call():
        state[0], metrics = jax.block_until_ready(compiled(state[0]))

    return call


if __name__ == "__main__":
    main()
