"""Locate, load and declare libddstore (the C library) for ctypes.

Where the library is taken from, first match wins:

1. ``PYDDSTORE_LIBRARY``: full path of a libddstore shared library (for a
   development build, or to force a particular copy).
2. The copy shipped inside the installed ``pyddstore-core`` distribution
   (meson-python puts it in ``.pyddstore_core.mesonpy.libs/``), found through
   the distribution's RECORD; used only when that distribution is the one this
   module was imported from.
3. The library path recorded at build time: the build directory's copy for an
   editable install (``pip install -e``), or a system libddstore when the
   package was built with the meson option ``use_system_libddstore``.
4. The system: ``ctypes.util.find_library('ddstore')``.

The library is always loaded by full path and its ABI major is checked against
``ABI_VERSION`` at import, so a wrong copy fails with an ImportError that names
it, never with a crash later.

Nothing here needs MPI: libddstore functions that do (store creation, reads of
core stores) are only called by ``pyddstore._store`` after it has imported
``mpi4py.MPI``, which initialises MPI.
"""

import ctypes
import ctypes.util
import os
import re

# The ABI major this binding is written for (DDS_ABI_MAJOR in ddstore.h).
ABI_VERSION = 1

# Longest variable name in bytes (DDS_NAME_MAX in ddstore.h).
NAME_MAX = 255

_LIB_NAME_RE = re.compile(r"(^|/)libddstore\.so(\.\d+)*$")


class Options(ctypes.Structure):
    """struct dds_options."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("method", ctypes.c_int32),
        ("width", ctypes.c_int32),
        ("fabric", ctypes.c_char_p),
        ("handshake_dir", ctypes.c_char_p),
        # since ABI 1.2
        ("nic_map", ctypes.c_char_p),
        ("storage_dir", ctypes.c_char_p),
    ]


class StoreInfo(ctypes.Structure):
    """struct dds_store_info."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("method", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("comm_size", ctypes.c_int32),
        ("group_rank", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("group_index", ctypes.c_int32),
        ("n_groups", ctypes.c_int32),
        ("is_reader", ctypes.c_int32),
        ("node_local", ctypes.c_int32),
        ("reads_collective", ctypes.c_int32),
        # since ABI 1.2
        ("node_shm", ctypes.c_int32),
    ]


class VarInfoC(ctypes.Structure):
    """struct dds_var_info."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("global_rows", ctypes.c_int64),
        ("local_rows", ctypes.c_int64),
        ("row_bytes", ctypes.c_int64),
        ("first_row", ctypes.c_int64),
        ("group_size", ctypes.c_int32),
    ]


class StatsInfo(ctypes.Structure):
    """struct dds_stats_info."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("read_calls", ctypes.c_uint64),
        ("rows_local", ctypes.c_uint64),
        ("rows_remote", ctypes.c_uint64),
        ("bytes_local", ctypes.c_uint64),
        ("bytes_remote", ctypes.c_uint64),
        ("read_seconds", ctypes.c_double),
        # since ABI 1.2
        ("gather_requests", ctypes.c_uint64),
        ("gather_bytes", ctypes.c_uint64),
    ]


_vp = ctypes.c_void_p
_cp = ctypes.c_char_p
_i = ctypes.c_int
_i64 = ctypes.c_int64
_u32 = ctypes.c_uint32
_sz = ctypes.c_size_t

# name: (restype, argtypes) for every function of ddstore.h. Pointers to
# data and int64 arrays are passed as plain addresses (c_void_p) because they
# come from numpy, whose buffers ctypes cannot type-check anyway; the Python
# layer validates sizes before every call.
_PROTOTYPES = {
    "dds_version": (_cp, []),
    "dds_abi_version": (_i, []),
    "dds_strerror": (_cp, [_i]),
    "dds_last_error": (_cp, []),
    "dds_has_fabric": (_i, []),
    "dds_options_init": (None, [ctypes.POINTER(Options)]),
    "dds_create": (_i, [ctypes.POINTER(_vp), _i, ctypes.POINTER(Options)]),
    "dds_free": (_i, [_vp]),
    "dds_store_info_get": (_i, [_vp, ctypes.POINTER(StoreInfo)]),
    "dds_add": (_i, [_vp, _cp, _vp, _i64, _i64, _u32]),
    "dds_init": (_i, [_vp, _cp, _i64, _i64, _u32]),
    "dds_update": (_i, [_vp, _cp, _vp, _i64, _i64]),
    "dds_sync": (_i, [_vp]),
    "dds_get": (_i, [_vp, _cp, _vp, _i64, _i64]),
    "dds_get_batch": (_i, [_vp, _cp, _vp, _vp, _i64]),
    "dds_get_ranges": (_i, [_vp, _cp, _vp, _vp, _vp, _i64]),
    "dds_read_fail": (_i, [_vp, _i, _cp]),
    "dds_epoch_begin": (_i, [_vp]),
    "dds_epoch_end": (_i, [_vp]),
    "dds_query": (_i, [_vp, _cp, ctypes.POINTER(VarInfoC)]),
    "dds_var_offsets": (_i, [_vp, _cp, _vp, _i64]),
    "dds_var_count": (_i, [_vp, ctypes.POINTER(_i64)]),
    "dds_var_name": (_i, [_vp, _i64, _vp, _sz]),
    "dds_register_recv": (_i, [_vp, _vp, _sz]),
    "dds_unregister_recv": (_i, [_vp, _vp]),
    "dds_join": (_i, [ctypes.POINTER(_vp), _cp, _i, ctypes.c_double]),
    "dds_attach": (_i, [_vp, _cp]),
    "dds_stats": (_i, [_vp, ctypes.POINTER(StatsInfo)]),
    "dds_stats_reset": (_i, [_vp]),
    # versioned variables (ABI 1.1)
    "dds_init_versioned": (_i, [_vp, _cp, _i64, _i64, _u32, _i64]),
    "dds_var_block_rows": (_i, [_vp, _cp, ctypes.POINTER(_i64)]),
    "dds_generation": (_i, [_vp, _cp, _i64, ctypes.POINTER(ctypes.c_uint64)]),
    # store properties (ABI 1.2)
    "dds_store_property": (_i, [_vp, _cp, _vp, _sz]),
    # several variables' rows in one read (ABI 1.2)
    "dds_get_batch_vars": (_i, [_vp, _i, _vp, _vp, _vp, _i64]),
    # file-backed stores (ABI 1.2)
    "dds_save": (_i, [_vp]),
    "dds_open": (_i, [ctypes.POINTER(_vp), _i, _cp, ctypes.POINTER(Options)]),
    "dds_verify_saved": (_i, [_vp, ctypes.POINTER(_i64)]),
}


def _own_distribution_copy():
    """Path of the libddstore shipped in the pyddstore-core distribution
    this module belongs to, or None."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        dist = metadata.distribution("pyddstore-core")
    except metadata.PackageNotFoundError:
        return None
    files = dist.files or []
    here = os.path.realpath(__file__)
    owns_us = False
    candidates = []
    for f in files:
        p = str(f).replace("\\", "/")
        if p.endswith("pyddstore/_lib.py"):
            try:
                owns_us = os.path.realpath(str(f.locate())) == here
            except OSError:
                owns_us = False
        elif _LIB_NAME_RE.search(p):
            candidates.append(f)
    # A pyddstore imported from a source tree (PYTHONPATH) must not pick up
    # the library of some other installed copy: its ABI may differ.
    if not owns_us:
        return None
    for f in sorted(candidates, key=lambda f: -len(str(f))):
        path = os.path.realpath(str(f.locate()))
        if os.path.isfile(path):
            return path
    return None


def _build_time_copy():
    """Path recorded at build time, or None: the build directory's library
    for an editable install, else a system libddstore chosen at build time."""
    for module, attr in (("_editable", "LIBDDSTORE_BUILD_PATH"), ("_buildinfo", "LIBDDSTORE_PATH")):
        try:
            mod = __import__(f"{__package__}.{module}", fromlist=[attr])
        except ImportError:
            continue
        path = getattr(mod, attr, "") or ""
        if path and os.path.isfile(path):
            return path
    return None


def find_library():
    """Return (path, how) of the libddstore to load; raise ImportError when none is found."""
    env = os.environ.get("PYDDSTORE_LIBRARY", "")
    if env:
        if not os.path.isfile(env):
            raise ImportError(
                f"PYDDSTORE_LIBRARY={env!r} is not a file; point it at a libddstore "
                "shared library (e.g. build/libddstore/libddstore.so) or unset it to use "
                "the copy installed with pyddstore-core"
            )
        return os.path.abspath(env), "PYDDSTORE_LIBRARY"
    path = _own_distribution_copy()
    if path:
        return path, "the pyddstore-core distribution"
    path = _build_time_copy()
    if path:
        return path, "the path recorded at build time"
    name = ctypes.util.find_library("ddstore")
    if name:
        return name, "the system (ctypes.util.find_library)"
    raise ImportError(
        "libddstore not found: install the package with `pip install ./pyddstore-core` "
        "(which builds and ships the library), or set PYDDSTORE_LIBRARY to the full "
        "path of libddstore.so, or install libddstore where the dynamic linker finds it"
    )


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _loaded_path(lib, name):
    """Full path of the file the dynamic linker loaded for `name`
    (find_library gives a bare soname), so errors and library_path name it."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(lib.dds_abi_version, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return name


def load():
    """Load libddstore, declare every function and check its ABI version.

    Returns (ctypes.CDLL, path). Raises ImportError naming the path and both
    versions when the ABI does not match or a function is missing.
    """
    path, how = find_library()
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise ImportError(f"cannot load libddstore from {path} (found via {how}): {e}") from e
    if not os.path.isabs(path):
        path = _loaded_path(lib, path)
    missing = []
    for fname, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, fname)
        except AttributeError:
            missing.append(fname)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    if "dds_abi_version" in missing:
        raise ImportError(f"{path} (found via {how}) is not libddstore: it has no dds_abi_version()")
    abi = lib.dds_abi_version()
    if abi != ABI_VERSION:
        raise ImportError(
            f"libddstore ABI version mismatch: {path} (found via {how}) has ABI {abi}, "
            f"this pyddstore needs ABI {ABI_VERSION}; install a matching libddstore or "
            "reinstall pyddstore-core (pip install ./pyddstore-core), or unset/fix PYDDSTORE_LIBRARY"
        )
    if missing:
        raise ImportError(
            f"{path} (found via {how}, ABI {abi}) lacks functions this pyddstore needs: "
            + ", ".join(missing)
        )
    return lib, path


lib, path = load()


def last_error(code):
    """Message for a failed call: dds_last_error() of this thread, else dds_strerror(code)."""
    msg = lib.dds_last_error()
    text = msg.decode("utf-8", "replace") if msg else ""
    if not text:
        s = lib.dds_strerror(code)
        text = s.decode("utf-8", "replace") if s else f"libddstore error {code}"
    return text
