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

