"""PyDDStore: the Python face of a libddstore store.

Every argument is checked (with the helpers of ``_args``) before libddstore
is called, so no Python input can make the C library touch memory it must
not. Collective calls (constructor, add, init) first agree across ranks on
whether every rank's arguments are valid, so a bad argument on one rank
raises on every rank instead of leaving the others waiting in a collective.
"""

import ctypes
import os
import threading
from typing import NamedTuple, Optional, Tuple

import numpy as np

from . import _lib, _verify
from ._args import (
    _INT64_MAX,
    _address,
    _bfloat16_view,
    _check_rows_match,
    _encode_name,
    _index,
    _int64_array,
    _row_bytes,
    _to_array,
)
from ._dtypes import _TAG_BFLOAT16, SUPPORTED_DTYPES, dtype_of_tag, dtype_tag, is_record, record_problem, \
    record_text
from ._errors import DDS_EEXIST, DDS_EINVAL, DDS_ENOENT, DDS_EOVERFLOW, DDS_ERANGE, DDS_ESTATE, \
    DDStoreDTypeError, DDStoreError, DDStoreKeyError, DDStoreRangeError, DDStoreStateError, \
    DDStoreTypeError, DDStoreValueError, make_error
from ._lifetime import _Handle, _mpi
from .util import raise_agreed

_c = _lib.lib

_INT64 = np.dtype(np.int64)
_ndarray = np.ndarray
_Byte = ctypes.c_char  # element type of the zero-copy views get_batch passes by reference
_byref = ctypes.byref
_addressof = ctypes.addressof


# The store's attributes that copy fields of dds_store_info (attribute, field),
# and the flags among them (as bool). reads_collective is libddstore's own rule
# (dds_get_batch), not derived again here; width is the group size.
_INFO_ATTRS = (("method", "method"), ("rank", "rank"), ("size", "comm_size"),
               ("group_rank", "group_rank"), ("group_size", "group_size"), ("width", "group_size"),
               ("group_index", "group_index"), ("n_groups", "n_groups"))
_INFO_FLAGS = ("is_reader", "node_local", "reads_collective")


class VarInfo(NamedTuple):
    """Description of a variable, from :meth:`PyDDStore.query`.

    ``dtype`` is None for a raw-bytes variable (from ``init``), the record
    dtype for numpy records given to ``add`` on this process; ``row_shape``
    is the trailing shape given to ``add`` on this process, None when not
    known here (``init`` variables, reader stores); ``offsets[k]`` is the
    first global row of group rank k's shard and ``offsets[-1]`` the total.
    """

    name: str
    global_rows: int
    local_rows: int
    row_bytes: int
    dtype: Optional[np.dtype]
    row_shape: Optional[Tuple[int, ...]]
    offsets: np.ndarray
    first_row: int


class _Var:
    """Cached metadata of one variable (variables never change shape)."""

    __slots__ = ("name", "bname", "tag", "dtype", "row_bytes", "global_rows", "local_rows",
                 "first_row", "offsets", "row_shape", "disp", "itemsize", "layouts",
                 "get_dtype", "get_tail", "record")

    def describe(self):
        """What rows of this variable look like, for error messages."""
        kind = (f"records of dtype {self.record}" if self.record is not None else
                self.dtype.name if self.dtype is not None else "raw")
        shape = f", row shape {self.row_shape}" if self.row_shape is not None else ""
        return f"{kind} rows of {self.row_bytes} bytes{shape}"


def _c_int(x, what):
    """x unchanged when a C int (the options' int32 fields) holds it: ctypes would
    truncate it silently. What values are valid is libddstore's check."""
    if not -(1 << 31) <= x < (1 << 31):
        raise DDStoreValueError(f"{what}={x} is out of range of a C int", DDS_EINVAL)
    return x


def _remember_layout(v, out):
    """Let get()/get_batch() take their fast paths for outputs laid out like `out` (checked).
    Not for records whose fields export no buffer (datetime64, ...): the fast paths reach
    the data through the buffer protocol; the checked path reads into them."""
    if out.dtype.kind == "V":
        try:
            memoryview(out[:0])
        except (ValueError, TypeError):
            return
    v.layouts.add((out.dtype, out.shape[1:]))
    v.get_dtype, v.get_tail = out.dtype, out.shape[1:]


# ---- the store ----------------------------------------------------------------



def _fast_rows(rows):
    """len(rows) when `rows` goes to C as it is (a non-empty 1-D C-contiguous
    writable int64 ndarray: what a loader passes on every batch), else 0."""
    if type(rows) is not np.ndarray or rows.ndim != 1:
        return 0
    rd, rf = rows.dtype, rows.flags
    if (rd is _INT64 or rd == _INT64) and rf.c_contiguous and rf.writeable:
        return rows.shape[0]
    return 0


def _fast_out(v, out, n):
    """Whether `out` takes `n` rows of variable `v` as it is: a writable
    C-contiguous ndarray of at least n rows whose layout already passed
    _checked_out. The dtype is tested by identity first (shared dtype
    objects), the set only when a caller alternates layouts: hashing a dtype
    costs about as much as the other checks."""
    if type(out) is not np.ndarray or not out.ndim or out.shape[0] < n:
        return False
    od, tail = out.dtype, out.shape[1:]
    if not ((od is v.get_dtype and tail == v.get_tail) or (od, tail) in v.layouts):
        return False
    of = out.flags
    return of.c_contiguous and of.writeable


def _checked_out(v, out, name):
    """`out` as an ndarray checked against variable `v` (the slow path);
    its layout is remembered for _fast_out."""
    o = _to_array(out, "output", name, output=True)
    _check_rows_match(v, o, "output")
    _remember_layout(v, o)
    return o


def _check_room(name, o, n):
    if o.shape[0] < n:
        raise DDStoreValueError(f"variable {name!r}: output has {o.shape[0]} rows, {n} requested", DDS_EINVAL)


class PyDDStore:
    """A distributed in-memory store of row-indexed variables.

    ``PyDDStore(comm=None, method=None, ddstore_width=None, *, handshake_dir=None,
    fabric=None, n_core=None, timeout=None, nic_map=None, storage_dir=None)``

    * comm: mpi4py intra-communicator of the ranks holding the data
      (default ``MPI.COMM_WORLD``). Collective over it.
    * method: 0 MPI RMA, 1 libfabric, 2 libfabric with a file handshake;
      default ``DDSTORE_METHOD`` or 0.
    * ddstore_width: ranks per group (consecutive ranks; each group holds its
      own full copy); default the whole communicator. Must divide comm's size.
    * handshake_dir, fabric: method 2 directory and libfabric provider
      (defaults ``DDSTORE_HANDSHAKE_DIR``, ``DDSTORE_FABRIC``).
    * storage_dir: keep every shard in a file under this directory, mapped
      into memory, instead of in memory (default ``DDSTORE_STORAGE_DIR``;
      ``""`` or unset: memory): the page cache decides what stays in memory,
      so the data may be larger than memory. :meth:`save` makes the store
      reopenable with :meth:`open` by a later job, at any rank count. One
      store per directory: the directory is locked while the store lives
      (docs/storage.rst).
    * ``PyDDStore(None, method=2, handshake_dir=d, n_core=N)`` (comm None
      with method 2 or n_core given) is a method-2 *reader* with no MPI: see
      :func:`pyddstore.join`; attach variables with :meth:`join`. timeout:
      seconds a reader waits for the publication (default
      ``DDSTORE_HANDSHAKE_TIMEOUT_S``, else 300).
    * Original-DDStore forms also accepted: a path as the third positional
      argument is handshake_dir (``PyDDStore(comm, 2, "/hs")``),
      ``handshake_dir=""`` means the default, and ``n_core=0`` on a store over a
      communicator.
    * nic_map: methods 1 and 2, on nodes with several NICs: which NIC
      (libfabric domain) each rank opens, by its allowed CPUs, in the
      original DDStore's ``DDSTORE_NIC_MAP`` format
      ``"hsn0=0-15,64-79;hsn1=16-31,80-95"`` (a name is a domain such as
      ``cxi1`` or ``mlx5_0``, or a network interface of one such as ``hsn1``).
      Default ``DDSTORE_NIC_MAP``, else the node's topology (the NIC on the
      NUMA node of the rank's CPUs); ``DDSTORE_FABRIC_DOMAIN`` overrides both.
      ``info()["domain"]`` and ``info()["domain_choice"]`` report the choice.
      Unused by method 0; a method-2 reader takes ``DDSTORE_NIC_MAP`` from its
      environment instead.

    Attributes (read-only): ``comm`` (the communicator given, None for a
    reader), ``group_comm`` (mpi4py communicator of this rank's group),
    ``rank``/``size`` (in comm), ``group_rank``/``group_size``/``group_index``
    (the group; for a reader, group_size is the number of core ranks),
    ``method``, ``width`` (ranks per group), ``is_reader``, ``freed``,
    ``node_local`` (every rank of the group on one node, reads are memory
    copies), ``reads_collective`` (True where :meth:`get_batch`,
    :meth:`get_ranges` and :meth:`fail_read` are group-collective, as
    libddstore decides: method 0 over a group of several ranks not all in one
    node's shared memory; False otherwise and for a reader).

    Compatible with code written for the original DDStore: ``PyDDStore(comm)``,
    ``add/init/update/get/epoch_begin/epoch_end/free`` with the same
    positional arguments. The object is always truthy. Free it with
    :meth:`free` (collective); stores left unfreed are freed collectively at
    interpreter exit, never from a garbage collector.
    """

    def __init__(self, comm=None, method=None, ddstore_width=None, *, handshake_dir=None,
                 fabric=None, n_core=None, timeout=None, nic_map=None, storage_dir=None):
        # The newest original is PyDDStore(comm_or_none, method, handshake_dir, n_core,
        # nic_map): a path in third place is its handshake_dir, and "" its "unset".
        if isinstance(ddstore_width, (str, os.PathLike)):
            if handshake_dir is not None:
                raise DDStoreValueError(
                    f"handshake_dir given twice ({ddstore_width!r} in third place and "
                    f"handshake_dir={handshake_dir!r}); the third positional argument is "
                    "ddstore_width (a path there is taken as handshake_dir)", DDS_EINVAL)
            handshake_dir, ddstore_width = ddstore_width, None
        if isinstance(handshake_dir, str) and handshake_dir == "":
            handshake_dir = None
        # nic_map: the original's CPU->NIC map; libddstore parses and applies it
        # (methods 1 and 2) and reports the choice in info().
        if nic_map is not None and not isinstance(nic_map, str):
            raise DDStoreTypeError(f"nic_map must be a str (the original's 'iface=cpus;...' map) or "
                                   f"None, got {type(nic_map).__name__}", DDS_EINVAL)
        if isinstance(nic_map, str) and "\0" in nic_map:
            raise DDStoreValueError("nic_map holds a NUL character", DDS_EINVAL)
        self._h = None
        self._vars = {}
        self._recv = {}  # address -> registered buffer (kept alive)
        self._recv_lock = threading.Lock()
        self.comm = None
        self.group_comm = None
        if comm is None and (method == 2 or (method is None and n_core is not None)):
            if nic_map:
                raise DDStoreValueError(
                    "a method-2 reader takes its NIC map from the environment, not nic_map=: "
                    "export DDSTORE_NIC_MAP (same format) in the reader's job, or name the NIC "
                    "with DDSTORE_FABRIC_DOMAIN", DDS_EINVAL)
            if storage_dir is not None:
                raise DDStoreValueError("storage_dir does not apply to a method-2 reader (it reads the "
                                        "core group's shards, wherever they live)", DDS_EINVAL)
            self._init_reader(handshake_dir, n_core, timeout, ddstore_width, fabric)
        else:
            self._init_core(comm, method, ddstore_width, handshake_dir, fabric, n_core, nic_map,
                            storage_dir)

    @classmethod
    def open(cls, storage_dir, comm=None, method=None, ddstore_width=None, *, handshake_dir=None,
             fabric=None):
        """Reopen the store saved (:meth:`save`) in `storage_dir`, over `comm`
        (default ``MPI.COMM_WORLD``) of any size, without its source: every
        variable is there, read-only, its shards mapped from the saved files
        (the saved layout at the same number of ranks per group, else an
        even split of each variable's rows; no row is copied, so the time
        does not grow with the data). method, ddstore_width, handshake_dir,
        fabric: as for the constructor. Collective over comm.

        A missing directory or manifest raises DDStoreKeyError; a truncated,
        corrupt, foreign or stale directory (a file changed after the save)
        DDStoreError with code DDS_EPROTO; a directory another job is
        writing DDStoreStateError: on every rank, naming the directory and
        what is wrong. The directory stays locked (shared) until
        :meth:`free`. :meth:`verify_saved` checks every row against the
        checksums saved with it."""
        self = cls.__new__(cls)
        self._h = None
        self._vars = {}
        self._recv = {}
        self._recv_lock = threading.Lock()
        self.comm = None
        self.group_comm = None
        self._init_core(comm, method, ddstore_width, handshake_dir, fabric, None, None, None,
                        reopen=storage_dir)
        return self

    # -- construction

    def _init_core(self, comm, method, width, handshake_dir, fabric, n_core, nic_map, storage_dir,
                   reopen=None):
        MPI = _mpi()
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise DDStoreTypeError(
                f"comm must be an mpi4py intra-communicator (e.g. MPI.COMM_WORLD or one from "
                f"comm.Split), got {comm!r}", DDS_EINVAL)
        size = comm.Get_size()
        ctl = comm.Dup()  # private channel for argument agreement
        err = None
        try:
            # Python checks the types and what ctypes would truncate; the values (a method
            # 0, 1 or 2, a width dividing the size, the same on every rank) are libddstore's
            # checks in dds_create, agreed there and raised on every rank.
            m = -1 if method is None else _c_int(_index(method, "method"), "method")
            w = size if width is None else _c_int(_index(width, "ddstore_width"), "ddstore_width")
            if w == 0:  # libddstore's "whole communicator", which Python spells None
                raise DDStoreValueError("ddstore_width=0 does not divide the communicator: pass None "
                                        "for the whole communicator, or a divisor of its size", DDS_EINVAL)
            # n_core=0 is the newest original's default ("not a reader").
            if n_core is not None and _index(n_core, "n_core") != 0:
                raise DDStoreValueError(
                    "n_core is for method-2 readers (PyDDStore(None, method=2, n_core=N)); a store "
                    "over a communicator has its ranks as core", DDS_EINVAL)
            for label, val in (("handshake_dir", handshake_dir), ("fabric", fabric),
                               ("storage_dir", storage_dir)):
                if val is not None and not isinstance(val, (str, os.PathLike)):
                    raise DDStoreTypeError(f"{label} must be a str or path, got {type(val).__name__}",
                                           DDS_EINVAL)
            if reopen is not None and (not isinstance(reopen, (str, os.PathLike)) or not os.fspath(reopen)):
                raise DDStoreTypeError(f"storage_dir must be the directory a store was saved in (a str or "
                                       f"path), got {reopen!r}", DDS_EINVAL)
        except DDStoreError as e:
            err = e
        try:
            raise_agreed(ctl, err, "create")
        except BaseException:
            ctl.Free()
            raise
        opts = _lib.Options()
        _c.dds_options_init(ctypes.byref(opts))
        opts.method = m
        opts.width = w
        keep = []
        if fabric is not None:
            keep.append(os.fsencode(fabric))
            opts.fabric = keep[-1]
        if handshake_dir is not None:
            keep.append(os.fsencode(handshake_dir))
            opts.handshake_dir = keep[-1]
        if nic_map is not None:
            keep.append(nic_map.encode())
            opts.nic_map = keep[-1]
        if storage_dir is not None:
            keep.append(os.fsencode(storage_dir))
            opts.storage_dir = keep[-1]
        ptr = ctypes.c_void_p()
        if reopen is not None:
            rc = _c.dds_open(ctypes.byref(ptr), comm.py2f(), os.fsencode(reopen), ctypes.byref(opts))
        else:
            rc = _c.dds_create(ctypes.byref(ptr), comm.py2f(), ctypes.byref(opts))
        if rc:
            msg = _lib.last_error(rc)
            ctl.Free()
            raise make_error(rc, msg)
        self._h = _Handle(ptr.value, True, (ctl,))
        self._ctl = ctl
        self.comm = comm
        self._load_info()
        # The group libddstore formed, as dds_store_info reports it (not its rule
        # derived again here); freed with the store.
        self.group_comm = comm.Split(self.group_index, self.group_rank)
        self._h.comms.append(self.group_comm)

    def _init_reader(self, handshake_dir, n_core, timeout, width, fabric):
        if width is not None:
            raise DDStoreValueError("ddstore_width does not apply to a method-2 reader", DDS_EINVAL)
        if fabric is not None:
            raise DDStoreValueError(
                "a reader takes its provider from the handshake (or DDSTORE_FABRIC), not fabric=",
                DDS_EINVAL)
        n = 0 if n_core is None else _index(n_core, "n_core")
        if n_core is not None and n < 1:
            raise DDStoreValueError(f"n_core must be >= 1, got {n}", DDS_EINVAL)
        t = -1.0
        if timeout is not None:
            try:
                t = float(timeout)
            except (TypeError, ValueError):
                raise DDStoreTypeError(f"timeout must be a number of seconds, got {timeout!r}",
                                       DDS_EINVAL) from None
            if not t >= 0:
                raise DDStoreValueError(f"timeout must be >= 0 seconds, got {timeout}", DDS_EINVAL)
        hs = None if handshake_dir is None else os.fsencode(handshake_dir)
        ptr = ctypes.c_void_p()
        rc = _c.dds_join(ctypes.byref(ptr), hs, n, t)
        if rc:
            raise make_error(rc, _lib.last_error(rc))
        self._h = _Handle(ptr.value, False)
        self._ctl = None
        self._load_info()

    def _load_info(self):
        info = _lib.StoreInfo()
        info.size = ctypes.sizeof(info)
        with self._h as ptr:
            rc = _c.dds_store_info_get(ptr, ctypes.byref(info))
        if rc:
            raise make_error(rc, _lib.last_error(rc))
        for attr, field in _INFO_ATTRS:
            setattr(self, attr, getattr(info, field))
        for flag in _INFO_FLAGS:
            setattr(self, flag, bool(getattr(info, flag)))
        self._store_info = info

    # -- helpers

    def _raise(self, rc):
        raise make_error(rc, _lib.last_error(rc))

    def _require_core(self, what):
        if self._h is None:
            raise DDStoreStateError("the store was not created", DDS_ESTATE)
        if self.is_reader:
            raise DDStoreStateError(
                f"{what}() needs a store over a communicator; this is a method-2 reader, which "
                "only reads", DDS_ESTATE)
        if not self._h.live:
            raise DDStoreStateError(f"{what}() on a freed store", DDS_ESTATE)

    def _var(self, name):
        """Metadata of `name`; raises on a freed store before any other check."""
        h = self._h
        if h is None or h.ptr is None or h._closing:
            raise DDStoreStateError(f"call on a freed store (variable {name!r})", DDS_ESTATE)
        try:
            return self._vars[name]
        except (KeyError, TypeError):
            return self._load_var(name, None)

    def _load_var(self, name, row_shape, disp_itemsize=None, record=None):
        bname = _encode_name(name)
        if self._h is None:
            raise DDStoreStateError("the store was not created", DDS_ESTATE)
        ci = _lib.VarInfoC()
        ci.size = ctypes.sizeof(ci)
        with self._h as ptr:
            rc = _c.dds_query(ptr, bname, ctypes.byref(ci))
            if rc == DDS_ENOENT:
                raise DDStoreKeyError(
                    f"no variable {name!r} in this store (it has: {', '.join(map(repr, self.names())) or 'none'})",
                    DDS_ENOENT)
            if rc:
                self._raise(rc)
            offsets = np.zeros(ci.group_size + 1, dtype=np.int64)
            rc = _c.dds_var_offsets(ptr, bname, offsets.ctypes.data, offsets.size)
            if rc:
                self._raise(rc)
        v = _Var()
        v.layouts = set()  # (dtype, shape[1:]) of output arrays that passed _check_rows_match
        v.get_dtype = v.get_tail = None  # the last layout get()/get_batch() accepted (fast paths)
        v.name = name
        v.bname = bname
        v.tag = ci.dtype
        v.dtype = dtype_of_tag(ci.dtype)
        # A record variable: raw bytes in libddstore, records of this dtype here.
        v.record = record
        if record is not None:
            v.dtype = record
        v.row_bytes = ci.row_bytes
        v.global_rows = ci.global_rows
        v.local_rows = ci.local_rows
        v.first_row = ci.first_row
        v.offsets = offsets
        v.row_shape = row_shape
        if disp_itemsize is None:
            isz = v.dtype.itemsize if v.dtype is not None else (2 if v.tag == _TAG_BFLOAT16 else 1)
            disp_itemsize = (v.row_bytes // isz, isz)
        v.disp, v.itemsize = disp_itemsize
        self._vars[name] = v
        return v

    # -- variables

    def _new_name(self, name):
        """`name` encoded for the C library, for a variable about to be made
        (add/init): raises when it is invalid or already in this store."""
        bname = _encode_name(name)
        if name in self._vars:
            raise DDStoreValueError(f"variable {name!r} already exists in this store", DDS_EEXIST)
        return bname

    def add(self, name, arr, *, dtype=None):
        """Add variable `name` from this rank's rows `arr` (collective over comm).

        `arr`: numpy array (or anything with the buffer/array interface) whose
        first axis counts rows; 1-D means one value per row. Ranks may hold
        zero rows; trailing shape and dtype must agree across ranks. The store
        keeps its own copy. numpy records (a structured array, a record array:
        any void dtype, nested and aligned ones included, without object
        fields) are stored as their bytes, as the original DDStore's users
        store them; reads give them back bit for bit into an array of the same
        record dtype (or as bytes into a 1-byte integer array), and
        ``query(name).dtype`` is the record dtype on the ranks that added it
        (a method-2 reader sees raw rows: read them into that dtype). Raises on every rank when any rank's arguments
        are bad (duplicate or invalid name, unsupported dtype, mismatch).

        dtype: keyword-only; ``"bfloat16"`` tags the variable as bfloat16
        when `arr` is a 2-byte integer view of bfloat16 values (numpy has no
        bfloat16: ``torch_tensor.view(torch.int16).numpy()``); reads then
        accept int16/uint16 outputs. None (default): the dtype of `arr`.
        """
        self._require_core("add")
        err = None
        agreed = None
        try:
            bname = self._new_name(name)
            a = _to_array(arr, "array", name, output=False)
            if dtype is not None and dtype != "bfloat16":
                raise DDStoreValueError(f"variable {name!r}: dtype={dtype!r}: only 'bfloat16' (for a "
                                        "2-byte integer view of bfloat16 values) or None", DDS_EINVAL)
            if dtype == "bfloat16" and not (_bfloat16_view(a.dtype) or dtype_tag(a.dtype) == _TAG_BFLOAT16):
                raise DDStoreDTypeError(f"variable {name!r}: dtype='bfloat16' needs an int16/uint16 view "
                                        f"of the values, got {a.dtype}", DDS_EINVAL)
            record = None
            if dtype is None and is_record(a.dtype):
                problem = record_problem(a.dtype)
                if problem is not None:
                    raise DDStoreDTypeError(f"variable {name!r}: {problem}", DDS_EINVAL)
                record, tag = a.dtype, 0
            else:
                tag = _TAG_BFLOAT16 if dtype == "bfloat16" else dtype_tag(a.dtype)
            if tag is None:
                raise DDStoreDTypeError(
                    f"variable {name!r}: dtype {a.dtype} is not supported; use one of "
                    f"{', '.join(SUPPORTED_DTYPES)} (native byte order), or numpy records "
                    "(a structured dtype)", DDS_EINVAL)
            rb = _row_bytes(a)
            if rb < 1:
                raise DDStoreValueError(f"variable {name!r}: rows of shape {a.shape[1:]} hold no bytes",
                                        DDS_EINVAL)
            if a.shape[0] > _INT64_MAX // rb:
                raise DDStoreValueError(f"variable {name!r}: {a.shape[0]} rows of {rb} bytes overflow",
                                        DDS_EOVERFLOW)
            agreed = (name, tuple(a.shape[1:]), record_text(record) if record is not None else a.dtype.str)
        except DDStoreError as e:
            err = e
        # dds_add agrees again (name, row bytes, dtype tag), but this agreement is not
        # redundant: the errors found above (not an array, unsupported dtype, bad
        # dtype=) never reach C, and only here does a rank without one learn of
        # another's ("rank k: ..." with its class), instead of waiting in dds_add; C
        # compares row bytes, not the trailing shape ((2, 3) vs (3, 2) rows).
        raise_agreed(self._ctl, err, agreed)
        nrows = a.shape[0]
        with self._h as ptr:
            rc = _c.dds_add(ptr, bname, a.ctypes.data if nrows else None, nrows, rb, tag)
        if rc:
            self._raise(rc)
        self._load_var(name, tuple(a.shape[1:]), record=record)
        # Per-shard checksums for verify(), from the caller's rows (no read
        # back); collective like add itself.
        _verify.record(self, name, local=a)

    def init(self, name, nrows, disp, itemsize=1):
        """Allocate variable `name` of `nrows` zero-filled local rows of
        `disp * itemsize` bytes each, to be written with :meth:`update`
        (collective over comm). The variable holds raw bytes: any dtype whose
        rows have that many bytes can write and read it.

        Raises on every rank when any rank's arguments are bad, with the
        codes libddstore's ``dds_init`` gives: :class:`DDStoreValueError`
        with ``DDS_EINVAL`` for a negative `nrows` or a `disp` or `itemsize`
        below 1, ``DDS_EOVERFLOW`` when the shard's bytes overflow 2^63,
        ``DDS_EMISMATCH`` when ranks pass different names or row sizes;
        :class:`DDStoreTypeError` for a non-integer argument.
        """
        self._init_raw("init", name, nrows, disp, itemsize, None)

    def init_versioned(self, name, nrows, disp, itemsize=1, *, block_rows=1):
        """Allocate versioned variable `name`: `nrows` zero-filled local rows
        of `disp * itemsize` bytes, one generation counter per `block_rows`
        local rows (collective over comm, like :meth:`init`; write it with
        :meth:`update`, visible to readers as soon as ``update()`` returns).

        Every read of it (``get``, ``get_batch``, ``DistDatasetReader``...)
        checks the counters and reads again rows that changed meanwhile, so
        no row read is ever a mix of two updates (see "Data that changes
        while it is read" in the concepts guide). Choose `block_rows` as the
        rows one update writes together (e.g. one timestep of one rank): rows
        of one block are consistent with each other.

        Raises on every rank when any rank's arguments are bad: the errors of
        :meth:`init` (the same checks and codes), and ``DDS_EINVAL`` for
        `block_rows` below 1; ``DDS_EMISMATCH`` when ranks pass different
        `block_rows`.
        """
        self._init_raw("init_versioned", name, nrows, disp, itemsize, block_rows)

    def _init_raw(self, what, name, nrows, disp, itemsize, block_rows):
        """init() and init_versioned() (`block_rows` None: a plain variable):
        the argument checks, with the codes C gives for the same checks
        (dds_init, dds_init_versioned), agreed among the ranks; then the C call."""
        self._require_core(what)
        err = None
        agreed = None
        try:
            bname = self._new_name(name)
            n = _index(nrows, "nrows")
            d = _index(disp, "disp")
            isz = _index(itemsize, "itemsize")
            b = 1 if block_rows is None else _index(block_rows, "block_rows")
            if n < 0:
                raise DDStoreValueError(f"variable {name!r}: nrows must be >= 0, got {n}", DDS_EINVAL)
            if d < 1 or isz < 1:
                raise DDStoreValueError(
                    f"variable {name!r}: disp ({d}) and itemsize ({isz}) must be >= 1", DDS_EINVAL)
            if b < 1:
                raise DDStoreValueError(
                    f"variable {name!r}: block_rows must be >= 1 (rows per generation counter), got {b}",
                    DDS_EINVAL)
            if d > _INT64_MAX // isz or n > _INT64_MAX // (d * isz):
                raise DDStoreValueError(f"variable {name!r}: {n} rows of {d}x{isz} bytes overflow",
                                        DDS_EOVERFLOW)
            agreed = (name, d * isz, b)
        except DDStoreError as e:
            err = e
        raise_agreed(self._ctl, err, agreed)
        with self._h as ptr:
            if block_rows is None:
                rc = _c.dds_init(ptr, bname, n, d * isz, 0)
            else:
                rc = _c.dds_init_versioned(ptr, bname, n, d * isz, 0, b)
        if rc:
            self._raise(rc)
        self._load_var(name, None, (d, isz))

    def block_rows(self, name):
        """Rows per generation counter of variable `name`; 0 when it is not
        versioned (see :meth:`init_versioned`). Local (a method-2 reader
        looks the counters up once)."""
        v = self._var(name)
        out = ctypes.c_int64()
        with self._h as ptr:
            rc = _c.dds_var_block_rows(ptr, v.bname, ctypes.byref(out))
        if rc:
            self._raise(rc)
        return out.value

    def generation(self, name, row):
        """Generation counter of the block holding global row `row` of
        versioned variable `name` (see :meth:`init_versioned`): even when no
        update of it is in progress (``gen // 2`` updates have completed),
        odd during one. Not collective; poll it to see whether new rows were
        published."""
        v = self._var(name)
        r = _index(row, "row")
        out = ctypes.c_uint64()
        with self._h as ptr:
            rc = _c.dds_generation(ptr, v.bname, r, ctypes.byref(out))
        if rc:
            self._raise(rc)
        return out.value

    def update(self, name, arr, offset=0):
        """Write the rows of `arr` into this rank's own shard of `name` from
        local row `offset`. Local; visible to others after :meth:`sync` or
        :meth:`epoch_begin`."""
        v = self._var(name)
        a = _to_array(arr, "array", name, output=False)
        _check_rows_match(v, a, "array")
        off = _index(offset, "offset")
        n = a.shape[0]
        if off < 0 or off > v.local_rows - n:
            raise DDStoreRangeError(
                f"variable {name!r}: local rows [{off}, {off + n}) are outside this rank's "
                f"[0, {v.local_rows})", DDS_ERANGE)
        with self._h as ptr:
            rc = _c.dds_update(ptr, v.bname, a.ctypes.data if n else None, n, off)
        if rc:
            self._raise(rc)

    def _core_collective(self, what, cfn):
        """Run a store-wide C call taking only the handle (sync, epochs) on a
        core store and raise its error."""
        self._require_core(what)
        with self._h as ptr:
            rc = cfn(ptr)
        if rc:
            self._raise(rc)

    def sync(self):
        """Make every update() so far visible to all readers (collective over comm)."""
        self._core_collective("sync", _c.dds_sync)

    # -- reads

    def get(self, name, arr, start=0):
        """Read ``arr.shape[0]`` rows of `name` from global row `start` into
        `arr` (in place, C-contiguous, writable). Not collective; the data is
        complete on return. `start` may be a numpy integer."""
        # Fast path for the original DDStore's loop (one get() per sample, the same output
        # array every time): a known variable, a writable C-contiguous ndarray whose layout
        # already passed the checks below, a Python int start inside the variable. O(1)
        # checks only; anything else takes the checked path below.
        # The layout test is by identity (dtype objects of one type are shared), cheaper
        # than hashing into v.layouts; ctypes.byref(from_buffer) is the cheapest way to the
        # data address (arr.ctypes.data costs more than the C call).
        v = self._vars.get(name) if type(name) is str else None
        if (v is not None and type(arr) is np.ndarray and type(start) is int
                and arr.dtype is v.get_dtype and arr.shape[1:] == v.get_tail and arr.shape[0]):
            f = arr.flags
            n = arr.shape[0]
            # ctypes truncates an int beyond int64 silently: the range is checked here.
            if f.c_contiguous and f.writeable and 0 <= start <= v.global_rows - n:
                with self._h as ptr:
                    rc = _c.dds_get(ptr, v.bname, _byref(_Byte.from_buffer(arr)), start, n)
                if rc:
                    self._raise(rc)
                return
        v = self._var(name)
        if (type(arr) is np.ndarray and arr.ndim and arr.flags.c_contiguous
                and arr.flags.writeable and not arr.dtype.hasobject):
            out = arr
        else:
            out = _to_array(arr, "output", name, output=True)
        _check_rows_match(v, out, "output")
        _remember_layout(v, out)
        n = out.shape[0]
        s = start if type(start) is int else _index(start, "start")
        if s < 0 or s > v.global_rows - n:
            raise DDStoreRangeError(
                f"variable {name!r}: rows [{s}, {s + n}) are outside [0, {v.global_rows})", DDS_ERANGE)
        with self._h as ptr:
            rc = _c.dds_get(ptr, v.bname, out.ctypes.data, s, n)
        if rc:
            self._raise(rc)

    def fail_read(self, error):
        """Take part in the group's collective read (method 0: get_batch and
        get_ranges are collective where the group spans nodes or
        DDSTORE_NODE_LOCAL=0) as a read that failed here with `error` (an
        exception, typically this rank's bad argument), then raise.

        Every other rank of the group that is in the matching read raises the
        same error, as a DDStoreError named ``"rank k: ..."`` (the lowest
        failing rank), instead of waiting for this rank; this rank raises
        `error` itself. Where reads are not collective only this rank raises. For
        code that finds a problem before calling get_batch (e.g. a dataset
        with an index out of range); get_batch and get_ranges do this
        themselves for their own argument errors.
        """
        code = getattr(error, "code", None)
        if not isinstance(code, int) or code >= 0:
            code = DDS_EINVAL
        if not isinstance(error, DDStoreError):
            text = f"{type(error).__name__}: {error}"
        else:
            text = str(error)
        h = self._h
        if self.reads_collective and h is not None and h.live:
            with h as ptr:
                _c.dds_read_fail(ptr, code, text.encode("utf-8", "replace")[:1000])
        raise error

    def get_batch(self, name, out, rows):
        """Read global rows ``rows[i]`` into ``out[i]`` (any order, repeats
        allowed; ``out.shape[0] >= len(rows)``). Method 0: collective over the
        group where the group spans nodes or DDSTORE_NODE_LOCAL=0 (every rank
        of the group calls it the same number of times; pass an empty `rows`
        when there is nothing to read); a bad argument on one rank then
        raises on every rank ("rank k: ..."), and unequal numbers of calls
        raise or just work, never hang (docs/concepts.rst). Where the whole
        group shares node memory, and for methods 1/2, reads are not
        collective: a bad argument raises on this rank only."""
        # Fast path for what a loader passes on every batch: O(1) checks written out here
        # (it runs after every network wait, with cold caches, where each Python call and
        # temporary object shows): libddstore checks every row against the variable's range
        # itself (and, where a group-collective read synchronises, reports DDS_ERANGE on
        # every rank of the group, so none is left waiting). It accepts what _fast_rows and
        # _fast_out accept (get_batch_vars calls them), written out here because the two
        # calls cost 1 us a batch with cold caches (8.3 vs 7.3 us per call, measured):
        # change both together. Anything else takes the checked path below.
        v = self._vars.get(name) if type(name) is str else None
        if (v is not None and type(rows) is _ndarray and type(out) is _ndarray and rows.ndim == 1
                and out.ndim and rows.dtype is _INT64):
            n = len(rows)
            od = out.dtype
            if n and len(out) >= n and ((od is v.get_dtype and out.shape[1:] == v.get_tail)
                                        or (od, out.shape[1:]) in v.layouts):
                # from_buffer refuses a read-only or non-contiguous array (the checked path
                # takes those) and gives the data address without building .ctypes or
                # __array_interface__ (each costs more than the C call for small reads).
                try:
                    po, pr = _Byte.from_buffer(out), _Byte.from_buffer(rows)
                except (TypeError, ValueError, BufferError):
                    po = None
                h = self._h
                if po is not None and h.usable:
                    inflight = h.inflight  # the handle's lighter guard (_Handle)
                    inflight.append(None)
                    try:
                        rc = _c.dds_get_batch(h.ptr, v.bname, _byref(po), _byref(pr), n) if h.usable else None
                    finally:
                        inflight.pop()
                    if rc is not None:
                        if rc:
                            self._raise(rc)
                        return
        try:
            v = self._var(name)
            o = _checked_out(v, out, name)
            r = _int64_array(rows, "rows", name)
            n = r.size
            _check_room(name, o, n)
            # The row range is libddstore's check (one for every caller): DDS_ERANGE naming the
            # row and its position, on every rank of the group where the read is collective.
        except Exception as e:  # noqa: BLE001 - every argument error reaches the group's read
            self.fail_read(e)
        with self._h as ptr:
            rc = _c.dds_get_batch(ptr, v.bname, o.ctypes.data, r.ctypes.data, n)
        if rc:
            self._raise(rc)

    def get_batch_vars(self, names, outs, rows):
        """Read the same global rows of several variables: ``rows[i]`` of
        ``names[v]`` into ``outs[v][i]``, as :meth:`get_batch` of each
        variable in turn would. Methods 1 and 2 send one request per owner
        for all the variables (a sample of several fields costs one round
        trip per owner, not one per field). Where reads are collective
        (method 0, :meth:`get_batch`'s rule) a call is one collective read
        for all the variables (one agreement, one exchange), and a bad
        argument for any of them fails it on every rank; elsewhere this is
        :meth:`get_batch` of each. On an error every variable was still
        attempted and the first error is raised."""
        # get_batch's fast path (_fast_rows, _fast_out) for every variable.
        n = _fast_rows(rows)
        if n and type(names) in (list, tuple) and type(outs) in (list, tuple) and len(names) == len(outs):
            k, vs = len(names), self._vars
            cnames, couts = (ctypes.c_char_p * k)(), (ctypes.c_void_p * k)()
            for i in range(k):
                v = vs.get(names[i]) if type(names[i]) is str else None
                if v is None or not _fast_out(v, outs[i], n):
                    break
                cnames[i] = v.bname
                couts[i] = _addressof(_Byte.from_buffer(outs[i]))
            else:
                with self._h as ptr:
                    rc = _c.dds_get_batch_vars(ptr, k, cnames, couts, _byref(_Byte.from_buffer(rows)), n)
                if rc:
                    self._raise(rc)
                return
        names, outs = list(names), list(outs)
        try:
            if len(names) != len(outs):
                raise DDStoreValueError(f"{len(names)} variable names but {len(outs)} outputs", DDS_EINVAL)
            r = _int64_array(rows, "rows", names[0] if names else "")
            n = r.size
            arrays = []
            for name, out in zip(names, outs):
                v = self._var(name)
                o = _checked_out(v, out, name)
                _check_room(name, o, n)
                arrays.append((v, o))
        except Exception as e:  # noqa: BLE001 - every argument error reaches the group's read
            if names:  # one collective read for all the variables
                self.fail_read(e)
            raise
        k = len(arrays)
        cnames = (ctypes.c_char_p * max(k, 1))(*[v.bname for v, _ in arrays])
        couts = (ctypes.c_void_p * max(k, 1))(*[o.ctypes.data for _, o in arrays])
        with self._h as ptr:
            rc = _c.dds_get_batch_vars(ptr, k, cnames, couts, r.ctypes.data, n)
        if rc:
            self._raise(rc)

    def get_ranges(self, name, out, starts, counts):
        """Read row ranges ``[starts[i], starts[i] + counts[i])`` one after
        the other into `out` (``out.shape[0] >= sum(counts)``). Same
        collective rule as :meth:`get_batch`."""
        try:
            v = self._var(name)
            o = _to_array(out, "output", name, output=True)
            _check_rows_match(v, o, "output")
            s = _int64_array(starts, "starts", name)
            c = _int64_array(counts, "counts", name)
            if s.size != c.size:
                raise DDStoreValueError(
                    f"variable {name!r}: {s.size} starts but {c.size} counts", DDS_EINVAL)
            total = 0
            if s.size:
                g = v.global_rows
                bad = (c < 0) | (s < 0) | (s > g) | (c > g - s)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise DDStoreRangeError(
                        f"variable {name!r}: range {i} [{int(s[i])}, {int(s[i]) + int(c[i])}) is outside "
                        f"[0, {g})", DDS_ERANGE)
                if float(c.sum(dtype=np.float64)) > 2.0 ** 62:
                    raise DDStoreValueError(f"variable {name!r}: ranges overflow", DDS_EOVERFLOW)
                total = int(c.sum())
            if o.shape[0] < total:
                raise DDStoreValueError(
                    f"variable {name!r}: output has {o.shape[0]} rows, the ranges hold {total}",
                    DDS_EINVAL)
        except Exception as e:  # noqa: BLE001 - every argument error reaches the group's read
            self.fail_read(e)
        with self._h as ptr:
            rc = _c.dds_get_ranges(ptr, v.bname, o.ctypes.data, s.ctypes.data, c.ctypes.data, s.size)
        if rc:
            self._raise(rc)

    # -- epochs

    def epoch_begin(self):
        """Begin an access epoch (collective over the group); for code written
        for the original DDStore. get() works inside and outside epochs."""
        self._core_collective("epoch_begin", _c.dds_epoch_begin)

    def epoch_end(self):
        """End the access epoch begun by :meth:`epoch_begin` (collective over the group)."""
        self._core_collective("epoch_end", _c.dds_epoch_end)

    def epoch(self):
        """Context manager: ``with store.epoch(): ...`` = epoch_begin()/epoch_end()."""
        return _Epoch(self)

    # -- metadata

    def query(self, name):
        """Describe variable `name` as a :class:`VarInfo`."""
        v = self._var(name)
        return VarInfo(v.name, v.global_rows, v.local_rows, v.row_bytes, v.dtype, v.row_shape,
                       v.offsets.copy(), v.first_row)

    def info(self, name=None):
        """Describe the store, or one variable.

        ``info(name)``: ``(total_rows, disp, itemsize)`` of variable `name`,
        as the original DDStore reports it.

        ``info()``: a dict describing how this store moves rows, from
        libddstore: ``method``; ``transport`` (``"mpi"`` for method 0,
        ``"libfabric:<provider>"`` for methods 1 and 2); ``read_protocol``
        (how rows of other nodes are read: text starting with
        ``"owner-side gather"``, ``"one-sided reads"`` or ``"node shared
        memory"``, and why; see ``DDSTORE_GATHER``); ``node_shm`` (True
        when the shards of ranks on one node live in node shared memory, so
        that reading a node peer's rows is a memcpy for *every* method; the
        transport then carries only rows of other nodes;
        ``DDSTORE_NODE_LOCAL=0`` turns it off); ``domain`` (methods 1 and 2:
        the libfabric domain, i.e. the NIC, this process opened, such as
        ``"cxi2"``, ``"mlx5_1"`` or ``"lo"``; None for method 0) and
        ``domain_choice`` (why: text starting with ``DDSTORE_FABRIC_DOMAIN``,
        ``nic_map``, ``DDSTORE_NIC_MAP``, ``only``, ``topology`` or ``spread``;
        None for method 0); ``node_local`` (the whole
        group is on one node: every read is a memcpy); ``reads_collective``;
        ``rank``, ``size``, ``group_rank``, ``group_size``, ``group_index``,
        ``is_reader``; where this rank's shards live: ``storage``
        (``"files"``: in files under ``storage_dir``, mapped; ``"node-shm"``:
        node shared memory, /dev/shm; ``"memory"``: private memory;
        ``"remote"`` for a reader), ``storage_dir`` (None unless files),
        ``storage_state`` (``"memory"``, ``"written"``: files not saved or
        changed since, ``"saved"``, ``"reopened"``), ``shard_bytes`` (this
        rank's shards, all variables), ``resident_bytes`` (how much of them
        is in memory now: for files, what the page cache holds; mincore),
        ``storage_free_bytes`` (room left where shards go: the storage
        directory's file system, /dev/shm, or available memory; -1 unknown).
        Local.
        """
        if name is not None:
            v = self._var(name)
            return (v.global_rows, v.disp, v.itemsize)
        if self._h is None:
            raise DDStoreStateError("the store was not created", DDS_ESTATE)
        return {
            "method": self.method,
            "transport": self._property("transport"),
            "read_protocol": self._property("read_protocol"),
            "domain": self._property("domain") or None,
            "domain_choice": self._property("domain_choice") or None,
            "node_shm": bool(self._store_info.node_shm),
            "node_local": self.node_local,
            "reads_collective": self.reads_collective,
            "rank": self.rank,
            "size": self.size,
            "group_rank": self.group_rank,
            "group_size": self.group_size,
            "group_index": self.group_index,
            "is_reader": self.is_reader,
            "storage": self._property("storage"),
            "storage_dir": self._property("storage_dir") or None,
            "storage_state": self._property("storage_state"),
            "shard_bytes": int(self._property("shard_bytes")),
            "resident_bytes": int(self._property("resident_bytes")),
            "storage_free_bytes": int(float(self._property("storage_free_bytes"))),
        }

    def _property(self, key):
        """Text of libddstore's store property `key` (dds_store_property)."""
        buf = ctypes.create_string_buffer(4200)
        with self._h as ptr:
            rc = _c.dds_store_property(ptr, key.encode(), ctypes.addressof(buf), len(buf))
        if rc:
            self._raise(rc)
        return buf.value.decode("utf-8", "replace")

    def save(self):
        """Save a store created with ``storage_dir`` so that a later job can
        reopen it with :meth:`open` (collective over comm): every rank's rows
        are written to disk, a CRC-32C of every 16 MiB block of every shard
        and the store's manifest (variables, dtypes, row counts, per-rank
        offsets, file sizes and times, format version) are written
        atomically. A later add/init/update makes it unsaved again until the
        next save; a store freed unsaved takes its files with it."""
        self._core_collective("save", _c.dds_save)

    def verify_saved(self):
        """Read every row of a store reopened with :meth:`open` and compare
        it with the checksums saved with it (collective over comm). Returns
        the number of bad blocks, 0 when all match; raises DDStoreError (code
        DDS_EPROTO) on every rank naming the first bad block otherwise."""
        self._require_core("verify_saved")
        bad = ctypes.c_int64()
        with self._h as ptr:
            rc = _c.dds_verify_saved(ptr, ctypes.byref(bad))
        if rc:
            self._raise(rc)
        return bad.value

    def names(self):
        """Names of the variables, in the order they were added."""
        if self._h is None:
            raise DDStoreStateError("the store was not created", DDS_ESTATE)
        count = ctypes.c_int64()
        buf = ctypes.create_string_buffer(_lib.NAME_MAX + 1)
        out = []
        with self._h as ptr:
            rc = _c.dds_var_count(ptr, ctypes.byref(count))
            if rc:
                self._raise(rc)
            for i in range(count.value):
                rc = _c.dds_var_name(ptr, i, ctypes.addressof(buf), len(buf))
                if rc:
                    self._raise(rc)
                out.append(buf.value.decode("utf-8"))
        return out

    def join(self, name):
        """Reader: wait until variable `name` (a str or a list of str) is
        published and attach it. On a core store: check that it exists."""
        names = [name] if isinstance(name, str) else list(name)
        for nm in names:
            bname = _encode_name(nm)
            if self.is_reader and nm not in self._vars:
                with self._h as ptr:
                    rc = _c.dds_attach(ptr, bname)
                if rc:
                    self._raise(rc)
            self._var(nm)

    # -- receive buffers

    def register_recv(self, *args):
        """Register a receive buffer once for faster reads (methods 1/2; a
        no-op for method 0): ``register_recv(arr)`` or ``register_recv(name,
        arr)`` like the original. Registering memory that is already
        registered (same start, no more bytes) is a no-op, as in the original
        (more bytes at the same start: unregister first); registrations
        belong to the store, whatever `name`. The store keeps `arr` alive
        until :meth:`unregister_recv` or :meth:`free`."""
        target = self._recv_buffer(args, "register_recv")
        if target is None:
            return
        a, addr = target
        with self._recv_lock:
            held = self._recv.get(addr)
            if held is not None and held.nbytes >= a.nbytes:
                return
            with self._h as ptr:
                rc = _c.dds_register_recv(ptr, addr, a.nbytes)
            if rc:
                self._raise(rc)
            self._recv[addr] = a

    prefetch_recv_mr = register_recv

    def unregister_recv(self, *args):
        """Undo :meth:`register_recv` for `arr` (or ``(name, arr)``). Memory
        that is not registered raises DDStoreKeyError (also a ValueError,
        as the original raised) for methods 1/2; method 0 ignores it."""
        target = self._recv_buffer(args, "unregister_recv")
        if target is None:
            return
        _, addr = target
        with self._recv_lock:
            held = self._recv.get(addr)
            if held is None:
                with self._h:  # a freed store raises DDStoreStateError here
                    pass
                if self.method == 0:
                    return
                raise DDStoreKeyError(
                    f"unregister_recv: the buffer at {addr:#x} is not registered with this store "
                    "(register it with register_recv first; each registration is undone once)",
                    DDS_ENOENT)
            with self._h as ptr:
                rc = _c.dds_unregister_recv(ptr, addr)
            if rc:
                self._raise(rc)
            del self._recv[addr]

    def _recv_buffer(self, args, what):
        """(array, address) of the receive buffer that `args` of register_recv or
        unregister_recv (`what`) name; None for an empty one (nothing to do)."""
        a = _to_array(self._recv_arg(args, what), "receive buffer", "-", output=True)
        if a.nbytes == 0:
            return None
        return a, _address(a)

    @staticmethod
    def _recv_arg(args, what):
        if len(args) == 1:
            return args[0]
        if len(args) == 2 and isinstance(args[0], str):
            return args[1]
        raise DDStoreTypeError(f"{what}() takes (arr) or (name, arr)", DDS_EINVAL)

    # -- counters

    def stats(self):
        """Read counters since creation or reset_stats(): read_calls,
        rows_local, rows_remote, bytes_local, bytes_remote, read_seconds,
        gather_requests (owner-side gather requests sent: one per owner per
        read that gathers, see ``info()["read_protocol"]``) and gather_bytes
        (bytes of rows in their replies)."""
        st = _lib.StatsInfo()
        st.size = ctypes.sizeof(st)
        with self._h as ptr:
            rc = _c.dds_stats(ptr, ctypes.byref(st))
        if rc:
            self._raise(rc)
        return {k: getattr(st, k) for k in ("read_calls", "rows_local", "rows_remote",
                                             "bytes_local", "bytes_remote", "read_seconds",
                                             "gather_requests", "gather_bytes")}

    def to_tensorboard(self, writer, step, prefix="ddstore/"):
        """Write stats() as TensorBoard scalars: ``writer.add_scalar(prefix + counter, value, step)``.

        writer: any object with add_scalar(tag, value, step), such as
        torch.utils.tensorboard.SummaryWriter (AdaptDL-style). step: the
        global step (int). Returns the dict written. Local, like stats().
        """
        add = getattr(writer, "add_scalar", None)
        if not callable(add):
            raise DDStoreTypeError(f"to_tensorboard(writer={type(writer).__name__}): pass an object with "
                                   "add_scalar(tag, value, step), e.g. a SummaryWriter", DDS_EINVAL)
        step = _index(step, "to_tensorboard(step)")
        if not isinstance(prefix, str):
            raise DDStoreTypeError(f"to_tensorboard(prefix={prefix!r}): pass a str such as 'ddstore/'",
                                   DDS_EINVAL)
        counters = self.stats()
        for key, value in counters.items():
            add(prefix + key, value, step)
        return counters

    def get_profile(self, name):
        """The original DDStore's DDSTORE_PROFILE read timings, for code
        written for it: a dict with its keys (calls, lock_wait, mr, mr_miss,
        read, cq, rows, py_gets, py_get, py_sync), filled from :meth:`stats`.
        Here the counters are per store, not per variable (`name` must
        exist), and are always kept; phases not timed separately here
        (lock_wait, mr, mr_miss, cq, py_sync) are 0. Local."""
        self._var(name)
        st = self.stats()
        return {"calls": st["read_calls"], "lock_wait": 0.0, "mr": 0.0, "mr_miss": 0,
                "read": st["read_seconds"], "cq": 0.0, "rows": st["rows_local"] + st["rows_remote"],
                "py_gets": st["read_calls"], "py_get": st["read_seconds"], "py_sync": 0.0}

    def reset_stats(self):
        """Zero the read counters (local)."""
        with self._h as ptr:
            rc = _c.dds_stats_reset(ptr)
        if rc:
            self._raise(rc)

    # -- lifetime

    def free(self):
        """Free the store: collective over comm for a core store, local for a
        reader. Idempotent: later calls do nothing."""
        h = self._h
        if h is None:
            return
        try:
            h.free()
        finally:
            self._recv.clear()

    close = free

    def verify(self, name, *, expected=None, strict=False):
        """Read every row of `name` back through the read path and compare
        it with the checksums recorded at add() (or by
        :meth:`record_checksums`). Collective over comm for a core store;
        a reader passes `expected` (pyddstore._verify.table(core_store,
        name)). Returns a pyddstore._verify.VerifyReport, the same on every
        rank; strict=True raises DDStoreError naming the corrupt blocks."""
        return _verify.verify(self, name, expected=expected, strict=strict)

    def record_checksums(self, name):
        """Recompute the per-shard checksums of `name` from its current
        contents (collective over comm): call it after update()/sync(),
        e.g. for a variable made with init()."""
        return _verify.record(self, name)

    @property
    def freed(self):
        """True once the store has been freed."""
        return self._h is None or not self._h.live

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    def __bool__(self):
        # Code written for the original does `if self.ddstore and ...`.
        return True

    def __del__(self):
        # Never a collective from here: a garbage collector runs at different
        # times on different ranks. A core store stays registered and is
        # freed collectively at exit; a reader is local and freed now.
        h = getattr(self, "_h", None)
        if h is None or not h.live:
            return
        try:
            if not h.collective:
                h.free()
        except Exception:  # noqa: BLE001 - nothing useful to do in a finaliser
            pass

    def __repr__(self):
        if self._h is None:
            return "<PyDDStore (not created)>"
        state = "freed" if not self._h.live else f"{len(self._vars)} variables"
        if self.is_reader:
            return f"<PyDDStore reader method={self.method} core={self.group_size} {state}>"
        return (f"<PyDDStore method={self.method} rank={self.rank}/{self.size} "
                f"group={self.group_index} ({self.group_rank}/{self.group_size}) {state}>")


class _Epoch:
    """Context manager returned by PyDDStore.epoch()."""

    def __init__(self, store):
        self._store = store

    def __enter__(self):
        self._store.epoch_begin()
        return self._store

    def __exit__(self, *exc):
        # Ended on every path: the other ranks end theirs too, and a rank
        # that skipped the collective would hang them.
        self._store.epoch_end()
        return False


def join(name=None, handshake_dir=None, n_core=None, timeout=None):
    """Join, without MPI, the method-2 store published in `handshake_dir`
    (default DDSTORE_HANDSHAKE_DIR or ./ddstore_hs) by `n_core` core ranks
    (default DDSTORE_N_CORE), waiting up to `timeout` seconds (default
    DDSTORE_HANDSHAKE_TIMEOUT_S or 300). Attaches `name` (a str or list of
    str) when given. Returns a reader :class:`PyDDStore`."""
    store = PyDDStore(None, method=2, handshake_dir=handshake_dir, n_core=n_core, timeout=timeout)
    if name is not None:
        store.join(name)
    return store
