"""pyddstore: a distributed in-memory data store for data-parallel training.

Each MPI rank holds a shard of every variable; any rank reads any row by
one-sided remote memory access (libddstore, loaded with ctypes). See
:class:`PyDDStore` and :func:`join`.

The shared library is taken from ``PYDDSTORE_LIBRARY`` when set, else the
copy installed with the ``pyddstore-core`` distribution, else the system
(``pyddstore.library_path`` says which file was loaded).

Log records go to the ``pyddstore`` logger with the rank in each
(``%(rank)s``): by default only WARNING and above on rank 0, nothing on
other ranks; :func:`pyddstore.enable_logging` prints more.

Helpers for packages built on pyddstore (agreement of a collective call's
checks, error codes, the dtype table, logging): :mod:`pyddstore.util`.
"""

from pkgutil import extend_path

# pyddstore.torch ships in another distribution (pyddstore-torch); without
# this, a pyddstore found first on sys.path would hide it.
__path__ = extend_path(__path__, __name__)

from . import _lib  # noqa: E402  (loads libddstore and checks its ABI)
from ._logging import enable_logging  # noqa: E402  (also installs the rank-0 default handler)
from ._errors import (  # noqa: E402
    CODE_NAMES,
    DDStoreDTypeError,
    DDStoreError,
    DDStoreKeyError,
    DDStoreNotSupportedError,
    DDStoreRangeError,
    DDStoreStateError,
    DDStoreTimeoutError,
    DDStoreTypeError,
    DDStoreValueError,
)
from ._store import PyDDStore, VarInfo, join  # noqa: E402
from ._dtypes import SUPPORTED_DTYPES  # noqa: E402
from ._versioned import block_rows, generation, init_versioned  # noqa: E402

__version__ = _lib.lib.dds_version().decode("ascii")
library_path = _lib.path
ABI_VERSION = _lib.ABI_VERSION


def has_fabric():
    """True when the loaded libddstore was built with libfabric (methods 1 and 2)."""
    return bool(_lib.lib.dds_has_fabric())


__all__ = [
    "PyDDStore",
    "join",
    "init_versioned",
    "block_rows",
    "generation",
    "VarInfo",
    "DDStoreError",
    "DDStoreValueError",
    "DDStoreKeyError",
    "DDStoreTypeError",
    "DDStoreDTypeError",
    "DDStoreRangeError",
    "DDStoreStateError",
    "DDStoreNotSupportedError",
    "DDStoreTimeoutError",
    "CODE_NAMES",
    "SUPPORTED_DTYPES",
    "has_fabric",
    "enable_logging",
    "library_path",
    "ABI_VERSION",
    "__version__",
]
