"""Helpers of pyddstore that other packages may import (like ``mpi4py.util``).

``pyddstore.torch`` and applications built on pyddstore use these instead of
pyddstore's private modules, whose names may change between releases; the
names listed in ``__all__`` follow the package's compatibility rules.

Agreement (the "agree, then raise" rule)
  A collective call's argument checks are exchanged among all ranks of its
  communicator with one allgather, and every rank raises when any rank
  failed. A check that failed on one rank only would otherwise leave the
  other ranks waiting in the collective that follows. libddstore applies
  the same rule to the checks it makes in C; :func:`agree` is the one copy
  of it on the Python side, :func:`raise_agreed` its common use (the
  failing rank raises its own error, the others that rank's error).

Errors
  The exception classes (also exported by :mod:`pyddstore`), the
  libddstore error codes ``DDS_E*`` (enum ``dds_error``; never renumbered),
  :func:`error_class` / :func:`make_error` from a code, and
  :func:`verdict` / :func:`raise_verdict`: an error sent to other ranks and
  raised there with its class and code.

dtypes
  :data:`pyddstore.SUPPORTED_DTYPES` (the one table of element types, also exported
  by :mod:`pyddstore`), :data:`BFLOAT16`, and numpy records (structured
  dtypes, stored as bytes) described as JSON: :func:`record_to_obj`,
  :func:`record_from_obj`, :func:`record_text`, :func:`record_problem`.

Logging
  :func:`get_logger` for the ``pyddstore`` logger or a child of it (every
  record carries the MPI rank as ``%(rank)s``), :func:`current_rank`,
  :func:`enable_logging`, :data:`LOGGER_NAME` and :class:`RankFilter`.
"""

# The error codes and classes are defined in _errors (pyddstore's own modules
# import them from there); this module is their public name.
from ._errors import CODE_NAMES, DDS_EAGAIN, DDS_EEXIST, DDS_EFABRIC, DDS_EINVAL, DDS_EIO, \
    DDS_EMISMATCH, DDS_EMPI, DDS_ENOENT, DDS_ENOMEM, DDS_ENOTSUP, DDS_EOVERFLOW, DDS_EPEER, \
    DDS_EPROTO, DDS_ERANGE, DDS_ESTATE, DDS_ETIMEDOUT, DDS_OK
from ._errors import DDStoreDTypeError, DDStoreError, DDStoreKeyError, DDStoreNotSupportedError, \
    DDStoreRangeError, DDStoreStateError, DDStoreTimeoutError, DDStoreTypeError, DDStoreValueError
from ._errors import error_class, make_error, raise_verdict, verdict
from ._dtypes import BFLOAT16, SUPPORTED_DTYPES, record_from_obj, record_problem, record_text, record_to_obj
from ._logging import LOGGER_NAME, RankFilter, current_rank, enable_logging, get_logger

# ---- agreement ----------------------------------------------------------------


def _is_set(payload):
    return payload is not None


def agree(comm, err, payload, raise_failed, *, raise_own=True, failed=_is_set):
    """Exchange this rank's verdict with every rank of `comm` (one allgather)
    and raise on every rank when any rank failed. Collective over `comm`.

    Callers differ only in what a rank tells the others and what the others
    raise, both arguments here; :func:`raise_agreed` is the common case.

    Parameters:
      comm: an mpi4py communicator (anything with ``allgather``).
      err: this rank's exception, or None where its checks passed.
      payload: what the other ranks learn of this rank's verdict (picklable);
        None where the checks passed, unless `failed` is given.
      raise_failed: ``raise_failed(failures)`` is called when some rank
        failed, with the ``(rank, payload)`` pair of every failed rank in rank
        order; it raises (usually an exception naming the first one).
      raise_own: a rank whose `err` is set raises it; with False it raises
        what `raise_failed` raises, as the other ranks do (every rank then
        raises the same exception).
      failed: ``failed(payload)`` says whether the rank that sent `payload`
        failed (default: payload is not None), for payloads that carry more
        than the verdict.

    Returns the gathered payloads, in rank order, when no rank failed.
    """
    gathered = comm.allgather(payload)
    if raise_own and err is not None:
        raise err
    failures = [(rank, p) for rank, p in enumerate(gathered) if failed(p)]
    if failures:
        raise_failed(failures)
    return gathered


_NO_VALUE = object()


def raise_agreed(comm, err, value=_NO_VALUE):
    """Raise on every rank of `comm` when any rank's checks failed, the
    ranks' way of every pyddstore collective call. Collective over `comm`.

    A rank whose `err` is set raises it; the others raise the first failed
    rank's error (see :func:`verdict`): its class and code, its message
    prefixed with ``rank <k>:``. With `value` (picklable, compared with
    ``==``), the ranks must also pass equal values: when no rank failed but
    the values differ, every rank raises a :class:`~pyddstore.DDStoreValueError` with
    code ``DDS_EMISMATCH`` naming rank 0's value and the first that differs.

    Parameters:
      comm: an mpi4py communicator.
      err: this rank's exception (any class; one that is not a
        :class:`~pyddstore.DDStoreError` reaches the other ranks as a DDStoreError whose
        message starts with its class name), or None.
      value: what every rank must agree on (omit to compare nothing).

    Returns None when every rank passed (and agreed).
    """
    def raise_first_failed(failures):
        rank, (failed_verdict, _) = failures[0]
        raise_verdict(rank, failed_verdict)

    gathered = agree(comm, err, (verdict(err), None if value is _NO_VALUE else value),
                     raise_first_failed, failed=lambda mine: mine[0] is not None)
    if value is _NO_VALUE:
        return
    first = gathered[0][1]
    for r, (_, w) in enumerate(gathered):
        if w != first:
            raise DDStoreValueError(
                f"ranks disagree on a value that must agree: rank 0 has {first}, rank {r} has {w}",
                DDS_EMISMATCH)


__all__ = [
    # agreement
    "agree", "raise_agreed",
    # errors
    "DDStoreError", "DDStoreValueError", "DDStoreKeyError", "DDStoreTypeError", "DDStoreDTypeError",
    "DDStoreRangeError", "DDStoreStateError", "DDStoreNotSupportedError", "DDStoreTimeoutError",
    "CODE_NAMES", "error_class", "make_error", "verdict", "raise_verdict",
    "DDS_OK", "DDS_EINVAL", "DDS_ENOMEM", "DDS_ENOENT", "DDS_EEXIST", "DDS_ERANGE", "DDS_EMPI",
    "DDS_EFABRIC", "DDS_ENOTSUP", "DDS_ESTATE", "DDS_EPEER", "DDS_ETIMEDOUT", "DDS_EIO", "DDS_EPROTO",
    "DDS_EOVERFLOW", "DDS_EMISMATCH", "DDS_EAGAIN",
    # dtypes
    "SUPPORTED_DTYPES", "BFLOAT16", "record_to_obj", "record_from_obj", "record_text", "record_problem",
    # logging
    "LOGGER_NAME", "RankFilter", "current_rank", "enable_logging", "get_logger",
]
