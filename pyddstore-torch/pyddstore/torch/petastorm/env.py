"""Petastorm's own virtual environment, found or created from an installed pyddstore-torch.

Petastorm 0.13.1 needs pyarrow<13 and numpy<2, so it cannot share this environment; the
comparisons with it (``pyddstore-throughput --vs petastorm``) run it in a separate one. Where
that environment is, in this order:

1. ``--petastorm-python PY`` (the tool's option; :func:`find_python`'s ``explicit``): that
   interpreter (checked to import petastorm).
2. :envvar:`PYDDSTORE_PETASTORM_VENV`: the environment in that folder.
3. ``${XDG_CACHE_HOME:-~/.cache}/pyddstore/petastorm-venv``.

For 2 and 3: an environment made by the shipped script (its ``.pyddstore-pins`` stamp is
there) or one that imports petastorm is used as it is; a folder that does not
exist yet is created there (once: a few minutes and about 1 GB, with pip and network access)
by the script shipped in this package, ``petastorm_venv.sh``; an existing folder that does not
import petastorm is an error (it is never deleted). From a shell::

    python -m pyddstore.torch.petastorm.env [VENV_DIR]

finds or creates the environment (by the order above, or in VENV_DIR) and prints its python. Standard library only, as
:mod:`pyddstore.torch.tools.throughput` at module level.
"""

import os
import subprocess
import sys

__all__ = ["find_python", "create", "default_venv", "script_path", "PetastormEnvError"]

_PROBE = "import petastorm, petastorm.pytorch"
_STAMP = ".pyddstore-pins"  # written by petastorm_venv.sh once the environment works


class PetastormEnvError(RuntimeError):
    """Petastorm's environment is missing, unusable, or could not be created (the message says
    which, and what to do)."""


def script_path():
    """Path of the shell script that creates the environment (package data of pyddstore-torch)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "petastorm_venv.sh")


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _script_pins():
    """The pins line of the shipped script (what its stamp records)."""
    for line in (_read(script_path()) or "").splitlines():
        if line.startswith('pins="') and line.endswith('"'):
            return line[len('pins="'):-1]
    return None


def default_venv():
    """Where the environment lives when none is given: :envvar:`PYDDSTORE_PETASTORM_VENV`, else
    ``${XDG_CACHE_HOME:-~/.cache}/pyddstore/petastorm-venv``."""
    env = os.environ.get("PYDDSTORE_PETASTORM_VENV")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "pyddstore", "petastorm-venv")


def _imports_petastorm(python):
    try:
        res = subprocess.run([python, "-I", "-c", _PROBE], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    lines = res.stderr.strip().splitlines()
    return res.returncode == 0, (lines[-1] if lines else f"exit status {res.returncode}")


def create(venv=None, *, quiet=False):
    """Create (or reuse, when it already imports petastorm with the script's pins) the
    environment in ``venv`` (default :func:`default_venv`) with the shipped script; returns its
    python. Progress goes to stderr unless ``quiet``. Raises PetastormEnvError on failure."""
    venv = os.path.abspath(os.path.expanduser(venv)) if venv else default_venv()
    script = script_path()
    if not os.path.isfile(script):
        raise PetastormEnvError(f"{script} is missing from this pyddstore-torch installation; "
                                "reinstall pyddstore-torch, or pass --petastorm-python")
    try:
        res = subprocess.run(["bash", script, venv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE if quiet else None, text=True)
    except OSError as e:
        raise PetastormEnvError(f"cannot run {script}: {e}") from None
    if res.returncode != 0:
        tail = (res.stderr or "").strip().splitlines()[-1:] if quiet else []
        why = f": {tail[0]}" if tail else "; the script's messages above say why"
        raise PetastormEnvError(
            f"creating Petastorm's environment in {venv} failed (exit status {res.returncode}{why}). "
            f"Creating it needs pip with network access (python -m pyddstore.torch.petastorm.env "
            f"{venv}); or pass --petastorm-python")
    return res.stdout.strip().splitlines()[-1]


def find_python(explicit=None, *, create_missing=True, quiet=False):
    """The python of Petastorm's environment, in the order of the module doc: ``explicit``
    (must exist and import petastorm), then :func:`default_venv` (used when it imports
    petastorm; created when the folder does not exist and ``create_missing``). Raises
    PetastormEnvError with what to do otherwise."""
    if explicit:
        python = os.path.expanduser(explicit)
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise PetastormEnvError(f"--petastorm-python {explicit}: no such executable")
        ok, why = _imports_petastorm(python)
        if not ok:
            raise PetastormEnvError(f"--petastorm-python {explicit} does not import petastorm ({why})")
        return python
    venv = default_venv()
    where = "PYDDSTORE_PETASTORM_VENV" if os.environ.get("PYDDSTORE_PETASTORM_VENV") else "the default"
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(venv) and (not os.path.isdir(venv) or os.listdir(venv)):
        stamp = os.path.join(venv, _STAMP)
        if os.path.isfile(stamp):  # made by the script, which writes the stamp once it works
            if os.path.exists(python) and _read(stamp) == _script_pins():
                return python
            return create(venv, quiet=quiet)  # other pins: the script rebuilds what it made
        ok, why = (_imports_petastorm(python) if os.path.exists(python)
                   else (False, "it has no bin/python"))
        if ok:
            return python
        raise PetastormEnvError(
            f"Petastorm's environment {venv} ({where}) does not import petastorm ({why}); remove the "
            f"folder to have it created again, or set PYDDSTORE_PETASTORM_VENV / --petastorm-python")
    if not create_missing:
        raise PetastormEnvError(f"no Petastorm environment in {venv} ({where}); create it with "
                                f"python -m pyddstore.torch.petastorm.env, or pass --petastorm-python")
    return create(venv, quiet=quiet)


def main(argv=None):
    """``python -m pyddstore.torch.petastorm.env [VENV_DIR]``: print the python of the
    environment (last line of stdout): without VENV_DIR the one :func:`find_python` finds
    (created when missing), with it the one in VENV_DIR (created, or checked by the script).
    Exit status 1 with a one-line reason on failure."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python -m pyddstore.torch.petastorm.env [VENV_DIR]\n"
              f"  creates (once) Petastorm 0.13.1's environment; VENV_DIR default: {default_venv()}",
              file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        print(create(argv[0]) if argv else find_python())
    except PetastormEnvError as e:
        print(f"petastorm_env: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
