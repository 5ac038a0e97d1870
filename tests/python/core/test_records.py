"""numpy records (structured dtypes) as the original DDStore's users keep samples: add()
stores them as their bytes and every read gives them back bit for bit (padding
included) into an array of the record dtype, or as bytes; nested, aligned, padded
and record-array layouts; object fields and mismatches raise on every rank."""
import numpy as np
import pytest

from core_helpers import layout, make_store
from pyddstore import DDStoreDTypeError, DDStoreError

# HydraGNN-style sample records, and the layouts numpy can give them.
ATOMS = np.dtype([("x_modules", "<f4", (4, 3)), ("id", "<i8"), ("flag", "?")])
ALIGNED = np.dtype(ATOMS.descr, align=True)
PADDED = np.dtype({"names": ["a", "b"], "formats": ["<i2", ">f8"], "offsets": [0, 8], "itemsize": 24})
NESTED = np.dtype([("inner", ALIGNED, (2,)), ("name", "S5"), ("label", "<U3"), ("t", "<M8[ns]"),
                   ("z", "<c16"), ("raw", "V3")], align=True)
TITLED = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f2"], "titles": ["alpha", None]})
RECORDS = {"atoms": ATOMS, "aligned": ALIGNED, "padded": PADDED, "nested": NESTED, "titled": TITLED,
           "recarray": np.dtype((np.record, ATOMS)), "void": np.dtype("V7")}


def record_bytes(rows, dtype, row_shape=()):
    """The bytes of global `rows` of a record variable, (len(rows), bytes per row): every
    byte a function of (row, byte), padding bytes included, so that a copy that skips
    padding shows (numpy's own copies of records, e.g. fancy indexing, do skip it)."""
    rows = np.asarray(rows, np.int64)
    n = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    return ((rows[:, None] * 37 + np.arange(n)[None, :] * 11 + 5) % 251).astype(np.uint8)


def records(rows, dtype, row_shape=()):
    """Global `rows` of a record variable as records (a record array for np.record dtypes)."""
    out = record_bytes(rows, dtype, row_shape).view(dtype).reshape((len(rows),) + row_shape)
    return out.view(np.recarray) if dtype.type is np.record else out


def same_records(out, rows, dtype, row_shape=()):
    """`out` holds global `rows` bit for bit, as records of `dtype`."""
    return (out.dtype == dtype and out.shape == (len(rows),) + row_shape
            and out.tobytes() == record_bytes(rows, dtype, row_shape).tobytes())


def local_records(s, dtype, row_shape=()):
    counts, offsets = layout(s.group_size)
    lo = int(offsets[s.group_rank])
    return records(np.arange(lo, lo + counts[s.group_rank]), dtype, row_shape)


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_records_round_trip(comm, kind):
    dt = RECORDS[kind]
    s = make_store(comm)
    try:
        s.add("rec", local_records(s, dt))
        s.add("rec2", local_records(s, dt, (2,)))
        total = int(layout(s.group_size)[1][-1])
        q = s.query("rec")
        assert q.dtype == dt and q.row_bytes == dt.itemsize and q.row_shape == ()
        assert s.query("rec2").row_shape == (2,) and s.info("rec2") == (total, 2, dt.itemsize)
        want = records(np.arange(total), dt)
        out = np.zeros(total, dt)
        s.get("rec", out, 0)
        assert same_records(out, np.arange(total), dt)
        for g in range(total):            # one record at a time, inside an epoch (upstream's loop)
            one = np.empty(1, dt)
            s.epoch_begin()
            s.get("rec", one, np.int64(g))
            s.epoch_end()
            assert one.tobytes() == want[g:g + 1].tobytes()
        rows = np.array([(7 * j + comm.Get_rank()) % total for j in range(9)] + [0, 0], np.int64)
        out = np.empty(len(rows), dt)
        s.get_batch("rec", out, rows)
        assert same_records(out, rows, dt)
        two = np.empty((len(rows), 2), dt)
        s.get_batch("rec2", two, rows)
        assert same_records(two, rows, dt, (2,))
        out = np.empty(total, dt)
        s.get_ranges("rec", out, [0, total // 2], [total // 2, total - total // 2])
        assert same_records(out, np.arange(total), dt)
        as_bytes = np.empty((total, dt.itemsize), np.uint8)   # the records' bytes
        s.get("rec", as_bytes, 0)
        assert as_bytes.tobytes() == want.tobytes()
        if dt.type is np.record:                             # a record array as the output
            out = np.recarray(total, dt)
            s.get("rec", out, 0)
            assert out.tobytes() == want.tobytes() and np.array_equal(out.id, want.id)
        assert s.verify("rec") is not None
    finally:
        s.free()


def test_records_in_raw_variables(comm):
    """init()/update() (raw bytes) hold records too, as in the original DDStore."""
    s = make_store(comm)
    try:
        counts, offsets = layout(s.group_size)
        mine = local_records(s, NESTED)
        s.init("raw", len(mine), NESTED.itemsize)
        if len(mine):
            s.update("raw", mine[1:], 1)
            s.update("raw", mine[:1], 0)
        s.sync()
        out = np.empty(int(offsets[-1]), NESTED)
        s.get("raw", out, 0)
        assert same_records(out, np.arange(int(offsets[-1])), NESTED)
    finally:
        s.free()


def test_byte_variables_read_as_records(comm):
    """Records kept as bytes by the user (uint8 rows of the record's size, as upstream's
    users pack them) read straight into an array of the record dtype."""
    s = make_store(comm)
    try:
        mine = local_records(s, ATOMS)
        s.add("bytes", mine.view(np.uint8).reshape(len(mine), ATOMS.itemsize))
        total = int(layout(s.group_size)[1][-1])
        out = np.empty(total, ATOMS)
        s.get("bytes", out, 0)
        assert same_records(out, np.arange(total), ATOMS)
    finally:
        s.free()


def test_wrong_outputs_and_inputs(comm):
    s = make_store(comm)
    try:
        s.add("rec", local_records(s, ATOMS))
        renamed = np.dtype([("y", "<f4", (4, 3)), ("id", "<i8"), ("flag", "?")])
        for bad in (np.empty(1, "S57"), np.empty(1, renamed)):
            assert bad.itemsize == ATOMS.itemsize
            with pytest.raises(DDStoreDTypeError, match="records of dtype"):
                s.get("rec", bad, 0)
        with pytest.raises(DDStoreDTypeError, match="records of dtype"):
            s.update("rec", np.zeros(1, ALIGNED), 0)
        # Records are not read from variables of other dtypes than bytes.
        s.add("f32", np.zeros((layout(s.group_size)[0][s.group_rank], 2), np.float32))
        with pytest.raises(DDStoreDTypeError):
            s.get("f32", np.empty(1, [("a", "<f4", (2,))]), 0)
        # Object fields are references, not data: refused on every rank.
        with pytest.raises(DDStoreDTypeError, match="Python objects") as e:
            s.add("obj", np.zeros(2, [("a", "<f4"), ("o", object)]))
        assert len(set(comm.allgather(str(e.value)))) == 1
        # Ranks that disagree on the record layout (of one size): every rank raises.
        if comm.Get_size() > 1:
            other = np.dtype([("a", "<f8"), ("b", "V49")])
            assert other.itemsize == ATOMS.itemsize
            with pytest.raises(DDStoreError, match="rank"):
                s.add("mixed", np.zeros(1, other if comm.Get_rank() % 2 else ATOMS))
        assert "mixed" not in s.names()
    finally:
        s.free()
