"""Exception classes of pyddstore.torch.

One hierarchy with pyddstore's: an error that comes from the store is a
``pyddstore.DDStoreError`` whichever layer raises it, so ``except
pyddstore.DDStoreError`` around dataset code catches every store failure.
Each class keeps its builtin bases too, so ``except ValueError`` /
``except RuntimeError`` written for the original DDStore's torch layer keeps
working:

* :class:`WindowRangeError` -- a window outside the stored rows: a
  ``DDStoreRangeError`` (IndexError, ValueError).
* :class:`DatasetStoreError` -- the store under a dataset failed on some
  rank while it was loading (raised on every rank alike), or holds something
  other than the dataset expects: a ``DDStoreError`` and a RuntimeError.
* A freed dataset raises ``pyddstore.DDStoreStateError`` (a RuntimeError), as
  a freed store does.

:class:`FieldNotFoundError` is not a store error: it names keys or positions
that the *source's* samples lack, before anything is stored. Code written for
this package catches its first bases (KeyError or IndexError); code written
for the original DDStore's torch layer catches ValueError. Both work.
"""

from pyddstore import DDStoreError, DDStoreRangeError
from pyddstore.util import DDS_ERANGE


class FieldNotFoundError(KeyError, IndexError, ValueError):
    """fields= names keys (KeyError) or positions (IndexError) that the samples
    do not have."""

    def __str__(self):
        # KeyError's __str__ would print the message with quotes around it.
        return str(self.args[0]) if self.args else ""


class WindowRangeError(DDStoreRangeError, IndexError, ValueError):
    """A window start outside the rows of the dataset.

    A ``pyddstore.DDStoreRangeError`` (rows outside the stored variable), and
    so also an IndexError and a ValueError as before.
    """

    def __init__(self, message, code=DDS_ERANGE):
        # The store's code for rows out of range, not DDStoreError's DDS_EINVAL.
        super().__init__(message, code)


class DatasetStoreError(DDStoreError, RuntimeError):
    """The store under a dataset failed, or does not hold what the dataset expects.

    Raised on every rank alike when a store call failed on one rank while a
    dataset was loading (the message names that rank and its error class;
    ``code`` is its libddstore error code), and by a reader whose store holds
    another dataset. A ``pyddstore.DDStoreError`` and, as these errors were
    before, a RuntimeError.
    """
