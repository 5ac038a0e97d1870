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


__all__ = ["ENV", "bar", "check_argument", "wanted"]
