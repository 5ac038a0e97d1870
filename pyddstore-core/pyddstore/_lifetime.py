"""Process lifetime of C stores: MPI imported on first use, stores left
unfreed freed collectively at exit, stores made before fork() refused in the
child, and the handle that owns one dds_store pointer and its lock.

The registry of live handles, the fork flag and the cached mpi4py module are
state of this module alone: other modules reach them through it
(``_lifetime._live``, ``_mpi()``), never with ``from ._lifetime import _MPI``,
which would copy a binding that later changes.
"""

import atexit
import os
import sys
import threading

from . import _lib
from ._errors import DDS_EMISMATCH, DDS_ESTATE, DDStoreStateError, make_error

_c = _lib.lib

_MPI = None
_live = []  # handles not yet freed, in creation order (see _free_at_exit)
_live_lock = threading.Lock()
_forked = False


def _mpi():
    """mpi4py.MPI, imported on first use so that `import pyddstore` leaves
    mpi4py.rc settable; importing it initialises MPI."""
    global _MPI
    if _MPI is None:
        from mpi4py import MPI

        _MPI = MPI
        # mpi4py finalises MPI from Py_AtExit, which runs after every atexit
        # handler, so stores are freed while MPI is still usable.
        atexit.register(_free_at_exit)
    return _MPI


def _after_fork_in_child():
    global _forked
    _forked = True
    for h in _live:  # the parent's stores: their fast paths step aside (see _Handle.usable)
        h.usable = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _free_at_exit():
    """Free, collectively and in creation order, the stores the program did
    not free itself, so their MPI windows go before MPI_Finalize.

    Skipped after an uncaught exception: the other ranks are not at exit, so
    a collective would turn a crash into a hang.
    """
    if getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None:
        return
    with _live_lock:
        handles = list(_live)
    for h in handles:
        try:
            h.free()
        except Exception as e:  # noqa: BLE001 - report and keep freeing the others
            print(f"pyddstore: freeing a store at exit failed: {e}", file=sys.stderr)


class _Handle:
    """Owner of one dds_store pointer and the communicators made for it.

    Reads take the handle for the duration of the C call; free() waits until
    no call is in flight, so a read in another thread never sees freed memory.

    Two ways to take it: ``with handle as ptr`` (a lock around a count; raises
    when the store is freed or was made before fork()), and the per-batch
    read's lighter one, which costs no lock (every batch of a loader pays it,
    after each network wait, with cold caches)::

        if h.usable:
            h.inflight.append(None)   # first announce the call ...
            try:
                if h.usable:          # ... then look again: free() may have begun
                    call(h.ptr)
            finally:
                h.inflight.pop()

    free() clears ``usable`` before it waits for ``inflight`` to empty, so a
    call either sees it cleared or is waited for (list appends and attribute
    stores are atomic under the GIL). Where ``usable`` is False the caller
    takes ``with`` instead, which raises the right error.
    """

    def __init__(self, ptr, collective, comms=()):
        self.ptr = ptr
        self.collective = collective  # dds_free is collective (store from dds_create)
        self.comms = list(comms)      # mpi4py communicators to Free after dds_free
        self.pid = os.getpid()
        # Reads take and release the plain lock directly (a Condition's `with` costs Python-level
        # calls on every read); the Condition over the same lock serves free()'s waits.
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._busy = 0
        self._closing = False
        self.inflight = []  # calls of the lighter guard (see the class's docstring)
        self.usable = True  # ptr is set, free() has not begun, not a forked child's copy
        with _live_lock:
            _live.append(self)

    def __enter__(self):
        if _forked and self.pid != os.getpid():
            raise DDStoreStateError(
                "this store was created in the parent process; a store cannot be used after "
                "fork() (use threads, e.g. pyddstore.torch.ThreadDataLoader, or num_workers=0)",
                DDS_ESTATE)
        lock = self._lock
        lock.acquire()
        try:
            if self.ptr is None or self._closing:
                raise DDStoreStateError("the store has been freed", DDS_ESTATE)
            self._busy += 1
            return self.ptr
        finally:
            lock.release()

    def __exit__(self, *exc):
        lock = self._lock
        lock.acquire()
        try:
            self._busy -= 1
            if self._busy == 0 and self._closing:  # only free() waits for in-flight calls
                self._cv.notify_all()
        finally:
            lock.release()
        return False

    @property
    def live(self):
        """True until free() has started."""
        return self.ptr is not None and not self._closing

    def free(self):
        """Free the C store (collective for core stores); idempotent."""
        if _forked and self.pid != os.getpid():
            return  # the parent owns it; MPI/fabric state is not ours to touch
        with self._cv:
            if self.ptr is None:
                return
            if self._closing:  # another thread is freeing it
                while self.ptr is not None and self._closing:
                    self._cv.wait()
                return
            self._closing = True
            self.usable = False
            # The lighter guard's calls do not notify: poll for them.
            while self._busy or self.inflight:
                self._cv.wait(0.001 if self.inflight else None)
            ptr = self.ptr
        rc = 0
        msg = ""
        try:
            mpi_gone = self.collective and (_MPI is None or _MPI.Is_finalized())
            if not mpi_gone:
                rc = _c.dds_free(ptr)
                if rc:
                    msg = _lib.last_error(rc)
                if rc != DDS_EMISMATCH:
                    for comm in self.comms:
                        try:
                            comm.Free()
                        except Exception:  # noqa: BLE001 - already freed by the user
                            pass
            # After MPI_Finalize nothing can be released: the process is ending.
        except BaseException:
            self._forget()
            raise
        if rc == DDS_EMISMATCH:
            # Another rank was in another collective call (epoch_end, add...): libddstore
            # kept the store, so a later free() on every rank can still release it.
            with self._cv:
                self._closing = False
                self.usable = not _forked
                self._cv.notify_all()
        else:
            self._forget()
        if rc:
            raise make_error(rc, msg)

    def _forget(self):
        """Drop the pointer once dds_free has run (or can no longer run)."""
        with self._cv:
            self.ptr = None
            self._closing = False
            self.comms = []
            self._cv.notify_all()
        with _live_lock:
            try:
                _live.remove(self)
            except ValueError:
                pass
