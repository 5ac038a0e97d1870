"""Names of a package imported on first use (PEP 562), for pyddstore.torch and its sub-packages."""

import importlib


def lazy_names(namespace, table):
    """``__getattr__`` and ``__dir__`` for the package whose ``globals()`` is
    ``namespace``: a name of ``table`` ({name: submodule relative to the
    package}) is imported on first use, then kept in the namespace."""
    package = namespace["__name__"]

    def __getattr__(name):
        mod = table.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
