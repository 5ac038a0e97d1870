"""Agree, then raise: how a collective call fails on every rank alike.

The rule: a collective call's argument checks are exchanged among all ranks
of its communicator with one allgather, and every rank raises when any rank
failed: the failing rank raises its own exception, the others an exception
naming the first failed rank. A check that failed on one rank only would
otherwise leave the other ranks waiting in the collective that follows.
libddstore applies the same rule to the checks it makes in C; this module is
the one copy of it on the Python side.

Callers differ only in what a rank tells the others and what the others
raise; :func:`agree` takes both as arguments. Some callers make every rank
raise the same exception, the failing ranks included (``raise_own=False``):
the torch datasets and ``pyddstore.torch.adaptive.init_process_group``,
whose message is the first failed rank's on every rank, and the throughput
tool, whose message groups every rank's error.
"""

__all__ = ["agree"]


def _is_set(payload):
    return payload is not None


def agree(comm, err, payload, raise_failed, *, raise_own=True, failed=_is_set):
    """Exchange this rank's verdict with every rank of `comm` (one allgather)
    and raise on every rank when any rank failed. Collective over `comm`.

    err: this rank's exception, or None where its checks passed.
    payload: what the other ranks learn of this rank's verdict (picklable);
    None where the checks passed, unless `failed` is given.
    raise_failed(failures): called when some rank failed, with the
    ``(rank, payload)`` pair of every failed rank in rank order; it raises
    (usually an exception naming the first one).
    raise_own: a rank whose `err` is set raises it; with False it raises what
    raise_failed raises, as the other ranks do.
    failed(payload): whether the rank that sent `payload` failed (default:
    payload is not None), for payloads that carry more than the verdict.

    Returns the gathered payloads, in rank order, when no rank failed.
    """
    gathered = comm.allgather(payload)
    if raise_own and err is not None:
        raise err
    failures = [(rank, p) for rank, p in enumerate(gathered) if failed(p)]
    if failures:
        raise_failed(failures)
    return gathered
