/* Shard memory, for every method: where each rank's shard of a variable
 * lives (node shared memory, private memory, or a file under the store's
 * storage directory: storage.c), the shared-memory probe, and the
 * transport's mapping of a shard just allocated (dds_shard_alloc/release). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

static int probe_shared(dds_store *s, void *unused)
{
    (void)unused;
    void *base = NULL;
    MPI_Win win = MPI_WIN_NULL;
    int mrc = MPI_Win_allocate_shared(1, 1, MPI_INFO_NULL, s->node, &base, &win);
    if (mrc != MPI_SUCCESS)
        return DDS_EMPI;
    MPI_Win_free(&win);
    return DDS_OK;
}

int dds_shm_probe(dds_store *s)
{
    int want = dds_env_flag("DDSTORE_NODE_LOCAL", true) ? 1 : 0;
    int all = 0;
    int mrc = MPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MIN, s->comm);
    if (mrc != MPI_SUCCESS)
        return dds_agree(s->comm, dds_err_mpi(mrc, "MPI_Allreduce (shared memory probe)"));
    if (!all || s->storage) {
        /* File-backed shards: node peers map the same files, no MPI
         * shared window needed. */
        s->shm_enabled = all != 0;
        return DDS_OK;
    }
    /* Some MPIs (or their configuration) cannot allocate shared windows:
     * try once with a tiny window and fall back to private memory. */
    int ok = dds_with_window_lock(s, probe_shared, NULL) == DDS_OK;
    int all_ok = 0;
    mrc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s->comm);
    if (mrc != MPI_SUCCESS)
        return dds_agree(s->comm, dds_err_mpi(mrc, "MPI_Allreduce (shared memory probe)"));
    s->shm_enabled = all_ok != 0;
    if (!s->shm_enabled)
        dds_debug("rank %d: shared-memory windows unavailable; node peers are read through RMA",
                  s->rank);
    return DDS_OK;
}

/* Methods 1/2 make shard pages read-only (protect.c), which needs each
 * shard on pages of its own. Noncontiguous shared windows start each rank's
 * segment near a page boundary but not on it (Open MPI 4.1: 0x108 bytes
 * after), so one extra page is asked for and the shard starts at the first
 * page boundary inside the segment; every rank finds that boundary the
 * same way in its own mapping. */
static char *page_align(void *p, size_t pad)
{
    if (!pad)
        return p;
    return (char *)(((uintptr_t)p + pad - 1) / pad * pad);
}

static int alloc_shared(dds_store *s, dds_var *v, size_t bytes)
{
    size_t pad = s->tp->page_shards ? dds_page_size() : 0;
    MPI_Info info;
    MPI_Info_create(&info);
    /* Each rank's segment starts on its own pages: no false sharing between
     * shards, and libfabric can register it alone. */
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    int mrc = MPI_Win_allocate_shared((MPI_Aint)(bytes + pad), 1, info, s->node, &v->base, &v->shm_win);
    MPI_Info_free(&info);
    if (mrc != MPI_SUCCESS) {
        v->shm_win = MPI_WIN_NULL;
        v->base = NULL;
        return dds_err_mpi(mrc, "MPI_Win_allocate_shared");
    }
    MPI_Win_set_errhandler(v->shm_win, MPI_ERRORS_RETURN);
    for (int g = 0; g < s->group_size; g++) {
        int nr = s->node_rank_of[g];
        if (nr < 0)
            continue;
        MPI_Aint size;
        int disp;
        void *ptr = NULL;
        mrc = MPI_Win_shared_query(v->shm_win, nr, &size, &disp, &ptr);
        if (mrc != MPI_SUCCESS)
            return dds_err_mpi(mrc, "MPI_Win_shared_query");
        v->peer_base[g] = page_align(ptr, pad);
    }
    v->base = page_align(v->base, pad);
    /* MPI_Win_sync, which publishes local writes, needs a passive epoch. */
    mrc = MPI_Win_lock_all(MPI_MODE_NOCHECK, v->shm_win);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Win_lock_all (shared window)");
    return DDS_OK;
}

static int alloc_private(dds_store *s, dds_var *v, size_t bytes)
{
    /* Plain memory for every method: MPI_Win_create exposes any memory, and
     * MPI_Alloc_mem fails badly on large requests (Open MPI raises
     * MPI_ERR_NO_MEM on MPI_COMM_WORLD, fatal by default; MPICH 4.0 ch4
     * returns MPI_SUCCESS with an invalid pointer). */
    void *p = NULL;
    if (posix_memalign(&p, dds_page_size(), bytes) != 0)
        return dds_err(DDS_ENOMEM, "variable '%s': cannot allocate %zu bytes", v->name, bytes);
    v->base = p;
    v->peer_base[s->group_rank] = v->base;
    return DDS_OK;
}

/* The transport's map_shard, collective over the group, after shard
 * memory was allocated and agreed on; releases the shard on failure. */
static int map_for_transport(dds_store *s, dds_var *v)
{
    if (s->tp->map_shard) {
        int rc = s->tp->map_shard(s, v);
        if (rc) {
            dds_shard_release(s, v);
            return rc;
        }
    }
    return DDS_OK;
}

/* A file-backed shard (storage.c): no memory checks, the page cache holds
 * what it can; the storage directory's room is checked there. */
static int map_file(dds_store *s, dds_var *v)
{
    int rc = dds_storage_map(s, v);
    if (rc) {
        dds_shard_release(s, v);
        return rc;
    }
    return map_for_transport(s, v);
}

int dds_shard_alloc(dds_store *s, dds_var *v)
{
    size_t bytes = (size_t)(v->local_rows * v->row_bytes);
    if (bytes == 0)
        bytes = 1; /* windows and registrations want a real address */
    if ((uint64_t)v->local_rows * (uint64_t)v->row_bytes > (uint64_t)PTRDIFF_MAX - (1u << 20))
        return dds_err(DDS_EOVERFLOW, "variable '%s' is too large for this machine", v->name);
    if (s->storage)
        return map_file(s, v);
    if (s->tp->page_shards) {
        /* Whole pages, which dds_shard_protect() makes read-only. */
        size_t page = dds_page_size();
        bytes = (bytes + page - 1) / page * page;
    }

    /* Refuse shards this node cannot hold before asking MPI: a failed
     * MPI_Win_allocate_shared in Open MPI 4.1 returns on the rank that
     * creates the segment and leaves the node's other ranks waiting inside
     * it. With shared memory, one rank allocates the whole node's segment. */
    int rc = DDS_OK;
    double node_bytes = (double)bytes;
    if (s->shm_enabled) {
        double mine = (double)bytes;
        int mrc = MPI_Allreduce(&mine, &node_bytes, 1, MPI_DOUBLE, MPI_SUM, s->node);
        if (mrc != MPI_SUCCESS)
            rc = dds_err_mpi(mrc, "MPI_Allreduce (shard sizes)");
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double phys = (pages > 0 && page > 0) ? (double)pages * (double)page : 0;
    struct rlimit as;
    double as_limit = 0; /* every rank of the node maps the whole shared segment */
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
        as_limit = (double)as.rlim_cur;
    /* Open MPI and MPICH back shared windows with a file in /dev/shm, which
     * is usually half the memory: a segment between that and the physical
     * memory passes the check above and then hangs or dies of SIGBUS. */
    struct statvfs vfs;
    double shm_free = 0;
    if (s->shm_enabled && statvfs("/dev/shm", &vfs) == 0)
        shm_free = (double)vfs.f_bavail * (double)vfs.f_frsize;
    if (rc == DDS_OK && phys > 0 && node_bytes > phys)
        rc = dds_err(DDS_ENOMEM,
                     "variable '%s': %.0f bytes of shards on this node exceed its %.0f bytes of "
                     "memory (use more nodes or fewer rows per rank, or keep shards in files: storage_dir / "
                     "DDSTORE_STORAGE_DIR)",
                     v->name, node_bytes, phys);
    else if (rc == DDS_OK && as_limit > 0 && node_bytes > as_limit)
        rc = dds_err(DDS_ENOMEM,
                     "variable '%s': %.0f bytes of shards on this node exceed the address-space "
                     "limit of %.0f bytes (ulimit -v)",
                     v->name, node_bytes, as_limit);
    else if (rc == DDS_OK && shm_free > 0 && node_bytes > shm_free)
        rc = dds_err(DDS_ENOMEM,
                     "cannot allocate %.0f bytes of shared memory for variable '%s' on this node: "
                     "/dev/shm has %.0f bytes free (free some, set DDSTORE_NODE_LOCAL=0 to use "
                     "private memory, or keep shards in files: storage_dir / DDSTORE_STORAGE_DIR)",
                     node_bytes, v->name, shm_free);
    rc = dds_agree(s->group, rc);
    if (rc)
        return rc;

    rc = s->shm_enabled ? alloc_shared(s, v, bytes) : alloc_private(s, v, bytes);
    /* The transport's map_shard (an RMA window) is collective over the
     * group: agree first. */
    rc = dds_agree(s->group, rc);
    if (rc) {
        dds_shard_release(s, v);
        return rc;
    }
    return map_for_transport(s, v);
}

int dds_var_node_shared(dds_store *s, dds_var *v)
{
    int mine = s->node_rank_of && v->peer_base, all = 0;
    for (int g = 0; mine && g < s->group_size; g++)
        mine = s->node_rank_of[g] < 0 || v->peer_base[g] || v->offsets[g + 1] == v->offsets[g];
    int mrc = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, s->group);
    v->node_shared = mrc == MPI_SUCCESS && all;
    return dds_agree(s->group, mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Allreduce (node shards)"));
}

void dds_shard_release(dds_store *s, dds_var *v)
{
    /* free() writes into freed memory; MPI may reuse a shared segment. */
    if (v->base)
        dds_shard_protect(s, v, false);
    if (v->win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(v->win);
        MPI_Win_free(&v->win);
        v->win = MPI_WIN_NULL;
    }
    free(v->win_skew);
    v->win_skew = NULL;
    if (v->file) {
        dds_storage_unmap(v); /* the rows stay in the file */
    } else if (v->shm_win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(v->shm_win);
        MPI_Win_free(&v->shm_win); /* frees the shard memory too */
        v->shm_win = MPI_WIN_NULL;
    } else if (v->mpi_mem) {
        MPI_Free_mem(v->mpi_mem);
    } else {
        free(v->base);
    }
    v->mpi_mem = NULL;
    v->base = NULL;
}

void dds_shard_resident(const dds_var *v, uint64_t *bytes, uint64_t *resident)
{
    *bytes = (uint64_t)(v->local_rows * v->row_bytes);
    *resident = 0;
    if (!v->base || *bytes == 0)
        return;
    size_t page = dds_page_size();
    uintptr_t first = (uintptr_t)v->base / page * page, end = (uintptr_t)v->base + *bytes;
    unsigned char vec[4096];
    /* In windows of 4096 pages: bounded memory for any shard size. */
    for (uintptr_t a = first; a < end;) {
        size_t pages = (end - a + page - 1) / page;
        if (pages > sizeof vec)
            pages = sizeof vec;
        if (mincore((void *)a, pages * page, vec) != 0)
            return; /* unknown: reported as not resident */
        for (size_t i = 0; i < pages; i++) {
            if (!(vec[i] & 1))
                continue;
            uintptr_t lo = a + i * page, hi = lo + page;
            lo = lo < (uintptr_t)v->base ? (uintptr_t)v->base : lo;
            hi = hi > end ? end : hi;
            *resident += hi - lo;
        }
        a += pages * page;
    }
}
