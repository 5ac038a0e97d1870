#!/usr/bin/env python3
"""Run a command (an MPI job and everything it starts) under a memory cap: a
cgroup of its own with a memory limit, as a batch system would give a job.

    python ci/memcap.py --cap 128M [--json FILE] -- COMMAND ARGS...

Needs root and a cgroup memory controller: cgroup v2 (memory.max; the
controller enabled for a new child of the hierarchy's root) or v1
(memory.limit_in_bytes in a child of this process's memory cgroup). Exits 77
printing "memcap: SKIPPED: <why>" when no such cgroup can be made; else the
command's exit status, after printing the cap, the cgroup's peak usage and
how often the cap was hit (memory the kernel had to reclaim to stay under
it). Page cache counts against the cap, as it does for a job. --json FILE
writes those figures as {"cap", "peak", "hits", "cgroup", "rc"}. Used by
tests/python/storage/run.sh and bench/b8_storage.py. The cgroup is removed
afterwards.
"""
import argparse
import json
import os
import subprocess
import sys
import time

SKIP = 77


def _size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def _mounts():
    """(cgroup2 mount point or None, v1 memory mount point or None)."""
    v2 = v1 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _src, opts = (right.split() + ["", "", ""])[:3]
            point = left.split()[4]
            if fstype == "cgroup2" and v2 is None:
                v2 = point
            elif fstype == "cgroup" and "memory" in opts.split(",") and v1 is None:
                v1 = point
    return v2, v1


def _own(controller):
    """This process's cgroup path in the v1 hierarchy of `controller` ('' for v2)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _id, ctrls, path = line.rstrip("\n").split(":", 2)
            if (controller == "" and ctrls == "") or controller in ctrls.split(","):
                return path
    return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _attempt(d, setup, label, why):
    """mkdir d and setup(d); on OSError remove d again, note why under `label`: True if made."""
    try:
        os.mkdir(d)
        setup(d)
        return True
    except OSError as e:
        why.append(f"{label}: {e}")
        try:
            os.rmdir(d)
        except OSError:
            pass
        return False


def make(cap):
    """Make a cgroup capped at `cap` bytes: (kind, directory); raises RuntimeError saying why not."""
    if os.geteuid() != 0:
        raise RuntimeError("not root: cannot make a cgroup")
    v2, v1 = _mounts()
    why = []
    name = f"ddstore-memcap-{os.getpid()}"

    def setup_v2(d):
        if not os.path.exists(os.path.join(d, "memory.max")):
            _write(os.path.join(v2, "cgroup.subtree_control"), "+memory")
        _write(os.path.join(d, "memory.max"), str(cap))
        if os.path.exists(os.path.join(d, "memory.swap.max")):
            _write(os.path.join(d, "memory.swap.max"), "0")

    if v2 and os.path.exists(os.path.join(v2, "cgroup.controllers")):
        with open(os.path.join(v2, "cgroup.controllers")) as f:
            ctrls = f.read().split()
        if "memory" not in ctrls:
            why.append(f"cgroup v2 at {v2} has no memory controller")
        elif _attempt(os.path.join(v2, name), setup_v2, f"cgroup v2 at {v2}", why):
            return "v2", os.path.join(v2, name)
    if v1:
        d = os.path.join(v1, (_own("memory") or "/").lstrip("/"), name)
        if _attempt(d, lambda d: _write(os.path.join(d, "memory.limit_in_bytes"), str(cap)),
                    f"cgroup v1 memory at {v1}", why):
            return "v1", d
    if not v1 and not why:
        why.append("no cgroup file system with a memory controller is mounted")
    raise RuntimeError("; ".join(why))


def figures(kind, d):
    """(peak bytes or None, times the cap was hit)."""
    def read(name):
        try:
            with open(os.path.join(d, name)) as f:
                return f.read()
        except OSError:
            return None
    if kind == "v1":
        peak = read("memory.max_usage_in_bytes")
        return (int(peak) if peak else None), int(read("memory.failcnt") or 0)
    peak = read("memory.peak")
    events = dict(line.split() for line in (read("memory.events") or "").splitlines() if line)
    return (int(peak) if peak else None), int(events.get("max", 0))


def remove(d):
    for _ in range(50):
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    print(f"memcap: could not remove {d}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cap", required=True, help="memory cap, e.g. 128M or 1G")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    cap = _size(a.cap)
    try:
        kind, d = make(cap)
    except (OSError, RuntimeError) as e:
        print(f"memcap: SKIPPED: no cgroup with a memory cap can be made here ({e})", flush=True)
        return SKIP
    procs = os.path.join(d, "cgroup.procs")
    try:
        child = subprocess.Popen(cmd, preexec_fn=lambda: _write(procs, str(os.getpid())))
        rc = child.wait()
        rc = 128 - rc if rc < 0 else rc  # killed by a signal: as the shell says it
        peak, hits = figures(kind, d)
    finally:
        remove(d)
    print(f"memcap: cap {cap >> 20} MiB (cgroup {kind}): peak {peak >> 20 if peak else '?'} MiB, "
          f"cap hit {hits} times; exit status {rc}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cap": cap, "peak": peak, "hits": hits, "cgroup": kind, "rc": rc}, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
