"""Method 2: a core group under mpiexec publishes its store in a handshake
directory; processes of "another job" (plain subprocesses: no mpiexec, no
MPI) join from it and read every row bit-exact."""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreStateError, DDStoreTimeoutError, PyDDStore

from fabric_helpers import (PROVIDER, VARIABLES, local_values, offsets, reader_env, shared_tmpdir,
                            through_fabric, values)

pytestmark = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reader_script.py")


def spawn_reader(hs, n_core, timeout=60):
    """Start reader_script.py as a plain process with no MPI environment."""
    return subprocess.Popen([sys.executable, SCRIPT, hs, str(n_core), str(timeout)], env=reader_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def collect(comm, procs, limit=120):
    """Rank 0 waits for its readers; every rank gets [(returncode, output)]."""
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out = f"(killed after {limit} s)\n{out}"
        results.append((p.returncode, out))
    return comm.bcast(results, root=0)


def publish(comm, hs):
    """A method-2 core store over `comm` holding VARIABLES."""
    with through_fabric():
        s = PyDDStore(comm, 2, handshake_dir=hs, fabric=PROVIDER)
    for name, dtype, shape, salt in VARIABLES:
        s.add(name, local_values(comm.Get_rank(), comm.Get_size(), shape, dtype, salt))
    return s


def test_two_plain_process_readers(comm, rank, size):
    hs = os.path.join(shared_tmpdir(comm, "ddstore-fab-"), "hs")
    s = publish(comm, hs)
    procs = [spawn_reader(hs, size), spawn_reader(hs, size)] if rank == 0 else []
    results = collect(comm, procs)
    # Core ranks read each other like method 1 meanwhile.
    name, dtype, shape, salt = VARIABLES[2]
    total = int(offsets(size)[-1])
    out = np.zeros((total,) + shape, dtype=dtype)
    s.get(name, out, 0)
    assert out.tobytes() == values(np.arange(total), shape, dtype, salt).tobytes()
    s.free()
    for rc, text in results:
        assert rc == 0, text
    # Freeing withdraws the publication (and the directory the store made).
    assert not os.path.exists(os.path.join(hs, "store.dds"))
    comm.Barrier()
    if rank == 0:
        os.rmdir(os.path.dirname(hs))


def test_reader_started_before_the_core_group(comm, rank, size):
    hs = os.path.join(shared_tmpdir(comm, "ddstore-fab-"), "hs")
    procs = [spawn_reader(hs, size)] if rank == 0 else []
    if rank == 0:
        time.sleep(1.0)  # the reader is waiting for a directory that does not exist yet
        assert procs[0].poll() is None, procs[0].communicate()[0]
    comm.Barrier()
    s = publish(comm, hs)
    results = collect(comm, procs)
    s.free()
    for rc, text in results:
        assert rc == 0, text
    comm.Barrier()
    if rank == 0:
        os.rmdir(os.path.dirname(hs))


def test_in_process_reader_attaches_a_late_variable(comm, rank, size):
    hs = os.path.join(shared_tmpdir(comm, "ddstore-fab-"), "hs")
    s = publish(comm, hs)
    r = pyddstore.join(handshake_dir=hs, n_core=size, timeout=30) if rank == 0 else None
    if rank == 0:
        assert set(r.names()) == {v[0] for v in VARIABLES}
    comm.Barrier()
    late = local_values(rank, size, (5,), "int32", 9)
    s.add("late", late)
    if rank == 0:
        r.join("late")
        total = int(offsets(size)[-1])
        out = np.zeros((total, 5), dtype=np.int32)
        r.get("late", out, 0)
        assert out.tobytes() == values(np.arange(total), (5,), "int32", 9).tobytes()
        with pytest.raises(DDStoreStateError):
            r.add("nope", np.zeros(3))
        r.free()
    comm.Barrier()
    s.free()
    comm.Barrier()
    if rank == 0:
        os.rmdir(os.path.dirname(hs))


def test_empty_directory_times_out_in_the_configured_time(comm):
    d = tempfile.mkdtemp(prefix="ddstore-empty-")
    t0 = time.monotonic()
    with pytest.raises(DDStoreTimeoutError) as e:
        pyddstore.join(handshake_dir=d, n_core=comm.Get_size(), timeout=1.0)
    t = time.monotonic() - t0
    assert 0.95 <= t < 4.0, t
    assert d in str(e.value) and "store.dds" in str(e.value), str(e.value)
    os.rmdir(d)
    comm.Barrier()
