"""geometric.DistDataset reports store failures as pyddstore.DDStoreError subclasses
(the RuntimeError / builtin classes they were stay bases)."""
import pytest
pytest.importorskip("torch_geometric")
from conftest import raised_everywhere  # noqa: E402
from graphs import Graphs  # noqa: E402

import pyddstore  # noqa: E402
from pyddstore._errors import DDS_ENOENT, DDS_ESTATE  # noqa: E402
from pyddstore.torch._errors import DatasetStoreError  # noqa: E402
from pyddstore.torch.geometric import DistDataset  # noqa: E402

N = 9


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_store_failure_while_loading(world, chunk_size):
    size = world.Get_size()

    def encode(d):
        if float(d.y) == N - 1:  # the last graph: the last rank's share
            raise pyddstore.DDStoreKeyError("unknown variable 'elsewhere'", DDS_ENOENT)
        return d

    with pytest.raises(pyddstore.DDStoreError) as ei:
        DistDataset(Graphs(N), f"geo_err_{chunk_size}", comm=world, encode=encode, chunk_size=chunk_size)
    assert type(ei.value) is DatasetStoreError and isinstance(ei.value, RuntimeError)
    assert ei.value.code == DDS_ENOENT
    assert raised_everywhere(world, ei) == (f"geometric.DistDataset 'geo_err_{chunk_size}': on rank "
                                            f"{size - 1}: DDStoreKeyError: unknown variable 'elsewhere'")


def test_freed(world):
    ds = DistDataset(Graphs(N), "geo_err_freed", comm=world)
    ds.free()
    for read in (lambda: ds[0], ds.stats, lambda: ds.__getitems__([0]), ds.graph_sizes):
        with pytest.raises(pyddstore.DDStoreStateError, match="was freed") as ei:
            read()
        assert isinstance(ei.value, RuntimeError) and ei.value.code == DDS_ESTATE



def test_batch_index_out_of_range(world):
    """A bad graph index in a batch is the store's range check (pyddstore.DDStoreRangeError,
    an IndexError) naming it; where the read is group-collective every rank of the group
    raises it ("rank k: ..."), elsewhere the others complete their batch; nobody hangs."""
    ds = DistDataset(Graphs(N), "geo_err_idx", comm=world)
    try:
        last = world.rank == world.size - 1
        rows = [0, N + 2] if last else [0, 1]
        if last or ds.ddstore.reads_collective:
            with pytest.raises(IndexError, match=rf"row {N + 2} \(position 1\) is outside \[0, {N}\)"):
                ds.__getitems__(rows)
        else:
            assert [float(d.y) for d in ds.__getitems__(rows)] == [0.0, 1.0]
        assert [float(d.y) for d in ds.__getitems__([-1, 2])] == [N - 1.0, 2.0]  # still usable
    finally:
        ds.free()
