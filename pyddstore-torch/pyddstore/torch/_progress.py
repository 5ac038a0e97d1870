"""Loading progress bars (tqdm) for DistDataset, shown on rank 0 only.

Whether a bar is shown: never on a rank other than 0; else the
``progress=`` argument when it is True or False; else the environment
variable ``DDSTORE_PROGRESS`` (``1`` on, ``0`` off); else only when stderr is
an interactive terminal. tqdm is optional: without it there is no bar.

Open MPI's mpiexec gives its ranks a pipe for stderr (and a pseudo-terminal
for stdout even when stdout goes to a file), so a rank cannot tell an
interactive run from a batch one; under it the automatic choice is "off"
and DDSTORE_PROGRESS=1 turns the bar on.
"""

import os
import sys
import time

from ._logging import logger

ENV = "DDSTORE_PROGRESS"


def check_argument(progress):
    """Raise when progress= or DDSTORE_PROGRESS has a value that means nothing."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None (auto), True or False, got {progress!r}")
    env = os.environ.get(ENV)
    if env is not None and env.strip() not in ("", "0", "1"):
        raise ValueError(f"{ENV}={env!r}: set it to 1 (show loading progress on rank 0), 0 (never) "
                         "or unset it (show it when stderr is a terminal)")


def wanted(progress, rank, stream=None):
    """True when a bar should be shown on this rank (rules in the module docstring).

    stream: the stream the bar would go to (default: sys.stderr now); only
    its isatty() matters, for the automatic choice.
    """
    if rank != 0:
        return False
    if progress is not None:
        return bool(progress)
    env = os.environ.get(ENV, "").strip()
    if env:
        return env == "1"
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty(), or a closed stream
        return False


def where(store):
    """Where `store` keeps this rank's shards, in words: ``files in DIR``,
    ``node shared memory`` (/dev/shm) or ``memory`` (store.info()'s
    ``storage``)."""
    info = store.info()
    kind = info["storage"]
    if kind == "files":
        return f"files in {info['storage_dir']}"
    return {"node-shm": "node shared memory", "memory": "memory"}.get(kind, kind)


class Residency:
    """Shows on `bar` how much of this rank's shards is in memory (store.info()'s
    ``resident_bytes`` of ``shard_bytes``: for files, what the page cache holds),
    at most once a second; nothing when no bar is shown."""

    def __init__(self, bar, store, every=1.0):
        self._bar = None if isinstance(bar, _NoBar) else bar
        self._store = store
        self._every = every
        self._last = 0.0

    def show(self, final=False):
        """Update the bar's note (throttled unless `final`)."""
        now = time.monotonic()
        if self._bar is None or (not final and now - self._last < self._every):
            return
        self._last = now
        info = self._store.info()
        self._bar.set_postfix_str(f"{_size(info['resident_bytes'])} of {_size(info['shard_bytes'])} resident",
                                  refresh=final)


def _size(n):
    """Bytes in binary units, e.g. '3.2 GiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class _NoBar:
    """Stands in for a bar when none is shown, so the loader calls update() unconditionally."""

    def update(self, n=1):
        """Nothing to advance."""

    def close(self):
        """Nothing to close."""


def bar(total, *, progress, rank, desc, unit="samples"):
    """A tqdm bar over `total` units on sys.stderr, or a do-nothing stand-in.

    The bar is shown when wanted(progress, rank) is true and tqdm can be
    imported; when it was asked for explicitly (progress=True or
    DDSTORE_PROGRESS=1) but tqdm is missing, a warning says so.
    """
    if not wanted(progress, rank):
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        if progress or os.environ.get(ENV, "").strip() == "1":
            logger.warning("loading progress was asked for but tqdm is not installed; "
                           "`pip install tqdm` to see it")
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)


__all__ = ["ENV", "Residency", "bar", "check_argument", "wanted", "where"]
