"""AdaptDL's epoch loop: ``remaining_epochs_until`` and where the job stands in it."""

import operator

from . import _state
from ._state import _deref


def current_dataloader():
    """The :class:`AdaptiveDataLoaderHelper` being iterated, or None (AdaptDL's name)."""
    return _deref(_state._job.current)


def current_epoch():
    """The epoch of the running ``remaining_epochs_until`` loop, or None outside one."""
    return _state._job.current_epoch


def finished_epochs():
    """Epochs completed so far (restored by ``AdaptiveDataLoader.load_state_dict``)."""
    return _state._job.finished_epochs


def remaining_epochs_until(epoch):
    """Iterate over the epochs not finished yet, up to ``epoch`` (excluded).

    ``for epoch in remaining_epochs_until(30)`` yields ``0, 1, ..., 29`` in a
    fresh job and, after ``loader.load_state_dict()`` of a checkpoint taken
    in epoch 7, ``7, ..., 29``. An epoch counts as finished when the loop body
    returns. Only one such loop may run at a time (RuntimeError).
    """
    epoch = operator.index(epoch)
    if _state._job.current_epoch is not None:
        raise RuntimeError("remaining_epochs_until: an epoch loop is already running; "
                           "epoch loops cannot be nested")

    def loop():
        job = _state._job
        try:
            while job.finished_epochs < epoch:
                job.current_epoch = job.finished_epochs
                yield job.current_epoch
                job.finished_epochs += 1
        finally:
            job.current_epoch = None

    return loop()

