/* Versioned variables: rows rewritten while they are read are never seen
 * torn (dds_init_versioned, dds_generation, dds_var_block_rows).
 *
 * Run under mpiexec with DDSTORE_METHOD=0, 1 or 2 (methods 1/2 need
 * libfabric: exit 77 without it; DDSTORE_FABRIC=shm or tcp). Every rank
 * runs a writer thread that keeps rewriting random spans of its own rows of
 * a versioned variable; a row written by update number u holds one 64-bit
 * stamp (u << 24 | global row) in every word, so a row mixing two updates
 * shows. Meanwhile the main thread of every rank reads random rows of all
 * ranks with dds_get, dds_get_batch and dds_get_ranges and checks every row
 * it gets; with method 2, rank 0 also starts a reader process (another
 * "job": dds_join, no MPI) that does the same. Then: every block's
 * generation counter equals twice the updates made to it (read from every
 * rank), the counters are not listed among the variables, a block left
 * odd makes reads fail with DDS_EAGAIN and a clear message after the
 * bounded retries, and bad input gives errors on every rank.
 * A plain (not versioned) variable updated the same way is read too, and
 * its torn rows are counted and printed: they show what the check detects;
 * they are not asserted (their number depends on timing). */
#include <mpi.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

#include "check.h"

extern char **environ;

#define WORDS 2048            /* 16 KiB rows */
#define ROW_BYTES (WORDS * 8)
#define BLOCK_ROWS 2
#define ITERS 150

static int rank, size;

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t local_rows_of(int r) { return (r == 2) ? 0 : 5 + r; } /* rank 2 holds none */

/* 1 when row `buf` (global row `row`) is all zeros (never written) or
 * holds one stamp of `row` in every word. */
static int row_whole(const uint64_t *buf, int64_t row)
{
    uint64_t w = buf[0];
    if (w != 0 && (int64_t)(w & 0xFFFFFF) != row)
        return 0;
    for (int i = 1; i < WORDS; i++)
        if (buf[i] != w)
            return 0;
    return 1;
}

/* ---- writer thread ---------------------------------------------------------- */

typedef struct writer {
    dds_store *s;
    int64_t first, nrows;
    int64_t *updates;       /* per block of the versioned variable */
    _Atomic int stop;
    _Atomic int64_t count;   /* updates so far */
    int64_t done;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1);
    uint64_t *buf = malloc(3 * ROW_BYTES);
    CHECK(buf != NULL, "malloc");
    uint64_t u = 0;
    while (!w->stop && w->nrows > 0) {
        int64_t off = (int64_t)(rng(&seed) % (uint64_t)w->nrows);
        int64_t max = w->nrows - off < 3 ? w->nrows - off : 3;
        int64_t n = 1 + (int64_t)(rng(&seed) % (uint64_t)max);
        u++;
        for (int64_t i = 0; i < n; i++)
            for (int k = 0; k < WORDS; k++)
                buf[i * WORDS + k] = (u << 24) | (uint64_t)(w->first + off + i);
        const char *name = (u & 1) ? "gen/field" : "gen/plain";
        OK(dds_update(w->s, name, buf, n, off));
        if (u & 1)
            for (int64_t b = off / BLOCK_ROWS; b <= (off + n - 1) / BLOCK_ROWS; b++)
                w->updates[b]++;
        w->count++;
        struct timespec ts = { 0, (long)(rng(&seed) % 50000) }; /* a simulation computes between steps */
        nanosleep(&ts, NULL);
    }
    w->done = (int64_t)u;
    free(buf);
    return NULL;
}

/* ---- reads and their checks --------------------------------------------------- */

typedef struct tally {
    int64_t rows, torn_plain, plain_rows;
} tally;

static void check_rows(const uint64_t *buf, const int64_t *rows, int64_t n, const char *how)
{
    for (int64_t i = 0; i < n; i++)
        CHECK(row_whole(buf + i * WORDS, rows[i]), "%s: row %lld is torn or misplaced (words 0 and last: %llx %llx)",
              how, (long long)rows[i], (unsigned long long)buf[i * WORDS],
              (unsigned long long)buf[i * WORDS + WORDS - 1]);
}

/* One round of reads of the versioned variable (and a plain read); `collective`
 * false for a method-2 reader, whose batched reads are not collective. */
static void read_round(dds_store *s, int64_t total, uint64_t *seed, uint64_t *buf, tally *t)
{
    int64_t rows[16];
    /* dds_get: up to 5 consecutive rows, spanning shards. */
    int64_t n = 1 + (int64_t)(rng(seed) % 5);
    if (n > total)
        n = total;
    int64_t start = (int64_t)(rng(seed) % (uint64_t)(total - n + 1));
    OK(dds_get(s, "gen/field", buf, start, n));
    for (int64_t i = 0; i < n; i++)
        rows[i] = start + i;
    check_rows(buf, rows, n, "dds_get");
    t->rows += n;
    /* dds_get_batch: 16 rows in any order, repeats allowed. */
    for (int i = 0; i < 16; i++)
        rows[i] = (int64_t)(rng(seed) % (uint64_t)total);
    OK(dds_get_batch(s, "gen/field", buf, rows, 16));
    check_rows(buf, rows, 16, "dds_get_batch");
    t->rows += 16;
    /* dds_get_ranges: 3 ranges of up to 3 rows. */
    int64_t starts[3], counts[3], k = 0;
    for (int i = 0; i < 3; i++) {
        counts[i] = 1 + (int64_t)(rng(seed) % 3);
        if (counts[i] > total)
            counts[i] = total;
        starts[i] = (int64_t)(rng(seed) % (uint64_t)(total - counts[i] + 1));
        for (int64_t j = 0; j < counts[i]; j++)
            rows[k++] = starts[i] + j;
    }
    OK(dds_get_ranges(s, "gen/field", buf, starts, counts, 3));
    check_rows(buf, rows, k, "dds_get_ranges");
    t->rows += k;
    /* The plain variable: torn rows are possible there; count them. */
    OK(dds_get(s, "gen/plain", buf, start, n));
    for (int64_t i = 0; i < n; i++) {
        t->plain_rows++;
        t->torn_plain += !row_whole(buf + i * WORDS, start + i);
    }
}

/* ---- method-2 reader process ----------------------------------------------------- */

static int reader_main(const char *dir, int n_core)
{
    check_in_reader = 1;
    dds_store *s = NULL;
    OK(dds_join(&s, dir, n_core, 60.0));
    OK(dds_attach(s, "gen/field"));
    OK(dds_attach(s, "gen/plain"));
    int64_t br = -1;
    OK(dds_var_block_rows(s, "gen/field", &br));
    CHECK(br == BLOCK_ROWS, "reader: block_rows %lld", (long long)br);
    OK(dds_var_block_rows(s, "gen/plain", &br));
    CHECK(br == 0, "reader: plain variable has block_rows %lld", (long long)br);
    int64_t count = -1;
    OK(dds_var_count(s, &count));
    CHECK(count == 2, "reader: %lld variables listed, 2 expected (counters hidden)", (long long)count);
    dds_var_info vi = { .size = sizeof vi };
    OK(dds_query(s, "gen/field", &vi));
    uint64_t *buf = malloc(32 * ROW_BYTES);
    CHECK(buf != NULL, "malloc");
    uint64_t seed = 0xD1B54A32D192ED03ull ^ (uint64_t)getpid();
    tally t = { 0 };
    for (int i = 0; i < ITERS; i++)
        read_round(s, vi.global_rows, &seed, buf, &t);
    uint64_t g;
    OK(dds_generation(s, "gen/field", 0, &g));
    free(buf);
    OK(dds_free(s));
    printf("reader %d: %lld versioned rows whole; plain variable: %lld of %lld rows torn\n", (int)getpid(),
           (long long)t.rows, (long long)t.torn_plain, (long long)t.plain_rows);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--reader") == 0)
        return reader_main(argv[2], atoi(argv[3]));
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *m = getenv("DDSTORE_METHOD");
    int method = m ? atoi(m) : 0;
    if ((method != 0 && !dds_has_fabric()) || provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            printf("test_generation: %s: skipped\n",
                   provided < MPI_THREAD_MULTIPLE ? "no MPI_THREAD_MULTIPLE" : "built without libfabric");
        MPI_Finalize();
        return 77;
    }
    char base[512] = { 0 }, hs[600] = { 0 };
    if (method == DDS_METHOD_FILE) {
        test_tmpdir(base, sizeof base, "dds-gen-test");
        snprintf(hs, sizeof hs, "%s/hs", base);
    }
    double t0 = now();
    dds_store *s = test_create(method, hs[0] ? hs : NULL);

    /* Bad input first, on every rank alike. */
    CHECK(dds_init_versioned(s, "gen/bad", 4, 8, DDS_DTYPE_UINT8, 0) == DDS_EINVAL, "block_rows 0");
    CHECK(strstr(dds_last_error(), "block_rows") != NULL, "message: %s", dds_last_error());
    int rc = dds_init_versioned(s, "gen/bad", 4, 8, DDS_DTYPE_UINT8, rank == 0 ? 2 : 3);
    CHECK(size == 1 ? rc == DDS_OK : rc == DDS_EMISMATCH, "ranks disagreeing on block_rows: %d", rc);
    CHECK(dds_init_versioned(s, "gen/bad\x1fgen", 4, 8, DDS_DTYPE_UINT8, 1) == DDS_EINVAL, "reserved suffix");

    int64_t L = local_rows_of(rank), first = 0;
    int64_t *all_rows = calloc((size_t)size, sizeof *all_rows);
    CHECK(all_rows != NULL, "calloc");
    MPI_Allgather(&L, 1, MPI_INT64_T, all_rows, 1, MPI_INT64_T, MPI_COMM_WORLD);
    int64_t total = 0;
    for (int r = 0; r < size; r++) {
        if (r < rank)
            first += all_rows[r];
        total += all_rows[r];
    }
    OK(dds_init_versioned(s, "gen/field", L, ROW_BYTES, DDS_DTYPE_UINT64, BLOCK_ROWS));
    OK(dds_init(s, "gen/plain", L, ROW_BYTES, DDS_DTYPE_UINT64));
    CHECK(dds_init_versioned(s, "gen/field", L, ROW_BYTES, DDS_DTYPE_UINT64, BLOCK_ROWS) == DDS_EEXIST,
          "a second versioned variable of the same name");
    int64_t br = -1;
    OK(dds_var_block_rows(s, "gen/field", &br));
    CHECK(br == BLOCK_ROWS, "block_rows %lld", (long long)br);
    OK(dds_var_block_rows(s, "gen/plain", &br));
    CHECK(br == 0, "plain block_rows %lld", (long long)br);
    uint64_t g = 1;
    CHECK(dds_generation(s, "gen/plain", 0, &g) == DDS_EINVAL, "generation of a plain variable");
    CHECK(strstr(dds_last_error(), "not versioned") != NULL, "message: %s", dds_last_error());
    CHECK(dds_generation(s, "gen/field", total, &g) == DDS_ERANGE, "generation beyond the rows");
    OK(dds_generation(s, "gen/field", 0, &g));
    CHECK(g == 0, "fresh counter %llu", (unsigned long long)g);
    /* The counters are not listed. */
    int64_t count = -1;
    OK(dds_var_count(s, &count));
    int64_t expect = 2 + (size == 1); /* gen/bad exists where block_rows could not disagree */
    CHECK(count == expect, "%lld variables listed, %lld expected", (long long)count, (long long)expect);
    for (int64_t i = 0; i < count; i++) {
        char name[DDS_NAME_MAX + 1];
        OK(dds_var_name(s, i, name, sizeof name));
        CHECK(strchr(name, '\x1f') == NULL, "hidden counters listed as '%s'", name);
    }
    CHECK(dds_var_name(s, count, (char[300]){ 0 }, 300) == DDS_ERANGE, "index past the listed variables");

    int64_t nblocks = L ? (L - 1) / BLOCK_ROWS + 1 : 0;
    writer w = { .s = s, .first = first, .nrows = L };
    w.updates = calloc((size_t)nblocks + 1, sizeof *w.updates);
    CHECK(w.updates != NULL, "calloc");
    pthread_t th;
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has checked the fresh counters */
    CHECK(pthread_create(&th, NULL, writer_main, &w) == 0, "pthread_create");

    pid_t reader = -1;
    if (method == DDS_METHOD_FILE && rank == 0) {
        char n[16];
        snprintf(n, sizeof n, "%d", size);
        char *args[] = { argv[0], "--reader", hs, n, NULL };
        int prc = posix_spawn(&reader, argv[0], NULL, NULL, args, environ);
        CHECK(prc == 0, "posix_spawn: %s", strerror(prc));
    }
    uint64_t *buf = malloc(32 * ROW_BYTES);
    CHECK(buf != NULL, "malloc");
    uint64_t seed = 0xBF58476D1CE4E5B9ull ^ (uint64_t)(rank + 7);
    tally t = { 0 };
    /* At least ITERS rounds, and on until every writer has made 400
     * updates (or 20 s passed): the rounds of method 0's batched reads
     * must match across ranks, so the ranks agree when to stop. */
    double tr = now();
    for (int i = 0;; i++) {
        read_round(s, total, &seed, buf, &t);
        if (i + 1 >= ITERS && (i + 1) % 20 == 0) {
            int done = (w.nrows == 0 || w.count >= 400 || now() - tr > 20.0), all = 0;
            MPI_Allreduce(&done, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            if (all)
                break;
        }
    }
    if (reader > 0) {
        int st = 0;
        CHECK(waitpid(reader, &st, 0) == reader, "waitpid");
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the method-2 reader failed (status 0x%x)", st);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    w.stop = 1;
    pthread_join(th, NULL);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Every block's counter is even and counts its updates, seen from every rank. */
    int64_t nb_max = 0, *nb = calloc((size_t)size, sizeof *nb);
    CHECK(nb != NULL, "calloc");
    MPI_Allgather(&nblocks, 1, MPI_INT64_T, nb, 1, MPI_INT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        nb_max = nb[r] > nb_max ? nb[r] : nb_max;
    int64_t *ups = calloc((size_t)(size * (nb_max + 1)), sizeof *ups);
    CHECK(ups != NULL, "calloc");
    int64_t *mine = calloc((size_t)nb_max + 1, sizeof *mine);
    memcpy(mine, w.updates, (size_t)nblocks * sizeof *mine);
    MPI_Allgather(mine, (int)nb_max + 1, MPI_INT64_T, ups, (int)nb_max + 1, MPI_INT64_T, MPI_COMM_WORLD);
    int64_t row0 = 0, checked = 0;
    for (int r = 0; r < size; r++) {
        for (int64_t b = 0; b < nb[r]; b++) {
            OK(dds_generation(s, "gen/field", row0 + b * BLOCK_ROWS, &g));
            CHECK(g == 2 * (uint64_t)ups[r * (nb_max + 1) + b], "rank %d block %lld: generation %llu after %lld updates",
                  r, (long long)b, (unsigned long long)g, (long long)ups[r * (nb_max + 1) + b]);
            checked++;
        }
        row0 += all_rows[r];
    }

    /* A block left odd (as if its writer died mid-update): reads retry,
     * then fail with DDS_EAGAIN and a message naming the rows. */
    setenv("DDSTORE_GEN_RETRIES", "3", 1);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank has checked the counters */
    int owner = 0; /* rank 0 holds rows whenever size >= 1 */
    if (rank == owner) {
        uint64_t odd = 1; /* row 1 of the hidden counters is block 0's */
        OK(dds_update(s, "gen/field\x1fgen", &odd, 1, 1));
    }
    OK(dds_sync(s));
    rc = dds_get(s, "gen/field", buf, 0, 1);
    CHECK(rc == DDS_EAGAIN, "read of a block left odd: %d", rc);
    CHECK(strstr(dds_last_error(), "being rewritten") && strstr(dds_last_error(), "DDSTORE_GEN_RETRIES"),
          "message: %s", dds_last_error());
    CHECK(strcmp(dds_strerror(DDS_EAGAIN), "unknown error") != 0, "strerror of DDS_EAGAIN");
    if (size > 1 && all_rows[1] > 0) { /* other blocks stay readable */
        int64_t r1 = all_rows[0];
        OK(dds_get(s, "gen/field", buf, r1, 1));
    }
    OK(dds_sync(s));
    if (rank == owner) {
        uint64_t even = 2 * (uint64_t)w.updates[0];
        OK(dds_update(s, "gen/field\x1fgen", &even, 1, 1));
    }
    OK(dds_sync(s));
    OK(dds_get(s, "gen/field", buf, 0, 1));
    unsetenv("DDSTORE_GEN_RETRIES");

    int64_t sum[4] = { t.rows, t.torn_plain, t.plain_rows, w.done }, tot[4];
    MPI_Reduce(sum, tot, 4, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    free(buf);
    free(ups);
    free(mine);
    free(nb);
    free(w.updates);
    free(all_rows);
    OK(dds_free(s));
    if (rank == 0) {
        printf("test_generation: method %d, %d ranks: %lld versioned rows read whole while %lld updates ran; "
               "%lld block counters checked; plain variable: %lld of %lld rows torn; %d checks, %.2f s\n",
               method, size, (long long)tot[0], (long long)tot[3], (long long)checked, (long long)tot[1],
               (long long)tot[2], checks, now() - t0);
        if (base[0]) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", base);
        }
    }
    MPI_Finalize();
    return 0;
}
