"""pyddstore-throughput: how fast a Parquet dataset trains from the distributed store.

Run under MPI, one process per rank::

    mpiexec -n 4 pyddstore-throughput /data/train.parquet -m 50 -n 500 -b 256
    mpiexec -n 2 pyddstore-throughput --synthetic 200000 --vs petastorm

Each rank loads its share of the dataset (``ParquetSource`` -> ``DistDataset``; a
tqdm bar on rank 0), then reads shuffled batches through ``ThreadDataLoader``
(``DistributedSampler``, every rank the same number of batches): ``-m`` warm-up
batches, then ``-n`` measured ones. Rank 0 prints, per rank and in total:
samples/s and MB/s (sample bytes as stored), time to first batch (start to the
first batch in hand, loading included), load time, peak RSS and CPU time/use.

``--synthetic ROWS`` first writes a Parquet dataset (``x``: ``--features`` float32
values as a list column, ``label``: int64) into a temporary directory (rank 0; the
path must be visible to every rank) and removes it at the end.

``--dtypes COLUMN=DTYPE ...`` casts columns at load, as ParquetSource's ``dtypes=``
(e.g. ``--dtypes cnd_i16=float32`` where the store does not hold a column's dtype).

``--vs petastorm`` then runs Petastorm 0.13.1 on the same path and the same number
of processes (one per rank, shard ``rank`` of ``size``), in Petastorm's own virtual
environment, found as :mod:`pyddstore.torch.petastorm.env` says (``--petastorm-python``,
then :envvar:`PYDDSTORE_PETASTORM_VENV`, then ``~/.cache/pyddstore/petastorm-venv``,
created there on first use), with the same columns, batch size, warm-up and measured
batches, and prints the ratios pyddstore / Petastorm. On plain Parquet:
``make_batch_reader`` + ``BatchedDataLoader`` (shuffling queue of 8 batches) and
``make_batch_reader`` + ``InMemBatchedDataLoader`` (shuffled). Petastorm reads list
columns only (it ignores fixed_size_list columns), which is why the synthetic data uses
a list column; binary and string columns it cannot make tensors of, and the tool refuses
them by name (leave them out with ``--columns``). On a dataset written by Petastorm (a
Unischema: images, ndarrays): ``make_reader``, which decodes the codecs as pyddstore's
source does, + ``petastorm.pytorch.DataLoader`` (shuffling queue of 8 batches), so both
sides time the same decoded samples.

Errors (a bad argument, a missing path, a dtype the store does not hold, Petastorm
failing) end the run on every rank with a one-line message from rank 0 and exit status 1
(``--traceback`` shows the traceback instead).

This file imports only the standard library at module level: Petastorm's
environment runs it as a script (``--petastorm-worker``) without pyddstore.
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

__all__ = ["main", "cli", "write_synthetic", "ThroughputError"]

_MB = 1e6


class ThroughputError(RuntimeError):
    """A run that cannot go on, raised by main() on every rank alike.

    ``messages``: the distinct error lines and the ranks that had each, as
    ``[(message, [ranks])]``; ``str()`` is one line per distinct message."""

    def __init__(self, messages):
        self.messages = messages
        super().__init__("; ".join(f"rank {','.join(map(str, r))}: {m}" if r else m for m, r in messages))


def _one_line(e):
    text = " ".join(str(e).split())
    return text if isinstance(e, (ThroughputError, SystemExit)) else f"{type(e).__name__}: {text}"


def _agree(comm, err):
    """Collective: raise ThroughputError on every rank when any rank has an error (err: None,
    a message or an exception), so that no rank goes on into a collective the others left."""
    # Imported here, not at module level: Petastorm's environment runs this file without pyddstore.
    from pyddstore.util import agree

    def raise_failed(failures):
        # One line per distinct message; the ranks are left out of one that every rank had.
        seen = {}
        for r, m in failures:
            seen.setdefault(m, []).append(r)
        size = comm.Get_size()
        raise ThroughputError([(m, rs if len(rs) < size else []) for m, rs in seen.items()])

    agree(comm, err, None if err is None else _one_line(err) if isinstance(err, BaseException) else err,
          raise_failed, raise_own=False, failed=bool)


class _Meter:
    """Counts the batches a run takes and marks where its measured interval starts.

    Both the DistDataset run and the Petastorm run measure alike: ``take(batch)``
    after each batch, then ``interval(...)`` for where the measured interval starts.
    """

    def __init__(self, warmup, want):
        self.warmup, self.want = warmup, want
        self.got = 0
        self._start = None  # (perf_counter(), CPU seconds) after the warm-up's last batch

    def take(self, batch):
        """Count one batch and touch its tensors as a training step would (so lazily
        produced batches count); True once `want` batches are taken."""
        import torch

        self.got += 1
        for v in batch.values():
            if isinstance(v, torch.Tensor):
                v.sum()
        if self.got == self.warmup:
            self._start = time.perf_counter(), _cpu_seconds()
        return self.got >= self.want

    def interval(self, first_t, first_cpu):
        """(perf_counter(), CPU seconds) where the measured interval starts: after the
        warm-up, or at the first batch (`first_t`, `first_cpu`) when there was none."""
        return self._start if self._start is not None else (first_t, first_cpu)


def _launcher_rank():
    # The rank the launcher gave this process, known before MPI starts: argument errors are
    # printed once (rank 0) although every rank parses the same arguments.
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        if _launcher_rank() == 0:
            self.print_usage(sys.stderr)
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    def print_help(self, file=None):
        if _launcher_rank() == 0:
            super().print_help(file)


def _cpu_seconds():
    t = os.times()
    return t.user + t.system


def _peak_rss_mb():
    # VmHWM is the peak RSS of this process image. getrusage's ru_maxrss is not used: Linux
    # carries it over fork and exec, so a Petastorm child would report its MPI parent's peak.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / _MB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / _MB  # KiB on Linux


def _parse(argv):
    p = _Parser(
        prog="pyddstore-throughput",
        description="Samples/s and MB/s of a Parquet dataset loaded into the distributed store (run under "
                    "mpiexec), optionally against Petastorm on the same data.")
    p.add_argument("path", nargs="?", help="Parquet file or directory (local path or URL); omit with --synthetic")
    p.add_argument("--synthetic", type=int, metavar="ROWS", help="write a synthetic dataset of ROWS rows and use it")
    p.add_argument("--features", type=int, default=128, help="float32 values per synthetic row (default 128)")
    p.add_argument("--row-group-rows", type=int, default=10000, help="synthetic row-group size (default 10000)")
    p.add_argument("--synthetic-dir", help="where to write the synthetic dataset (default: a temporary directory "
                                           "under TMPDIR; must be visible to every rank)")
    p.add_argument("-m", "--warmup", type=int, default=20, help="warm-up batches per rank (default 20)")
    p.add_argument("-n", "--measure", type=int, default=200, help="measured batches per rank (default 200)")
    p.add_argument("-b", "--batch-size", type=int, default=256, help="samples per batch (default 256)")
    p.add_argument("-w", "--workers", type=int, default=2, help="loader threads per rank (default 2)")
    p.add_argument("--columns", nargs="+", help="columns to load (names or regexes; default all)")
    p.add_argument("--dtypes", nargs="+", metavar="COLUMN=DTYPE", default=[],
                   help="cast columns at load, as ParquetSource's dtypes= (e.g. --dtypes img=float32 "
                        "label=int64)")
    p.add_argument("--chunk-size", type=int, help="rows per load step (default: about 1/20 of a share)")
    p.add_argument("--no-shuffle", action="store_true", help="read in order instead of shuffled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vs", choices=["petastorm"], help="also run Petastorm on the same data and print ratios")
    p.add_argument("--petastorm-python",
                   help="python of Petastorm's environment (default: $PYDDSTORE_PETASTORM_VENV, else "
                        "~/.cache/pyddstore/petastorm-venv, created there on first use)")
    p.add_argument("--json", metavar="FILE", help="also write all figures as JSON (rank 0)")
    p.add_argument("--traceback", action="store_true", help="on an error, show the traceback (every rank)")
    p.add_argument("--petastorm-worker", choices=["batched", "inmem", "rows"], help=argparse.SUPPRESS)
    p.add_argument("--shard", type=int, nargs=2, metavar=("INDEX", "COUNT"), help=argparse.SUPPRESS)
    p.add_argument("--rows-capacity", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    dtypes = {}
    for item in args.dtypes:
        col, eq, name = item.partition("=")
        if not eq or not col or not name:
            p.error(f"--dtypes {item!r}: give COLUMN=DTYPE, e.g. cnd_i16=float32")
        try:
            import numpy as np
            if name != "bfloat16":  # a torch dtype numpy lacks; the source says if it takes it
                np.dtype(name)
        except TypeError:
            p.error(f"--dtypes {item!r}: {name!r} is not a numpy dtype (e.g. float32, int64, uint8)")
        dtypes[col] = name
    args.dtypes = dtypes
    if args.petastorm_worker:
        return args
    if (args.path is None) == (args.synthetic is None):
        p.error("give a Parquet path or --synthetic ROWS (one of them)")
    for name in ("warmup", "batch_size", "workers", "features", "row_group_rows"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'warmup' else 'positive'}")
    if args.measure < 1:
        p.error("--measure must be positive")
    if args.synthetic is not None and args.synthetic < 1:
        p.error("--synthetic needs a positive number of rows")
    if args.chunk_size is not None and args.chunk_size < 1:
        p.error("--chunk-size must be positive")
    return args


def write_synthetic(path, rows, *, features=128, row_group_rows=10000, files=None, seed=0):
    """Write a synthetic Parquet dataset: ``x`` (list<float32> of ``features`` values) and
    ``label`` (int64 in [0, 10)), split over ``files`` part files. Returns path."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    files = files or max(1, min(8, math.ceil(rows / max(row_group_rows, 1) / 4)))
    rng = np.random.default_rng(seed)
    for k in range(files):
        a, b = rows * k // files, rows * (k + 1) // files
        n = b - a
        x = rng.standard_normal((n, features), dtype=np.float32)
        offsets = pa.array(np.arange(0, (n + 1) * features, features, dtype=np.int32))
        table = pa.table({"x": pa.ListArray.from_arrays(offsets, pa.array(x.ravel())),
                          "label": pa.array(rng.integers(0, 10, n, dtype=np.int64))})
        pq.write_table(table, os.path.join(path, f"part-{k:05d}.parquet"), row_group_size=row_group_rows)
    return path


class _Progress:
    """A source wrapper that advances a tqdm bar as read_range() loads rows (rank 0)."""

    def __init__(self, source, bar):
        self._s, self._bar = source, bar

    def __len__(self):
        return len(self._s)

    def __getitem__(self, i):
        return self._s[i]

    def read_range(self, start, stop):
        out = self._s.read_range(start, stop)
        if self._bar is not None:
            self._bar.update(stop - start)
        return out


def _sample_bytes(source):
    import numpy as np
    return int(sum(np.dtype(dt).itemsize * int(np.prod(shape, dtype=np.int64))
                   for dt, shape in source.field_info().values()))


def _run_pyddstore(args, path, comm, vs_petastorm=False):
    import torch
    from torch.utils.data.distributed import DistributedSampler

    from ..dataset import DistDataset
    from ..loader import ThreadDataLoader
    from ..parquet import ParquetSource

    rank, size = comm.Get_rank(), comm.Get_size()
    comm.Barrier()
    t0 = time.perf_counter()
    cpu0 = _cpu_seconds()
    src = err = None
    try:
        src = ParquetSource(path, columns=args.columns, dtypes=args.dtypes or None)
        if vs_petastorm:
            _check_petastorm_columns(src)
    except Exception as e:  # noqa: BLE001 - agreed below, then raised on every rank
        err = e
    _agree(comm, err)
    n = len(src)
    per_rank = n // size
    if per_rank // args.batch_size < 1:
        raise ThroughputError([(f"{n} rows over {size} ranks is less than one batch of {args.batch_size} "
                                "per rank; use a smaller -b", [])])
    share = n * (rank + 1) // size - n * rank // size
    chunk = args.chunk_size or max(256, math.ceil(max(share, 1) / 20))
    bar = None
    if rank == 0:
        try:
            from tqdm import tqdm
            bar = tqdm(total=share, desc="loading (rank 0)", unit="rows", file=sys.stderr,
                       mininterval=0.5, leave=False)
        except ImportError:  # the bar is a nicety; the figures do not need it
            bar = None
    ds = None
    try:
        # DistDataset agrees on its errors itself (every rank raises); agreeing once more
        # here turns them into one message.
        ds = DistDataset(_Progress(src, bar), "throughput", comm=comm, chunk_size=chunk)
    except Exception as e:  # noqa: BLE001
        err = e
    finally:
        if bar is not None:
            bar.close()
    _agree(comm, err)
    load_s = time.perf_counter() - t0
    sample_bytes = _sample_bytes(src)
    sampler = DistributedSampler(ds, num_replicas=size, rank=rank, shuffle=not args.no_shuffle,
                                 seed=args.seed, drop_last=True)
    loader = ThreadDataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                              drop_last=True)
    meter = _Meter(args.warmup, args.warmup + args.measure)
    first_batch_s = None
    epoch = 0
    try:
        while meter.got < meter.want:
            sampler.set_epoch(epoch)
            for batch in loader:
                if first_batch_s is None:
                    first_batch_s = time.perf_counter() - t0
                if meter.take(batch):
                    break
            epoch += 1
        t_meas, cpu_meas = meter.interval(t0 + first_batch_s, cpu0)
        wall = time.perf_counter() - t_meas
        cpu = _cpu_seconds() - cpu_meas
    finally:
        close = getattr(loader, "close", None)
        if close is not None:
            close()
        ds.free()
    samples = args.measure * args.batch_size
    return {
        "rank": rank, "rows": n, "sample_bytes": sample_bytes, "petastorm_dataset": src.petastorm_fields is not None,
        "samples_s": samples / wall, "mb_s": samples * sample_bytes / wall / _MB,
        "first_batch_s": first_batch_s, "load_s": load_s,
        "peak_rss_mb": _peak_rss_mb(), "cpu_s": _cpu_seconds() - cpu0,
        "cpu_pct": 100.0 * cpu / wall if wall > 0 else 0.0,
    }


def _check_petastorm_columns(src):
    """Refuse, naming them, the columns Petastorm's side of the comparison cannot give as
    tensors: binary/string columns of plain Parquet (make_batch_reader does not decode them;
    in a dataset written by Petastorm, make_reader decodes its codecs and all columns work)."""
    if src.petastorm_fields is not None:
        return
    import pyarrow as pa

    from ..parquet import column_type

    bad = []
    for c in src.columns:
        t = column_type(src, c)
        while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            t = t.value_type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
                or pa.types.is_string(t) or pa.types.is_large_string(t):
            bad.append(f"{c} ({column_type(src, c)})")
    if bad:
        raise ValueError(f"--vs petastorm: Petastorm's make_batch_reader cannot make tensors of the binary/string "
                         f"columns {', '.join(bad)} of this plain Parquet dataset (only make_reader decodes "
                         "encoded images and arrays, for datasets written by Petastorm); leave them out with "
                         "--columns")


def _petastorm_worker(args):
    """Runs in Petastorm's environment (no MPI, no pyddstore): one shard, one loader kind."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from petastorm import make_batch_reader, make_reader
    from petastorm.pytorch import BatchedDataLoader, DataLoader, InMemBatchedDataLoader

    url = args.path if "://" in args.path else "file://" + os.path.abspath(args.path)
    shard, count = args.shard
    t0 = time.perf_counter()
    cpu0 = _cpu_seconds()
    common = dict(schema_fields=args.columns, cur_shard=shard, shard_count=count, seed=args.seed,
                  workers_count=args.workers, reader_pool_type="thread", shuffle_row_groups=not args.no_shuffle)
    want = args.warmup + args.measure
    queue = 0 if args.no_shuffle else 8 * args.batch_size
    if args.petastorm_worker == "rows":  # a dataset written by Petastorm: make_reader decodes its codecs
        reader = make_reader(url, num_epochs=None, **common)
        loader = DataLoader(reader, batch_size=args.batch_size, shuffling_queue_capacity=queue)
    elif args.petastorm_worker == "batched":
        reader = make_batch_reader(url, num_epochs=None, **common)
        loader = BatchedDataLoader(reader, batch_size=args.batch_size, shuffling_queue_capacity=queue)
    else:
        reader = make_batch_reader(url, num_epochs=1, **common)
        loader = InMemBatchedDataLoader(reader, batch_size=args.batch_size, num_epochs=10**6, seed=args.seed,
                                        rows_capacity=args.rows_capacity, shuffle=not args.no_shuffle)
    # --dtypes: the same casts as pyddstore's source, so both sides time the same samples.
    casts = {k: getattr(torch, v) for k, v in args.dtypes.items()}
    meter = _Meter(args.warmup, want)
    first = None
    sample_bytes = 0
    try:
        for batch in loader:
            for k, dt in casts.items():
                if k in batch and isinstance(batch[k], torch.Tensor) and batch[k].dtype != dt:
                    batch[k] = batch[k].to(dt)
            nrows = len(next(iter(batch.values())))
            if nrows < args.batch_size:  # Petastorm's last batch of an epoch may be short: skip it
                continue
            if first is None:
                first = time.perf_counter() - t0
                sample_bytes = sum(v[0].numel() * v.element_size() for v in batch.values()
                                   if isinstance(v, torch.Tensor))
            if meter.take(batch):
                break
    finally:
        if args.petastorm_worker in ("batched", "rows"):
            reader.stop()
            reader.join()
    if meter.got < meter.want:
        raise SystemExit(f"petastorm gave only {meter.got} full batches")
    t_meas, cpu_meas = meter.interval(t0 + first, cpu0)
    wall = time.perf_counter() - t_meas
    samples = args.measure * args.batch_size
    print(json.dumps({
        "samples_s": samples / wall, "mb_s": samples * sample_bytes / wall / _MB, "first_batch_s": first,
        "sample_bytes": sample_bytes,
        "peak_rss_mb": _peak_rss_mb(), "cpu_s": _cpu_seconds() - cpu0,
        "cpu_pct": 100.0 * (_cpu_seconds() - cpu_meas) / wall,
    }))


def _run_petastorm(args, path, comm, kind, python, rows):
    rank, size = comm.Get_rank(), comm.Get_size()
    # -I: isolated mode, so that no folder of pyddstore's (pyddstore/torch/petastorm/) shadows
    # the real petastorm package, and this environment's PYTHON* variables stay out.
    cmd = [python, "-I", os.path.abspath(__file__), path, "--petastorm-worker", kind, "--shard", str(rank), str(size),
           "-m", str(args.warmup), "-n", str(args.measure), "-b", str(args.batch_size),
           "-w", str(args.workers), "--seed", str(args.seed), "--rows-capacity", str(rows)]
    if args.columns:
        cmd += ["--columns"] + list(args.columns)
    if args.no_shuffle:
        cmd.append("--no-shuffle")
    if args.dtypes:
        cmd += ["--dtypes"] + [f"{k}={v}" for k, v in args.dtypes.items()]
    # Petastorm runs without MPI: keep Open MPI's per-process variables away from it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    comm.Barrier()  # all shards start together, as DDP processes would
    err = out = None
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if res.returncode != 0:
            lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
            why = res.stderr.strip()[-4000:] if args.traceback else (lines[-1].strip() if lines else "")
            err = f"petastorm ({kind} loader) failed, exit status {res.returncode}: {why}"
        else:
            out = json.loads(res.stdout.strip().splitlines()[-1])
            out["rank"] = rank
    except (OSError, ValueError, IndexError) as e:
        err = f"petastorm ({kind} loader) did not run: {_one_line(e)}"
    _agree(comm, err)
    return out


def _table(title, rows, out):
    print(title, file=out)
    print(f"  {'rank':>4} {'samples/s':>12} {'MB/s':>10} {'1st batch s':>12} {'load s':>8} "
          f"{'peak RSS MB':>12} {'CPU s':>8} {'CPU %':>7}", file=out)
    for r in rows:
        load = f"{r['load_s']:8.2f}" if "load_s" in r else f"{'-':>8}"
        print(f"  {r['rank']:>4} {r['samples_s']:12.1f} {r['mb_s']:10.1f} {r['first_batch_s']:12.3f} {load} "
              f"{r['peak_rss_mb']:12.1f} {r['cpu_s']:8.2f} {r['cpu_pct']:7.1f}", file=out)
    tot = _total(rows)
    load = f"{tot['load_s']:8.2f}" if "load_s" in tot else f"{'-':>8}"
    print(f"  {'all':>4} {tot['samples_s']:12.1f} {tot['mb_s']:10.1f} {tot['first_batch_s']:12.3f} "
          f"{load} {tot['peak_rss_mb']:12.1f} "
          f"{tot['cpu_s']:8.2f} {tot['cpu_pct']:7.1f}", file=out)
    print("  (all: samples/s, MB/s, peak RSS, CPU summed over ranks; first batch and load: slowest rank)",
          file=out)
    return tot


def _total(rows):
    tot = {k: sum(r[k] for r in rows) for k in ("samples_s", "mb_s", "peak_rss_mb", "cpu_s", "cpu_pct")}
    tot["first_batch_s"] = max(r["first_batch_s"] for r in rows)
    if all("load_s" in r for r in rows):
        tot["load_s"] = max(r["load_s"] for r in rows)
    return tot


def _petastorm_kinds(src_is_petastorm):
    # (worker kind, table title, name in the ratio line)
    if src_is_petastorm:
        return (("rows", "petastorm make_reader + DataLoader", "make_reader + DataLoader"),)
    return (("batched", "petastorm make_batch_reader + BatchedDataLoader", "BatchedDataLoader"),
            ("inmem", "petastorm make_batch_reader + InMemBatchedDataLoader", "InMemBatchedDataLoader"))


def main(argv=None, comm=None, out=None):
    """Entry point of ``pyddstore-throughput`` (see the module doc). ``comm``: the MPI
    communicator (default COMM_WORLD); ``out``: where rank 0 prints (default stdout).
    Returns the figures on rank 0 (a dict), None elsewhere. Collective; a run that cannot go
    on raises ThroughputError on every rank (cli() prints it as one line)."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.petastorm_worker:
        _petastorm_worker(args)
        return None
    import torch  # noqa: F401  (before MPI starts, as pyddstore.torch requires)
    from mpi4py import MPI

    comm = comm or MPI.COMM_WORLD
    out = out or sys.stdout
    rank, size = comm.Get_rank(), comm.Get_size()
    tmpdir = None
    path = args.path
    try:
        err = None
        if args.synthetic is not None and rank == 0:
            try:
                tmpdir = args.synthetic_dir or tempfile.mkdtemp(prefix="pyddstore-throughput-")
                path = os.path.join(tmpdir, "synthetic.parquet")
                write_synthetic(path, args.synthetic, features=args.features,
                                row_group_rows=args.row_group_rows, seed=args.seed)
            except Exception as e:  # noqa: BLE001 - agreed below
                err = f"cannot write the synthetic dataset: {_one_line(e)}"
        path = comm.bcast(path, root=0)
        _agree(comm, err)
        mine = _run_pyddstore(args, path, comm, vs_petastorm=args.vs == "petastorm")
        python = None
        if args.vs == "petastorm" and rank == 0:
            # After pyddstore's run: columns Petastorm cannot read are refused before this,
            # and creating the environment (first use) takes minutes.
            from ..petastorm.env import PetastormEnvError, find_python
            try:
                python = find_python(args.petastorm_python)
            except PetastormEnvError as e:
                err = _one_line(e)
        python = comm.bcast(python, root=0)
        _agree(comm, err)
        rows = comm.gather(mine, root=0)
        report = None
        if rank == 0:
            print(f"pyddstore-throughput: {path} rows={mine['rows']} bytes/sample={mine['sample_bytes']} "
                  f"ranks={size} batch={args.batch_size} workers={args.workers} warmup={args.warmup} "
                  f"measure={args.measure} shuffle={not args.no_shuffle}", file=out)
            report = {"pyddstore": {"ranks": rows, "total": _table("pyddstore (DistDataset + ThreadDataLoader)",
                                                                  rows, out)}}
        if args.vs == "petastorm":
            n_rows = mine["rows"]
            kinds = _petastorm_kinds(mine["petastorm_dataset"])
            for kind, title, _ in kinds:
                res = comm.gather(_run_petastorm(args, path, comm, kind, python, n_rows), root=0)
                if rank == 0:
                    tot = _table(f"{title} (bytes/sample={res[0]['sample_bytes']})", res, out)
                    report[kind] = {"ranks": res, "total": tot}
            if rank == 0:
                ours = report["pyddstore"]["total"]
                for kind, _, title in kinds:
                    theirs = report[kind]["total"]
                    ratios = {
                        "samples_s": ours["samples_s"] / theirs["samples_s"],
                        "first_batch_s": ours["first_batch_s"] / theirs["first_batch_s"],
                        "peak_rss_mb": ours["peak_rss_mb"] / theirs["peak_rss_mb"],
                        "cpu_s": ours["cpu_s"] / theirs["cpu_s"] if theirs["cpu_s"] else float("nan"),
                    }
                    report[kind]["ratio"] = ratios
                    print(f"ratio pyddstore / petastorm {title}: samples/s x{ratios['samples_s']:.2f}, "
                          f"time to first batch x{ratios['first_batch_s']:.2f}, peak RSS x{ratios['peak_rss_mb']:.2f}, "
                          f"CPU s x{ratios['cpu_s']:.2f} (totals over ranks; x>1: pyddstore's figure is higher)", file=out)
        if rank == 0:
            out.flush()
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(report, f, indent=1)
        return report
    finally:
        if tmpdir is not None and args.synthetic_dir is None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def cli():
    """Console-script entry point (``pyddstore-throughput``): runs main(); returns the exit
    status: 0, 1 after an error (one line on stderr from rank 0, the same status on every rank;
    an error that only one rank saw outside an agreement point aborts the MPI job, so that no
    rank is left waiting), 2 for bad arguments."""
    if "--petastorm-worker" in sys.argv[1:]:
        # In Petastorm's environment, without MPI: a failure prints its traceback, whose last
        # line the MPI parent reports.
        main()
        return 0
    traceback_wanted = "--traceback" in sys.argv[1:]
    try:
        main()
    except ThroughputError as e:
        if traceback_wanted:
            raise
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"pyddstore-throughput: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one rank only: the others may wait in a collective
        if traceback_wanted:
            import traceback
            traceback.print_exc()
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        print(f"pyddstore-throughput: error on rank {world.Get_rank()}: {_one_line(e)}"
              + ("" if traceback_wanted else " (--traceback shows where)"), file=sys.stderr)
        sys.stderr.flush()
        if world.Get_size() > 1:
            world.Abort(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
