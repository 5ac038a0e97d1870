"""Integrity checks of a store's variables: checksums recorded when a
variable is added, compared later with what the store's read path returns.

``record(store, name)`` computes, on every rank, a CRC-32 (``zlib.crc32``)
of each block of its own shard and shares the table with its group, so that
every rank holds the checksums of every shard of its group.
``verify(store, name)`` then reads every row of the group back through
``store.get`` (the same path applications use: MPI RMA, node shared memory
or libfabric, depending on the method) and compares block by block. Each
rank reads the shard of the *next* rank of its group, so that with two or
more ranks per group every byte crosses the transport rather than being
copied from the reader's own memory.

Both calls are collective over the store's communicator (``store.comm``):
every rank must make them, in the same order relative to the store's other
collective calls. Reader stores (method 2, no MPI) can verify against a
table passed explicitly (``expected=``), e.g. one exported by a core rank
with :func:`table`.

A variable changed with ``update()`` after its checksum was recorded fails
verification until ``record`` is called again: verify cannot tell a
legitimate write from corruption, which is also how the tests corrupt a
shard on purpose.
"""

import zlib
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from ._errors import DDS_EINVAL, DDS_ENOTSUP, DDS_EPROTO, DDS_ESTATE, DDStoreError
from ._errors import DDStoreNotSupportedError, DDStoreStateError, DDStoreValueError
from .util import raise_agreed

# Bytes per checksummed block: small enough to point at a bad region, large
# enough that the table stays tiny (256 entries per GiB).
BLOCK_BYTES = 4 << 20
# Bytes read per get() during verification (bounded memory per rank).
READ_BYTES = 16 << 20

_ATTR = "_dds_checksums"


class ShardTable(NamedTuple):
    """Recorded checksums of one variable in one group.

    ``block_rows``: rows per block; ``offsets``: first global row of each
    shard (group_size + 1 entries); ``crcs[k]``: CRC-32 of each block of
    shard k, in order.
    """

    row_bytes: int
    block_rows: int
    offsets: Tuple[int, ...]
    crcs: Tuple[Tuple[int, ...], ...]


class Mismatch(NamedTuple):
    """A block whose bytes read back differ from the recorded checksum."""

    group: int
    shard: int
    first_row: int  # global row where the block starts
    rows: int
    expected: int
    got: int


class VerifyReport(NamedTuple):
    """Result of :func:`verify`, identical on every rank.

    ``ok`` is True when every block of every group matched; ``rows`` and
    ``bytes`` count what was read back (all ranks together); ``mismatches``
    lists the bad blocks of every group.
    """

    name: str
    ok: bool
    rows: int
    bytes: int
    mismatches: List[Mismatch]

    def describe(self):
        """A one-paragraph summary naming the first bad blocks."""
        if self.ok:
            return f"variable {self.name!r}: {self.rows} rows ({self.bytes} bytes) verified"
        parts = [f"group {m.group} shard {m.shard} rows [{m.first_row}, {m.first_row + m.rows}) "
                 f"crc {m.got:#010x} != recorded {m.expected:#010x}" for m in self.mismatches[:5]]
        more = f" (+{len(self.mismatches) - 5} more)" if len(self.mismatches) > 5 else ""
        return (f"variable {self.name!r}: {len(self.mismatches)} corrupt block(s): "
                + "; ".join(parts) + more)


def _block_rows(row_bytes):
    return max(1, BLOCK_BYTES // row_bytes)


def _crc_blocks(data, row_bytes, block_rows):
    """CRC-32 of each block of `block_rows` rows of the bytes `data`."""
    b = np.ascontiguousarray(data).reshape(-1).view(np.uint8)  # a flat view, empty arrays too
    step = block_rows * row_bytes
    return tuple(zlib.crc32(b[i:i + step]) for i in range(0, b.size, step))


def _require_core(store, what):
    if getattr(store, "is_reader", False):
        raise DDStoreNotSupportedError(
            f"{what}() needs a store over a communicator; for a method-2 reader pass expected= "
            "(a table from pyddstore._verify.table() on a core rank)", DDS_ENOTSUP)
    if store.freed:
        raise DDStoreStateError(f"{what}() on a freed store", DDS_ESTATE)


def _read_rows(store, name, start, nrows, row_bytes, buf):
    """Read `nrows` rows from global row `start` through store.get, in
    pieces of at most READ_BYTES, and yield each piece's bytes."""
    per = max(1, READ_BYTES // row_bytes)
    done = 0
    while done < nrows:
        n = min(per, nrows - done)
        view = buf[:n]
        store.get(name, view, start + done)
        yield view
        done += n


def _block_crcs(pieces, row_bytes, block_rows):
    """(CRC-32, rows) of each block of `block_rows` rows, the last one possibly
    shorter, of the rows in `pieces` (arrays of whole rows, in order). A
    block's CRC is chained across pieces, so it does not depend on how the
    rows were split into reads."""
    crc, in_block = 0, 0
    for piece in pieces:
        mv = memoryview(piece).cast("B")
        pos = 0
        while pos < len(mv):
            take = min(len(mv) - pos, (block_rows - in_block) * row_bytes)
            crc = zlib.crc32(mv[pos:pos + take], crc)
            pos += take
            in_block += take // row_bytes
            if in_block == block_rows:
                yield crc, in_block
                crc, in_block = 0, 0
    if in_block:
        yield crc, in_block


def _output(store, name, nrows_max):
    """A C-contiguous array that store.get accepts for `name` (its dtype,
    rows flattened), of at most `nrows_max` rows and READ_BYTES bytes."""
    info = store.query(name)
    per = max(1, min(nrows_max, READ_BYTES // info.row_bytes))
    if info.dtype is None or info.dtype.kind == "V":   # raw bytes, or records: their bytes
        return np.empty((per, info.row_bytes), dtype=np.uint8)
    return np.empty((per, info.row_bytes // info.dtype.itemsize), dtype=info.dtype)


def record(store, name, local=None):
    """Compute and share the checksums of variable `name` (collective over
    store.comm). `local`: this rank's rows as given to add() (saves reading
    them back); by default the rank reads its own shard through store.get.
    Returns the group's :class:`ShardTable`."""
    _require_core(store, "record")
    info = store.query(name)
    rb = info.row_bytes
    br = _block_rows(rb)
    err = None
    crcs = ()
    try:
        if local is not None:
            a = np.ascontiguousarray(local)
            if a.nbytes != info.local_rows * rb:
                raise DDStoreValueError(
                    f"record({name!r}): local rows hold {a.nbytes} bytes, the shard has "
                    f"{info.local_rows} rows of {rb} bytes", DDS_EINVAL)
            crcs = _crc_blocks(a, rb, br)
        else:
            parts = []
            if info.local_rows:
                buf = _output(store, name, info.local_rows)
                pieces = _read_rows(store, name, info.first_row, info.local_rows, rb, buf)
                parts = [crc for crc, _ in _block_crcs(pieces, rb, br)]
            crcs = tuple(parts)
    except Exception as e:  # noqa: BLE001 - agreed below, then raised on every rank
        err = e
    # Agree on failure first so that no rank is left in the allgather below.
    raise_agreed(store.comm, err)
    gathered = store.group_comm.allgather(crcs)
    t = ShardTable(rb, br, tuple(int(x) for x in info.offsets), tuple(gathered))
    tables = store.__dict__.setdefault(_ATTR, {})
    tables[name] = t
    return t


def table(store, name):
    """The recorded :class:`ShardTable` of `name` on this rank (to pass to a
    reader's :func:`verify` as expected=); DDStoreStateError when none."""
    t = store.__dict__.get(_ATTR, {}).get(name)
    if t is None:
        raise DDStoreStateError(
            f"no checksum recorded for variable {name!r}; call pyddstore._verify.record(store, "
            f"{name!r}) (collective) after its last update", DDS_ESTATE)
    return t


def _check_shard(store, name, t, k, group):
    """Read shard k of the group back through the read path; list the
    blocks that do not match table `t`."""
    start, stop = t.offsets[k], t.offsets[k + 1]
    rb, br = t.row_bytes, t.block_rows
    expected = t.crcs[k]
    bad = []
    nblocks = -(-(stop - start) // br) if stop > start else 0
    if len(expected) != nblocks:
        raise DDStoreValueError(
            f"verify({name!r}): the recorded table has {len(expected)} blocks for shard {k}, its "
            f"{stop - start} rows make {nblocks}; record again", DDS_EINVAL)
    if stop == start:
        return bad, 0
    buf = _output(store, name, stop - start)
    row = start
    pieces = _read_rows(store, name, start, stop - start, rb, buf)
    for b, (crc, nrows) in enumerate(_block_crcs(pieces, rb, br)):
        if crc != expected[b]:
            bad.append(Mismatch(group, k, row, nrows, expected[b], crc))
        row += nrows
    return bad, stop - start


def verify(store, name, *, expected: Optional[ShardTable] = None, strict=False):
    """Read every row of `name` back through the store's read path and
    compare it with the recorded checksums.

    Core store: collective over store.comm; rank r of a group reads shard
    (r + 1) mod group_size of its group, so every shard is read once per
    group, by another rank where the group has several. Returns a
    :class:`VerifyReport`, the same on every rank. Reader store (method 2):
    local; reads every shard and needs `expected` (see :func:`table`).
    strict=True raises DDStoreError (code DDS_EPROTO) naming the bad blocks
    instead of returning a failed report.
    """
    if getattr(store, "is_reader", False):
        if expected is None:
            raise DDStoreNotSupportedError(
                f"verify({name!r}) on a method-2 reader needs expected= (a ShardTable from "
                "pyddstore._verify.table() on a core rank)", DDS_ENOTSUP)
        bad, rows = [], 0
        for k in range(len(expected.crcs)):
            b, n = _check_shard(store, name, expected, k, -1)
            bad += b
            rows += n
        rep = VerifyReport(name, not bad, rows, rows * expected.row_bytes, bad)
    else:
        if store.freed:
            raise DDStoreStateError(f"verify({name!r}) on a freed store", DDS_ESTATE)
        err = None
        bad, rows, rb = [], 0, 0
        try:
            t = expected if expected is not None else table(store, name)
            info = store.query(name)
            if tuple(int(x) for x in info.offsets) != t.offsets or info.row_bytes != t.row_bytes:
                raise DDStoreValueError(
                    f"verify({name!r}): the recorded table describes another layout (offsets "
                    f"{t.offsets}, {t.row_bytes}-byte rows) than the variable's "
                    f"({tuple(int(x) for x in info.offsets)}, {info.row_bytes}-byte rows)", DDS_EINVAL)
            k = (store.group_rank + 1) % store.group_size
            bad, rows = _check_shard(store, name, t, k, store.group_index)
            rb = t.row_bytes
        except Exception as e:  # noqa: BLE001 - agreed below, then raised on every rank
            err = e
        raise_agreed(store.comm, err)
        results = store.comm.allgather((bad, rows * rb, rows))
        allbad = [m for b, _, _ in results for m in b]
        rep = VerifyReport(name, not allbad, sum(x[2] for x in results), sum(x[1] for x in results),
                           allbad)
    if strict and not rep.ok:
        raise DDStoreError(rep.describe(), DDS_EPROTO)
    return rep
