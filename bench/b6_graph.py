"""B6: graphs/s of one epoch of torch_geometric molecules through the store vs PyG's own loader.

Run under mpiexec at 1 and 2 ranks (bench/run.sh does both). Random molecules, 10-60 atoms
(mean 35), about 5 bonds per atom: x float32 (n, 11), pos float32 (n, 3), z int64 (n,),
edge_index int64 (2, E), edge_attr float32 (E, 4), y float32 (1,). Every rank iterates one
epoch of its share of a global shuffle (DistributedSampler, batch 64) through:

* store: pyddstore.torch.geometric.DistDataset (this rank holds 1/ranks of the graphs) +
  geometric.DataLoader (Batch built from the store's flat columns, num_workers threads);
* pyg: torch_geometric.loader.DataLoader over the whole in-memory list of Data (every rank
  holds all graphs), num_workers=0, the same sampler;
* per_sample: the original DDStore API as HydraGNN uses it: one packed record per graph in a
  PyDDStore variable, per-graph offsets and shapes on every rank, one get() per graph between
  epoch_begin()/epoch_end(), a Data rebuilt per graph, Batch.from_data_list (fewer batches:
  it is slow; its rate is graphs/s all the same).

Batches are checked against Batch.from_data_list before timing. The variants run interleaved,
repeat by repeat, with a barrier before each epoch; medians of the repeats.
"""

import os

os.environ["PYDDSTORE_BENCH_TORCH"] = "1"  # _common imports torch before mpi4py

import _common as C  # noqa: E402
from _common import COMM, RANK, SIZE, np  # noqa: E402

import torch  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402
from torch_geometric.data import Batch, Data  # noqa: E402
from torch_geometric.loader import DataLoader as PygLoader  # noqa: E402

import pyddstore  # noqa: E402
from pyddstore.torch.geometric import DataLoader, DistDataset  # noqa: E402

BATCH = 64
KEYS = ("x", "pos", "z", "edge_index", "edge_attr", "y")


def extra(p):
    p.add_argument("--graphs", type=int, default=20000)
    p.add_argument("--workers", type=int, default=1, help="store loader num_workers (threads)")


def molecule(i):
    g = np.random.default_rng(i)
    n = int(g.integers(10, 61))
    e = 5 * n + int(g.integers(-n, n + 1))
    return Data(x=torch.from_numpy(g.standard_normal((n, 11), dtype=np.float32)),
                pos=torch.from_numpy(g.standard_normal((n, 3), dtype=np.float32)),
                z=torch.from_numpy(g.integers(1, 10, n)),
                edge_index=torch.from_numpy(g.integers(0, n, (2, e))),
                edge_attr=torch.from_numpy(g.standard_normal((e, 4), dtype=np.float32)),
                y=torch.tensor([float(n)]))


class PerSample:
    """The original API's per-sample path: packed records, one get() per graph."""

    def __init__(self, graphs, comm):
        n = len(graphs)
        self.store = pyddstore.PyDDStore(comm)
        g, gs = self.store.group_rank, self.store.group_size
        a, b = n * g // gs, n * (g + 1) // gs
        self.dtypes = {k: graphs[0][k].numpy().dtype for k in KEYS}
        recs = [np.concatenate([graphs[i][k].numpy().reshape(-1).view(np.uint8) for k in KEYS])
                for i in range(a, b)]
        # Per-graph shapes and byte offsets, copied to every rank (as HydraGNN does).
        shapes = [[tuple(graphs[i][k].shape) for k in KEYS] for i in range(a, b)]
        self.shapes = [s for part in comm.allgather(shapes) for s in part]
        sizes = np.array([s for part in comm.allgather([r.size for r in recs]) for s in part])
        self.offsets = np.concatenate(([0], np.cumsum(sizes)))
        self.store.add("b6_records", np.concatenate(recs) if recs else np.zeros(0, np.uint8))

    def get(self, i):
        buf = np.empty(int(self.offsets[i + 1] - self.offsets[i]), np.uint8)
        self.store.get("b6_records", buf, int(self.offsets[i]))
        d, pos = Data(), 0
        for k, shape in zip(KEYS, self.shapes[i]):
            dt = self.dtypes[k]
            nb = int(np.prod(shape)) * dt.itemsize
            d[k] = torch.from_numpy(buf[pos:pos + nb].view(dt).reshape(shape))
            pos += nb
        return d

    def epoch(self, indices):
        n = 0
        self.store.epoch_begin()
        for s in range(0, len(indices), BATCH):
            b = Batch.from_data_list([self.get(i) for i in indices[s:s + BATCH]])
            n += b.num_graphs
        self.store.epoch_end()
        return n


def same(b, w):
    return all(torch.equal(b[k], w[k]) and b[k].dtype == w[k].dtype for k in w.keys()) and \
        sorted(b.keys()) == sorted(w.keys())


def main():
    args, machine = C.start(__doc__, extra, torch_threads=1)
    n = args.graphs // 4 if args.quick else args.graphs
    repeats = 2 if args.quick else 5
    graphs = [molecule(i) for i in range(n)]
    C.log(f"B6: {n} molecules, mean {np.mean([d.num_nodes for d in graphs]):.1f} atoms, "
          f"{np.mean([d.num_edges for d in graphs]):.1f} bonds; {SIZE} rank(s)")
    t0 = C.now()
    ds = DistDataset(graphs, "b6", comm=COMM)
    build_s = C.now() - t0
    sampler = DistributedSampler(ds, num_replicas=SIZE, rank=RANK, shuffle=True, seed=0)
    n_local = len(sampler)
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=args.workers)
    pyg = PygLoader(graphs, batch_size=BATCH, sampler=sampler, num_workers=0)
    per = PerSample(graphs, COMM)
    # Check: the store's batches equal PyG's, and the per-sample path's graphs the source's.
    sampler.set_epoch(99)
    ok = all(same(a, b) for a, b in zip(loader, pyg))
    idx = list(sampler)[:BATCH]
    ok &= same(Batch.from_data_list([per.get(i) for i in idx]), Batch.from_data_list([graphs[i] for i in idx]))
    C.require_everywhere(ok, "B6: the store's batches differ from torch_geometric's")
    per_n = max(BATCH, n_local // 4)   # the per-sample path is slow: a quarter epoch

    def epoch_of(it):
        return sum(b.num_graphs for b in it)

    def per_epoch(e):
        sampler.set_epoch(e)
        return per.epoch(list(sampler)[:per_n])

    fns = {"pyg": lambda e: (sampler.set_epoch(e), epoch_of(pyg))[1],
           "store": lambda e: (sampler.set_epoch(e), epoch_of(loader))[1],
           "per_sample": per_epoch}
    counts = {"pyg": n_local, "store": n_local, "per_sample": per_n}
    load = [os.getloadavg()[0]]
    times, cpus = C.timed_epochs(fns, repeats, counts, after_repeat=lambda: load.append(os.getloadavg()[0]))
    rate = {k: counts[k] / float(np.median(times[k])) for k in fns}
    rate_cpu = {k: counts[k] / float(np.median(cpus[k])) for k in fns}
    results = []
    for k in fns:
        stat = C.gather_stat(COMM, rate[k])
        results.append({
            "bench": "B6", "variant": k, "ranks": SIZE, "graphs": n, "graphs_per_rank_epoch": counts[k],
            "batch": BATCH, "graphs_per_s": stat["median"], "graphs_per_s_per_rank": stat["per_rank"],
            "ratio_to_pyg": C.gather_stat(COMM, rate[k] / rate["pyg"])["median"],
            "ratio_to_per_sample": C.gather_stat(COMM, rate[k] / rate["per_sample"])["median"],
            "graphs_per_cpu_s": C.gather_stat(COMM, rate_cpu[k])["median"],
            "ratio_cpu_to_pyg": C.gather_stat(COMM, rate_cpu[k] / rate_cpu["pyg"])["median"],
            "epoch_s_all": times[k], "epoch_cpu_s_all": cpus[k], "repeats": repeats,
            "store_build_s": build_s, "loadavg_1min": load, "loader_workers": args.workers})
        C.log(f"B6 {SIZE} rank(s) {k:10s} {stat['median']:9.0f} graphs/s/rank "
              f"({results[-1]['ratio_to_pyg']:.2f}x pyg, cpu {results[-1]['ratio_cpu_to_pyg']:.2f}x; "
              f"{results[-1]['ratio_to_per_sample']:.1f}x per-sample)")
    notes = [f"B6: store loader num_workers={args.workers} (threads); torch_geometric DataLoader "
             "num_workers=0 over the in-memory list; torch.set_num_threads(1); load average "
             f"{min(load):.1f}-{max(load):.1f} during the epochs (the machine is shared)"]
    loader.close()
    per.store.free()
    ds.free()
    C.write_result(args.out, "B6", machine, results, notes)


if __name__ == "__main__":
    main()
