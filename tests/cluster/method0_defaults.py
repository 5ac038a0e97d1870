"""Method 0 across hosts with the MPI's defaults (run under mpiexec by
ci/cluster.sh, Open MPI without OMPI_MCA_osc): store creation must either
work, and then remote rows read back bit-exact, or fail on EVERY rank with a
DDStoreError that names the setting to use (OMPI_MCA_osc=sm,ucx). Failing later
(in add(), as Open MPI's osc/rdma over TCP does with MPI_ERR_WIN) or on some
ranks only is a failure. Exit 0 on either accepted outcome; the caller bounds
the time (a hang is a failure).
"""
import sys

import numpy as np
from mpi4py import MPI

from pyddstore import DDStoreError, PyDDStore

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
SETTING = "OMPI_MCA_osc=sm,ucx"

outcome, detail = "ok", ""
try:
    store = PyDDStore(comm, 0)
except DDStoreError as e:
    outcome, detail = ("clean-error" if SETTING in str(e) else "unclear-error"), f"{type(e).__name__}: {e}"
    store = None
if store is not None:
    try:
        n = 5 + rank
        off = sum(5 + r for r in range(rank))
        store.add("d/x", (np.arange(off, off + n, dtype=np.float64)[:, None] * np.ones((1, 3))))
        total = sum(5 + r for r in range(size))
        rows = np.arange(total - 1, -1, -1, dtype=np.int64)
        out = np.empty((total, 3))
        store.get_batch("d/x", out, rows)
        if out.tobytes() != (rows.astype(np.float64)[:, None] * np.ones((1, 3))).tobytes():
            outcome, detail = "wrong-data", "rows read back differ"
        store.free()
    except DDStoreError as e:
        outcome, detail = "late-error", f"{type(e).__name__}: {e}"
# Plain MPI point-to-point still works when the window failed.
outcomes = comm.gather((outcome, detail, MPI.Get_processor_name()), root=0)
code = 0
if rank == 0:
    kinds = {o for o, _, _ in outcomes}
    for r, (o, dt, host) in enumerate(outcomes):
        print(f"method0-defaults: rank {r} on {host}: {o} {dt[:300]}")
    if kinds == {"ok"}:
        print("method0-defaults: PASS (method 0 works with the defaults)")
    elif kinds == {"clean-error"}:
        print(f"method0-defaults: PASS (clean error naming {SETTING} on every rank)")
    else:
        print(f"method0-defaults: FAIL (outcomes {sorted(kinds)}; want all ok or all clean-error "
              f"naming {SETTING} at store creation)")
        code = 1
code = comm.bcast(code, root=0)
sys.exit(code)
