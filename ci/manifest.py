#!/usr/bin/env python3
"""Reads tests/manifest.toml (what the test suite runs) and prints the steps
of one section, one a line, for ci/test.sh and ci/mpich.sh to run:

    run<TAB>label<TAB>timeout-seconds<TAB>command (shell-quoted words)
    skip<TAB>label<TAB>reason

    python3 ci/manifest.py [--section ci|mpich] [--have fabric] [--have mpifort]
        [--mpiexec LAUNCHER] [--python PYTHON] [--env NAME=value]... [--list]
    python3 ci/manifest.py --build NAME     the `meson setup` options of build
                                            NAME ([builds]), one a line

--have names what the runner has (a step's `needs` must all be had, else it
is printed as skipped); --mpiexec/--python/--env make the commands of pytest
steps (defaults: mpiexec, python, nothing). --list prints a readable table
instead. Exit 2, with the reason on stderr, when the manifest is malformed,
names a file that does not exist, or (section ci) leaves out a suite of
tests/python/. Python 3.11+ (tomllib); nothing else.
"""
import argparse
import pathlib
import shlex
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "tests" / "manifest.toml"
KEYS = {"label", "run", "suite", "pytest", "ranks", "env", "note", "timeout", "needs"}


class ManifestError(Exception):
    pass


def expand(section, step, args):
    """The (label, timeout, argv) runs of one manifest entry."""
    unknown = set(step) - KEYS
    kinds = [k for k in ("run", "suite", "pytest") if k in step]
    if unknown or len(kinds) != 1 or not isinstance(step.get("timeout"), int):
        raise ManifestError(f"[{section}] {step}: needs one of run/suite/pytest and an integer "
                            f"timeout{'; unknown keys ' + ', '.join(sorted(unknown)) if unknown else ''}")
    t = step["timeout"]
    if "run" in step:
        if "label" not in step:
            raise ManifestError(f"[{section}] {step}: a run step needs a label")
        argv = shlex.split(step["run"])
        scripts = [w for w in argv if w.endswith(".sh")]
        for w in scripts:
            if not (ROOT / w).is_file():
                raise ManifestError(f"[{section}] {step['label']}: no file {w}")
        return [(step["label"], t, argv)]
    if "suite" in step:
        d = step["suite"].rstrip("/")
        if not (ROOT / d / "run.sh").is_file():
            raise ManifestError(f"[{section}] {d}: no {d}/run.sh")
        return [(step.get("label", f"suite {d}/"), t, ["bash", f"{d}/run.sh"])]
    d = step["pytest"].rstrip("/")
    if not list((ROOT / d).glob("test_*.py")):
        raise ManifestError(f"[{section}] {d}: no test_*.py there")
    ranks = step.get("ranks")
    if not ranks or not all(isinstance(n, int) and n > 0 for n in ranks):
        raise ManifestError(f"[{section}] {d}: ranks must be a list of positive integers")
    env = shlex.split(step.get("env", ""))
    tag = step.get("note", step.get("env", ""))
    suffix = " (MPICH)" if section == "mpich" else ""
    runs = []
    for n in ranks:
        label = " ".join(w for w in ("pytest", d, f"np={n}", tag) if w) + suffix
        argv = (["env", *args.env, *env, args.mpiexec, "-n", str(n), args.python,
                 "tests/python/run_pytest.py", "-q", "--color=no", d])
        runs.append((label, t, argv))
    return runs


def unlisted_suites(steps):
    """Directories of tests/python/ with tests or a run.sh that no step names."""
    named = {s.get("suite", s.get("pytest", "")).rstrip("/") for s in steps}
    named |= {w.rstrip("/") for s in steps if "run" in s for w in shlex.split(s["run"])}
    out = []
    for d in sorted((ROOT / "tests" / "python").iterdir()):
        rel = d.relative_to(ROOT).as_posix()
        if d.is_dir() and (list(d.glob("test_*.py")) or (d / "run.sh").is_file()) and rel not in named \
                and f"{rel}/run.sh" not in named:
            out.append(rel)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--section", default="ci", choices=["ci", "mpich"])
    ap.add_argument("--have", action="append", default=[])
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--python", default="python")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--build")
    args = ap.parse_args()
    try:
        with open(MANIFEST, "rb") as f:
            manifest = tomllib.load(f)
        if args.build:
            build = manifest.get("builds", {}).get(args.build)
            if not isinstance(build, dict) or not isinstance(build.get("options"), list):
                raise ManifestError(f"no build {args.build} (with options = [...]) in [builds]")
            for opt in build["options"]:
                print(opt)
            return 0
        steps = manifest.get(args.section)
        if not isinstance(steps, list) or not steps:
            raise ManifestError(f"no steps in section {args.section}")
        if args.section == "ci":
            missing = unlisted_suites(steps)
            if missing:
                raise ManifestError("suites not in tests/manifest.toml (add a line for each): "
                                    + ", ".join(missing))
        lines = []
        for step in steps:
            lacking = [n for n in step.get("needs", []) if n not in args.have]
            for label, t, argv in expand(args.section, step, args):
                if lacking:
                    lines.append(("skip", label, "needs " + ", ".join(lacking)))
                else:
                    lines.append(("run", label, str(t), shlex.join(argv)))
    except (ManifestError, tomllib.TOMLDecodeError, OSError) as e:
        print(f"ci/manifest.py: {MANIFEST.relative_to(ROOT)}: {e}", file=sys.stderr)
        return 2
    for line in lines:
        if args.list:
            if line[0] == "run":
                print(f"{line[2]:>6} s  {line[1]}\n          {line[3]}")
            else:
                print(f"  skip  {line[1]} ({line[2]})")
        else:
            print("\t".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
