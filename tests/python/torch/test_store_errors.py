"""One error hierarchy: what pyddstore.torch raises for a store failure is a
pyddstore.DDStoreError (with its libddstore code), and still the builtin class
it was before, with the same message."""
import pickle

import numpy as np
import pytest
import torch

import pyddstore
from pyddstore._errors import DDS_EMISMATCH, DDS_ENOENT, DDS_ERANGE, DDS_ESTATE
from pyddstore.torch import DistDataset, WindowedDataset
from pyddstore.torch._errors import DatasetStoreError, FieldNotFoundError, WindowRangeError

N = 12


def source():
    return [{"x": torch.full((2,), float(i)), "y": i} for i in range(N)]


def test_classes_keep_their_builtin_bases():
    # Added bases only: code catching the builtin classes is unaffected.
    assert issubclass(WindowRangeError, pyddstore.DDStoreRangeError)
    assert issubclass(WindowRangeError, (IndexError)) and issubclass(WindowRangeError, ValueError)
    assert issubclass(DatasetStoreError, pyddstore.DDStoreError)
    assert issubclass(DatasetStoreError, RuntimeError)
    # Not a store error: it names keys the source's samples lack.
    assert not issubclass(FieldNotFoundError, pyddstore.DDStoreError)
    for cls, code in ((WindowRangeError, DDS_ERANGE), (DatasetStoreError, DDS_EMISMATCH)):
        e = cls("plain text", code)
        assert str(e) == "plain text" and e.code == code and e.args == ("plain text",)
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and str(back) == "plain text" and back.code == code
    assert WindowRangeError("w").code == DDS_ERANGE  # the store's code for rows out of range


def test_window_out_of_range_is_a_store_range_error(world):
    ds = DistDataset(source(), "err_win", comm=world)
    try:
        for catch in (pyddstore.DDStoreRangeError, pyddstore.DDStoreError, IndexError, ValueError):
            with pytest.raises(catch, match=r"starts\[1\] = 11: a window of 3 rows") as ei:
                WindowedDataset(ds, 3, starts=[0, N - 1])
            assert type(ei.value) is WindowRangeError and ei.value.code == DDS_ERANGE
    finally:
        ds.free()


def test_freed_dataset_is_a_store_state_error(world):
    ds = DistDataset(source(), "err_freed", comm=world)
    ds.free()
    for read in (lambda: ds[0], lambda: ds.read_rows([0]), ds.stats, lambda: ds.alloc(2)):
        with pytest.raises(pyddstore.DDStoreStateError, match="'err_freed' was freed") as ei:
            read()
        assert isinstance(ei.value, RuntimeError) and ei.value.code == DDS_ESTATE


def test_store_failure_while_loading_is_a_store_error_on_every_rank(world):
    # A store call that fails on the last rank only, in the middle of loading
    # (stood in for by an encode that raises what the store would).
    size = world.Get_size()

    def encode(sample):
        if int(sample["y"]) == N - 1:
            raise pyddstore.DDStoreKeyError("unknown variable 'elsewhere'", DDS_ENOENT)
        return sample

    with pytest.raises(pyddstore.DDStoreError) as ei:
        DistDataset(source(), "err_load", comm=world, encode=encode)
    e = ei.value
    assert type(e) is DatasetStoreError and isinstance(e, RuntimeError)  # RuntimeError as before
    assert e.code == DDS_ENOENT
    assert str(e) == (f"DistDataset 'err_load': on rank {size - 1}: DDStoreKeyError: "
                      "unknown variable 'elsewhere'")
    assert len(set(world.allgather(str(e)))) == 1


def test_other_failures_while_loading_are_unchanged(world):
    # Not from the store: the builtin class as before, not a DDStoreError.
    def encode(sample):
        if int(sample["y"]) == N - 1:
            raise ValueError("bad sample")
        return sample

    with pytest.raises(ValueError, match="on rank .*: bad sample") as ei:
        DistDataset(source(), "err_other", comm=world, encode=encode)
    assert type(ei.value) is ValueError
    with pytest.raises(FieldNotFoundError) as ei:
        DistDataset(source(), "err_fields", comm=world, fields=["nope"])
    assert not isinstance(ei.value, pyddstore.DDStoreError)


def test_read_out_of_range_stays_an_index_error(world):
    ds = DistDataset(source(), "err_idx", comm=world)
    try:
        with pytest.raises(IndexError, match="out of range"):
            ds[N]
        # the store's check (libddstore's get_batch), naming the row and the range
        with pytest.raises(IndexError, match=rf"row {N + 3} \(position 1\) is outside \[0, {N}\)"):
            ds.__getitems__(np.array([0, N + 3]))
        with pytest.raises(IndexError, match=rf"row {-N - 2} \(position 0\) is outside"):
            ds.__getitems__([-N - 2])  # below -len: named as given
    finally:
        ds.free()
