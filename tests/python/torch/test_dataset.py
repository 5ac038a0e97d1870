"""DistDataset: structure preservation, shape/dtype rules, encode/decode/fields, chunk_size,
alloc/read_rows/release, DDSTORE_BATCH_GET, devices. Run under mpiexec (every rank)."""
import os
import tracemalloc

import numpy as np
import pytest
import torch
from conftest import MapSource, Point, RangeSource, assert_same, value

from pyddstore import PyDDStore
from pyddstore.torch import SUPPORTED_DTYPES, DistDataset

N = 23  # not a multiple of 2, 3 or 4: uneven shares

KINDS = ["tensor", "tensor0d", "ndarray", "ndarray0d", "uint8", "bool", "int", "float", "pybool",
         "npscalar"]

SAMPLES = {
    **{f"single-{k}": (lambda k: lambda i: value(i, k))(k) for k in KINDS},
    "tuple": lambda i: (value(i, "tensor"), value(i, "int"), value(i, "ndarray")),
    "list": lambda i: [value(i, "float"), value(i, "bool")],
    "dict": lambda i: {k: value(i, k) for k in KINDS},
    "dict-int-keys": lambda i: {3: value(i, "ndarray"), 1: value(i, "float")},
    "namedtuple": lambda i: Point(value(i, "tensor"), value(i, "int")),
}


def raised_everywhere(world, excinfo):
    """The error is the same (type and text) on every rank; returns its text."""
    mine = (excinfo.type.__name__, str(excinfo.value))
    allv = world.allgather(mine)
    assert all(v == allv[0] for v in allv), allv
    return mine[1]


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_structure_preserved(world, kind):
    make = SAMPLES[kind]
    ds = DistDataset(MapSource(N, make), f"s-{kind}")
    try:
        assert len(ds) == N
        for i in range(N):
            assert_same(ds[i], make(i))
        assert_same(ds[-1], make(N - 1))
        idx = [N - 1, 0, 5, 5, 11]
        batch = ds.__getitems__(idx)
        assert isinstance(batch, list) and len(batch) == len(idx)
        for s, i in zip(batch, idx):
            assert_same(s, make(i))
        # samples of a batch default-collate like the source's samples
        ref = torch.utils.data.default_collate([make(i) for i in idx])
        assert_same(torch.utils.data.default_collate(batch), ref)
        assert_same(batch.collated(copy=False), ref)
        assert_same(batch.collated(copy=True), ref)
    finally:
        ds.free()


def test_variables_and_store(world):
    ds = DistDataset(MapSource(N, SAMPLES["dict"]), "vars")
    try:
        assert isinstance(ds.ddstore, PyDDStore)
        names = ds.ddstore.names()
        for k in KINDS:
            assert f"vars/{k}" in names
            q = ds.ddstore.query(f"vars/{k}")
            assert q.global_rows == N
        q = ds.ddstore.query("vars/tensor")
        assert q.dtype == np.float32 and q.row_shape == (2, 3)
        # each rank holds only its contiguous share
        offs = ds.ddstore.query("vars/int").offsets
        r, p = world.rank, world.size
        assert offs[r] == N * r // p and offs[r + 1] == N * (r + 1) // p
    finally:
        ds.free()
        ds.free()  # idempotent


def test_tuple_positions_and_single_variable_names(world):
    ds = DistDataset(MapSource(N, SAMPLES["tuple"]), "tup")
    ds2 = DistDataset(MapSource(N, SAMPLES["single-tensor"]), "one")
    try:
        assert {"tup/0", "tup/1", "tup/2"} <= set(ds.ddstore.names())
        assert "one/0" in ds2.ddstore.names()
    finally:
        ds2.free()
        ds.free()


def test_nested_rejected(world):
    with pytest.raises(TypeError) as e:
        DistDataset(MapSource(N, lambda i: {"a": (value(i, "tensor"), 1)}), "nested")
    assert "nested" in raised_everywhere(world, e)


@pytest.mark.parametrize("bad", [torch.zeros(3, dtype=torch.complex64), np.zeros(2, np.complex64),
                                 np.zeros(2, np.dtype(">i4")), np.zeros(2, "datetime64[s]")],
                         ids=lambda b: str(b.dtype))
def test_unsupported_dtype(world, bad):
    with pytest.raises(TypeError) as e:
        DistDataset(MapSource(N, lambda i: {"ok": i, "bad": bad}), "dt")
    msg = raised_everywhere(world, e)
    assert "field 'bad'" in msg and "sample" in msg
    for d in SUPPORTED_DTYPES:
        assert d in msg


def test_unsupported_value_type(world):
    with pytest.raises(TypeError) as e:
        DistDataset(MapSource(N, lambda i: {"x": i, "name": f"s{i}"}), "str")
    msg = raised_everywhere(world, e)
    assert "field 'name'" in msg and "str" in msg and "encode" in msg


def test_int_out_of_int64_range(world):
    with pytest.raises(ValueError) as e:
        DistDataset(MapSource(N, lambda i: 2 ** 70 if i == 0 else i), "big")
    assert "int64" in raised_everywhere(world, e)


def test_shape_mismatch_names_sample_field_and_shapes(world):
    bad = N - 2  # held by the last rank only; every rank must raise the same error
    make = lambda i: {"x": torch.zeros(3 if i != bad else 4), "y": i}  # noqa: E731
    with pytest.raises(ValueError) as e:
        DistDataset(MapSource(N, make), "shape")
    msg = raised_everywhere(world, e)
    assert f"sample {bad}" in msg and "field 'x'" in msg and "(4,)" in msg and "(3,)" in msg


def test_dtype_mismatch_between_samples(world):
    make = lambda i: {"y": i if i != 7 else 7.5}  # noqa: E731
    with pytest.raises(ValueError) as e:
        DistDataset(MapSource(N, make), "dtmis")
    msg = raised_everywhere(world, e)
    assert "sample 7" in msg and "field 'y'" in msg and "int64" in msg and "float64" in msg


def test_structure_mismatch_between_samples(world):
    make = lambda i: {"a": i} if i < N - 1 else {"a": i, "b": 1}  # noqa: E731
    with pytest.raises(ValueError) as e:
        DistDataset(MapSource(N, make), "keys")
    assert f"sample {N - 1}" in raised_everywhere(world, e)


def test_source_error_raised_on_every_rank(world):
    def make(i):
        if i == N - 1:
            raise RuntimeError("broken file")
        return i
    with pytest.raises(RuntimeError) as e:
        DistDataset(MapSource(N, make), "err")
    msg = raised_everywhere(world, e)
    assert "broken file" in msg and f"rank {world.size - 1}" in msg


def test_empty_and_length_mismatch(world):
    with pytest.raises(ValueError) as e:
        DistDataset(MapSource(0, lambda i: i), "empty")
    assert "empty" in raised_everywhere(world, e)
    if world.size > 1:
        with pytest.raises(ValueError) as e:
            DistDataset(MapSource(N + world.rank, lambda i: i), "lens")
        assert "len(source)" in raised_everywhere(world, e)


def test_argument_errors(world):
    src = MapSource(N, SAMPLES["dict"])
    with pytest.raises(ValueError) as e:
        DistDataset(src, "a", encode=lambda s: s, fields=["int"])
    assert "fields" in raised_everywhere(world, e)
    with pytest.raises(ValueError) as e:
        DistDataset(src, "a", chunk_size=0)
    assert "chunk_size" in raised_everywhere(world, e)
    with pytest.raises(TypeError):
        DistDataset(src, "a", decode="nope")
    with pytest.raises(TypeError):
        DistDataset([1, 2, 3].__iter__(), "a")


def test_encode_decode(world):
    labels = ["cat", "dog", "owl"]
    src = MapSource(N, lambda i: {"img": value(i, "tensor"), "label": labels[i % 3], "meta": object()})
    enc = lambda s: {"img": s["img"], "label": labels.index(s["label"])}  # noqa: E731
    dec = lambda s, i: {**s, "name": labels[s["label"]], "index": i}  # noqa: E731
    ds = DistDataset(src, "enc", encode=enc, decode=dec)
    try:
        assert set(ds.ddstore.names()) >= {"enc/img", "enc/label"}
        assert "enc/meta" not in ds.ddstore.names()
        s = ds[4]
        assert s["name"] == "dog" and s["index"] == 4 and s["label"] == 1
        assert torch.equal(s["img"], value(4, "tensor"))
        b = ds.__getitems__([5, 2])
        assert [x["name"] for x in b] == ["owl", "owl"] and [x["index"] for x in b] == [5, 2]
        assert b.collated(copy=False) is None  # decoded samples are not plain column views
        rr = ds.read_rows([4])  # as stored: no decode
        assert set(rr) == {"img", "label"} and rr["label"].tolist() == [1]
    finally:
        ds.free()


def test_encode_result_checked(world):
    with pytest.raises(TypeError) as e:
        DistDataset(MapSource(N, lambda i: i), "encbad", encode=lambda s: {"x": "text"})
    assert "field 'x'" in raised_everywhere(world, e)


@pytest.mark.parametrize("container", ["dict", "tuple", "list"])
def test_fields_selection(world, container):
    if container == "dict":
        make, fields = SAMPLES["dict"], ["float", "tensor"]
        expect = lambda i: {"float": value(i, "float"), "tensor": value(i, "tensor")}  # noqa: E731
    elif container == "tuple":
        make, fields = SAMPLES["tuple"], [2, 0]
        expect = lambda i: (value(i, "ndarray"), value(i, "tensor"))  # noqa: E731
    else:
        make, fields = SAMPLES["list"], [1]
        expect = lambda i: [value(i, "bool")]  # noqa: E731
    ds = DistDataset(MapSource(N, make), "sel", fields=fields)
    try:
        for i in (0, 9, N - 1):
            assert_same(ds[i], expect(i))
        assert len([n for n in ds.ddstore.names() if not n.endswith("__structure__")]) == len(fields)
    finally:
        ds.free()


def test_fields_errors(world):
    with pytest.raises(KeyError) as e:
        DistDataset(MapSource(N, SAMPLES["dict"]), "selbad", fields=["nope"])
    assert "nope" in raised_everywhere(world, e)
    with pytest.raises(TypeError) as e:
        DistDataset(MapSource(N, SAMPLES["single-int"]), "selbad2", fields=[0])
    raised_everywhere(world, e)


@pytest.mark.parametrize("chunk", [1, 4, 100])
def test_chunk_size_same_content(world, chunk):
    src = MapSource(N, SAMPLES["dict"])
    ds = DistDataset(src, "chunk", chunk_size=chunk)
    try:
        for i in range(N):
            assert_same(ds[i], SAMPLES["dict"](i))
        assert_same(ds.__getitems__([3, 1])[1], SAMPLES["dict"](1))
    finally:
        ds.free()


def test_chunk_size_holds_one_chunk(world):
    """Peak Python/numpy memory while loading: about one chunk with chunk_size, the share without."""
    row = 64 * 1024  # bytes per sample
    n = 64 * world.size  # 4 MiB share per rank
    make = lambda i: np.full(row // 8, i, dtype=np.float64)  # noqa: E731
    peaks = {}
    for chunk in (None, 4):
        tracemalloc.start()
        ds = DistDataset(MapSource(n, make), "peak", chunk_size=chunk)
        peaks[chunk] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert np.array_equal(ds[n - 1], make(n - 1))
        ds.free()
    share = 64 * row
    assert peaks[None] >= share  # the whole share was held
    assert peaks[4] < 8 * row  # one chunk (4 rows) and one sample, not the share
    world.Barrier()


def test_read_range_protocol(world):
    make = lambda i: {"x": torch.full((3,), float(i)), "y": i}  # noqa: E731
    src = RangeSource(N, make)
    ds = DistDataset(src, "rr")
    try:
        g = world.rank
        start, stop = N * g // world.size, N * (g + 1) // world.size
        assert src.range_calls == ([(start, stop)] if stop > start else [])
        assert src.calls <= 1  # at most the one sample that gives the structure
        for i in range(N):
            assert_same(ds[i], make(i))
    finally:
        ds.free()
    src = RangeSource(N, make)
    ds = DistDataset(src, "rr", chunk_size=2)
    try:
        assert all(b - a <= 2 for a, b in src.range_calls)
        assert_same(ds[N - 1], make(N - 1))
    finally:
        ds.free()
    # fields= works on the stacked block
    ds = DistDataset(RangeSource(N, make), "rr", fields=["y"])
    try:
        assert ds[3] == {"y": 3}
    finally:
        ds.free()


def test_read_range_shape_checked(world):
    class Bad(RangeSource):
        def read_range(self, a, b):
            out = super().read_range(a, b)
            out["x"] = out["x"][:, :2]
            return out
    with pytest.raises(ValueError) as e:
        DistDataset(Bad(N, lambda i: {"x": torch.zeros(3), "y": i}), "rrbad")
    msg = raised_everywhere(world, e)
    assert "field 'x'" in msg and "read_range" in msg


def test_alloc_read_rows_views(world):
    make = SAMPLES["dict"]
    ds = DistDataset(MapSource(N, make), "alloc")
    try:
        bufs = ds.alloc(8)
        assert list(bufs) == KINDS
        assert bufs["tensor"].shape == (8, 2, 3) and bufs["int"].shape == (8,)
        rows = [N - 1, 2, 2, 0]
        out = ds.read_rows(rows, out=bufs)
        assert list(out) == KINDS
        for k in KINDS:
            v = out[k]
            arr = v.numpy() if isinstance(v, torch.Tensor) else v
            assert np.shares_memory(arr, bufs[k]) and arr.shape[0] == len(rows)
        assert isinstance(out["tensor"], torch.Tensor) and isinstance(out["ndarray"], np.ndarray)
        assert out["int"].ndim == 1 and out["int"].tolist() == [make(r)["int"] for r in rows]
        assert torch.equal(out["tensor"][0], make(N - 1)["tensor"])
        # samples read into the buffers are views into them
        batch = ds.__getitems__([4, 5], out=bufs)
        assert np.shares_memory(batch[1]["tensor"].numpy(), bufs["tensor"])
        assert np.shares_memory(batch[0]["ndarray"], bufs["ndarray"])
        assert_same(batch[1], make(5))
        # selected fields only
        sub = ds.alloc(3, fields=["float"])
        assert list(ds.read_rows([1], fields=["float"], out=sub)) == ["float"]
        with pytest.raises(KeyError):
            ds.read_rows([1], fields=["tensor"], out=sub)
        with pytest.raises(ValueError):
            ds.read_rows(list(range(5)), fields=["float"], out=sub)  # too few rows
        ds.release(sub)
        ds.release(bufs)
        # without out: fresh arrays
        fresh = ds.read_rows(np.array([3, 1]), fields=["int", "tensor"])
        assert list(fresh) == ["int", "tensor"] and fresh["tensor"].shape == (2, 2, 3)
        with pytest.raises(KeyError):
            ds.read_rows([1], fields=["nope"])
        ds.alloc(2)  # left for free() to release
        assert len(ds._allocated) == 1
    finally:
        ds.free()
    assert len(ds._allocated) == 0


def test_batch_get_env(world, monkeypatch):
    make = SAMPLES["tuple"]
    ds = DistDataset(MapSource(N, make), "bget")
    try:
        idx = [1, 7, 3, N - 1]
        ds.ddstore.reset_stats()
        a = ds.__getitems__(idx)
        calls_batch = ds.ddstore.stats()["read_calls"]
        monkeypatch.setenv("DDSTORE_BATCH_GET", "0")
        ds.ddstore.reset_stats()
        b = ds.__getitems__(idx)
        calls_single = ds.ddstore.stats()["read_calls"]
        assert calls_batch == 3  # one get_batch per field
        assert calls_single == 3 * len(idx)  # one get per sample and field
        for x, y in zip(a, b):
            assert_same(x, y)
    finally:
        ds.free()


def test_index_errors(world):
    ds = DistDataset(MapSource(N, SAMPLES["single-int"]), "idx")
    try:
        with pytest.raises(IndexError):
            ds[N]
        with pytest.raises(IndexError):
            ds[-N - 1]
        assert ds[np.int64(3)] == 9 and ds[torch.tensor(2)] == 6
        with pytest.raises(TypeError):
            ds[1.5]
        # one rank asks for a bad row: that rank fails, naming it; where the read is
        # group-collective (DDSTORE_NODE_LOCAL=0, several hosts) the others fail it too
        # ("rank k: ..."), elsewhere they complete it; nobody hangs
        rows = [0, N + 3] if world.rank == world.size - 1 else [0, 1]
        if world.rank == world.size - 1 or ds.ddstore.reads_collective:
            with pytest.raises(IndexError) as e:
                ds.__getitems__(rows)
            assert str(N + 3) in str(e.value)
        else:
            assert list(ds.__getitems__(rows)) == [0, 3]
        # the store still works afterwards
        assert [s for s in ds.__getitems__([2, 1])] == [6, 3]
    finally:
        ds.free()


def test_devices_cpu(world):
    make = SAMPLES["dict"]
    for dev in ("cpu", torch.device("cpu")):
        ds = DistDataset(MapSource(N, make), "dev", device=dev, add_device=dev)
        try:
            s = ds[3]
            assert s["tensor"].device.type == "cpu"
            assert_same(s, make(3))
            assert ds.__getitems__([1])[0]["tensor"].device.type == "cpu"
        finally:
            ds.free()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError) as e:
            DistDataset(MapSource(N, make), "dev", device="cuda")
        assert "CUDA" in raised_everywhere(world, e)
    with pytest.raises(ValueError):
        DistDataset(MapSource(N, make), "dev", device="not-a-device")


@pytest.mark.parametrize("part", [1, 2])
def test_width_groups_hold_full_copies(world, part):
    # width 1, and half the communicator (groups split from one communicator: Open MPI issue 9492)
    width = 1 if part == 1 else (world.size // 2 if world.size % 2 == 0 else world.size)
    ds = DistDataset(MapSource(N, SAMPLES["single-tensor"]), "w", ddstore_width=width)
    try:
        assert ds.ddstore.group_size == width
        g = ds.ddstore.group_rank
        assert ds.ddstore.query("w/0").local_rows == N * (g + 1) // width - N * g // width
        for i in (0, N - 1, N // 2):
            assert_same(ds[i], value(i, "tensor"))
        b = ds.__getitems__([1, N - 2])  # each rank reads from its own group
        assert_same(b[1], value(N - 2, "tensor"))
    finally:
        ds.free()


def test_context_manager_and_freed(world):
    with DistDataset(MapSource(N, SAMPLES["single-int"]), "cm") as ds:
        assert ds[1] == 3
    with pytest.raises(RuntimeError):
        ds[1]


def test_graph_samples_point_to_the_geometric_dataset(world):
    """Data samples are torch_geometric graphs: the message names the class that stores them."""
    geo = pytest.importorskip("torch_geometric.data")
    for sample in (geo.Data(x=torch.zeros(2, 1)), {"g": geo.Data(x=torch.zeros(2, 1))}):
        with pytest.raises(TypeError) as e:
            DistDataset(MapSource(N, lambda i, s=sample: s), "graphs")
        msg = raised_everywhere(world, e)
        assert "pyddstore.torch.geometric.DistDataset" in msg and "Data" in msg
