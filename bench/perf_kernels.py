#!/usr/bin/env python3
"""Where a podc program's time goes on podc's own plugin, kernel by kernel: `perf record`
of a running podc command, with its samples in XLA's generated code named by the kernel.

XLA:CPU compiles each fusion to machine code that it loads into anonymous memory, so
`perf` sees its samples as `[unknown]` addresses. With `--xla_dump_to` the plugin also
writes every kernel's object file; this script reads the sampled code from the running
process (`/proc/PID/mem`) and finds which object holds those bytes, so each sample gets
its kernel's name (`wrapped_reduce-window.3`, `add_tanh_fusion.1`), and, from the dumped
optimized HLO, the kernel's shape and root op. Kernels whose code is the same bytes (the
same loop over other bounds) cannot be told apart: they are listed together, `a | b`.
Library code (YNNPACK's dots, Eigen's contractions) is named by `perf` itself. Code that
no dumped object holds is the libraries' JIT code (oneDNN's sgemm kernels, which Eigen's
contractions call).

`bench/profile_hlo.py` profiles thunks under jaxlib's profiler, which only jaxlib's own,
different XLA reports to: a reduction that the plugin leaves to XLA's loops can be a
YNNPACK call in jaxlib. This script profiles the plugin that podc runs.

    python3 bench/perf_kernels.py -- target/release/podc bench train examples/cartpole_a2c.pod --envs 1024 --runs 600 --no-cache

The command must run for the warm-up and the recording (`--warmup`, `--seconds`); it is
stopped after. Needs `perf` (linux-perf) and permission to record and to read the
process's memory (root, or `kernel.perf_event_paranoid` <= 1 and ptrace rights).
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

CHUNK = 12  # bytes of code matched against the objects; relocated bytes differ, so many offsets vote


def samples(data):
    """(ip, symbol, dso) of every sample in a perf.data file."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*([0-9a-f]+)\s+(.*)\s+\((.*)\)$", line)
        if m:
            yield int(m.group(1), 16), m.group(2), m.group(3)


def anonymous_code(pid):
    """The process's executable anonymous mappings (where XLA loads its kernels)."""
    regions = []
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if "x" in parts[1] and len(parts) < 6:
            regions.append((lo, hi))
    return regions


def read_code(pid, ips, regions):
    """The bytes around each sampled ip, read from the running process."""
    code = {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for ip in ips:
            lo = max(ip - 64, next(r[0] for r in regions if r[0] <= ip < r[1]))
            try:
                mem.seek(lo)
                code[ip] = (ip - lo, mem.read(128))
            except OSError:
                pass
    return code


def kernel_of(off, code, objects, memo):
    """The dumped object whose bytes match most chunks around `off` in `code`, or None.
    `memo` caches each chunk's objects across calls."""
    votes = collections.Counter()
    for start in range(max(0, off - 48), min(len(code) - CHUNK, off + 48), 4):
        chunk = code[start:start + CHUNK]
        if chunk not in memo:
            memo[chunk] = [name for name, obj in objects.items() if chunk in obj]
        hits = memo[chunk]
        for name in hits if 0 < len(hits) <= 3 else []:
            votes[name] += 1 / len(hits)
    if not votes:
        return None
    best = max(votes.values())
    return " | ".join(sorted(name for name, v in votes.items() if v == best))


def hlo_summaries(dump):
    """Kernel name -> `shape root-op` from the dumped optimized HLO, where there is one."""
    out = {}
    for path in glob.glob(os.path.join(dump, "*after_optimizations.txt")):
        text = open(path).read()
        roots = {}
        for comp in re.finditer(r"^(%\S+) .*?\{\n(.*?)\n\}", text, re.S | re.M):
            root = re.search(r"ROOT \S+ = (\S+) (\S+?)\(", comp.group(2))
            if root:
                roots[comp.group(1)] = f"{root.group(1)} {root.group(2)}"
        for m in re.finditer(r"^\s*(?:ROOT )?%(\S+) = (\S+) fusion\(.*?calls=(%[^,\s]+)", text, re.M):
            out[m.group(1)] = f"{m.group(2)} ({roots.get(m.group(3), '?').split()[-1]})"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=float, default=10, help="seconds before recording (compile, warm-up)")
    ap.add_argument("--seconds", type=float, default=5, help="seconds recorded")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--module", default=".*", help="dump only the modules matching this (XLA's module regex)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the podc command")
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command: pass it after --")
    if not shutil.which("perf"):
        sys.exit("perf is not installed (apt-get install linux-perf)")
    dump = tempfile.mkdtemp(prefix="perf_kernels-")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text "
                        f"--xla_dump_hlo_module_re={a.module}")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(a.warmup)
        if proc.poll() is not None:
            sys.exit(f"the command ended before recording began (exit {proc.returncode}):\n{proc.stderr.read()}")
        data = os.path.join(dump, "perf.data")
        subprocess.run(["perf", "record", "-q", "-p", str(proc.pid), "-o", data, "--", "sleep", str(a.seconds)],
                       check=True, stderr=subprocess.DEVNULL)
        found = list(samples(data))
        regions = anonymous_code(proc.pid)
        jit = {ip for ip, _, _ in found if any(lo <= ip < hi for lo, hi in regions)}
        code = read_code(proc.pid, jit, regions)
        if proc.poll() is not None:
            sys.exit("the command ended while its code was read: give it more --runs")
    finally:
        proc.kill()
        proc.wait()

    objects = {}
    for path in glob.glob(os.path.join(dump, "*.o")):
        name = os.path.basename(path).split("obj-file.", 1)[-1]
        objects[re.sub(r"(_kernel_module)?\.o$", "", name).removeprefix("__compute_module_")] = open(path, "rb").read()
    shapes = hlo_summaries(dump)
    counts, where, memo = collections.Counter(), collections.Counter(), {}
    kernels = {ip: kernel_of(off, c, objects, memo) for ip, (off, c) in code.items()}
    for ip, sym, dso in found:
        if ip in code:
            name = kernels[ip]
            shape = " | ".join(shapes.get(n, "?") for n in name.split(" | ")) if name else ""
            key = f"XLA kernel  {name}  {shape}" if name else "JIT code outside XLA's kernels"
            where["XLA kernels" if name else "other JIT code"] += 1
        else:
            key = f"{os.path.basename(dso)}  {sym[:90]}"
            where[os.path.basename(dso)] += 1
        counts[key] += 1
    total = sum(counts.values())
    print(f"{total} samples of `{' '.join(cmd)}` over {a.seconds:g} s ({len(objects)} kernel objects dumped)\n")
    for key, n in where.most_common():
        print(f"{100 * n / total:6.2f}%  {key}")
    print()
    for key, n in counts.most_common(a.top):
        print(f"{100 * n / total:6.2f}%  {key}")
    shutil.rmtree(dump)


if __name__ == "__main__":
    main()
