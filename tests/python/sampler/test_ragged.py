"""Variable-size fields: a synthetic graph dataset round-trips bit-exact, with bounded store calls.

Runs on every rank of the job (1, 2, 4 ranks): the store is over
MPI.COMM_WORLD, every rank makes the same collective calls in the same order
and checks every sample.
"""

import numpy as np
import pytest
import torch

from mpi4py import MPI

from pyddstore.torch.ragged import RaggedCollate, RaggedFields

N_GRAPHS = 37
F = 3


def graph(i):
    """Sample i: random node and edge counts, zero included; fixed fields besides."""
    rng = np.random.default_rng(1000 + i)
    n = int(rng.integers(0, 6)) if i % 7 else 0
    e = int(rng.integers(0, 9)) if i % 5 else 0
    return {
        "x": torch.from_numpy(rng.standard_normal((n, F)).astype(np.float32)),
        "edge_index": torch.from_numpy(rng.integers(0, max(n, 1), (2, e)).astype(np.int64)),
        "tokens": rng.integers(0, 255, int(rng.integers(0, 4))).astype(np.uint8),
        "y": torch.tensor(float(i)),
        "pos": rng.standard_normal(3),
    }


AXES = {"x": 0, "edge_index": 1, "tokens": 0}


class Graphs(torch.utils.data.Dataset):
    def __len__(self):
        return N_GRAPHS

    def __getitem__(self, i):
        return graph(i)


def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            and a.tobytes() == b.tobytes())


def test_ragged_fields_on_a_store_round_trip_and_count_calls():
    from pyddstore import PyDDStore

    comm = MPI.COMM_WORLD
    store = PyDDStore(comm)
    try:
        g, gsize = store.group_rank, store.group_size
        start, stop = N_GRAPHS * g // gsize, N_GRAPHS * (g + 1) // gsize
        fields = RaggedFields(AXES)
        for i in range(start, stop):
            rest = fields.take(graph(i), i)
            assert sorted(rest) == ["pos", "y"]
        fields.store(store, comm, "rg", start, stop)
        rows = np.array([5, 0, 36, 14, 7, 7, 21, 35, 1], dtype=np.int64)
        store.reset_stats()
        got = fields.read(rows)
        assert store.stats()["read_calls"] == 2 * len(AXES)  # whatever the batch size
        for key, (values, lengths) in got.items():
            parts = fields.per_sample(key, values, lengths)
            for r, value in zip(rows, parts):
                assert same(graph(int(r))[key], value), (key, r)
            cat, lens = fields.concatenated(key, values, lengths)
            want = [graph(int(r))[key] for r in rows]
            if isinstance(want[0], np.ndarray):
                assert same(np.concatenate(want, axis=AXES[key]), cat)
            else:
                assert same(torch.cat(want, dim=AXES[key]), cat)
            assert lens.tolist() == [w.shape[AXES[key]] for w in want]
        # Not collective: one sample, read with get() calls only.
        one = fields.read([36], collective=False)
        assert same(graph(36)["x"], fields.per_sample("x", *one["x"])[0])
    finally:
        store.free()


def test_take_checks():
    f = RaggedFields({"x": 0})
    f.take({"x": np.zeros((2, 3), np.float32), "y": 1}, 0)
    with pytest.raises(ValueError, match="differs"):
        f.take({"x": np.zeros((2, 4), np.float32), "y": 1}, 1)
    with pytest.raises(ValueError, match="differs"):
        f.take({"x": np.zeros((2, 3), np.float64), "y": 1}, 1)
    with pytest.raises(KeyError, match="no ragged field"):
        f.take({"y": 1}, 2)
    with pytest.raises(TypeError, match="dict"):
        f.take((np.zeros((2, 3)),), 3)
    with pytest.raises(ValueError, match="fixed-shape"):
        RaggedFields({"x": 0}).take({"x": np.zeros((2, 3), np.float32)}, 0)
    with pytest.raises(TypeError, match="non-empty dict"):
        RaggedFields([])
    with pytest.raises(TypeError, match="int axis"):
        RaggedFields({"x": 0.5})


def test_collate():
    samples = [graph(i) for i in (3, 4, 5)]
    batch = RaggedCollate(AXES)(samples)
    assert batch["y"].tolist() == [3.0, 4.0, 5.0] and tuple(batch["pos"].shape) == (3, 3)
    assert all(same(a, s["x"]) for a, s in zip(batch["x"], samples))
    cat = RaggedCollate(AXES, concat=True)(samples)
    values, lengths = cat["edge_index"]
    assert values.shape[0] == 2 and lengths.tolist() == [s["edge_index"].shape[1] for s in samples]
    tokens, tlen = cat["tokens"]
    assert isinstance(tokens, np.ndarray) and tlen.tolist() == [len(s["tokens"]) for s in samples]


def test_dist_dataset_graphs_bit_exact_with_bounded_calls():
    from pyddstore.torch import DistDataset

    from pyddstore.torch import ThreadDataLoader
    from pyddstore.torch.sampler import ElasticSampler

    ds = DistDataset(Graphs(), "graphs", ragged=AXES, chunk_size=4)
    try:
        assert ds.ragged_axes == AXES
        for i in range(N_GRAPHS):
            want, got = graph(i), ds[i]
            assert sorted(got) == sorted(want)
            for key in want:
                if key in AXES:
                    assert same(want[key], got[key]), (i, key)
                else:
                    assert same(torch.as_tensor(want[key]), torch.as_tensor(got[key])), (i, key)
        rows = [36, 0, 7, 7, 14, 35]
        ds.ddstore.reset_stats()
        batch = ds.__getitems__(rows)
        # One get_batch per fixed field, two calls per ragged field: not per sample.
        assert ds.ddstore.stats()["read_calls"] == 2 + 2 * len(AXES)
        for r, sample in zip(rows, batch):
            for key in AXES:
                assert same(graph(r)[key], sample[key])
        sampler = ElasticSampler(ds, seed=3)
        loader = ThreadDataLoader(ds, batch_size=5, sampler=sampler, num_workers=2,
                                  collate_fn=RaggedCollate(ds.ragged_axes))
        seen = []
        for b in loader:
            for j, y in enumerate(b["y"].tolist()):
                i = int(y)
                seen.append(i)
                assert same(graph(i)["edge_index"], b["edge_index"][j])
                assert same(graph(i)["tokens"], b["tokens"][j])
        assert sorted(seen) == sorted(list(sampler))
        loader.close()
    finally:
        ds.free()
