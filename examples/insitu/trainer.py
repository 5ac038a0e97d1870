"""In-situ training, the training side: a job of its own (mpiexec -n 2)
joins the store that examples/insitu/simulation.f90 publishes (method 2)
while the simulation runs, and trains a surrogate of one time step on the
newest steps.

The store holds, per simulation rank, a ring of its newest 16 steps; a row
is [t, u_t with one halo cell each side (34 values), u_{t+1} (32 values),
check]. ``DistDatasetReader("insitu")`` opens the ring as a dataset of
rows; every batch is read afresh, so training follows the simulation. The
surrogate is a 3-point convolution (what an explicit scheme is), trained by
data-parallel SGD across the job's ranks (gradients averaged with
MPI_Allreduce). Every row read is checked to be exactly one step's write:
its XOR check word must match; a row torn between two steps would fail it.

    mpiexec -n 2 python examples/insitu/trainer.py --handshake-dir DIR --stop-file FILE
"""
import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from pyddstore.torch import DistDatasetReader  # noqa: E402

T_IMPORT = time.perf_counter() - T_START

NX = 32
R = 0.2  # the simulation's diffusion number: the stencil to learn is [R, 1 - 2R, R]


def row_is_one_step(row):
    """True when `row` (68 float64) is exactly what one dds_update wrote."""
    bits = row.view(np.int64)
    return int(np.bitwise_xor.reduce(bits[:-1])) == int(bits[-1]) and row[0] >= 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--handshake-dir", required=True, help="the simulation's DDSTORE_HANDSHAKE_DIR")
    ap.add_argument("--n-core", type=int, default=2, help="ranks of the simulation (default 2)")
    ap.add_argument("--stop-file", help="created when training is done, to stop the simulation")
    ap.add_argument("--iterations", type=int, default=250)
    ap.add_argument("--batch", type=int, default=8, help="rows per rank and iteration")
    ap.add_argument("--lr", type=float, default=1.0, help="SGD learning rate")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    t_join = time.perf_counter()
    ds = DistDatasetReader("insitu", handshake_dir=args.handshake_dir, n_core=args.n_core)
    t_join = time.perf_counter() - t_join
    n = len(ds)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Conv1d(1, 1, 3, bias=False, dtype=torch.float64)
    # Plain SGD with momentum, by hand: torch.optim's first step imports
    # torch._dynamo, which takes many seconds on a busy machine.
    lr, beta = args.lr, 0.9
    velocity = np.zeros_like(model.weight.detach().numpy())
    rng = np.random.default_rng(1234 + rank)
    rows_read = rows_used = 0
    bad = []
    steps_seen = set()
    losses = []
    t0 = time.perf_counter()
    it = 0
    while it < args.iterations:
        idx = rng.integers(n, size=args.batch)
        batch = ds.read_rows(idx)["row"]  # (batch, 68) float64 tensor, read now
        rows_read += len(idx)
        keep = []
        for j, r in enumerate(batch.numpy()):
            if not r.any():
                continue  # slot not written yet (the simulation has just started)
            if not row_is_one_step(r):
                bad.append((int(idx[j]), r[0]))
                continue
            keep.append(j)
            steps_seen.add(int(r[0]))
        # Every rank takes part in each allreduce, with or without rows.
        x = batch[keep, 1:NX + 3].unsqueeze(1)
        y = batch[keep, NX + 3:2 * NX + 3].unsqueeze(1)
        model.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum") if keep else model.weight.sum() * 0
        loss.backward()
        g = model.weight.grad.numpy().copy()
        count = comm.allreduce(len(keep) * NX)
        comm.Allreduce(MPI.IN_PLACE, g)
        tot = comm.allreduce(float(loss.detach()))
        if count == 0:
            continue  # nothing published yet anywhere: wait for the simulation
        velocity = beta * velocity + g / count
        with torch.no_grad():
            model.weight -= torch.from_numpy(lr * velocity)
        losses.append(tot / count)
        rows_used += len(keep)
        it += 1
    elapsed = time.perf_counter() - t0
    ds.free()

    all_bad = comm.allreduce(len(bad))
    used = comm.allreduce(rows_used)
    read = comm.allreduce(rows_read)
    seen = comm.allgather(steps_seen)
    steps = set().union(*seen)
    kernel = model.weight.detach().numpy().ravel()
    if rank == 0:
        print(f"trainer: {size} ranks (imports {T_IMPORT:.1f} s) joined the simulation's store in {t_join:.2f} s ({n} rows: "
              f"{args.n_core} ranks x {n // args.n_core} newest steps)")
        print(f"trainer: {args.iterations} iterations in {elapsed:.2f} s; {read} rows read, {used} used, "
              f"{all_bad} torn; steps {min(steps)}..{max(steps)} ({len(steps)} distinct) seen while the "
              "simulation ran")
        print(f"trainer: loss {losses[0]:.3e} -> {losses[-1]:.3e}; learned stencil "
              f"[{kernel[0]:.4f}, {kernel[1]:.4f}, {kernel[2]:.4f}], scheme [{R}, {1 - 2 * R}, {R}]")
    ok = (all_bad == 0 and losses[-1] < losses[0] / 100
          and np.allclose(kernel, [R, 1 - 2 * R, R], atol=0.02) and len(steps) > 2 * n)
    comm.Barrier()
    if rank == 0 and args.stop_file:
        open(args.stop_file, "w").close()
    if rank == 0:
        if bad:
            print(f"trainer: torn rows (index, step): {bad[:10]}", file=sys.stderr)
        print("trainer: " + ("OK" if ok else "FAILED: torn rows, no convergence or too few steps seen"))
    return 0 if comm.allreduce(ok, op=MPI.LAND) else 1


if __name__ == "__main__":
    sys.exit(main())
