"""System-level faults and handshake-directory security, with real
processes (loopback only, every mpiexec under `timeout`).

Run WITHOUT mpiexec (run.sh does: ``python -m pytest test_system.py``): the
tests start their own MPI jobs and method-2 reader processes, kill them with
SIGKILL and watch what the survivors do. Under mpiexec the module skips on
every rank alike. The security tests create method-2 stores in this process
(an MPI singleton) and readers beside them.

Documented bounds checked here:
 * a rank that raises ends its job (non-zero) within 60 s;
 * a method-2 reader whose core group dies (job killed) fails with a
   DDStoreError within 15 s: tcp at once (the connection drops), shm after
   at most ~4 s (a reader stuck for 2 s re-checks the publication every
   2 s and finds its publisher's lock released);
 * with DDSTORE_READ_TIMEOUT_S (libddstore with the read deadline), a
   reader fails within that many seconds even when only a non-publishing
   core rank died and the rest of the group lives on.
"""
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rel_helpers import PYTHON, child_env  # noqa: E402

UNDER_MPIEXEC = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"))
pytestmark = pytest.mark.skipif(UNDER_MPIEXEC, reason="starts its own MPI jobs: run without mpiexec (run.sh)")

import pyddstore  # noqa: E402
from pyddstore import DDStoreError, DDStoreTimeoutError  # noqa: E402

needs_fabric = pytest.mark.skipif(not pyddstore.has_fabric(), reason="libddstore built without libfabric")

CORE = os.path.join(HERE, "rel_core.py")
READER = os.path.join(HERE, "rel_reader.py")


class Job:
    """A child process in its own session, killed with its children at the end."""

    def __init__(self, argv, env, log):
        self.log = open(log, "w")
        self.logname = log
        self.p = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def wait(self, t):
        try:
            return self.p.wait(t)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        self.log.flush()
        with open(self.logname) as f:
            return f.read()

    def wait_for(self, text, t):
        end = time.monotonic() + t
        while time.monotonic() < end:
            if text in self.output():
                return True
            if self.p.poll() is not None:
                return text in self.output()
            time.sleep(0.05)
        return False

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(10)
        self.log.close()


@pytest.fixture
def jobs():
    started = []
    yield started
    for j in started:
        j.kill()


def core_job(jobs, d, n=2, prov="shm", extra=(), env_extra=None, rows=4000):
    env = child_env(DDSTORE_FABRIC=prov, DDSTORE_NODE_LOCAL=0, **(env_extra or {}))
    j = Job(["timeout", "-k", "5", "120", "mpiexec", *extra, "-n", str(n), PYTHON, "-m", "mpi4py", CORE,
             "serve", str(d), str(rows)], env, os.path.join(d, f"core{len(jobs)}.log"))
    jobs.append(j)
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(d, "ready")):
        assert j.p.poll() is None, f"core job ended early:\n{j.output()}"
        assert time.monotonic() < end, f"core job not ready after 60 s:\n{j.output()}"
        time.sleep(0.05)
    return j


def reader_job(jobs, d, n_core=2, seconds=0, prov="shm", env_extra=None):
    env = child_env(DDSTORE_FABRIC=prov, **(env_extra or {}))
    j = Job(["timeout", "-k", "5", "90", PYTHON, READER, str(d), str(n_core), str(seconds)], env,
            os.path.join(d, f"reader{len(jobs)}.log"))
    jobs.append(j)
    return j


def pid_of(d, rank):
    with open(os.path.join(d, f"pid.{rank}")) as f:
        return int(f.read())


# ---- faults ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2])
def test_rank_that_raises_aborts_job(tmp_path, n):
    t0 = time.monotonic()
    p = subprocess.run(["timeout", "-k", "5", "60", "mpiexec", "-n", str(n), PYTHON, "-m", "mpi4py", CORE,
                        "raise", str(tmp_path)], env=child_env(), capture_output=True, text=True)
    dt = time.monotonic() - t0
    assert p.returncode not in (0, 124, 137), f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert "rank fails on purpose" in p.stderr
    assert dt < 60


@needs_fabric
@pytest.mark.parametrize("prov,victim", [("shm", 1), ("shm", 0), ("tcp", 1), ("tcp", 0)])
def test_core_rank_killed_readers_fail(tmp_path, jobs, prov, victim):
    core = core_job(jobs, tmp_path, prov=prov)
    readers = [reader_job(jobs, tmp_path, prov=prov) for _ in range(2)]
    for r in readers:
        assert r.wait_for("reading", 30), r.output()
    t_kill = time.monotonic()
    os.kill(pid_of(tmp_path, victim), signal.SIGKILL)
    for r in readers:
        rc = r.wait(20)
        dt = time.monotonic() - t_kill
        assert rc == 3, f"reader rc {rc} after {dt:.1f} s:\n{r.output()}"
        assert dt < 15, f"reader took {dt:.1f} s to fail"
        out = r.output()
        assert "error" in out and "DDStore" in out, out
    assert core.wait(30) not in (0, None)


@needs_fabric
def test_non_publisher_killed_publisher_alive_reader_times_out(tmp_path, jobs):
    # --enable-recovery keeps rank 0 (the publisher, whose lock marks the
    # publication live) running after rank 1 dies: only the deadline helps.
    core_job(jobs, tmp_path, prov="shm", extra=("--enable-recovery",))
    r = reader_job(jobs, tmp_path, prov="shm", env_extra={"DDSTORE_READ_TIMEOUT_S": 3})
    assert r.wait_for("reading", 30), r.output()
    t_kill = time.monotonic()
    os.kill(pid_of(tmp_path, 1), signal.SIGKILL)
    rc = r.wait(30)
    dt = time.monotonic() - t_kill
    assert rc == 3, f"reader rc {rc} after {dt:.1f} s:\n{r.output()}"
    assert dt < 3 + 5
    assert "DDStoreTimeoutError" in r.output() and "DDSTORE_READ_TIMEOUT_S" in r.output(), r.output()


@needs_fabric
def test_reader_killed_mid_read_core_unaffected(tmp_path, jobs):
    # tcp only. On libfabric 1.17's shm a reader SIGKILLed mid-read may die
    # holding the spin lock of the core rank's shm region (smr_generic_rma
    # holds it for the whole copy); the other shm readers of that rank then
    # spin inside fi_read for ever, where no read deadline can reach them.
    # That happens in about half the runs here (measured with
    # DDSTORE_READ_TIMEOUT_S=5: the other reader was still stuck after 25 s),
    # so an shm case could only pass or fail by chance: there is none.
    # docs/clusters.rst tells users to prefer tcp, verbs or cxi when readers
    # may be killed, and method 2 uses shm only when DDSTORE_FABRIC names it.
    prov = "tcp"
    core = core_job(jobs, tmp_path, prov=prov)
    victim = reader_job(jobs, tmp_path, prov=prov)
    other = reader_job(jobs, tmp_path, seconds=4, prov=prov)
    assert victim.wait_for("reading", 30), victim.output()
    assert other.wait_for("reading", 30), other.output()
    time.sleep(0.3)
    os.killpg(victim.p.pid, signal.SIGKILL)
    victim.wait(10)
    late = reader_job(jobs, tmp_path, seconds=1.5, prov=prov)  # joins after the kill
    assert other.wait(20) == 0, other.output()
    assert late.wait(20) == 0, late.output()
    assert "done" in other.output() and "done" in late.output()
    open(os.path.join(tmp_path, "stop"), "w").close()
    assert core.wait(60) == 0, core.output()
    assert all(os.path.exists(os.path.join(tmp_path, f"freed.{r}")) for r in range(2))
    assert not os.path.exists(os.path.join(tmp_path, "hs", "store.dds"))


@needs_fabric
def test_stale_handshake_dir_detected_and_reused(tmp_path, jobs):
    core = core_job(jobs, tmp_path, prov="tcp")
    hs = os.path.join(tmp_path, "hs")
    for r in range(2):
        os.kill(pid_of(tmp_path, r), signal.SIGKILL)
    core.wait(30)
    assert os.path.exists(os.path.join(hs, "store.dds")), "a crashed run leaves its files"
    t0 = time.monotonic()
    with pytest.raises(DDStoreTimeoutError, match=r"stale: its publisher \(pid \d+"):
        pyddstore.join("x", handshake_dir=hs, n_core=2, timeout=1.5)
    assert time.monotonic() - t0 < 10
    os.unlink(os.path.join(tmp_path, "ready"))
    core2 = core_job(jobs, tmp_path, prov="tcp")  # a new run takes the directory over
    r = reader_job(jobs, tmp_path, seconds=1, prov="tcp")
    assert r.wait(30) == 0, r.output()
    open(os.path.join(tmp_path, "stop"), "w").close()
    assert core2.wait(60) == 0, core2.output()


@pytest.mark.parametrize("node_local", [0, 1])
def test_huge_init_is_clean_error(tmp_path, node_local):
    # 1 TiB per rank: more than this machine's memory and /dev/shm.
    p = subprocess.run(["timeout", "-k", "5", "60", "mpiexec", "-n", "2", PYTHON, "-m", "mpi4py", CORE, "huge",
                        str(tmp_path), str(1 << 40)], env=child_env(DDSTORE_NODE_LOCAL=node_local),
                       capture_output=True, text=True)
    assert p.returncode == 0, f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    # Both ranks report (their lines may interleave in mpiexec's output).
    assert p.stdout.count("clean DDStoreError") == 2, p.stdout + p.stderr
    assert "variable 'huge'" in p.stdout, p.stdout


def test_allocation_failure_under_ulimit(tmp_path):
    # 3 GB of address space per process; 4 GiB of rows cannot fit.
    cmd = (f"ulimit -v 3000000 && exec timeout -k 5 60 mpiexec -n 2 {PYTHON} -m mpi4py {CORE} huge "
           f"{tmp_path} {4 << 30}")
    p = subprocess.run(["bash", "-c", cmd], env=child_env(DDSTORE_NODE_LOCAL=0), capture_output=True,
                       text=True)
    assert p.returncode == 0, f"rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert p.stdout.count("clean DDStoreError") == 2, p.stdout + p.stderr


# ---- security of the handshake directory (stores in this process) -----------------------


@pytest.fixture
def fabric_env(monkeypatch):
    if not pyddstore.has_fabric():
        pytest.skip("libddstore built without libfabric")
    monkeypatch.setenv("DDSTORE_FABRIC", "tcp")
    monkeypatch.setenv("FI_TCP_IFACE", "lo")
    from mpi4py import MPI

    return MPI.COMM_SELF


def core2(comm, d):
    import numpy as np

    s = pyddstore.PyDDStore(comm, method=2, handshake_dir=str(d))
    s.add("x", np.arange(8, dtype=np.int64).reshape(4, 2))
    return s


def test_dir_0700_files_0600(tmp_path, fabric_env):
    d = tmp_path / "new" / "deeper" / "hs"
    s = core2(fabric_env, d)
    try:
        for p in (tmp_path / "new", tmp_path / "new" / "deeper", d):
            assert stat.S_IMODE(os.lstat(p).st_mode) == 0o700, (p, oct(os.lstat(p).st_mode))
        names = os.listdir(d)
        assert "store.dds" in names and any(n.startswith("var-") for n in names), names
        for n in names:
            st = os.lstat(d / n)
            assert stat.S_ISREG(st.st_mode), n
            assert stat.S_IMODE(st.st_mode) == 0o600, (n, oct(st.st_mode))
        r = pyddstore.join("x", handshake_dir=str(d), n_core=1, timeout=5)
        import numpy as np

        out = np.zeros((4, 2), np.int64)
        r.get("x", out, 0)
        assert out.ravel().tolist() == list(range(8))
        r.free()
    finally:
        s.free()
    assert not d.exists(), "the directory this run created is removed at free"


def refused_by_core_and_reader(fabric_env, d, core_match, reader_match):
    """Neither core ranks (core2) nor a reader (pyddstore.join) take the
    handshake directory `d`; their errors match the patterns."""
    with pytest.raises(DDStoreError, match=core_match):
        core2(fabric_env, d)
    with pytest.raises(DDStoreError, match=reader_match):
        pyddstore.join("x", handshake_dir=str(d), n_core=1, timeout=1)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_dir_writable_by_others_refused(tmp_path, fabric_env, mode):
    d = tmp_path / "hs"
    d.mkdir()
    os.chmod(d, mode)
    refused_by_core_and_reader(fabric_env, d, r"writable by group or others .*refusing it",
                               r"writable by group or others")


def test_dir_symlink_refused(tmp_path, fabric_env):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    refused_by_core_and_reader(fabric_env, link, r"symbolic link", r"symbolic link")


def test_planted_symlinks_not_followed(tmp_path, fabric_env):
    # A live publication elsewhere, and a directory whose store.dds is a
    # link to it: the reader must refuse the link, not read through it.
    good = tmp_path / "good"
    s = core2(fabric_env, good)
    try:
        evil = tmp_path / "evil"
        evil.mkdir(mode=0o700)
        (evil / "store.dds").symlink_to(good / "store.dds")
        with pytest.raises(DDStoreError, match=r"store\.dds' is a symbolic link: refusing it"):
            pyddstore.join("x", handshake_dir=str(evil), n_core=1, timeout=1)
    finally:
        s.free()
    # Links planted where the publisher writes: its lock file (refused) and
    # a variable file (removed as stale, its target untouched).
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    d = tmp_path / "planted"
    d.mkdir(mode=0o700)
    (d / "lock").symlink_to(victim)
    with pytest.raises(DDStoreError, match=r"lock"):
        core2(fabric_env, d)
    assert victim.read_text() == "keep me"
    (d / "lock").unlink()
    (d / "var-00000000.dds").symlink_to(victim)
    (d / "store.dds").symlink_to(victim)
    s = core2(fabric_env, d)
    try:
        assert not (d / "var-00000000.dds").is_symlink()
        assert not (d / "store.dds").is_symlink()
    finally:
        s.free()
    assert victim.read_text() == "keep me"
