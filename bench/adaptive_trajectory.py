"""Adaptive batch size at work: the trajectory goodput chooses, against a fixed batch.

Trains a linear regression (y = x.w + noise) twice on the same DistDataset:
with the initial global batch size fixed, and with
``autoscale_batch_size``. As the parameters approach w the gradient gets
smaller relative to its noise (the noise scale grows), so goodput asks for
larger batches. Prints, for the autoscaled run, every choice (optimizer
step, local batch size, accumulation steps, global batch size, predicted
goodput before and after, throughput, efficiency, noise scale) and, for both
runs, the optimizer steps and seconds to reach the target loss. Run:

    mpiexec -n 2 python bench/adaptive_trajectory.py [--target 0.05] [--max-bsz 512]
"""

import argparse
import time

import numpy as np
import torch  # before mpi4py
from mpi4py import MPI

import pyddstore.torch.adaptive as adl
from pyddstore.torch import DistDataset


class Regression(torch.utils.data.Dataset):
    """y = x . w + sigma * noise, x ~ N(0, I_d)."""

    def __init__(self, n, d, sigma, seed):
        rng = np.random.default_rng(seed)
        self.w = rng.normal(size=d).astype(np.float32)
        self.x = rng.normal(size=(n, d)).astype(np.float32)
        self.y = (self.x @ self.w + sigma * rng.normal(size=n)).astype(np.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return torch.from_numpy(self.x[i]), torch.tensor(self.y[i])


def run(ds, w, args, autoscale):
    adl.reset()
    model = torch.nn.Linear(len(w), 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    adp = adl.AdaptiveDataParallel(model, opt)
    loader = adl.AdaptiveDataLoader(ds, batch_size=args.bs, shuffle=True)
    if autoscale:
        loader.autoscale_batch_size(args.max_bsz, local_bsz_bounds=(1, args.max_bsz),
                                    gradient_accumulation=True, sync_interval=args.interval)
    else:
        loader.train()
    steps, samples, start, excess = 0, 0, time.perf_counter(), float("inf")
    rows = []
    for _ in adl.remaining_epochs_until(100):
        for x, y in loader:
            opt.zero_grad()
            (0.5 * ((adp(x).squeeze(1) - y) ** 2).mean()).backward()
            opt.step()
            if loader.is_accum_step():
                continue
            steps += 1
            samples += loader.current_batch_size
            excess = 0.5 * float(((model.weight.detach().view(-1) - w) ** 2).sum())
            rows.append(excess)
            if excess <= args.target or steps >= args.max_steps:
                break
        if excess <= args.target or steps >= args.max_steps:
            break
    seconds = time.perf_counter() - start
    # Each choice with the excess loss at the step it was made.
    rows = [t + (rows[t[0] - 1] if 0 < t[0] <= len(rows) else float("nan"),)
            for t in loader.trajectory]
    loader.close()
    del adp
    return steps, samples, seconds, excess, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--bs", type=int, default=8)
    p.add_argument("--max-bsz", dest="max_bsz", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--interval", type=int, default=4)
    p.add_argument("--target", type=float, default=0.02)
    p.add_argument("--max-steps", dest="max_steps", type=int, default=2000)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    adl.init_process_group("gloo")
    src = Regression(args.n, args.d, args.sigma, seed=11)
    w = torch.from_numpy(src.w)
    ds = DistDataset(src, "bench-adaptive")
    fixed = run(ds, w, args, autoscale=False)
    auto = run(ds, w, args, autoscale=True)
    ds.free()
    if comm.Get_rank() == 0:
        k = comm.Get_size()
        print(f"ranks {k}, initial global batch {args.bs}, max {args.max_bsz}, target excess loss "
              f"{args.target}")
        print("step  local  accum  global  goodput(pred)  goodput(before)  throughput  "
              "efficiency  noise_scale  excess_loss")
        for step, local, accum, glob, g, before, thr, eff, phi, ex in auto[4]:
            print(f"{step:4d}  {local:5d}  {accum:5d}  {glob:6d}  {g:13.1f}  {before:15.1f}  "
                  f"{thr:10.1f}  {eff:10.3f}  {phi:11.1f}  {ex:11.4f}")
        for name, (steps, samples, seconds, excess, _) in (("fixed", fixed), ("autoscaled", auto)):
            print(f"{name:10s}: {steps:5d} optimizer steps, {samples:7d} samples, {seconds:6.2f} s, "
                  f"excess loss {excess:.4f}")
        print(f"steps ratio fixed/autoscaled {fixed[0] / auto[0]:.2f}, "
              f"time ratio {fixed[2] / auto[2]:.2f}")


if __name__ == "__main__":
    main()
