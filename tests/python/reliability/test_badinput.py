"""Bad input, table-driven: every bad argument to pyddstore.PyDDStore (and
pyddstore.torch.DistDataset) raises the documented exception class on every
rank, the same class on all ranks, with a message that names the variable or
says what was expected; and the store keeps working afterwards (a full get
and a get_batch return the right rows).

Cases marked ``ok`` are valid edge cases (empty row lists, boundary names)
that must succeed. Cases with ``min_size`` need that many ranks (ranks that
disagree); they are skipped on every rank alike below it.
Runs under mpiexec with any number of ranks, for method 0 and, when the
library has libfabric, method 1.
"""
import re
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

import pyddstore
from pyddstore import (DDStoreError, DDStoreKeyError, DDStoreRangeError, DDStoreStateError, DDStoreTypeError,
                       DDStoreValueError, PyDDStore)
from rel_helpers import expected_rows

W = 4  # floats per row of the test variable "v"

METHODS = [0] + ([1] if pyddstore.has_fabric() else [])


@pytest.fixture(scope="module", params=METHODS, ids=lambda m: f"method{m}")
def ctx(request):
    """A store holding "v" (float32 rows of W, 3 + rank rows on each rank)."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    kw = {"method": request.param}
    store = PyDDStore(comm, **kw)
    first = sum(3 + r for r in range(rank))
    store.add("v", expected_rows(first, 3 + rank, W))
    store.init("raw", 2, 8)
    c = SimpleNamespace(store=store, comm=comm, rank=rank, size=size, method=request.param, kw=kw,
                        first=first, global_rows=sum(3 + r for r in range(size)), n=0)
    yield c
    store.free()


def fresh_name(c, stem):
    """A variable name not used yet in this module (same on every rank)."""
    c.n += 1
    return f"{stem}-{c.n}"


def check_healthy(c):
    """The store still answers valid reads with the right rows."""
    s = c.store
    g = c.global_rows
    assert s.query("v").global_rows == g
    out = np.full((g, W), -1, np.float32)
    s.get("v", out, 0)
    np.testing.assert_array_equal(out, expected_rows(0, g, W))
    rows = np.array([g - 1, 0, g // 2, 0, (c.rank * 7) % g], np.int64)
    ob = np.full((rows.size, W), -1, np.float32)
    s.get_batch("v", ob, rows)
    np.testing.assert_array_equal(ob, expected_rows(0, g, W)[rows])


def f32(n, w=W):
    return np.zeros((n, w), np.float32)


# ---- case helpers -----------------------------------------------------------------


def new_store(c, comm=None, **kw):
    """Create (and on success free) a store with the given arguments."""
    args = dict(c.kw)
    args.update(kw)
    s = PyDDStore(c.comm if comm is None else comm, **args)
    s.free()


def freed_store(c):
    """A store holding "v" that has been freed."""
    s = PyDDStore(c.comm, **c.kw)
    s.add("v", expected_rows(0, 2, W))
    s.free()
    return s


def add(c, arr, name=None):
    c.store.add(fresh_name(c, "add") if name is None else name, arr)


def add_rank0(c, bad, good):
    """Rank 0 passes `bad`, the others `good` (ranks that disagree)."""
    add(c, bad if c.rank == 0 else good)


def freed_comm(c):
    d = c.comm.Dup()
    d.Free()
    return d


def ok_add_noncontig(c):
    name = fresh_name(c, "nc")
    base = np.arange(6 * 2 * W, dtype=np.float32).reshape(6, 2 * W)
    c.store.add(name, base[:, ::2])  # strided input: copied, not refused
    g = 6 * c.size
    out = f32(g)
    c.store.get(name, out, 0)
    np.testing.assert_array_equal(out[:6], base[:, ::2])


def ok_name(c, name):
    c.store.add(name, f32(1))
    assert name in c.store.names()
    out = f32(1)
    c.store.get(name, out, 0)


def ok_empty_batch(c, rows):
    c.store.get_batch("v", f32(0), rows)


def ok_zero_read_at_end(c):
    c.store.get("v", f32(0), c.global_rows)


def ok_numpy_start(c):
    out = f32(2)
    c.store.get("v", out, np.int64(c.global_rows - 2))
    np.testing.assert_array_equal(out, expected_rows(c.global_rows - 2, 2, W))


def ok_double_free(c):
    s = PyDDStore(c.comm, **c.kw)
    s.add("x", f32(1))
    s.free()
    s.free()
    s.close()
    assert s  # always truthy, even freed


def ok_ctx_then_free(c):
    with PyDDStore(c.comm, **c.kw) as s:
        s.add("x", f32(1))
    s.free()


def dist_dataset(c, source, name="ds", **kw):
    from pyddstore.torch import DistDataset

    ds = DistDataset(source, name, comm=c.comm, method=c.method, **kw)
    ds.ddstore.free()
    return ds


def ds_index_out_of_range(c):
    from pyddstore.torch import DistDataset

    ds = DistDataset([np.ones(3, np.float32)] * 4, "dsr", comm=c.comm, method=c.method)
    try:
        ds[4]
    finally:
        ds.ddstore.free()


# ---- the table --------------------------------------------------------------------

C = SimpleNamespace
CASES = [
    # add: dtype / shape / contiguity
    C(id="add-object-dtype", fn=lambda c: add(c, np.array([[None]] * 2, dtype=object)),
      exc=DDStoreTypeError, match=r"holds Python objects"),
    C(id="add-complex-dtype", fn=lambda c: add(c, np.zeros((2, 2), np.complex128)),
      exc=DDStoreTypeError, match=r"complex128 is not supported; use one of"),
    C(id="add-unicode-dtype", fn=lambda c: add(c, np.array(["ab", "cd"])),
      exc=DDStoreTypeError, match=r"<U2 is not supported"),
    C(id="add-bigendian", fn=lambda c: add(c, np.zeros((2, 2), ">i4")),
      exc=DDStoreTypeError, match=r"native byte order"),
    # numpy records are stored (tests/python/core/test_records.py), but not object fields.
    C(id="add-record-object-field", fn=lambda c: add(c, np.zeros(2, [("a", "i4"), ("o", object)])),
      exc=DDStoreTypeError, match=r"holds Python objects"),
    C(id="add-0d", fn=lambda c: add(c, np.float32(1.0)),
      exc=DDStoreValueError, match=r"0-dimensional"),
    C(id="add-zero-width-rows", fn=lambda c: add(c, np.zeros((2, 0), np.float32)),
      exc=DDStoreValueError, match=r"hold no bytes"),
    C(id="add-not-array", fn=lambda c: add(c, {"a": 1}),
      exc=DDStoreTypeError, match=r"holds Python objects|must be a numpy array"),
    C(id="add-noncontiguous-ok", fn=ok_add_noncontig, exc=None, match=None),
    C(id="add-zero-total-rows", fn=lambda c: add(c, f32(0)),
      exc=DDStoreRangeError, match=r"'add-\d+'.*no row at all"),
    # names
    C(id="name-empty", fn=lambda c: add(c, f32(1), ""),
      exc=DDStoreValueError, match=r"1 to 255 UTF-8 bytes"),
    C(id="name-too-long", fn=lambda c: add(c, f32(1), "n" * 256),
      exc=DDStoreValueError, match=r"1 to 255 UTF-8 bytes"),
    C(id="name-too-long-multibyte", fn=lambda c: add(c, f32(1), "\u00e9" * 128),
      exc=DDStoreValueError, match=r"1 to 255 UTF-8 bytes"),
    C(id="name-255-bytes-ok", fn=lambda c: ok_name(c, "m" * 254 + str(c.method)), exc=None, match=None),
    C(id="name-nul", fn=lambda c: add(c, f32(1), "a\0b"),
      exc=DDStoreValueError, match=r"without NUL"),
    C(id="name-surrogate-escape", fn=lambda c: add(c, f32(1), b"bad\xff".decode("utf-8", "surrogateescape")),
      exc=DDStoreValueError, match=r"not valid UTF-8"),
    C(id="name-bytes", fn=lambda c: add(c, f32(1), b"v2"),
      exc=DDStoreTypeError, match=r"name must be a str, got bytes"),
    C(id="name-int", fn=lambda c: add(c, f32(1), 7),
      exc=DDStoreTypeError, match=r"name must be a str, got int"),
    C(id="name-duplicate", fn=lambda c: add(c, f32(1), "v"),
      exc=DDStoreValueError, match=r"'v' already exists"),
    C(id="name-duplicate-init", fn=lambda c: c.store.init("raw", 1, 8),
      exc=DDStoreValueError, match=r"'raw' already exists"),
    C(id="name-unknown-get", fn=lambda c: c.store.get("nope", f32(1)),
      exc=DDStoreKeyError, match=r"no variable 'nope'.*has: 'v'"),
    C(id="name-unknown-query", fn=lambda c: c.store.query("nope"),
      exc=DDStoreKeyError, match=r"no variable 'nope'"),
    C(id="name-unicode-ok", fn=lambda c: ok_name(c, f"label/\u00e9t\u00e9-{c.method}"), exc=None, match=None),
    # ranks that disagree (collective agreement)
    C(id="mismatch-name", min_size=2,
      fn=lambda c: c.store.add(f"mm-{c.method}-{c.rank}", f32(1)),
      exc=DDStoreValueError, match=r"ranks disagree"),
    C(id="mismatch-row-bytes", min_size=2, fn=lambda c: add_rank0(c, f32(1, W + 1), f32(1)),
      exc=DDStoreValueError, match=r"ranks disagree"),
    C(id="mismatch-dtype", min_size=2,
      fn=lambda c: add_rank0(c, np.zeros((1, W), np.int32), f32(1)),
      exc=DDStoreValueError, match=r"ranks disagree"),
    C(id="mismatch-init-disp", min_size=2,
      fn=lambda c: c.store.init(fresh_name(c, "im"), 1, 8 if c.rank else 16),
      exc=DDStoreValueError, match=r"ranks disagree"),
    C(id="bad-on-rank0-only", min_size=2,
      fn=lambda c: add_rank0(c, np.zeros((1, 2), np.complex64), f32(1)),
      exc=DDStoreTypeError, match=r"complex64 is not supported"),
    # init: sizes and overflow
    C(id="init-overflow", fn=lambda c: c.store.init(fresh_name(c, "ov"), 1 << 62, 4),
      exc=DDStoreValueError, match=r"overflow"),
    C(id="init-overflow-itemsize", fn=lambda c: c.store.init(fresh_name(c, "ov"), 1 << 40, 1 << 20, 1 << 10),
      exc=DDStoreValueError, match=r"overflow"),
    C(id="init-negative-rows", fn=lambda c: c.store.init(fresh_name(c, "neg"), -1, 4),
      exc=DDStoreValueError, match=r"nrows must be >= 0, got -1"),
    C(id="init-zero-disp", fn=lambda c: c.store.init(fresh_name(c, "zd"), 1, 0),
      exc=DDStoreValueError, match=r"disp \(0\) and itemsize \(1\) must be >= 1"),
    C(id="init-float-itemsize", fn=lambda c: c.store.init(fresh_name(c, "fi"), 1, 4, 1.5),
      exc=DDStoreTypeError, match=r"itemsize must be an integer, got float"),
    C(id="init-bool-rows", fn=lambda c: c.store.init(fresh_name(c, "br"), True, 4),
      exc=DDStoreTypeError, match=r"nrows must be an integer, got a bool"),
    C(id="init-zero-total-rows", fn=lambda c: c.store.init(fresh_name(c, "zt"), 0, 4),
      exc=DDStoreRangeError, match=r"no row at all"),
    # update
    C(id="update-wrong-dtype", fn=lambda c: c.store.update("v", np.zeros((1, W), np.float64)),
      exc=DDStoreTypeError, match=r"'v' holds float32 rows; array has dtype float64"),
    C(id="update-wrong-row-bytes", fn=lambda c: c.store.update("v", f32(1, W - 1)),
      exc=DDStoreValueError, match=r"'v' has float32 rows of 16 bytes"),
    C(id="update-offset-beyond", fn=lambda c: c.store.update("v", f32(2), 3 + c.rank - 1),
      exc=DDStoreRangeError, match=r"local rows .* outside this rank's"),
    C(id="update-negative-offset", fn=lambda c: c.store.update("v", f32(1), -1),
      exc=DDStoreRangeError, match=r"outside this rank's"),
    C(id="update-unknown", fn=lambda c: c.store.update("nope", f32(1)),
      exc=DDStoreKeyError, match=r"no variable 'nope'"),
    # get: output checks and ranges
    C(id="get-wrong-dtype", fn=lambda c: c.store.get("v", np.zeros((1, W), np.float64)),
      exc=DDStoreTypeError, match=r"'v' holds float32 rows; output has dtype float64"),
    C(id="get-wrong-shape", fn=lambda c: c.store.get("v", f32(1, W + 1)),
      exc=DDStoreValueError, match=r"rows of 20 bytes"),
    C(id="get-noncontiguous", fn=lambda c: c.store.get("v", f32(4)[::2]),
      exc=DDStoreValueError, match=r"not C-contiguous"),
    C(id="get-readonly", fn=lambda c: c.store.get("v", np.broadcast_to(f32(1), (2, W))),
      exc=DDStoreValueError, match=r"not C-contiguous|read-only"),
    C(id="get-readonly-contig", fn=lambda c: c.store.get("v", _readonly(f32(1))),
      exc=DDStoreValueError, match=r"read-only"),
    C(id="get-bytes-output", fn=lambda c: c.store.get("raw", b"x" * 8),
      exc=DDStoreTypeError, match=r"must be writable memory"),
    C(id="get-list-output", fn=lambda c: c.store.get("v", [[0.0] * W]),
      exc=DDStoreTypeError, match=r"must be writable memory"),
    C(id="get-negative-start", fn=lambda c: c.store.get("v", f32(1), -1),
      exc=DDStoreRangeError, match=r"'v': rows \[-1, 0\) are outside"),
    C(id="get-past-end", fn=lambda c: c.store.get("v", f32(2), c.global_rows - 1),
      exc=DDStoreRangeError, match=r"are outside \[0, \d+\)"),
    C(id="get-float-start", fn=lambda c: c.store.get("v", f32(1), 1.0),
      exc=DDStoreTypeError, match=r"start must be an integer, got float"),
    C(id="get-huge-start", fn=lambda c: c.store.get("v", f32(1), 1 << 63),
      exc=DDStoreRangeError, match=r"outside"),
    C(id="get-numpy-start-ok", fn=ok_numpy_start, exc=None, match=None),
    C(id="get-zero-rows-at-end-ok", fn=ok_zero_read_at_end, exc=None, match=None),
    C(id="get-name-none", fn=lambda c: c.store.get(None, f32(1)),
      exc=DDStoreTypeError, match=r"name must be a str"),
    # get_batch / get_ranges (method 0: group-collective, same bad input on all ranks)
    C(id="batch-row-out-of-range", fn=lambda c: c.store.get_batch("v", f32(2), [0, c.global_rows]),
      exc=DDStoreRangeError, match=r"'v': row \d+ \(position 1\) is outside \[0, \d+\)"),
    C(id="batch-negative-row", fn=lambda c: c.store.get_batch("v", f32(2), [0, -1]),
      exc=DDStoreRangeError, match=r"row -1 \(position 1\) is outside"),
    C(id="batch-output-too-small", fn=lambda c: c.store.get_batch("v", f32(1), [0, 1]),
      exc=DDStoreValueError, match=r"output has 1 rows, 2 requested"),
    C(id="batch-float-rows", fn=lambda c: c.store.get_batch("v", f32(2), np.array([0.0, 1.0])),
      exc=DDStoreTypeError, match=r"rows for variable 'v' must hold integers"),
    C(id="batch-2d-rows", fn=lambda c: c.store.get_batch("v", f32(4), np.zeros((2, 2), np.int64)),
      exc=DDStoreValueError, match=r"must be 1-D"),
    C(id="batch-uint64-beyond-int64", fn=lambda c: c.store.get_batch("v", f32(1), np.array([1 << 63], np.uint64)),
      exc=DDStoreRangeError, match=r"beyond 2\*\*63-1"),
    C(id="batch-wrong-dtype", fn=lambda c: c.store.get_batch("v", np.zeros((1, W), np.int32), [0]),
      exc=DDStoreTypeError, match=r"holds float32 rows; output has dtype int32"),
    C(id="batch-empty-list-ok", fn=lambda c: ok_empty_batch(c, []), exc=None, match=None),
    C(id="batch-empty-array-ok", fn=lambda c: ok_empty_batch(c, np.zeros(0, np.int64)), exc=None, match=None),
    C(id="ranges-negative-count", fn=lambda c: c.store.get_ranges("v", f32(2), [0], [-1]),
      exc=DDStoreRangeError, match=r"range 0 \[0, -1\) is outside"),
    C(id="ranges-length-mismatch", fn=lambda c: c.store.get_ranges("v", f32(2), [0, 1], [1]),
      exc=DDStoreValueError, match=r"2 starts but 1 counts"),
    C(id="ranges-output-too-small", fn=lambda c: c.store.get_ranges("v", f32(1), [0], [2]),
      exc=DDStoreValueError, match=r"output has 1 rows, the ranges hold 2"),
    C(id="ranges-empty-ok", fn=lambda c: c.store.get_ranges("v", f32(0), [], []), exc=None, match=None),
    # store creation: communicator, width, method
    C(id="comm-not-a-communicator", fn=lambda c: new_store(c, comm="COMM_WORLD"),
      exc=DDStoreTypeError, match=r"comm must be an mpi4py intra-communicator"),
    C(id="comm-freed", fn=lambda c: new_store(c, comm=freed_comm(c)),
      exc=DDStoreTypeError, match=r"comm must be an mpi4py intra-communicator"),
    C(id="comm-null", fn=lambda c: new_store(c, comm=MPI.COMM_NULL),
      exc=DDStoreTypeError, match=r"comm must be an mpi4py intra-communicator"),
    C(id="comm-fortran-handle", fn=lambda c: new_store(c, comm=c.comm.py2f()),
      exc=DDStoreTypeError, match=r"comm must be an mpi4py intra-communicator"),
    C(id="width-not-dividing", fn=lambda c: new_store(c, ddstore_width=c.size + 1 if c.size < 3 else 3),
      exc=DDStoreValueError, match=r"width \d+ does not divide the communicator size \d+"),
    C(id="width-zero", fn=lambda c: new_store(c, ddstore_width=0),
      exc=DDStoreValueError, match=r"ddstore_width=0 does not divide"),
    C(id="width-float", fn=lambda c: new_store(c, ddstore_width=1.0),
      exc=DDStoreTypeError, match=r"ddstore_width must be an integer"),
    C(id="method-unknown", fn=lambda c: new_store(c, method=7),
      exc=DDStoreValueError, match=r"method 7 is not 0 \(MPI\), 1 \(libfabric\) or 2"),
    # the values are libddstore's agreed checks (dds_create): its error on every rank
    C(id="mismatch-method", min_size=2, fn=lambda c: new_store(c, method=1 if c.rank else 0),
      exc=DDStoreValueError, match=r"ranks disagree on the method \(0 to 1\)"),
    C(id="mismatch-width", min_size=2, fn=lambda c: new_store(c, ddstore_width=1 if c.rank else c.size),
      exc=DDStoreValueError, match=r"ranks disagree on the width \(1 to \d+\)"),
    C(id="method-str", fn=lambda c: new_store(c, method="0"),
      exc=DDStoreTypeError, match=r"method must be an integer"),
    C(id="n-core-on-core-store", fn=lambda c: new_store(c, n_core=2),
      exc=DDStoreValueError, match=r"n_core is for method-2 readers"),
    C(id="handshake-dir-int", fn=lambda c: new_store(c, handshake_dir=5),
      exc=DDStoreTypeError, match=r"handshake_dir must be a str or path"),
    # lifetime
    C(id="get-after-free", fn=lambda c: freed_store(c).get("v", f32(1)),
      exc=DDStoreStateError, match=r"freed store"),
    C(id="batch-after-free", fn=lambda c: freed_store(c).get_batch("v", f32(1), [0]),
      exc=DDStoreStateError, match=r"freed store"),
    C(id="add-after-free", fn=lambda c: freed_store(c).add("w", f32(1)),
      exc=DDStoreStateError, match=r"add\(\) on a freed store"),
    C(id="epoch-after-free", fn=lambda c: freed_store(c).epoch_begin(),
      exc=DDStoreStateError, match=r"epoch_begin\(\) on a freed store"),
    C(id="query-after-free", fn=lambda c: freed_store(c).query("v"),
      exc=DDStoreStateError, match=r"freed store"),
    C(id="double-free-ok", fn=ok_double_free, exc=None, match=None),
    C(id="context-manager-then-free-ok", fn=ok_ctx_then_free, exc=None, match=None),
    C(id="epoch-end-without-begin", fn=lambda c: c.store.epoch_end(),
      exc=DDStoreStateError, match=r"epoch_end without a matching epoch_begin"),
    C(id="register-recv-bad-args", fn=lambda c: c.store.register_recv(1, 2, 3),
      exc=DDStoreTypeError, match=r"register_recv\(\) takes \(arr\) or \(name, arr\)"),
    # pyddstore.torch.DistDataset
    C(id="ds-empty-source", fn=lambda c: dist_dataset(c, []),
      exc=ValueError, match=r"the source is empty"),
    C(id="ds-empty-name", fn=lambda c: dist_dataset(c, [np.ones(2)], name=""),
      exc=ValueError, match=r"name must be a non-empty str"),
    C(id="ds-fields-and-encode", fn=lambda c: dist_dataset(c, [np.ones(2)], fields=[0], encode=lambda s: s),
      exc=ValueError, match=r"either fields= or encode="),
    C(id="ds-chunk-size-zero", fn=lambda c: dist_dataset(c, [np.ones(2)], chunk_size=0),
      exc=ValueError, match=r"chunk_size must be a positive int"),
    C(id="ds-source-not-dataset", fn=lambda c: dist_dataset(c, 5),
      exc=TypeError, match=r"source must be a map-style dataset"),
    C(id="ds-len-differs", min_size=2, fn=lambda c: dist_dataset(c, [np.ones(2)] * (1 + (c.rank == 0))),
      exc=ValueError, match=r"len\(source\) differs between ranks"),
    C(id="ds-shape-differs", min_size=1,
      fn=lambda c: dist_dataset(c, [np.ones(2, np.float32)] * (4 * c.size - 1) + [np.ones(3, np.float32)]),
      exc=ValueError, match=r"shape"),
    C(id="ds-index-out-of-range", fn=ds_index_out_of_range, exc=IndexError, match=r"4|range"),
]


def _readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(ctx, case):
    if getattr(case, "min_size", 1) > ctx.size:
        pytest.skip(f"needs {case.min_size} ranks")
    err = None
    try:
        case.fn(ctx)
    except Exception as e:  # noqa: BLE001 - classified below
        err = e
    kinds = ctx.comm.allgather(None if err is None else type(err).__name__)
    if case.exc is None:
        assert err is None, f"{case.id}: valid input raised {type(err).__name__}: {err}"
    else:
        assert err is not None, f"{case.id}: no exception on rank {ctx.rank} (expected {case.exc.__name__})"
        assert isinstance(err, case.exc), f"{case.id}: {type(err).__name__}: {err}"
        assert re.search(case.match, str(err)), f"{case.id}: message {str(err)!r} !~ {case.match!r}"
        assert len(set(kinds)) == 1, f"{case.id}: ranks raised different classes: {kinds}"
    check_healthy(ctx)


def test_case_count():
    """The table holds at least 40 bad inputs (the issue's floor)."""
    assert sum(1 for c in CASES if c.exc is not None) >= 40
