"""What the store-backed datasets share: pyddstore.torch.DistDataset
(dataset.py) and the graph DistDataset (geometric.py).

Their loading: the :class:`LoadPlan` every loading step reads from (each
dataset extends it with what only it needs) and :func:`raise_agreed`, the
"agree, then raise" rule of loading, so an error on one rank fails every rank
alike instead of leaving the others in the next collective call.
"""

import dataclasses

from pyddstore import DDStoreError
from pyddstore._agreement import agree

from ._errors import DatasetStoreError, FieldNotFoundError


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    """What a dataset's loading steps all read from: its source and the loading arguments."""

    source: object
    encode: object = None      # encode(sample) -> sample, applied before storing
    chunk_size: object = None  # samples per chunk written to the store; None: the whole share
    what: str = ""             # the dataset as error messages name it
    progress: object = None    # the progress= argument (rank 0's loading bar)


# The classes another rank's error is raised as, by name (any other: RuntimeError).
_EXC_TYPES = {t.__name__: t for t in (ValueError, TypeError, KeyError, IndexError, RuntimeError,
                                      NotImplementedError, MemoryError, OSError, FieldNotFoundError)}


def raise_agreed(comm, err, what):
    """Raise the same exception on every rank of comm when any rank has err.

    Collective. err is the local exception or None. The message names the
    rank that failed first, so every rank reports the same cause. A store
    error (pyddstore.DDStoreError) there is a DatasetStoreError everywhere,
    with its code: a DDStoreError, and the RuntimeError it always was.
    """
    local = None if err is None else (
        type(err).__name__, str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err),
        err.code if isinstance(err, DDStoreError) else None)

    def raise_failed(failures):
        rank, (tname, text, code) = failures[0]
        exc_t = _EXC_TYPES.get(tname, RuntimeError)
        if exc_t is RuntimeError and tname != "RuntimeError":
            text = f"{tname}: {text}"
        message = f"{what}: on rank {rank}: {text}"
        if code is not None:
            # No DDStoreError class is in _EXC_TYPES: exc_t is RuntimeError here.
            raise DatasetStoreError(message, code) from err
        raise exc_t(message) from err

    agree(comm, err, local, raise_failed, raise_own=False)
