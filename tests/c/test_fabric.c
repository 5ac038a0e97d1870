/* Plain-C test of methods 1 and 2 (libfabric) through the public header.
 *
 * Run under mpiexec with DDSTORE_METHOD=1 (or 2: a private handshake
 * directory is used unless DDSTORE_HANDSHAKE_DIR is set),
 * DDSTORE_FABRIC=shm or tcp (FI_TCP_IFACE=lo) and DDSTORE_NODE_LOCAL=0, so
 * that every read of another rank's rows goes through libfabric. Checks:
 * bit-exact rows through get, get_batch and get_ranges (spanning shards,
 * zero-row ranks, repeats, large transfers), registered and unregistered
 * receive buffers, reads from 4 threads at once (DDS_TEST_THREADS), reads completing while the
 * owning rank computes without entering the library, and a clear error for
 * an absent provider. Any failure aborts the whole job. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

#include "check.h"

static int rank, size;

static void fill_rows(int k, int64_t first, int64_t n, int64_t rb, uint8_t *buf)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < rb; b++)
            buf[i * rb + b] = byte_of(k, first + i, b);
}

static int rows_ok(int k, const int64_t *rows, int64_t n, int64_t rb, const uint8_t *buf)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < rb; b++)
            if (buf[i * rb + b] != byte_of(k, rows[i], b))
                return 0;
    return 1;
}

static int range_ok(int k, int64_t start, int64_t n, int64_t rb, const uint8_t *buf)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < rb; b++)
            if (buf[i * rb + b] != byte_of(k, start + i, b))
                return 0;
    return 1;
}

/* Rows per rank: uneven, rank 1 (if any) holds none. */
static int64_t rows_of(int r, int64_t base) { return r == 1 ? 0 : base + 3 * r; }

typedef struct var_desc {
    int k;
    char name[32];
    int64_t rb, total, base;
} var_desc;

static void add_var(dds_store *s, var_desc *d, int k, int64_t rb, int64_t base)
{
    d->k = k;
    d->rb = rb;
    d->base = base;
    snprintf(d->name, sizeof d->name, "fab/%d", k);
    int64_t first = 0, total = 0;
    for (int r = 0; r < size; r++) {
        if (r < rank)
            first += rows_of(r, base);
        total += rows_of(r, base);
    }
    d->total = total;
    int64_t mine = rows_of(rank, base);
    uint8_t *buf = malloc((size_t)((mine + 1) * rb));
    fill_rows(k, first, mine, rb, buf);
    OK(dds_add(s, d->name, buf, mine, rb, DDS_DTYPE_UINT8));
    free(buf);
}

static uint64_t rng_state;
static int64_t rnd(int64_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)((rng_state >> 33) % (uint64_t)n);
}

static void read_suite(dds_store *s, const var_desc *d)
{
    int64_t rb = d->rb, total = d->total;
    uint8_t *out = malloc((size_t)(total * rb) + 1);
    /* Whole variable in one get: spans every shard, including empty ones. */
    memset(out, 0, (size_t)(total * rb));
    OK(dds_get(s, d->name, out, 0, total));
    CHECK(range_ok(d->k, 0, total, rb, out), "%s: whole get", d->name);
    /* Every single row, and every 2-row window (crosses shard boundaries). */
    for (int64_t r = 0; r < total; r++) {
        OK(dds_get(s, d->name, out, r, 1));
        CHECK(range_ok(d->k, r, 1, rb, out), "%s: row %lld", d->name, (long long)r);
        if (r + 2 <= total) {
            OK(dds_get(s, d->name, out, r, 2));
            CHECK(range_ok(d->k, r, 2, rb, out), "%s: rows %lld..+2", d->name, (long long)r);
        }
    }
    /* Zero rows, also at the very end. */
    OK(dds_get(s, d->name, out, total, 0));
    OK(dds_get(s, d->name, out, 0, 0));
    CHECK(dds_get(s, d->name, out, total, 1) == DDS_ERANGE, "read past the end");
    /* Batches: random rows with repeats, then a descending run. */
    int64_t nb = 300;
    int64_t *rows = malloc((size_t)nb * sizeof *rows);
    uint8_t *bout = malloc((size_t)(nb * rb));
    for (int it = 0; it < 5; it++) {
        for (int64_t i = 0; i < nb; i++)
            rows[i] = rnd(total);
        OK(dds_get_batch(s, d->name, bout, rows, nb));
        CHECK(rows_ok(d->k, rows, nb, rb, bout), "%s: batch %d", d->name, it);
    }
    for (int64_t i = 0; i < total && i < nb; i++)
        rows[i] = total - 1 - i;
    int64_t nd = total < nb ? total : nb;
    OK(dds_get_batch(s, d->name, bout, rows, nd));
    CHECK(rows_ok(d->k, rows, nd, rb, bout), "%s: descending batch", d->name);
    OK(dds_get_batch(s, d->name, bout, NULL, 0));
    /* Ranges: overlapping, empty, spanning. */
    int64_t starts[4] = { 0, total / 2, total - 1, 1 };
    int64_t counts[4] = { total / 2 + 1, 0, 1, total - 1 };
    int64_t sum = 0;
    for (int i = 0; i < 4; i++)
        sum += counts[i];
    uint8_t *rout = malloc((size_t)(sum * rb));
    OK(dds_get_ranges(s, d->name, rout, starts, counts, 4));
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        CHECK(range_ok(d->k, starts[i], counts[i], rb, rout + off * rb), "%s: range %d", d->name, i);
        off += counts[i];
    }
    free(rout);
    free(rows);
    free(bout);
    free(out);
}

static void recv_suite(dds_store *s, const var_desc *d)
{
    int64_t rb = d->rb, n = d->total < 64 ? d->total : 64;
    uint8_t *buf = malloc((size_t)(n * rb) + 64);
    OK(dds_register_recv(s, buf, (size_t)(n * rb) + 64));
    /* Registering the same buffer again is counted, not an error. */
    OK(dds_register_recv(s, buf, (size_t)(n * rb) + 64));
    CHECK(dds_register_recv(s, buf, 8) == DDS_EEXIST, "re-register with another size");
    for (int it = 0; it < 20; it++) {
        int64_t start = rnd(d->total - n + 1);
        OK(dds_get(s, d->name, buf + 7, start, n)); /* inside the registered range, misaligned */
        CHECK(range_ok(d->k, start, n, rb, buf + 7), "%s: into registered buffer", d->name);
    }
    int64_t rows[16];
    for (int i = 0; i < 16; i++)
        rows[i] = rnd(d->total);
    OK(dds_get_batch(s, d->name, buf, rows, 16 < n ? 16 : n));
    CHECK(rows_ok(d->k, rows, 16 < n ? 16 : n, rb, buf), "%s: batch into registered buffer", d->name);
    OK(dds_unregister_recv(s, buf));
    OK(dds_unregister_recv(s, buf));
    CHECK(dds_unregister_recv(s, buf) == DDS_ENOENT, "unregister twice more");
    int x;
    CHECK(dds_unregister_recv(s, &x) == DDS_ENOENT, "unregister a never registered buffer");
    /* A buffer straddling a registered one is read through a per-call registration. */
    OK(dds_register_recv(s, buf, (size_t)rb));
    OK(dds_get(s, d->name, buf, 0, n));
    CHECK(range_ok(d->k, 0, n, rb, buf), "%s: partly registered buffer", d->name);
    OK(dds_unregister_recv(s, buf));
    free(buf);
}

typedef struct thread_arg {
    dds_store *s;
    const var_desc *d;
    uint64_t seed;
    int ok;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    int64_t rb = a->d->rb;
    int64_t rows[97];
    uint8_t *out = malloc((size_t)(97 * rb));
    uint64_t st = a->seed;
    a->ok = 1;
    for (int it = 0; it < 60 && a->ok; it++) {
        for (int i = 0; i < 97; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            rows[i] = (int64_t)((st >> 33) % (uint64_t)a->d->total);
        }
        if (dds_get_batch(a->s, a->d->name, out, rows, 97) != DDS_OK || !rows_ok(a->d->k, rows, 97, rb, out))
            a->ok = 0;
        if (dds_get(a->s, a->d->name, out, rows[0], 1) != DDS_OK || !range_ok(a->d->k, rows[0], 1, rb, out))
            a->ok = 0;
    }
    free(out);
    return NULL;
}

/* Reader threads at once: DDS_TEST_THREADS (1..16, default 4; the
 * ThreadSanitizer run of tests/c/tsan-tests.sh uses 8). */
static void thread_suite(dds_store *s, const var_desc *d)
{
    enum { MAX_THREADS = 16 };
    int n = 4;
    const char *e = getenv("DDS_TEST_THREADS");
    if (e && atoi(e) >= 1 && atoi(e) <= MAX_THREADS)
        n = atoi(e);
    pthread_t th[MAX_THREADS];
    thread_arg a[MAX_THREADS];
    for (int i = 0; i < n; i++) {
        a[i] = (thread_arg){ .s = s, .d = d, .seed = (uint64_t)(rank * 16 + i + 1), .ok = 0 };
        CHECK(pthread_create(&th[i], NULL, thread_main, &a[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].ok, "thread %d read wrong data or failed", i);
    }
}

/* The last rank computes without entering the library (or libfabric) while
 * every other rank reads its rows (more reads than a provider's command
 * queue holds): the library must serve them without the owner's
 * cooperation. The owner computes until the readers are done (a nonblocking
 * barrier it tests between slices of work; MPI's progress does nothing for
 * libfabric's), for at most `limit` seconds: reads that need the owner never
 * finish while it computes, and the owner then reports it. No speed is
 * measured: a loaded machine only makes the reads slower.
 * DDS_TEST_SKIP_BUSY=1 skips it. */
static void busy_owner_suite(dds_store *s, const var_desc *d)
{
    const double limit = 60.0;
    int owner = size - 1 == 1 ? 0 : size - 1; /* rank 1 holds no rows */
    const char *skip = getenv("DDS_TEST_SKIP_BUSY");
    if (size < 2 || (skip && strcmp(skip, "1") == 0))
        return;
    int64_t first = 0;
    for (int r = 0; r < owner; r++)
        first += rows_of(r, d->base);
    int64_t n = rows_of(owner, d->base);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request done_req;
    if (rank == owner) {
        MPI_Ibarrier(MPI_COMM_WORLD, &done_req);
        double t0 = now();
        int done = 0;
        volatile double acc = 0;
        while (!done && now() - t0 < limit) {
            for (int i = 0; i < 100000; i++)
                acc += (double)i * 1e-9;
            MPI_Test(&done_req, &done, MPI_STATUS_IGNORE);
        }
        CHECK(done, "the other ranks' reads of this rank's rows did not finish in %.0f s while it "
                    "computed outside the library: they need the owner's cooperation", limit);
    } else {
        uint8_t *out = malloc((size_t)(n * d->rb));
        int reads = 0;
        while (reads < 1200) { /* more than shm's 1024-entry command queue */
            int64_t r = first + (reads % n);
            OK(dds_get(s, d->name, out, r, 1));
            CHECK(range_ok(d->k, r, 1, d->rb, out), "read during computation");
            reads++;
        }
        OK(dds_get(s, d->name, out, first, n));
        CHECK(range_ok(d->k, first, n, d->rb, out), "bulk read during computation");
        free(out);
        MPI_Ibarrier(MPI_COMM_WORLD, &done_req);
        MPI_Wait(&done_req, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The NIC (libfabric domain) of each rank: reported with its reason, and
 * chosen by opts->nic_map (the original DDStore's "iface=cpus;..." map)
 * when no DDSTORE_FABRIC_DOMAIN overrides it; a map that cannot be honoured
 * on one rank fails on every rank. */
static void nic_suite(int method, const char *handshake_dir, const char *dom)
{
    char map[160], why[512], got[128];
    snprintf(map, sizeof map, "%s=0-8191", dom);
    dds_options o;
    dds_options_init(&o);
    o.method = method;
    o.handshake_dir = handshake_dir;
    o.nic_map = map;
    dds_store *s = NULL;
    OK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o));
    OK(dds_store_property(s, "domain", got, sizeof got));
    OK(dds_store_property(s, "domain_choice", why, sizeof why));
    const char *fd = getenv("DDSTORE_FABRIC_DOMAIN");
    char want[200];
    snprintf(want, sizeof want, "nic_map: %s has ", dom);
    CHECK(strcmp(got, dom) == 0, "domain %s, want %s", got, dom);
    CHECK(fd ? strncmp(why, "DDSTORE_FABRIC_DOMAIN=", 22) == 0 : strncmp(why, want, strlen(want)) == 0,
          "nic_map choice: '%s'", why);
    OK(dds_free(s));
    o.nic_map = rank == 0 ? "nosuch0=0-8191" : map;
    s = NULL;
    int rc = dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o);
    CHECK(fd || (rc == DDS_EINVAL && !s), "a map naming no NIC of the provider: rc %d on every rank", rc);
    if (rc == DDS_OK)
        OK(dds_free(s));
}

static void provider_absent(void)
{
    dds_options o;
    dds_options_init(&o);
    o.method = DDS_METHOD_FABRIC;
    o.fabric = "no_such_provider";
    dds_store *s = NULL;
    int rc = dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o);
    CHECK(rc == DDS_ENOTSUP || rc == DDS_EPEER, "absent provider gave %d", rc);
    CHECK(s == NULL, "no store on failure");
    CHECK(strstr(dds_last_error(), "no_such_provider") != NULL, "message names the provider: %s",
          dds_last_error());
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rng_state = 12345 + (uint64_t)rank;
    if (!dds_has_fabric()) {
        if (rank == 0)
            printf("test_fabric: libddstore built without libfabric: skipped\n");
        MPI_Finalize();
        return 77;
    }
    const char *m = getenv("DDSTORE_METHOD");
    int method = (m && m[0] == '2') ? DDS_METHOD_FILE : DDS_METHOD_FABRIC;

    provider_absent();

    /* Method 2 publishes in a private directory unless one is given. */
    char base[512] = { 0 }, hs[600] = { 0 };
    if (method == DDS_METHOD_FILE && !getenv("DDSTORE_HANDSHAKE_DIR")) {
        test_tmpdir(base, sizeof base, "dds-fab-test");
        snprintf(hs, sizeof hs, "%s/hs", base);
    }
    dds_store *s = test_create(method, hs[0] ? hs : NULL);
    dds_store_info si = { .size = sizeof si };
    OK(dds_store_info_get(s, &si));
    CHECK(si.method == method, "method %d", si.method);
    char dom[128], why[512];
    OK(dds_store_property(s, "domain", dom, sizeof dom));
    OK(dds_store_property(s, "domain_choice", why, sizeof why));
    CHECK(dom[0] && (strncmp(why, "only: ", 6) == 0 || strncmp(why, "topology: ", 10) == 0 ||
                     strncmp(why, "spread: ", 8) == 0 || strncmp(why, "DDSTORE_", 8) == 0),
          "domain '%s' chosen because '%s'", dom, why);

    var_desc small, odd, big;
    add_var(s, &small, 1, 8, 5);       /* 8-byte rows */
    add_var(s, &odd, 2, 4096 + 3, 7);  /* rows of an odd size */
    add_var(s, &big, 3, 1 << 20, 3);   /* 1 MiB rows: multi-MiB transfers */

    read_suite(s, &small);
    read_suite(s, &odd);
    {
        /* Large transfers: every row of the big variable in one get. */
        uint8_t *out = malloc((size_t)(big.total * big.rb));
        OK(dds_get(s, big.name, out, 0, big.total));
        CHECK(range_ok(big.k, 0, big.total, big.rb, out), "big get");
        free(out);
    }
    recv_suite(s, &odd);
    thread_suite(s, &odd);
    busy_owner_suite(s, &odd);

    dds_stats_info st = { .size = sizeof st };
    OK(dds_stats(s, &st));
    unsigned long long remote = st.rows_remote, all_remote = 0;
    MPI_Allreduce(&remote, &all_remote, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(size == 1 || all_remote > 0, "remote rows were read");

    OK(dds_free(s));
    MPI_Barrier(MPI_COMM_WORLD);
    nic_suite(method, hs[0] ? hs : NULL, dom);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && base[0])
        CHECK(rmdir(base) == 0, "free leaves the handshake directory it created behind");
    if (rank == 0)
        printf("test_fabric: %d ranks, method %d, %d checks passed\n", size, method, (int)checks);
    MPI_Finalize();
    return 0;
}
