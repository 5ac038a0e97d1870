/* Node-wide serialisation of MPI window creation.
 *
 * Open MPI 4.1 names the shared-memory backing file of a window after the
 * communicator's id (open-mpi/ompi#9492). Communicators split from one parent
 * get the same id, so two groups (or two stores over the halves of a
 * comm.Split) that create windows at the same moment on one node clobber each
 * other's file: MPI_Win_create then fails or hangs. Creating windows one
 * group at a time per node avoids it. The lock is an flock() on a file named
 * after the node (host name and boot id, s->host_key) in a node-local
 * directory (/dev/shm, where those backing files live), held by one rank per
 * node and group; a group goes ahead only when all its node leaders hold
 * their node's lock, else they all let go and retry after a random pause, so
 * groups spanning several nodes cannot deadlock. The name must differ
 * between nodes: on clusters TMPDIR is often one shared directory, and two
 * node leaders of one group contending for one file there could never both
 * hold it (the retry loop then ran into its 300 s limit). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define LOCK_WAIT_S 300.0

static int open_lock_file(const dds_store *s)
{
    const char *dir = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : dds_env("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/ddstore-winlock-%u-%s", dir ? dir : "/tmp", (unsigned)getuid(),
             s->host_key);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        dds_debug("cannot open window lock %s (%s): creating windows without it", path,
                  strerror(errno));
    return fd;
}

static void pause_randomly(unsigned *seed)
{
    struct timespec ts = { 0, (long)(1000000 + rand_r(seed) % 20000000) }; /* 1-21 ms */
    nanosleep(&ts, NULL);
}

int dds_with_window_lock(dds_store *s, int (*fn)(dds_store *, void *), void *arg)
{
    int node_rank = 0;
    MPI_Comm_rank(s->node, &node_rank);
    int fd = node_rank == 0 ? open_lock_file(s) : -1;
    unsigned seed = (unsigned)(dds_now_ns() ^ ((uint64_t)s->rank << 20) ^ (uint64_t)getpid());
    uint64_t deadline = dds_now_ns() + (uint64_t)(LOCK_WAIT_S * 1e9);
    int rc = DDS_OK;
    for (;;) {
        int held = fd < 0 || flock(fd, LOCK_EX | LOCK_NB) == 0;
        int all = 0;
        int mrc = MPI_Allreduce(&held, &all, 1, MPI_INT, MPI_MIN, s->group);
        if (mrc != MPI_SUCCESS) {
            rc = dds_err_mpi(mrc, "MPI_Allreduce (window lock)");
            break;
        }
        if (all)
            break;
        if (held && fd >= 0)
            flock(fd, LOCK_UN);
        int late = dds_now_ns() > deadline;
        int any_late = 0;
        MPI_Allreduce(&late, &any_late, 1, MPI_INT, MPI_MAX, s->group);
        if (any_late) {
            rc = dds_err(DDS_ETIMEDOUT, "waited %.0f s for the node's window-creation lock", LOCK_WAIT_S);
            break;
        }
        pause_randomly(&seed);
    }
    if (rc == DDS_OK) {
        rc = fn(s, arg);
        /* Window creation is collective but may return earlier on some
         * ranks: hold the lock until every member is done. */
        int mrc = MPI_Barrier(s->group);
        if (mrc != MPI_SUCCESS && rc == DDS_OK)
            rc = dds_err_mpi(mrc, "MPI_Barrier (window lock)");
    }
    if (fd >= 0) {
        flock(fd, LOCK_UN);
        close(fd);
    }
    return rc;
}
