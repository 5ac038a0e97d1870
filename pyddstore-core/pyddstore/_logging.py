"""Logging for pyddstore: Python's logging, with the MPI rank in every record.

The package logs to the logger ``pyddstore`` and its children (such as
``pyddstore.torch``). Every record they emit carries a ``rank`` attribute
(usable as ``%(rank)s`` in a format): the rank in ``MPI.COMM_WORLD`` when
MPI is initialised, else the launcher's ``PMI_RANK``,
``OMPI_COMM_WORLD_RANK`` or ``SLURM_PROCID``, else 0.

Without any configuration nothing is printed on ranks > 0, and rank 0 prints
only WARNING and above to stderr (and nothing at all once the application
configures the root logger, which then receives the records as usual).
:func:`enable_logging` turns on more detail, on rank 0 or on every rank.
"""

import logging
import os
import sys

LOGGER_NAME = "pyddstore"
DEFAULT_FORMAT = "%(asctime)s [rank %(rank)s] %(name)s %(levelname)s: %(message)s"
_RANK_ENV = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def current_rank():
    """This process's rank: MPI.COMM_WORLD's when MPI is initialised, else the
    launcher's environment (PMI_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID), else 0.

    Never initialises MPI itself: mpi4py.MPI is consulted only when the
    program has already imported it.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return mpi.COMM_WORLD.Get_rank()
        except Exception:  # noqa: BLE001 - a logging call must never fail; fall back to the env
            pass
    for var in _RANK_ENV:
        text = os.environ.get(var, "").strip()
        if text.isdigit():
            return int(text)
    return 0


class RankFilter(logging.Filter):
    """Adds ``record.rank`` (see :func:`current_rank`) to every record it sees.

    Installed on the pyddstore loggers and on the handler of
    :func:`enable_logging`; a record that already has a rank keeps it.
    """

    def filter(self, record):
        """Set record.rank when missing; never drops a record."""
        if not hasattr(record, "rank"):
            record.rank = current_rank()
        return True


_RANK_FILTER = RankFilter()


class _RankZeroLastResort(logging.Handler):
    """The package's default handler: what logging's "last resort" handler
    does (WARNING and above to the current sys.stderr), on rank 0 only.

    A plain NullHandler would silence rank 0's warnings too; without any
    handler, logging's last resort would print them on every rank. It stands
    aside once the application configures the root logger (the records reach
    the application's handlers by propagation) or calls enable_logging().
    """

    def __init__(self):
        super().__init__(logging.WARNING)

    def emit(self, record):
        """Print record on rank 0 unless the application handles it elsewhere."""
        if logging.getLogger().handlers or getattr(record, "rank", current_rank()) != 0:
            return
        try:
            stream = sys.stderr
            if stream is None:
                return
            stream.write(f"{record.name}: {record.levelname}: {record.getMessage()}\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - as logging.Handler.handleError would
            self.handleError(record)


class _EnabledHandler(logging.StreamHandler):
    """StreamHandler installed by enable_logging(); rank 0 only unless all_ranks."""

    def __init__(self, stream, all_ranks):
        super().__init__(stream)
        self.all_ranks = all_ranks
        self.addFilter(_RANK_FILTER)

    def filter(self, record):
        """Add the rank, then keep the record if this rank prints."""
        if not super().filter(record):
            return False
        return self.all_ranks or record.rank == 0


def get_logger(name=LOGGER_NAME):
    """The logger `name` (``pyddstore`` or a child of it) with the rank filter installed.

    Logger filters apply only to records logged on that very logger, so each
    pyddstore logger gets its own.
    """
    if name != LOGGER_NAME and not name.startswith(LOGGER_NAME + "."):
        raise ValueError(f"get_logger({name!r}): pyddstore loggers are 'pyddstore' or "
                         "'pyddstore.<something>'")
    log = logging.getLogger(name)
    if _RANK_FILTER not in log.filters:
        log.addFilter(_RANK_FILTER)
    return log


logger = get_logger()
if not any(isinstance(h, _RankZeroLastResort) for h in logger.handlers):
    logger.addHandler(_RankZeroLastResort())


def enable_logging(level=logging.INFO, *, all_ranks=False, stream=None, fmt=DEFAULT_FORMAT):
    """Print pyddstore's log records from `level` up, with the rank in each line.

    Installs a ``logging.StreamHandler`` on the ``pyddstore`` logger (so
    ``pyddstore.torch`` and every other pyddstore logger is included) and sets
    that logger's level. Calling it again replaces the handler it installed
    before; the package's default (rank 0 warnings only) handler is removed.
    Records still propagate to the root logger: an application that
    configured root handlers as well sees them there too (set
    ``logging.getLogger("pyddstore").propagate = False`` to avoid that).

    Parameters:
      level: a logging level, as a number (``logging.DEBUG``) or a name ("DEBUG").
      all_ranks: print on every rank (default: only on rank 0; a record's
        rank is MPI.COMM_WORLD's rank when MPI is initialised, else
        PMI_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID, else 0).
      stream: where to write (default: sys.stderr at the time of the call).
      fmt: a ``logging.Formatter`` format; ``%(rank)s`` is the record's rank.

    Returns the installed handler (remove it with
    ``logging.getLogger("pyddstore").removeHandler(h)``).
    """
    if isinstance(level, str):
        named = logging.getLevelName(level.upper())
        if not isinstance(named, int):
            raise ValueError(f"enable_logging(level={level!r}): not a logging level name; pass "
                             "'DEBUG', 'INFO', 'WARNING', 'ERROR' or a number such as logging.DEBUG")
        level = named
    elif isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"enable_logging(level={level!r}): pass a logging level such as logging.DEBUG "
                        "or 'DEBUG'")
    if not isinstance(all_ranks, bool):
        raise TypeError(f"enable_logging(all_ranks={all_ranks!r}): pass True or False")
    if stream is not None and not callable(getattr(stream, "write", None)):
        raise TypeError("enable_logging(stream=...): pass a file-like object with write(), or None "
                        "for sys.stderr")
    if not isinstance(fmt, str):
        raise TypeError(f"enable_logging(fmt={fmt!r}): pass a logging.Formatter format string")
    for h in list(logger.handlers):
        if isinstance(h, (_RankZeroLastResort, _EnabledHandler)):
            logger.removeHandler(h)
    handler = _EnabledHandler(sys.stderr if stream is None else stream, all_ranks)
    handler.setFormatter(logging.Formatter(fmt))
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


__all__ = ["LOGGER_NAME", "RankFilter", "current_rank", "enable_logging", "get_logger", "logger"]
