"""Store lifetime: free (idempotent, collective), context manager, truthiness,
freeing at interpreter exit, import behaviour, the original-DDStore script."""
import gc
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pyddstore
from pyddstore import DDStoreKeyError, PyDDStore

from core_helpers import METHOD, local_values, make_store, same_bytes, subprocess_env, values

# The launcher of the MPI this suite runs under (ci/mpich.sh sets mpiexec.mpich).
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
HERE = os.path.dirname(os.path.abspath(__file__))


def test_truthy_context_manager_and_repr(comm):
    with make_store(comm) as s:
        assert bool(s) and not hasattr(s, "__len__")
        assert "PyDDStore" in repr(s)
        s.add("a", local_values(s, (), "int16"))
        assert s.method == METHOD
    assert s.freed and bool(s)
    s.free()


def test_create_free_many(comm):
    for i in range(12):
        s = make_store(comm, None if i % 2 else 1)
        s.add("x", local_values(s, (2,), "int8"))
        total = s.query("x").global_rows
        out = np.zeros((total, 2), dtype=np.int8)
        s.get("x", out)
        assert same_bytes(out, values(np.arange(total), (2,), "int8"))
        s.free()


def test_unfreed_store_dropped_is_not_freed_by_gc(comm):
    """Dropping a store without free() runs no collective (the garbage
    collector runs at different times on each rank): it stays registered
    and is freed collectively at exit."""
    from pyddstore import _lifetime

    before = len(_lifetime._live)
    s = make_store(comm)
    s.add("a", local_values(s, (), "int32"))
    if comm.Get_rank() == 0:
        del s
        gc.collect()
    assert len(_lifetime._live) == before + 1
    comm.Barrier()


def test_join_on_core_store_checks_names(store):
    store.add("present", local_values(store, (), "uint8"))
    store.join("present")
    with pytest.raises(DDStoreKeyError):
        store.join("absent")


def test_register_recv_forms(store):
    store.add("r", local_values(store, (2,), "float32"))
    total = store.query("r").global_rows
    buf = np.zeros((total, 2), dtype=np.float32)
    store.register_recv(buf)
    store.get("r", buf)
    assert same_bytes(buf, values(np.arange(total), (2,), "float32"))
    store.unregister_recv(buf)
    store.register_recv("r", buf)  # original (name, arr) form
    store.unregister_recv("r", buf)
    with pytest.raises(pyddstore.DDStoreValueError):
        store.register_recv(np.zeros((4, 4))[:, ::2])


def test_reader_without_publication_fails_cleanly():
    d = tempfile.mkdtemp(prefix="ddstore-empty-")
    with pytest.raises((pyddstore.DDStoreTimeoutError, pyddstore.DDStoreNotSupportedError)):
        pyddstore.join("x", handshake_dir=d, n_core=1, timeout=0.2)
    with pytest.raises((pyddstore.DDStoreTimeoutError, pyddstore.DDStoreNotSupportedError)):
        PyDDStore(None, method=2, handshake_dir=d, n_core=1, timeout=0.2)


# ---- separate processes (launched from a one-rank run only: a nested
# mpiexec inside a multi-rank job would compete for the same cores) ----------

def _single(comm):
    if comm.Get_size() != 1:
        pytest.skip("launches its own processes; runs in the one-rank job")


def _run(args, timeout=120, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                       env=subprocess_env(env), cwd=HERE)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("ranks,width", [(2, None), (3, None), (4, 2)])
def test_original_style_script_runs_unchanged(comm, ranks, width):
    _single(comm)
    args = [MPIEXEC, "-n", str(ranks), sys.executable, os.path.join(HERE, "original_style_script.py")]
    if width:
        args.append(str(width))
    rc, out = _run(args)
    assert rc == 0, out
    assert "original-style script OK" in out, out


EXIT_SCRIPT = r"""
import numpy as np
from mpi4py import MPI
from pyddstore import PyDDStore

comm = MPI.COMM_WORLD
half = comm.Split(comm.rank % 2, comm.rank)
a = PyDDStore(comm)
b = PyDDStore(half)
c = PyDDStore(comm, ddstore_width=1)
a.add("a", np.arange(3 * (comm.rank + 1), dtype=np.int64))
b.add("b", np.ones((2, 2)))
c.add("c", np.zeros(1, dtype=np.uint8))

class Holder:
    def __init__(self, s):
        self.ddstore = s
    def __del__(self):              # HydraGNN frees from a destructor
        if self.ddstore:
            self.ddstore.free()

keep = Holder(c)
del b                               # dropped without free(): freed at exit
if comm.rank == 0:
    print("exiting", flush=True)
# a: never freed; c: freed by Holder.__del__ after the exit handler did it
"""


def test_unfreed_stores_are_freed_at_exit(comm):
    _single(comm)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(EXIT_SCRIPT)
    rc, out = _run([MPIEXEC, "-n", "3", sys.executable, f.name], timeout=60)
    os.unlink(f.name)
    assert rc == 0, out
    assert "exiting" in out and "failed" not in out, out


def test_import_leaves_mpi_alone_and_reports_library(comm):
    _single(comm)
    code = ("import sys, pyddstore; assert 'mpi4py.MPI' not in sys.modules; "
            "print(pyddstore.__version__, pyddstore.library_path, pyddstore.ABI_VERSION)")
    rc, out = _run([sys.executable, "-c", code])
    assert rc == 0, out
    version, path, abi = out.split()
    assert version == open(os.path.join(HERE, "..", "..", "..", "libddstore", "VERSION")).read().strip()
    assert abi == "1" and os.path.exists(path)


def test_bad_library_gives_import_error(comm):
    _single(comm)
    code = "import pyddstore"
    rc, out = _run([sys.executable, "-c", code], env={"PYDDSTORE_LIBRARY": "/nonexistent/libddstore.so"})
    assert rc != 0 and "ImportError" in out and "/nonexistent/libddstore.so" in out, out
    import ctypes.util
    libm = ctypes.util.find_library("m")
    rc, out = _run([sys.executable, "-c", code], env={"PYDDSTORE_LIBRARY": "/lib/x86_64-linux-gnu/" + libm})
    assert rc != 0 and "ImportError" in out and "not libddstore" in out, out


def test_abi_mismatch_gives_import_error(comm):
    _single(comm)
    import shutil
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a library with another ABI")
    d = tempfile.mkdtemp(prefix="ddstore-abi-")
    src = os.path.join(d, "fake.c")
    lib = os.path.join(d, "libddstore.so.2")
    with open(src, "w") as f:
        f.write("int dds_abi_version(void) { return 2; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], check=True)
    rc, out = _run([sys.executable, "-c", "import pyddstore"], env={"PYDDSTORE_LIBRARY": lib})
    assert rc != 0 and "ImportError" in out, out
    assert "ABI 2" in out and "ABI 1" in out and lib in out, out


def test_library_found_without_override(comm):
    """Without PYDDSTORE_LIBRARY the package finds a library on its own (its
    installed copy, or the dynamic linker's search path) and reports its full path."""
    _single(comm)
    libdir = os.path.dirname(pyddstore.library_path)
    env = {"PYDDSTORE_LIBRARY": "",
           "LD_LIBRARY_PATH": libdir + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")}
    rc, out = _run([sys.executable, "-c", "import pyddstore; print(pyddstore.library_path)"], env=env)
    assert rc == 0, out
    path = out.strip().splitlines()[-1]
    assert os.path.isabs(path) and os.path.isfile(path), out


@pytest.mark.parametrize("width", [None, 1])
def test_reads_collective_reported_and_obeyed(comm, width):
    """store.reads_collective is libddstore's rule (dds_store_info), and the
    reads behave so: where True a bad row on one rank fails the read on every
    rank of the group ("rank k: ..."), elsewhere on that rank only."""
    with make_store(comm, width) as s:
        expected = METHOD == 0 and s.group_size > 1 and not s.node_local
        assert s.reads_collective is expected
        s.add("rc", local_values(s, (), "int32"))
        total = s.query("rc").global_rows
        out = np.zeros(1, dtype=np.int32)
        bad = s.group_rank == 0
        rows = np.array([total if bad else 0], dtype=np.int64)
        if bad or s.reads_collective:
            with pytest.raises(pyddstore.DDStoreRangeError) as e:
                s.get_batch("rc", out, rows)
            if not bad:
                assert "rank " in str(e.value), e.value
        else:
            s.get_batch("rc", out, rows)


def test_store_info_describes_transport_and_node_memory(comm):
    """store.info() (no name) reports libddstore's own view: the method, what
    moves rows between nodes, and whether node peers' rows are memcpy from
    node shared memory (DDSTORE_NODE_LOCAL, default on, for every method)."""
    with make_store(comm) as s:
        d = s.info()
        assert d["method"] == METHOD
        if METHOD == 0:
            assert d["transport"] == "mpi"
            assert d["domain"] is None and d["domain_choice"] is None  # MPI chooses its network
        else:
            assert d["transport"].startswith("libfabric:") and len(d["transport"]) > len("libfabric:")
            assert d["domain"] and d["domain_choice"]  # the NIC this rank opened, and why
        want_shm = os.environ.get("DDSTORE_NODE_LOCAL", "1") != "0"
        assert d["node_shm"] is want_shm
        assert d["reads_collective"] is s.reads_collective
        assert d["node_local"] is s.node_local
        assert (d["rank"], d["size"], d["group_rank"], d["group_size"]) == (
            comm.rank, comm.size, s.group_rank, s.group_size)
        s.add("i", local_values(s, (), "int32"))
        assert s.info("i")[0] == s.query("i").global_rows
