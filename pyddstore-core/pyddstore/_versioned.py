"""The module-level names of the versioned-variable calls, kept for code
written before they became :class:`PyDDStore` methods:
``pyddstore.init_versioned(store, ...)`` is ``store.init_versioned(...)``,
and so for ``block_rows`` and ``generation``.
"""


def init_versioned(store, name, nrows, disp, itemsize=1, *, block_rows=1):
    """Same as :meth:`PyDDStore.init_versioned` (``store.init_versioned(name, ...)``)."""
    store.init_versioned(name, nrows, disp, itemsize, block_rows=block_rows)


def block_rows(store, name):
    """Same as :meth:`PyDDStore.block_rows` (``store.block_rows(name)``)."""
    return store.block_rows(name)


def generation(store, name, row):
    """Same as :meth:`PyDDStore.generation` (``store.generation(name, row)``)."""
    return store.generation(name, row)
