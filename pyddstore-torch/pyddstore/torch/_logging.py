"""The ``pyddstore.torch`` logger (a child of ``pyddstore``'s, see pyddstore.util).

Its records carry the rank (``%(rank)s``) and follow the package's defaults:
nothing on ranks > 0, WARNING and above on rank 0, more after
:func:`enable_logging`.
"""

from pyddstore.util import current_rank, enable_logging, get_logger

logger = get_logger("pyddstore.torch")

__all__ = ["logger", "enable_logging", "current_rank"]
