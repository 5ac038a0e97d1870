"""File-backed stores (storage_dir): shards in files, mapped; save, and
reopen at other rank counts; clear errors on every rank for directories that
are missing, unsaved, truncated, corrupt, foreign, stale or locked.

Runs with the suite's method and DDSTORE_NODE_LOCAL (ci: methods 0/1/2,
node sharing on and off, 1-4 ranks). Other rank counts are made inside one
job by splitting the communicator. Data checked bit-exact on every rank.
"""
import os
import shutil

import numpy as np
import pytest

import pyddstore
from pyddstore import PyDDStore
from pyddstore._errors import DDS_EIO, DDS_EPROTO

from core_helpers import METHOD, layout, local_values, same_bytes, shared_tmpdir, values


def _kw(comm):
    """Constructor keywords of the suite's method (method 2: its own handshake dir)."""
    return {"handshake_dir": shared_tmpdir(comm)} if METHOD == 2 else {}


def _new(comm, storage_dir, width=None):
    return PyDDStore(comm, METHOD, width, storage_dir=storage_dir, **_kw(comm))


def _open(comm, storage_dir, width=None):
    return PyDDStore.open(storage_dir, comm, METHOD, width, **_kw(comm))


@pytest.fixture
def sdir(comm):
    """A fresh storage directory name, the same on every rank; removed after the test."""
    d = shared_tmpdir(comm)
    yield os.path.join(d, "store")
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(d, ignore_errors=True)


def _write(comm, d, salt=0, width=None):
    """A saved store in d: variable "x" (float32 rows of shape (3,)), "b" (int64,
    init + update), "u" (uint8 bytes, rank 0 only); returns nothing (freed)."""
    s = _new(comm, d, width)
    s.add("x", local_values(s, (3,), "float32", salt))
    counts, offsets = layout(s.group_size)
    s.init("b", counts[s.group_rank], 1, 8)
    mine = values(np.arange(offsets[s.group_rank], offsets[s.group_rank + 1]), (), "int64", salt)
    half = len(mine) // 2
    s.update("b", mine[half:], half)  # back to front: saved checksums are read back, not kept as written
    s.update("b", mine[:half])
    s.sync()
    s.add("u", np.arange(37, dtype=np.uint8) if s.group_rank == 0 else np.zeros(0, np.uint8))
    s.save()
    s.free()


def _check(s, nsaved, salt=0):
    """Every row of the store _write made with `nsaved` ranks per group,
    read bit-exact on this rank."""
    g = int(layout(nsaved)[1][-1])
    rows = np.arange(g, dtype=np.int64)[::-1].copy()
    out = np.empty((g, 3), np.float32)
    s.get_batch("x", out, rows)
    assert same_bytes(out, values(rows, (3,), "float32", salt))
    b = np.empty(g, np.int64)
    s.get("b", b, 0)
    assert same_bytes(b, values(np.arange(g), (), "int64", salt))
    u = np.empty(37, np.uint8)
    s.get_ranges("u", u, np.array([0, 10], np.int64), np.array([10, 27], np.int64))
    assert same_bytes(u, np.arange(37, dtype=np.uint8))


def _every_rank_raises(comm, fn, cls, *words):
    """fn() raises `cls` on this rank with all `words` in its message; returns the error."""
    with pytest.raises(cls) as ei:
        fn()
    msg = str(ei.value)
    for w in words:
        assert w in msg, (w, msg)
    comm.Barrier()
    return ei.value


# ---- file-backed shards -------------------------------------------------------


def test_file_backed_reads_and_info(comm, sdir):
    s = _new(comm, sdir)
    try:
        s.add("x", local_values(s, (3,), "float32"))
        info = s.info()
        assert info["storage"] == "files" and info["storage_state"] == "written"
        assert os.path.samefile(info["storage_dir"], sdir)
        assert info["shard_bytes"] == s.query("x").local_rows * 12
        assert 0 <= info["resident_bytes"] <= info["shard_bytes"]
        assert info["storage_free_bytes"] > 0
        g = s.query("x").global_rows
        rows = np.arange(g, dtype=np.int64)
        out = np.empty((g, 3), np.float32)
        s.get_batch("x", out, rows)
        assert same_bytes(out, values(rows, (3,), "float32"))
        # Rows live in the variable's file, at their global position (no other copy).
        with open(os.path.join(sdir, "v0.dds"), "rb") as f:
            f.seek(4096)
            on_disk = np.frombuffer(f.read(g * 12), np.float32).reshape(g, 3)
        assert same_bytes(on_disk, values(rows, (3,), "float32"))
        s.save()
        assert s.info()["storage_state"] == "saved"
        assert os.path.exists(os.path.join(sdir, "manifest"))
        comm.Barrier()  # every rank has looked before one writes again
        # A write after the save: the saved manifest is no longer current.
        if s.query("x").local_rows:
            s.update("x", values([0], (3,), "float32", salt=5), 0)
        comm.Barrier()
        changed = comm.allreduce(int(s.query("x").local_rows > 0))
        if changed:
            assert not os.path.exists(os.path.join(sdir, "manifest"))
            assert s.info()["storage_state"] == "written"  # on every rank, writer or not
    finally:
        s.free()
    comm.Barrier()
    # Freed without a current save: its files go with it.
    assert not os.path.exists(os.path.join(sdir, "v0.dds"))


def test_memory_store_reports_memory(comm):
    s = PyDDStore(comm, METHOD, storage_dir="", **_kw(comm))
    try:
        s.add("x", local_values(s, (2,), "int32"))
        info = s.info()
        assert info["storage"] in ("memory", "node-shm") and info["storage_dir"] is None
        assert info["storage_state"] == "memory"
        assert info["shard_bytes"] == s.query("x").local_rows * 8
        with pytest.raises(pyddstore.DDStoreError, match="in memory"):
            s.save()
    finally:
        s.free()


# ---- save and reopen ------------------------------------------------------------


def test_reopen_same_and_other_rank_counts(comm, sdir):
    _write(comm, sdir)
    size, rank = comm.Get_size(), comm.Get_rank()
    for k in range(1, size + 1):  # groups of k consecutive ranks reopen it at once
        sub = comm.Split(rank // k, rank)
        s = _open(sub, sdir)
        try:
            assert s.info()["storage_state"] == "reopened"
            assert s.names() == ["x", "b", "u"]
            q = s.query("x")
            assert q.dtype == np.float32 and q.row_bytes == 12
            if sub.Get_size() == size:
                assert list(q.offsets) == list(layout(size)[1])  # the saved layout
            else:
                g = q.global_rows
                n = sub.Get_size()
                assert list(q.offsets) == [g * j // n for j in range(n + 1)]  # an even split
            _check(s, size)
            assert s.verify_saved() == 0
        finally:
            s.free()
            sub.Free()


def test_reopen_with_groups(comm, sdir):
    _write(comm, sdir)
    size = comm.Get_size()
    width = 1 if size > 1 else None
    s = _open(comm, sdir, width)  # every group maps the same files
    try:
        assert s.group_size == (1 if width else size)
        _check(s, size)
    finally:
        s.free()


def test_written_by_groups_one_directory_each(comm, sdir):
    size = comm.Get_size()
    if size < 2:
        pytest.skip("needs 2 ranks for 2 groups")
    _write(comm, sdir, width=1)
    _every_rank_raises(comm, lambda: _open(comm, sdir), pyddstore.DDStoreKeyError, "one store per group",
                       "group0")
    s = _open(comm, os.path.join(sdir, "group0"))
    try:
        assert s.query("x").global_rows == int(layout(1)[1][-1])
    finally:
        s.free()


def test_reopen_read_only(comm, sdir):
    _write(comm, sdir)
    s = _open(comm, sdir)
    try:
        _every_rank_raises(comm, lambda: s.add("y", np.zeros(2, np.int32)), pyddstore.DDStoreStateError,
                           "read-only")
        _every_rank_raises(comm, lambda: s.update("b", np.zeros(0, np.int64)), pyddstore.DDStoreStateError,
                           "read-only")
        _every_rank_raises(comm, s.save, pyddstore.DDStoreStateError, "saved already")
    finally:
        s.free()


# ---- bad directories: a clear error on every rank ---------------------------------


def _rank0(comm, fn):
    """fn() on rank 0 alone, once every rank has done what came before (e.g.
    read the file fn changes), and before any goes on."""
    comm.Barrier()
    if comm.Get_rank() == 0:
        fn()
    comm.Barrier()


def _open_fails(comm, d, cls, *words):
    return _every_rank_raises(comm, lambda: _open(comm, d), cls, *words)


def test_missing_and_unsaved(comm, sdir):
    _open_fails(comm, sdir, pyddstore.DDStoreKeyError, "storage directory", sdir)
    s = _new(comm, sdir)
    s.add("x", local_values(s, (3,), "float32"))
    s.free()  # never saved
    _open_fails(comm, sdir, pyddstore.DDStoreKeyError, "holds no saved store")


def _edit(path, fn):
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        data = fn(data)
        f.seek(0)
        f.truncate()
        f.write(data)


def test_manifest_truncated_corrupt_foreign_version(comm, sdir):
    _write(comm, sdir)
    m = os.path.join(sdir, "manifest")
    with open(m, "rb") as f:
        good = f.read()

    def put(data):
        _rank0(comm, lambda: open(m, "wb").write(data))

    put(good[: len(good) // 2])
    e = _open_fails(comm, sdir, pyddstore.DDStoreError, "truncated", m)
    assert e.code == DDS_EPROTO
    put(good.replace(b"ranks ", b"ranks 1", 1))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "corrupt", "checksum")
    put(b"PK\x03\x04 not a manifest at all\n")
    _open_fails(comm, sdir, pyddstore.DDStoreError, "foreign")
    # A later format, with a valid checksum: named as such, never misread.
    import re
    body = good[: good.rindex(b"end ")].replace(b"ddstore-storage 1", b"ddstore-storage 2", 1)
    crc = _crc32c(body)
    put(body + b"end %08x\n" % crc)
    _open_fails(comm, sdir, pyddstore.DDStoreError, "format version 2")
    assert re.search(rb"end [0-9a-f]{8}\n$", good)
    put(good)
    s = _open(comm, sdir)
    s.free()


def _crc32c(data):
    """CRC-32C, bitwise (tests only)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def test_variable_file_truncated_stale_foreign_missing(comm, sdir):
    _write(comm, sdir)
    v0 = os.path.join(sdir, "v0.dds")
    st = os.stat(v0)
    with open(v0, "rb") as f:
        good = f.read()

    def restore():
        with open(v0, "wb") as f:
            f.write(good)
        os.utime(v0, ns=(st.st_atime_ns, st.st_mtime_ns))

    _rank0(comm, lambda: os.truncate(v0, st.st_size - 5))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "v0.dds", "bytes, the manifest says")
    _rank0(comm, restore)
    _rank0(comm, lambda: _edit(v0, lambda d: d[:4096] + bytes([d[4096] ^ 1]) + d[4097:]))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "v0.dds", "modified after the store was saved")
    # The same change with the old time put back: only the checksums see it.
    _rank0(comm, lambda: os.utime(v0, ns=(st.st_atime_ns, st.st_mtime_ns)))
    s = _open(comm, sdir)
    try:
        e = _every_rank_raises(comm, s.verify_saved, pyddstore.DDStoreError, "variable 'x'",
                               "do not match their saved checksum")
        assert e.code == DDS_EPROTO
    finally:
        s.free()
    _rank0(comm, restore)
    # A variable file of another store.
    other = sdir + "-other"
    _write(comm, other, salt=1)
    _rank0(comm, lambda: shutil.copyfile(os.path.join(other, "v0.dds"), v0))
    _rank0(comm, lambda: os.utime(v0, ns=(st.st_atime_ns, st.st_mtime_ns)))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "foreign")
    _rank0(comm, lambda: os.unlink(v0))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "incomplete", "v0.dds")
    _rank0(comm, lambda: shutil.rmtree(other))


def test_manifest_copied_from_another_directory(comm, sdir):
    _write(comm, sdir)
    other = sdir + "-other"
    _write(comm, other, salt=1)
    _rank0(comm, lambda: shutil.copyfile(os.path.join(other, "manifest"), os.path.join(sdir, "manifest")))
    _open_fails(comm, sdir, pyddstore.DDStoreError, "stale", "volume")
    _rank0(comm, lambda: shutil.rmtree(other))


def test_locked_while_written_or_read(comm, sdir):
    w = _new(comm, sdir)
    try:
        w.add("x", local_values(w, (3,), "float32"))
        w.save()
        _every_rank_raises(comm, lambda: _new(comm, sdir), pyddstore.DDStoreStateError,
                           "being written by another job", f"pid {os.getpid()}"
                           if comm.Get_rank() == 0 else "pid")
        _open_fails(comm, sdir, pyddstore.DDStoreStateError, "being written")
    finally:
        w.free()
    r = _open(comm, sdir)
    r2 = _open(comm, sdir)  # readers share the directory
    try:
        _every_rank_raises(comm, lambda: _new(comm, sdir), pyddstore.DDStoreStateError,
                           "open for reading")
    finally:
        r2.free()
        r.free()
    w = _new(comm, sdir)  # free again: a writer may take it over
    w.free()


def test_directory_of_something_else(comm, sdir):
    _rank0(comm, lambda: (os.makedirs(sdir), open(os.path.join(sdir, "notes.txt"), "w").close()))
    e = _every_rank_raises(comm, lambda: _new(comm, sdir), pyddstore.DDStoreValueError, "notes.txt",
                           "not a ddstore file")
    assert os.path.exists(os.path.join(sdir, "notes.txt"))
    del e


def test_storage_directory_too_small(comm, sdir):
    s = _new(comm, sdir)
    try:
        free = s.info()["storage_free_bytes"]
        rows = free // (1 << 20) // comm.Get_size() * 2 + 2  # twice the room, 1 MiB rows
        e = _every_rank_raises(comm, lambda: s.init("big", rows, 1 << 20), pyddstore.DDStoreError,
                               "variable 'big'", "bytes free", "need")
        assert e.code == DDS_EIO
        s.add("x", local_values(s, (3,), "float32"))  # the store goes on
    finally:
        s.free()


def test_some_ranks_without_storage(comm, sdir):
    if comm.Get_size() < 2:
        pytest.skip("needs 2 ranks")
    d = sdir if comm.Get_rank() else ""
    _every_rank_raises(comm, lambda: _new(comm, d), pyddstore.DDStoreValueError,
                       "some ranks have a storage directory")


def test_versioned_not_file_backed(comm, sdir):
    s = _new(comm, sdir)
    try:
        _every_rank_raises(comm, lambda: pyddstore.init_versioned(s, "v", 4, 8, block_rows=2),
                           pyddstore.DDStoreNotSupportedError, "versioned")
    finally:
        s.free()
