"""DistDataset in files (storage_dir=) and DistDataset.open(): loading in
chunks, reopening without the source at other rank counts (the communicator
split inside one job; tests/python/storage reopens in later jobs), bad
directories and names raising on every rank, the progress bar and info()
saying where shards live. Run under mpiexec (every rank); rows bit-exact."""
import inspect
import os
import shutil
import tempfile

import numpy as np
import pytest
import torch
from conftest import RangeSource, assert_same, value

import pyddstore
from pyddstore.torch import DistDataset, ThreadDataLoader
from pyddstore.torch import _progress
from pyddstore.torch import dataset as dataset_module

N = 23  # not a multiple of 2, 3 or 4: uneven shares


def make(i):
    return {"x": value(i, "tensor"), "y": np.int64(i * 7 - 3)}


def flat(i):
    """Sample i of a RangeSource (its read_range stacks "x" and gives "y" = i)."""
    return {"x": torch.full((3,), float(i)), "y": i}


def make_ragged(i):
    # Ragged fields come back after the fixed ones (as from memory): "pos" last.
    return {"y": np.int64(i), "pos": np.arange(3 * (i % 4), dtype=np.float32).reshape(-1, 3) + i}


@pytest.fixture
def sdir(world):
    """A fresh storage directory name, the same on every rank; removed after the test."""
    d = tempfile.mkdtemp(prefix="ddstore-torch-storage-") if world.rank == 0 else None
    d = world.bcast(d, root=0)
    yield os.path.join(d, "ds")
    world.Barrier()
    if world.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def raised_everywhere(world, excinfo, *words):
    """The error has the same type on every rank and names all `words` there
    (libddstore's text on other ranks starts "rank R: "); returns its text."""
    mine = (excinfo.type.__name__, str(excinfo.value))
    allv = world.allgather(mine)
    assert all(v[0] == mine[0] and all(w in v[1] for w in words) for v in allv), (words, allv)
    return mine[1]


def check_all(ds, maker=make):
    """Every sample of ds, on this rank, equal to the source's."""
    assert len(ds) == N
    for i in range(N):
        assert_same(ds[i], maker(i))


def test_loaded_in_chunks_into_files(world, sdir, monkeypatch):
    # Loading into files never holds the whole share: chunks of about
    # _FILE_CHUNK_BYTES (here 3 samples' worth) unless chunk_size= says otherwise.
    row = 3 * 4 + 8
    monkeypatch.setattr(dataset_module, "_FILE_CHUNK_BYTES", 3 * row)
    src = RangeSource(N, flat)
    ds = DistDataset(src, "chunks", storage_dir=sdir)
    try:
        assert src.range_calls and all(b - a <= 3 for a, b in src.range_calls), src.range_calls
        info = ds.ddstore.info()
        assert info["storage"] == "files" and info["storage_state"] == "saved"
        assert os.path.samefile(info["storage_dir"], sdir)
        assert 0 <= info["resident_bytes"] <= info["shard_bytes"]
        check_all(ds, flat)
    finally:
        ds.free()
    assert os.path.exists(os.path.join(sdir, "manifest"))  # saved: the files outlive the dataset


def test_memory_by_default(world, monkeypatch):
    monkeypatch.delenv("DDSTORE_STORAGE_DIR", raising=False)
    ds = DistDataset(RangeSource(N, flat), "mem")
    try:
        assert ds.ddstore.info()["storage"] in ("memory", "node-shm")
        assert ds.ddstore.info()["storage_dir"] is None
    finally:
        ds.free()


def test_storage_dir_from_environment(world, sdir, monkeypatch):
    monkeypatch.setenv("DDSTORE_STORAGE_DIR", sdir)
    ds = DistDataset(RangeSource(N, flat), "env")
    try:
        assert os.path.samefile(ds.ddstore.info()["storage_dir"], sdir)
    finally:
        ds.free()
    monkeypatch.delenv("DDSTORE_STORAGE_DIR")
    ds = DistDataset.open(sdir, "env")
    try:
        check_all(ds, flat)
    finally:
        ds.free()


@pytest.mark.parametrize("maker", [make, make_ragged], ids=["fixed", "ragged"])
def test_reopen_without_source_at_other_rank_counts(world, sdir, maker):
    ragged = {"pos": 0} if maker is make_ragged else None
    DistDataset(_Map(maker), "r", storage_dir=sdir, ragged=ragged).free()
    size, rank = world.Get_size(), world.Get_rank()
    for k in range(1, size + 1):  # groups of k consecutive ranks reopen it at once
        sub = world.Split(rank // k, rank)
        ds = DistDataset.open(sdir, "r", comm=sub)
        try:
            assert ds.ddstore.info()["storage_state"] == "reopened"
            assert ds.ddstore.size == sub.Get_size()
            check_all(ds, maker)
            # Batches through the loader, collective over the reopened store.
            loader = ThreadDataLoader(ds, batch_size=4, shuffle=False,
                                      collate_fn=lambda b: [int(s["y"]) for s in b])
            seen = []
            for batch in loader:
                seen.extend(batch)
            assert seen == [int(maker(i)["y"]) for i in range(N)]
            assert ds.ddstore.verify_saved() == 0
        finally:
            ds.free()
            sub.Free()


class _Map(torch.utils.data.Dataset):
    def __init__(self, maker):
        self.maker = maker

    def __len__(self):
        return N

    def __getitem__(self, i):
        return self.maker(i)


def test_reopened_decode_and_device(world, sdir):
    DistDataset(RangeSource(N, flat), "d", storage_dir=sdir).free()
    ds = DistDataset.open(sdir, "d", decode=lambda s, i: (s["x"].sum(), i), device="cpu")
    try:
        for i in range(N):
            total, j = ds[i]
            assert j == i and torch.equal(total, flat(i)["x"].sum())
    finally:
        ds.free()


def test_open_errors_on_every_rank(world, sdir):
    with pytest.raises(pyddstore.DDStoreKeyError) as ei:  # never built
        DistDataset.open(sdir, "nothing")
    raised_everywhere(world, ei, "storage directory", sdir)
    DistDataset(RangeSource(N, flat), "held", storage_dir=sdir).free()
    with pytest.raises(KeyError) as ei:
        DistDataset.open(sdir, "other")
    raised_everywhere(world, ei, "no dataset 'other'", "['held']")
    for bad, cls, words in (("", ValueError, "non-empty str"), ("a/", ValueError, "non-empty str")):
        with pytest.raises(cls) as ei:
            DistDataset.open(sdir, bad)
        raised_everywhere(world, ei, words)
    with pytest.raises(TypeError) as ei:
        DistDataset.open(sdir, "held", decode=3)
    raised_everywhere(world, ei, "decode must be callable")
    # A corrupt manifest: a clear error, never wrong rows.
    world.Barrier()
    if world.rank == 0:
        with open(os.path.join(sdir, "manifest"), "r+b") as f:
            f.seek(40)
            f.write(b"\xff\xfe")
    world.Barrier()
    with pytest.raises(pyddstore.DDStoreError) as ei:
        DistDataset.open(sdir, "held")
    raised_everywhere(world, ei, "manifest", sdir)


def test_storage_dir_keyword_only():
    kind = inspect.signature(DistDataset).parameters["storage_dir"].kind
    assert kind is inspect.Parameter.KEYWORD_ONLY


def test_progress_bar_says_where_and_resident(world, sdir, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    monkeypatch.delenv(_progress.ENV, raising=False)
    capsys.readouterr()
    ds = DistDataset(RangeSource(N, flat), "bar", storage_dir=sdir,
                     progress=True)
    err = capsys.readouterr().err
    ds.free()
    if world.rank == 0:
        assert f"loading into files in {os.path.realpath(sdir)}" in err or \
            f"loading into files in {sdir}" in err, err
        assert "resident" in err, err
    else:
        assert err == "", err
    ds = DistDataset(RangeSource(N, flat), "bar-mem", progress=True)
    err = capsys.readouterr().err
    ds.free()
    if world.rank == 0:
        assert "loading into memory" in err or "loading into node shared memory" in err, err
