/* The orchestrator: store lifecycle (create, free), adding and updating
 * variables, queries, and the entry points of readers. Builds on the ground
 * floor (registry.c, vartable.c, collective.c) and the transports. */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

/* ---- store lifecycle ---------------------------------------------------------- */

DDS_API void dds_options_init(dds_options *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->size = sizeof *opts;
    opts->method = DDS_METHOD_DEFAULT;
}

DDS_API int dds_has_fabric(void)
{
#ifdef DDS_HAVE_FABRIC
    return 1;
#else
    return 0;
#endif
}

/* Validate a communicator handle without letting MPI abort on garbage. */
static int comm_from_fortran(int comm_f, MPI_Comm *out)
{
#if defined(MPICH) || defined(MPICH_VERSION)
    /* MPICH handles encode their kind in bits 30-31 (0 = invalid) and the
     * object type in bits 26-29 (1 = communicator). */
    unsigned h = (unsigned)comm_f;
    if (((h >> 30) & 3u) == 0 || ((h >> 26) & 0xFu) != 1u)
        return dds_err(DDS_EINVAL, "%d is not an MPI communicator handle (pass comm.py2f())", comm_f);
#endif
    MPI_Comm c = MPI_Comm_f2c(comm_f);
#if defined(OPEN_MPI)
    if ((void *)c == NULL)
        return dds_err(DDS_EINVAL, "%d is not an MPI communicator handle (pass comm.py2f())", comm_f);
#endif
    if (c == MPI_COMM_NULL)
        return dds_err(DDS_EINVAL, "communicator is MPI_COMM_NULL");
    *out = c;
    return DDS_OK;
}

static int resolve_method(const dds_options *o, int *method)
{
    int m = o ? o->method : DDS_METHOD_DEFAULT;
    if (m == DDS_METHOD_DEFAULT) {
        const char *env = dds_env("DDSTORE_METHOD");
        m = DDS_METHOD_MPI;
        if (env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end != '\0' || v < DDS_METHOD_MPI || v > DDS_METHOD_FILE)
                return dds_err(DDS_EINVAL, "DDSTORE_METHOD='%s' is not 0, 1 or 2", env);
            m = (int)v;
        }
    }
    if (m < DDS_METHOD_MPI || m > DDS_METHOD_FILE)
        return dds_err(DDS_EINVAL, "method %d is not 0 (MPI), 1 (libfabric) or 2 (libfabric + files)", m);
    *method = m;
    return DDS_OK;
}

/* Name this node for node-wide resources (the window lock): host name and
 * boot id, so that nodes sharing a file system never share a name.
 * DDSTORE_TEST_NODES=k (a testing aid) splits each node's ranks of the group
 * into k consecutive blocks that act as k nodes with names of their own:
 * several nodes on one host, to test what spans nodes. */
static int split_test_nodes(dds_store *s)
{
    char host[64] = "host", boot[40] = "";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(s->host_key, sizeof s->host_key, "%s-%.8s", host, boot);
    const char *env = dds_env("DDSTORE_TEST_NODES");
    if (!env)
        return DDS_OK;
    char *end;
    long k = strtol(env, &end, 10);
    int node_size;
    MPI_Comm_size(s->node, &node_size);
    if (*end != '\0' || k < 1 || k > node_size)
        return dds_err(DDS_EINVAL, "DDSTORE_TEST_NODES='%s' is not a number of nodes from 1 to %d",
                       env, node_size);
    int node_rank;
    MPI_Comm_rank(s->node, &node_rank);
    int color = (int)((long)node_rank * k / node_size);
    MPI_Comm sub;
    int mrc = MPI_Comm_split(s->node, color, node_rank, &sub);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Comm_split (DDSTORE_TEST_NODES)");
    MPI_Comm_free(&s->node);
    s->node = sub;
    MPI_Comm_set_errhandler(s->node, MPI_ERRORS_RETURN);
    size_t len = strlen(s->host_key);
    snprintf(s->host_key + len, sizeof s->host_key - len, ".test-node%d", color);
    return DDS_OK;
}

/* Map each group rank to its rank in the node communicator (or -1). */
static int map_node_ranks(dds_store *s)
{
    int node_size, node_rank;
    MPI_Comm_size(s->node, &node_size);
    MPI_Comm_rank(s->node, &node_rank);
    int *members = malloc((size_t)node_size * sizeof *members);
    s->node_rank_of = malloc((size_t)s->group_size * sizeof *s->node_rank_of);
    if (!members || !s->node_rank_of) {
        free(members);
        return dds_err(DDS_ENOMEM, "out of memory creating the store");
    }
    int mrc = MPI_Allgather(&s->group_rank, 1, MPI_INT, members, 1, MPI_INT, s->node);
    if (mrc != MPI_SUCCESS) {
        free(members);
        return dds_err_mpi(mrc, "MPI_Allgather (node map)");
    }
    for (int g = 0; g < s->group_size; g++)
        s->node_rank_of[g] = -1;
    for (int i = 0; i < node_size; i++)
        if (members[i] >= 0 && members[i] < s->group_size)
            s->node_rank_of[members[i]] = i;
    free(members);
    s->node_local = (node_size == s->group_size);
    return DDS_OK;
}

/* s->node_server: for each group rank, the rank of its node that serves
 * this rank's gather requests by node (node shared memory holds the
 * node's shards, so any of its ranks can). Readers are spread over a
 * node's ranks by their own number, so that no rank serves the whole job.
 * Nodes are named by their lowest group rank, gathered over the group
 * (collective; after map_node_ranks). */
static int map_node_servers(dds_store *s)
{
    int n = s->group_size, lead = s->group_rank;
    for (int g = 0; g < n; g++)
        if (s->node_rank_of[g] >= 0 && g < lead)
            lead = g;
    int *leads = malloc((size_t)n * sizeof *leads), *members = malloc((size_t)n * sizeof *members);
    int *start = calloc((size_t)n + 1, sizeof *start);
    s->node_server = malloc((size_t)n * sizeof *s->node_server);
    int rc = leads && members && start && s->node_server ? DDS_OK
                                                        : dds_err(DDS_ENOMEM, "out of memory for the node map");
    rc = dds_agree(s->group, rc);
    if (rc == DDS_OK) {
        int mrc = MPI_Allgather(&lead, 1, MPI_INT, leads, 1, MPI_INT, s->group);
        rc = dds_agree(s->group, mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Allgather (node map)"));
    }
    if (rc == DDS_OK) {
        /* Each node's ranks in order (a counting sort by lead), then this
         * rank's pick among them. */
        for (int g = 0; g < n; g++)
            start[leads[g] + 1]++;
        for (int g = 0; g < n; g++)
            start[g + 1] += start[g];
        int *fill = s->node_server; /* borrowed as the fill positions */
        memcpy(fill, start, (size_t)n * sizeof *fill);
        for (int g = 0; g < n; g++)
            members[fill[leads[g]]++] = g;
        for (int g = 0; g < n; g++) {
            int k = start[leads[g] + 1] - start[leads[g]];
            s->node_server[g] = members[start[leads[g]] + s->group_rank % k];
        }
    }
    free(leads);
    free(members);
    free(start);
    if (rc) {
        free(s->node_server);
        s->node_server = NULL;
    }
    return rc;
}

static void store_release_comms(dds_store *s)
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return;
    if (s->node != MPI_COMM_NULL)
        MPI_Comm_free(&s->node);
    if (s->group != MPI_COMM_NULL)
        MPI_Comm_free(&s->group);
    if (s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
}

static char *dup_opt(const char *given, const char *env, const char *dflt)
{
    const char *v = given ? given : dds_env(env);
    if (!v)
        v = dflt;
    return v ? strdup(v) : NULL;
}

static int reopen_vars(dds_store *s);
static void var_destroy(dds_store *s, dds_var *v);

/* dds_create (reopen false) and dds_open (reopen: the saved store's
 * directory reopen_dir). */
static int create_store(dds_store **out, int comm_f, const dds_options *opts, bool reopen,
                        const char *reopen_dir)
{
    dds_err_clear();
    if (!out)
        return dds_err(DDS_EINVAL, "out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return dds_err(DDS_ESTATE, "MPI is not initialised (or already finalized)");
    if (opts && opts->size < sizeof(uint32_t) + 2 * sizeof(int32_t))
        return dds_err(DDS_EINVAL, "opts->size %u is too small (use dds_options_init)", opts->size);
    dds_options o;
    dds_options_init(&o);
    if (opts)
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);

    MPI_Comm user = MPI_COMM_NULL;
    int rc = comm_from_fortran(comm_f, &user);
    if (rc)
        return rc; /* cannot agree without a communicator: every rank sees the same bad handle */

    dds_store *s = dds_store_alloc();
    if (!s)
        return dds_err(DDS_ENOMEM, "out of memory creating the store");
    int mrc = MPI_Comm_dup(user, &s->comm);
    if (mrc != MPI_SUCCESS) {
        rc = dds_err_mpi(mrc, "MPI_Comm_dup");
        dds_store_destroy(s);
        return rc;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);

    rc = resolve_method(&o, &s->method);
    if (rc == DDS_OK) {
        s->width = o.width == 0 ? s->size : o.width;
        if (o.width < 0 || s->width > s->size || s->size % s->width != 0)
            rc = dds_err(DDS_EINVAL, "width %d does not divide the communicator size %d", (int)o.width,
                         s->size);
    }
    {
        /* Each rank's method and width may be valid on its own and still
         * differ between ranks; the groups below would then disagree on
         * their membership and on the number of collective steps (a hang).
         * Every rank takes part, also one whose own values were rejected. */
        int ok = rc == DDS_OK;
        int mine[5] = { ok, s->method, -s->method, s->width, -s->width }, all[5];
        int mrc2 = MPI_Allreduce(mine, all, 5, MPI_INT, MPI_MIN, s->comm);
        if (mrc2 != MPI_SUCCESS && rc == DDS_OK)
            rc = dds_err_mpi(mrc2, "MPI_Allreduce (method and width)");
        else if (rc == DDS_OK && all[0] && all[1] != -all[2])
            rc = dds_err(DDS_EMISMATCH, "ranks disagree on the method (%d to %d); pass the same "
                         "method on every rank", all[1], -all[2]);
        else if (rc == DDS_OK && all[0] && all[3] != -all[4])
            rc = dds_err(DDS_EMISMATCH, "ranks disagree on the width (%d to %d); pass the same "
                         "width on every rank", all[3], -all[4]);
    }
    if (rc == DDS_OK && s->method != DDS_METHOD_MPI && !dds_has_fabric())
        rc = dds_err(DDS_ENOTSUP,
                     "method %d needs libfabric, but libddstore was built without it (use method 0)",
                     s->method);
    if (rc == DDS_OK && reopen && (!reopen_dir || !*reopen_dir))
        rc = dds_err(DDS_EINVAL, "storage_dir is NULL or empty: name the directory a store was saved in");
    else if (rc == DDS_OK && reopen && o.storage_dir && strcmp(o.storage_dir, reopen_dir) != 0)
        rc = dds_err(DDS_EINVAL, "opts->storage_dir ('%s') differs from storage_dir ('%s'): leave it NULL",
                     o.storage_dir, reopen_dir);
    if (rc == DDS_OK)
        rc = dds_step_setup(s);
    if (rc == DDS_OK) {
        s->fabric_name = dup_opt(o.fabric, "DDSTORE_FABRIC", NULL);
        s->handshake_dir = dup_opt(o.handshake_dir, "DDSTORE_HANDSHAKE_DIR", "./ddstore_hs");
        s->nic_map = o.nic_map ? strdup(o.nic_map) : NULL; /* else DDSTORE_NIC_MAP, read by nic.c */
        if (!s->handshake_dir || (o.nic_map && !s->nic_map))
            rc = dds_err(DDS_ENOMEM, "out of memory creating the store");
    }
    rc = dds_agree(s->comm, rc);
    if (rc)
        goto fail;
    rc = dds_gather_setup(s);
    if (rc)
        goto fail;
    /* The one place that maps a method to its transport. */
    s->tp = s->method == DDS_METHOD_MPI ? &dds_transport_rma : &dds_transport_fabric;

    s->group_index = s->rank / s->width;
    mrc = MPI_Comm_split(s->comm, s->group_index, s->rank, &s->group);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_set_errhandler(s->group, MPI_ERRORS_RETURN);
    rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Comm_split (groups)");
    rc = dds_agree(s->comm, rc);
    if (rc)
        goto fail;
    MPI_Comm_rank(s->group, &s->group_rank);
    MPI_Comm_size(s->group, &s->group_size);

    mrc = MPI_Comm_split_type(s->group, MPI_COMM_TYPE_SHARED, s->group_rank, MPI_INFO_NULL, &s->node);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_set_errhandler(s->node, MPI_ERRORS_RETURN);
    rc = mrc == MPI_SUCCESS ? split_test_nodes(s) : dds_err_mpi(mrc, "MPI_Comm_split_type (node)");
    if (rc == DDS_OK)
        rc = map_node_ranks(s);
    rc = dds_agree(s->comm, rc);
    if (rc == DDS_OK)
        rc = map_node_servers(s);
    if (rc)
        goto fail;

    /* Before the probe: file-backed shards need no MPI shared window. */
    rc = reopen ? dds_storage_reopen(s, reopen_dir) : dds_storage_setup(s, o.storage_dir);
    if (rc)
        goto fail;

    rc = dds_shm_probe(s);
    if (rc)
        goto fail;

    rc = s->tp->open(s);
    if (rc)
        goto fail;
    s->steps_by_message = dds_gather_posts_early(s);
    if (reopen) {
        rc = reopen_vars(s);
        if (rc) {
            for (int64_t i = s->nvars - 1; i >= 0; i--)
                var_destroy(s, s->vars[i]);
            s->nvars = 0;
            if (s->tp->close)
                s->tp->close(s);
            goto fail;
        }
    }
    dds_debug("rank %d: store %s: method %d, group %d (%d of %d), node-local %d, shm %d, storage %s",
              s->rank, reopen ? "reopened" : "created", s->method, s->group_index, s->group_rank,
              s->group_size, (int)s->node_local, (int)s->shm_enabled,
              dds_storage_dir(s) ? dds_storage_dir(s) : "none");
    dds_store_track(s, true);
    *out = s;
    return DDS_OK;
fail:
    dds_storage_close(s, false);
    store_release_comms(s);
    dds_store_destroy(s);
    return rc;
}

DDS_API int dds_create(dds_store **out, int comm_f, const dds_options *opts)
{
    return create_store(out, comm_f, opts, false, NULL);
}

DDS_API int dds_open(dds_store **out, int comm_f, const char *storage_dir, const dds_options *opts)
{
    return create_store(out, comm_f, opts, true, storage_dir);
}

static void var_destroy(dds_store *s, dds_var *v)
{
    if (s->tp->release)
        s->tp->release(s, v);
    if (!s->is_reader)
        dds_shard_release(s, v);
    dds_var_free(v);
}

DDS_API int dds_free(dds_store *s)
{
    if (!s)
        return DDS_OK;
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    dds_store_track(s, false);
    int finalized = 0;
    if (!s->is_reader)
        MPI_Finalized(&finalized);
    if (finalized) {
        /* MPI is gone: its objects cannot be released any more. Keep the
         * memory (it may belong to MPI) and report. */
        s->magic = 0;
        return dds_err(DDS_ESTATE, "MPI was finalized before the store was freed; "
                                   "free stores before MPI_Finalize");
    }
    if (!s->is_reader && !s->broken) {
        /* Ranks that read more batches than this one are finished first:
         * each step that meets their reads serves one of them. */
        bool served = true;
        while (served && rc == DDS_OK) {
            int64_t rounds = 0; /* of a gather read it serves: this rank answers requests */
            rc = dds_step_val(s, DDS_COLL_FREE, DDS_OK, &served, &rounds);
            if (rc == DDS_OK && served)
                rc = dds_read_serve(s, rounds);
        }
        if (rc && !s->broken) {
            dds_store_track(s, true); /* out of step, not freed: free it again later */
            return rc;
        }
    }
    if (s->broken) {
        /* The group's collectives can no longer match: release nothing that
         * needs them (the memory is lost until the process ends). */
        dds_debug("rank %d: store freed locally only after a collective timed out", s->rank);
        s->magic = 0;
        return rc == DDS_ETIMEDOUT ? rc : DDS_OK;
    }
    for (int64_t i = s->nvars - 1; i >= 0; i--)
        var_destroy(s, s->vars[i]);
    s->nvars = 0;
    if (s->tp->close)
        s->tp->close(s);
    dds_storage_close(s, true);
    if (!s->is_reader)
        store_release_comms(s);
    dds_store_destroy(s);
    return DDS_OK;
}

/* dds_store_info, dds_var_info and dds_stats_info start with the caller's
 * `uint32_t size` and are filled up to it (they only grow at their end):
 * the caller's struct must be there and say its size. */
static int sized_check(const void *info)
{
    if (!info || *(const uint32_t *)info < sizeof(uint32_t))
        return dds_err(DDS_EINVAL, "info is NULL or info->size is not set");
    return DDS_OK;
}

/* Start of a query of the store into a size-first struct. */
static int sized_begin(const dds_store *s, const void *info)
{
    int rc = dds_store_check(s);
    return rc ? rc : sized_check(info);
}

DDS_API int dds_store_info_get(const dds_store *s, dds_store_info *info)
{
    int rc = sized_begin(s, info);
    if (rc)
        return rc;
    dds_store_info r = { 0 };
    r.size = info->size;
    r.method = s->method;
    r.is_reader = s->is_reader;
    r.group_size = s->group_size;
    if (s->is_reader) {
        r.rank = r.group_rank = r.group_index = -1;
    } else {
        r.rank = s->rank;
        r.comm_size = s->size;
        r.group_rank = s->group_rank;
        r.group_index = s->group_index;
        r.n_groups = s->size / s->width;
        r.node_local = s->node_local && s->shm_enabled;
        r.reads_collective = dds_reads_collective(s);
        r.node_shm = s->shm_enabled;
    }
    memcpy(info, &r, info->size < sizeof r ? info->size : sizeof r);
    return DDS_OK;
}

/* Where this rank's shards live and how much of them is in memory
 * (dds_store_property's storage keys). */
static void describe_storage(const dds_store *s, const char *key, char *buf, size_t cap)
{
    const char *dir = dds_storage_dir(s);
    if (strcmp(key, "storage") == 0) {
        snprintf(buf, cap, "%s", s->is_reader ? "remote" : dir ? "files" : s->shm_enabled ? "node-shm" : "memory");
    } else if (strcmp(key, "storage_dir") == 0) {
        snprintf(buf, cap, "%s", dir ? dir : "");
    } else if (strcmp(key, "storage_state") == 0) {
        static const char *states[] = { "memory", "written", "saved", "reopened" };
        snprintf(buf, cap, "%s", s->is_reader ? "remote" : states[dds_storage_state(s)]);
    } else if (strcmp(key, "storage_free_bytes") == 0) {
        /* What the shards draw on: the storage directory's file system,
         * /dev/shm for node shared memory, else the memory available. */
        double avail = -1;
        struct statvfs vfs;
        const char *where = dir ? dir : s->shm_enabled ? "/dev/shm" : NULL;
        if (where && statvfs(where, &vfs) == 0)
            avail = (double)vfs.f_bavail * (double)vfs.f_frsize;
        else if (!where) {
            long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
            avail = pages > 0 && page > 0 ? (double)pages * (double)page : -1;
        }
        snprintf(buf, cap, "%.0f", avail);
    } else {
        uint64_t bytes = 0, resident = 0;
        pthread_rwlock_rdlock((pthread_rwlock_t *)&s->vars_lock);
        for (int64_t i = 0; !s->is_reader && i < s->nvars; i++) {
            uint64_t b, r;
            dds_shard_resident(s->vars[i], &b, &r);
            bytes += b;
            resident += r;
        }
        pthread_rwlock_unlock((pthread_rwlock_t *)&s->vars_lock);
        snprintf(buf, cap, "%" PRIu64, strcmp(key, "shard_bytes") == 0 ? bytes : resident);
    }
}

DDS_API int dds_store_property(const dds_store *s, const char *key, char *buf, size_t buflen)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    if (!key || (!buf && buflen))
        return dds_err(DDS_EINVAL, "store property: %s is NULL", key ? "buf" : "key");
    char text[4200] = "";
    bool why = strcmp(key, "domain_choice") == 0;
    if (strcmp(key, "transport") == 0 && s->tp->describe)
        s->tp->describe(s, text, sizeof text);
    else if (strcmp(key, "read_protocol") == 0)
        dds_gather_describe(s, text, sizeof text);
    else if (why || strcmp(key, "domain") == 0) {
        if (s->tp->describe_domain)
            s->tp->describe_domain(s, why, text, sizeof text);
    } else if (strcmp(key, "storage") == 0 || strcmp(key, "storage_dir") == 0 ||
               strcmp(key, "shard_bytes") == 0 || strcmp(key, "resident_bytes") == 0 ||
               strcmp(key, "storage_free_bytes") == 0 || strcmp(key, "storage_state") == 0)
        describe_storage(s, key, text, sizeof text);
    else
        return dds_err(DDS_ENOENT, "no store property '%s' (known: transport, read_protocol, domain, domain_choice, "
                       "storage, storage_dir, storage_state, shard_bytes, resident_bytes, "
                       "storage_free_bytes)", key);
    size_t len = strlen(text);
    if (buflen)
        snprintf(buf, buflen, "%s", text);
    if (len >= buflen)
        return dds_err(DDS_ERANGE, "store property '%s' needs %zu bytes, got %zu", key, len + 1, buflen);
    return DDS_OK;
}

/* ---- adding variables ------------------------------------------------------------ */

/* Local checks of add/init arguments (no communication). */
static int check_new_var(dds_store *s, const char *name, const void *data, int64_t nrows,
                         int64_t row_bytes, bool need_data)
{
    int rc = dds_check_name(name);
    if (rc)
        return rc;
    if (nrows < 0)
        return dds_err(DDS_EINVAL, "variable '%s': negative row count %lld", name, (long long)nrows);
    if (row_bytes < 1)
        return dds_err(DDS_EINVAL, "variable '%s': bytes per row must be at least 1 (got %lld)", name,
                       (long long)row_bytes);
    if (nrows > 0 && row_bytes > INT64_MAX / nrows)
        return dds_err(DDS_EOVERFLOW, "variable '%s': %lld rows x %lld bytes overflows 2^63", name,
                       (long long)nrows, (long long)row_bytes);
    if (need_data && nrows > 0 && !data)
        return dds_err(DDS_EINVAL, "variable '%s': data is NULL for %lld rows", name, (long long)nrows);
    if (dds_var_find(s, name))
        return dds_err(DDS_EEXIST, "variable '%s' already exists", name);
    return dds_storage_check_writable(s, name);
}

/* All ranks must agree on name, row size and dtype; rank 0 is the reference. */
static int check_same_everywhere(dds_store *s, int rc, const char *name, int64_t row_bytes,
                                 uint32_t dtype)
{
    struct {
        char name[DDS_NAME_MAX + 1];
        int64_t row_bytes;
        uint32_t dtype;
    } ref;
    memset(&ref, 0, sizeof ref);
    if (s->rank == 0) {
        if (name)
            strncpy(ref.name, name, DDS_NAME_MAX);
        ref.row_bytes = row_bytes;
        ref.dtype = dtype;
    }
    int mrc = MPI_Bcast(&ref, sizeof ref, MPI_BYTE, 0, s->comm);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Bcast (variable metadata)");
    if (rc)
        return rc;
    if (strncmp(ref.name, name, DDS_NAME_MAX) != 0)
        return dds_err(DDS_EMISMATCH, "variable name '%s' differs from rank 0's '%s'", name, ref.name);
    if (ref.row_bytes != row_bytes)
        return dds_err(DDS_EMISMATCH, "variable '%s': %lld bytes per row differs from rank 0's %lld",
                       name, (long long)row_bytes, (long long)ref.row_bytes);
    if (ref.dtype != dtype)
        return dds_err(DDS_EMISMATCH, "variable '%s': dtype tag %u differs from rank 0's %u", name,
                       dtype, ref.dtype);
    return DDS_OK;
}

static int compute_offsets(dds_store *s, dds_var *v)
{
    v->offsets = calloc((size_t)s->group_size + 1, sizeof *v->offsets);
    v->peer_base = calloc((size_t)s->group_size, sizeof *v->peer_base);
    /* A rank short of memory still takes part in the allgather (into a
     * scratch buffer), so that the others do not wait for it; the caller
     * agrees on the result. */
    int64_t *counts = v->offsets ? v->offsets + 1 : calloc((size_t)s->group_size, sizeof *counts);
    int mrc = counts ? MPI_Allgather(&v->local_rows, 1, MPI_INT64_T, counts, 1, MPI_INT64_T, s->group)
                     : MPI_ERR_NO_MEM;
    if (counts && counts != v->offsets + 1)
        free(counts);
    if (!v->offsets || !v->peer_base)
        return dds_err(DDS_ENOMEM, "out of memory adding variable '%s'", v->name);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Allgather (row counts)");
    for (int r = 0; r < s->group_size; r++) {
        if (v->offsets[r + 1] > INT64_MAX - v->offsets[r])
            return dds_err(DDS_EOVERFLOW, "variable '%s': total row count overflows", v->name);
        v->offsets[r + 1] += v->offsets[r];
    }
    int64_t total = v->offsets[s->group_size];
    if (total == 0)
        return dds_err(DDS_ERANGE, "variable '%s': the group holds no row at all (every rank passed 0 rows)",
                       v->name);
    if (total > INT64_MAX / v->row_bytes)
        return dds_err(DDS_EOVERFLOW, "variable '%s': %lld rows x %lld bytes overflows 2^63", v->name,
                       (long long)total, (long long)v->row_bytes);
    return DDS_OK;
}

static int shard_alloc_cb(dds_store *s, void *v) { return dds_shard_alloc(s, v); }

/* The rest of add/init, and of a reopen: allocate (or map) v's shard,
 * write `data` into it (NULL: zeros, or a reopened file's rows), expose it
 * and append v to the store. rc: the agreed result so far (v is freed when
 * it is not DDS_OK). Collective over the communicator. */
static int var_place(dds_store *s, dds_var *v, int rc, const void *data)
{
    if (rc == DDS_OK) {
        int group_rc = dds_with_window_lock(s, shard_alloc_cb, v);
        rc = dds_agree(s->comm, group_rc);
        if (rc && group_rc == DDS_OK)
            dds_shard_release(s, v); /* this group allocated, another one failed */
        else if (rc)
            v->base = NULL; /* dds_shard_alloc cleaned up after itself */
    }
    int wrc = DDS_OK; /* a write that failed here (a full storage directory) fails the add everywhere */
    if (rc == DDS_OK) {
        size_t bytes = (size_t)(v->local_rows * v->row_bytes);
        if (data && bytes)
            wrc = dds_shard_write(v, 0, data, bytes);
        else if (bytes && !v->file)
            memset(v->base, 0, bytes); /* a file's rows are zeros until written, or the saved rows */
        if (s->tp->expose) {
            rc = s->tp->expose(s, v);
            rc = dds_agree(s->comm, rc);
            if (rc) {
                /* Another group may have failed after this one exposed v:
                 * drop its registration (and method-2 file) first. A no-op
                 * where expose failed (v->fab is NULL there). */
                s->tp->release(s, v);
                dds_shard_release(s, v);
            }
        }
    }
    if (rc == DDS_OK) {
        rc = wrc;
        if (rc == DDS_OK)
            rc = dds_shard_protect(s, v, true);
        if (rc == DDS_OK)
            rc = dds_rma_sync_local(s, v);
        rc = dds_agree(s->comm, rc); /* also a barrier: no rank reads before every shard is written */
        if (rc) {
            if (s->tp->release)
                s->tp->release(s, v);
            dds_shard_release(s, v);
        }
    }
    if (rc == DDS_OK)
        rc = dds_var_append(s, v);
    if (rc)
        dds_var_free(v);
    return rc;
}

/* The variables of a saved store, mapped from its files (dds_open). */
static int reopen_vars(dds_store *s)
{
    int64_t n = dds_storage_nvars(s);
    for (int64_t i = 0; i < n; i++) {
        dds_var *v = calloc(1, sizeof *v);
        int rc = DDS_OK;
        if (v) {
            v->shm_win = v->win = MPI_WIN_NULL;
            rc = dds_storage_var(s, i, v);
        } else {
            rc = dds_err(DDS_ENOMEM, "out of memory opening the store");
        }
        rc = dds_agree(s->comm, rc);
        if (rc && v && v->file) {
            free(v->file);
            v->file = NULL;
        }
        rc = var_place(s, v, rc, NULL);
        if (rc)
            return rc;
    }
    return DDS_OK;
}

static int var_create(dds_store *s, const char *name, const void *data, int64_t nrows,
                      int64_t row_bytes, uint32_t dtype, bool need_data)
{
    int rc = dds_core_begin(s, "cannot add variables");
    if (rc)
        return rc; /* no communicator to agree over; a freed store is freed on every rank */
    rc = check_new_var(s, name, data, nrows, row_bytes, need_data);
    /* First a tagged step over the group, so that a rank still reading
     * (method 0) meets this add in an error, not in a blocking broadcast. */
    int src = dds_step(s, DDS_COLL_ADD, DDS_OK, NULL);
    if (src)
        return src;
    rc = check_same_everywhere(s, rc, name, row_bytes, dtype);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;

    dds_var *v = calloc(1, sizeof *v);
    if (v) {
        strncpy(v->name, name, DDS_NAME_MAX);
        v->dtype = dtype;
        v->row_bytes = row_bytes;
        v->local_rows = nrows;
        v->shm_win = v->win = MPI_WIN_NULL;
        rc = compute_offsets(s, v);
    } else {
        rc = dds_err(DDS_ENOMEM, "out of memory adding variable '%s'", name);
    }
    rc = dds_agree(s->comm, rc);
    return var_place(s, v, rc, need_data ? data : NULL);
}

DDS_API int dds_add(dds_store *s, const char *name, const void *data, int64_t nrows,
                    int64_t row_bytes, uint32_t dtype)
{
    return var_create(s, name, data, nrows, row_bytes, dtype, true);
}

DDS_API int dds_init(dds_store *s, const char *name, int64_t nrows, int64_t row_bytes, uint32_t dtype)
{
    return var_create(s, name, NULL, nrows, row_bytes, dtype, false);
}

DDS_API int dds_update(dds_store *s, const char *name, const void *data, int64_t nrows, int64_t offset)
{
    int rc = dds_core_begin(s, "cannot update variables");
    if (rc)
        return rc;
    dds_var *v;
    rc = dds_var_get(s, name, &v);
    if (rc)
        return rc;
    if (nrows < 0 || offset < 0)
        return dds_err(DDS_EINVAL, "variable '%s': negative row count or offset", name);
    if (offset > v->local_rows || nrows > v->local_rows - offset)
        return dds_err(DDS_ERANGE,
                       "variable '%s': %lld rows at local row %lld are outside this rank's %lld local rows",
                       name, (long long)nrows, (long long)offset, (long long)v->local_rows);
    if (nrows > 0 && !data)
        return dds_err(DDS_EINVAL, "variable '%s': data is NULL", name);
    rc = dds_storage_check_writable(s, name);
    if (rc)
        return rc;
    dds_var *gen = atomic_load(&v->gen); /* set by dds_init_versioned on core ranks */
    if (nrows && gen) /* versioned: readers see the old rows or the new ones, never a mix */
        return dds_gen_write(s, v, gen, data, nrows, offset);
    if (nrows)
        return dds_shard_write(v, (size_t)(offset * v->row_bytes), data, (size_t)(nrows * v->row_bytes));
    return DDS_OK;
}

/* ---- queries --------------------------------------------------------------------- */

static const dds_var *query_var(const dds_store *s, const char *name, int *rc)
{
    *rc = dds_store_check(s);
    if (*rc)
        return NULL;
    *rc = dds_check_name(name);
    if (*rc)
        return NULL;
    const dds_var *v = dds_var_find(s, name);
    if (!v)
        *rc = dds_err(DDS_ENOENT, "no variable named '%s' in this store", name);
    return v;
}

DDS_API int dds_query(const dds_store *s, const char *name, dds_var_info *info)
{
    int rc;
    const dds_var *v = query_var(s, name, &rc);
    if (!v)
        return rc;
    rc = sized_check(info);
    if (rc)
        return rc;
    dds_var_info r = { 0 };
    r.size = info->size;
    r.dtype = v->dtype;
    r.global_rows = v->offsets[s->group_size];
    r.row_bytes = v->row_bytes;
    r.group_size = s->group_size;
    if (!s->is_reader) {
        r.local_rows = v->local_rows;
        r.first_row = v->offsets[s->group_rank];
    }
    memcpy(info, &r, info->size < sizeof r ? info->size : sizeof r);
    return DDS_OK;
}

DDS_API int dds_var_offsets(const dds_store *s, const char *name, int64_t *offsets, int64_t n)
{
    int rc;
    const dds_var *v = query_var(s, name, &rc);
    if (!v)
        return rc;
    if (!offsets)
        return dds_err(DDS_EINVAL, "offsets is NULL");
    if (n < s->group_size + 1)
        return dds_err(DDS_ERANGE, "offsets holds %lld entries, %d needed", (long long)n,
                       s->group_size + 1);
    memcpy(offsets, v->offsets, ((size_t)s->group_size + 1) * sizeof *offsets);
    return DDS_OK;
}

/* Index in s->vars of listed variable number `index` (generation counters
 * are not listed), or -1; *listed: how many are listed. The caller holds
 * vars_lock. */
static int64_t listed_var(const dds_store *s, int64_t index, int64_t *listed)
{
    int64_t visible = 0, at = -1;
    for (int64_t i = 0; i < s->nvars; i++)
        if (!dds_gen_hidden(s->vars[i]->name) && visible++ == index)
            at = i;
    *listed = visible;
    return at;
}

DDS_API int dds_var_count(const dds_store *s, int64_t *count)
{
    int rc = dds_store_check_out(s, count, "count");
    if (rc)
        return rc;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&s->vars_lock);
    listed_var(s, -1, count);
    pthread_rwlock_unlock((pthread_rwlock_t *)&s->vars_lock);
    return DDS_OK;
}

DDS_API int dds_var_name(const dds_store *s, int64_t index, char *buf, size_t buflen)
{
    int rc = dds_store_check_out(s, buf, "buf");
    if (rc)
        return rc;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&s->vars_lock);
    int64_t visible, at = listed_var(s, index, &visible); /* index counts listed variables only */
    if (index < 0 || at < 0)
        rc = dds_err(DDS_ERANGE, "variable index %lld is out of range [0, %lld)", (long long)index,
                     (long long)visible);
    else if (strlen(s->vars[at]->name) >= buflen)
        rc = dds_err(DDS_ERANGE, "buffer of %zu bytes is too small for the name", buflen);
    else
        strcpy(buf, s->vars[at]->name);
    pthread_rwlock_unlock((pthread_rwlock_t *)&s->vars_lock);
    return rc;
}

DDS_API int dds_stats(const dds_store *s, dds_stats_info *info)
{
    int rc = sized_begin(s, info);
    if (rc)
        return rc;
    dds_stats_info r = { .size = info->size }; /* the rest zero */
    r.read_calls = atomic_load(&s->st_calls);
    r.rows_local = atomic_load(&s->st_rows_local);
    r.rows_remote = atomic_load(&s->st_rows_remote);
    r.bytes_local = atomic_load(&s->st_bytes_local);
    r.bytes_remote = atomic_load(&s->st_bytes_remote);
    r.read_seconds = (double)atomic_load(&s->st_read_ns) * 1e-9;
    r.gather_requests = atomic_load(&s->st_gather_requests);
    r.gather_bytes = atomic_load(&s->st_gather_bytes);
    memcpy(info, &r, info->size < sizeof r ? info->size : sizeof r);
    return DDS_OK;
}

DDS_API int dds_stats_reset(dds_store *s)
{
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    atomic_store(&s->st_calls, 0);
    atomic_store(&s->st_rows_local, 0);
    atomic_store(&s->st_rows_remote, 0);
    atomic_store(&s->st_bytes_local, 0);
    atomic_store(&s->st_bytes_remote, 0);
    atomic_store(&s->st_read_ns, 0);
    atomic_store(&s->st_gather_requests, 0);
    atomic_store(&s->st_gather_bytes, 0);
    return DDS_OK;
}

/* ---- readers (method 2) ---------------------------------------------------------- */

DDS_API int dds_join(dds_store **out, const char *handshake_dir, int n_core, double timeout_s)
{
    dds_err_clear();
    if (!out)
        return dds_err(DDS_EINVAL, "out is NULL");
    *out = NULL;
    return dds_fab_join(out, handshake_dir, n_core, timeout_s);
}

DDS_API int dds_attach(dds_store *s, const char *name)
{
    dds_err_clear();
    int rc = dds_store_check(s);
    if (rc)
        return rc;
    rc = dds_check_name(name);
    if (rc)
        return rc;
    if (!s->is_reader)
        return dds_var_find(s, name) ? DDS_OK
                                     : dds_err(DDS_ENOENT, "no variable named '%s' in this store", name);
    if (dds_var_find(s, name))
        return DDS_OK;
    return dds_fab_attach(s, name);
}
