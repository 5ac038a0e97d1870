/* Plain-C test of libddstore's public header (method 0, and whatever
 * DDSTORE_METHOD selects): every rank writes rows derived from their global
 * index and reads every row back bit-exact through get, get_batch and
 * get_ranges, for several widths; bad arguments give errors, never crashes.
 * Run under mpiexec; any failure aborts the whole job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddstore/ddstore.h>

#include "check.h"

static int rank, size;

enum { ROW_WORDS = 3 };

/* Value of word w of global row r of variable k. */
static int64_t value(int k, int64_t r, int w) { return (int64_t)k * 1000003 + r * 7 + w; }

static void fill(int k, int64_t first, int64_t n, int64_t *buf)
{
    for (int64_t i = 0; i < n; i++)
        for (int w = 0; w < ROW_WORDS; w++)
            buf[i * ROW_WORDS + w] = value(k, first + i, w);
}

static void expect_rows(int k, const int64_t *rows, int64_t n, const int64_t *buf, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        for (int w = 0; w < ROW_WORDS; w++)
            CHECK(buf[i * ROW_WORDS + w] == value(k, rows[i], w), "%s: row %lld word %d", what,
                  (long long)rows[i], w);
}

/* Rows per rank: uneven, and rank 1 (if any) holds none. */
static int64_t rows_of(int group_rank) { return group_rank == 1 ? 0 : 5 + 3 * group_rank; }

static void data_suite(int width)
{
    dds_options o;
    dds_options_init(&o);
    o.width = width;
    dds_store *s = NULL;
    OK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o));
    dds_store_info si = { .size = sizeof si };
    OK(dds_store_info_get(s, &si));
    CHECK(si.group_size == (width ? width : size), "group size %d", si.group_size);
    CHECK(si.group_rank == (width ? rank % width : rank), "group rank");
    CHECK(si.reads_collective == (si.method == 0 && si.group_size > 1 && !si.node_local),
          "reads_collective %d (method %d, group of %d, node_local %d)", si.reads_collective,
          si.method, si.group_size, si.node_local);
    char tp[128];
    OK(dds_store_property(s, "transport", tp, sizeof tp));
    CHECK(si.method == 0 ? strcmp(tp, "mpi") == 0 : strncmp(tp, "libfabric:", 10) == 0 && tp[10],
          "transport '%s' for method %d", tp, si.method);
    CHECK(dds_store_property(s, "transport", tp, 3) == DDS_ERANGE && strlen(tp) == 2,
          "a short buffer gives DDS_ERANGE and a truncated text");
    CHECK(dds_store_property(s, "no such key", tp, sizeof tp) == DDS_ENOENT, "unknown key");
    char dom[128], why[512];
    OK(dds_store_property(s, "domain", dom, sizeof dom));
    OK(dds_store_property(s, "domain_choice", why, sizeof why));
    CHECK(si.method == 0 ? !dom[0] && !why[0] : dom[0] && why[0], "domain '%s' (%s) for method %d", dom, why,
          si.method);

    int64_t first = 0;
    for (int g = 0; g < si.group_rank; g++)
        first += rows_of(g);
    int64_t total = 0;
    for (int g = 0; g < si.group_size; g++)
        total += rows_of(g);
    int64_t mine = rows_of(si.group_rank);
    int64_t rb = ROW_WORDS * (int64_t)sizeof(int64_t);

    int64_t *local = malloc((size_t)(mine + 1) * rb);
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "var/%d", k);
        fill(k, first, mine, local);
        OK(dds_add(s, name, local, mine, rb, DDS_DTYPE_INT64));
    }
    /* init + update + sync */
    OK(dds_init(s, "var/2", mine, rb, DDS_DTYPE_INT64));
    fill(2, first, mine, local);
    if (mine > 2) {
        OK(dds_update(s, "var/2", local, 2, 0));
        OK(dds_update(s, "var/2", local + 2 * ROW_WORDS, mine - 2, 2));
    } else {
        OK(dds_update(s, "var/2", local, mine, 0));
    }
    OK(dds_sync(s));

    dds_var_info vi = { .size = sizeof vi };
    OK(dds_query(s, "var/1", &vi));
    CHECK(vi.global_rows == total && vi.local_rows == mine && vi.row_bytes == rb &&
              vi.first_row == first && vi.dtype == DDS_DTYPE_INT64,
          "query");
    int64_t *offs = malloc(((size_t)si.group_size + 1) * sizeof *offs);
    OK(dds_var_offsets(s, "var/1", offs, si.group_size + 1));
    CHECK(offs[si.group_rank] == first && offs[si.group_size] == total, "offsets");
    CHECK(dds_var_offsets(s, "var/1", offs, si.group_size) == DDS_ERANGE, "short offsets");
    int64_t nv = 0;
    OK(dds_var_count(s, &nv));
    CHECK(nv == 3, "var count %lld", (long long)nv);
    char nm[8];
    CHECK(dds_var_name(s, 0, nm, sizeof nm) == DDS_OK && strcmp(nm, "var/0") == 0, "name");
    CHECK(dds_var_name(s, 0, nm, 3) == DDS_ERANGE, "short name buffer");

    int64_t *buf = malloc((size_t)(total + 1) * rb);
    int64_t *rows = malloc((size_t)(4 * total + 1) * sizeof *rows);
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "var/%d", k);
        /* whole range in one get (spans every shard), then single rows */
        OK(dds_epoch_begin(s));
        OK(dds_get(s, name, buf, 0, total));
        for (int64_t r = 0; r < total; r++)
            rows[r] = r;
        expect_rows(k, rows, total, buf, "get all");
        for (int64_t r = 0; r < total; r++) {
            OK(dds_get(s, name, buf, r, 1));
            expect_rows(k, &r, 1, buf, "get one");
        }
        OK(dds_epoch_end(s));
        /* outside an epoch, zero rows at the very end */
        OK(dds_get(s, name, buf, total, 0));
        OK(dds_get(s, name, buf, total - 2, 2));
        expect_rows(k, rows + total - 2, 2, buf, "get tail");
        /* batch: reverse order, repeats, and runs */
        int64_t n = 0;
        for (int64_t r = total - 1; r >= 0; r--)
            rows[n++] = r;
        for (int64_t r = 0; r < total; r++)
            rows[n++] = r;
        rows[n++] = 0;
        rows[n++] = 0;
        for (int64_t r = 0; r < total; r += 3)
            rows[n++] = (r * 5 + rank) % total;
        int64_t *big = malloc((size_t)n * rb);
        OK(dds_get_batch(s, name, big, rows, n));
        expect_rows(k, rows, n, big, "get_batch");
        /* a rank with nothing to read still takes part */
        OK(dds_get_batch(s, name, big, rank % 2 ? NULL : rows, rank % 2 ? 0 : 1));
        /* ranges */
        int64_t starts[3] = { total - 1, 0, 1 }, counts[3] = { 1, total, 0 };
        OK(dds_get_ranges(s, name, big, starts, counts, 3));
        int64_t want[1 + 1024];
        want[0] = total - 1;
        for (int64_t r = 0; r < total; r++)
            want[1 + r] = r;
        expect_rows(k, want, total + 1, big, "get_ranges");
        free(big);
    }

    /* bad arguments: errors, every rank, store still usable afterwards */
    CHECK(dds_get(s, "nope", buf, 0, 1) == DDS_ENOENT, "unknown name");
    CHECK(dds_get(s, NULL, buf, 0, 1) == DDS_EINVAL, "NULL name");
    CHECK(dds_get(s, "var/0", NULL, 0, 1) == DDS_EINVAL, "NULL out");
    CHECK(dds_get(s, "var/0", buf, total, 1) == DDS_ERANGE, "past the end");
    CHECK(dds_get(s, "var/0", buf, -1, 1) == DDS_ERANGE, "negative start");
    CHECK(dds_get(s, "var/0", buf, 0, -1) == DDS_EINVAL, "negative count");
    rows[0] = total;
    CHECK(dds_get_batch(s, "var/0", buf, rows, 1) == DDS_ERANGE, "batch past the end");
    rows[0] = -5;
    CHECK(dds_get_batch(s, "var/0", buf, rows, 1) == DDS_ERANGE, "batch negative");
    CHECK(dds_get_batch(s, "var/0", buf, NULL, 1) == DDS_EINVAL, "batch NULL rows");
    CHECK(dds_add(s, "var/0", local, mine, rb, DDS_DTYPE_INT64) == DDS_EEXIST, "duplicate");
    CHECK(dds_add(s, "x", local, mine, rank == 0 ? rb : rb + 8, DDS_DTYPE_INT64) ==
              (size > 1 ? DDS_EMISMATCH : DDS_OK),
          "row_bytes mismatch");
    CHECK(dds_add(s, "y", local, mine, rb, rank == size - 1 ? DDS_DTYPE_FLOAT64 : DDS_DTYPE_INT64) ==
              (size > 1 ? DDS_EMISMATCH : DDS_OK),
          "dtype mismatch");
    CHECK(dds_add(s, "z", local, -1, rb, DDS_DTYPE_INT64) == DDS_EINVAL, "negative rows");
    CHECK(dds_add(s, "z", local, 0, rb, DDS_DTYPE_INT64) == DDS_ERANGE, "zero total rows");
    CHECK(dds_add(s, "z", local, INT64_MAX / 2, 16, DDS_DTYPE_INT64) == DDS_EOVERFLOW, "overflow");
    CHECK(dds_add(s, "\xff\xfe", local, mine, rb, 0) == DDS_EINVAL, "non-UTF-8 name");
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK(dds_add(s, longname, local, mine, rb, 0) == DDS_EINVAL, "long name");
    CHECK(dds_add(s, "", local, mine, rb, 0) == DDS_EINVAL, "empty name");
    CHECK(dds_update(s, "var/2", local, mine + 1, 0) == DDS_ERANGE, "update past shard");
    CHECK(dds_epoch_end(s) == DDS_ESTATE, "epoch_end without begin");
    CHECK(dds_query(s, "var/0", NULL) == DDS_EINVAL, "NULL info");
    /* still works */
    OK(dds_get(s, "var/0", buf, 0, total));
    for (int64_t r = 0; r < total; r++)
        rows[r] = r;
    expect_rows(0, rows, total, buf, "after errors");

    dds_stats_info st = { .size = sizeof st };
    OK(dds_stats(s, &st));
    CHECK(st.read_calls > 0 && st.rows_local + st.rows_remote > 0, "stats");

    OK(dds_free(s));
    CHECK(dds_free(s) == DDS_ESTATE, "double free");
    CHECK(dds_get(s, "var/0", buf, 0, 1) == DDS_ESTATE, "call after free");
    free(local);
    free(offs);
    free(buf);
    free(rows);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    CHECK(dds_abi_version() == DDS_ABI_MAJOR, "abi %d", dds_abi_version());
    CHECK(dds_version()[0] != '\0', "version");
    /* This test is built with the library it runs with: the header's release
     * macros name the same release as dds_version(). */
    char header_version[48];
    snprintf(header_version, sizeof header_version, "%d.%d.%d", DDS_VERSION_MAJOR, DDS_VERSION_MINOR,
             DDS_VERSION_PATCH);
    CHECK(strcmp(dds_version(), header_version) == 0, "dds_version() %s, header %s", dds_version(),
          header_version);
    CHECK(strcmp(dds_strerror(DDS_ENOENT), dds_strerror(DDS_EINVAL)) != 0, "strerror");
    CHECK(dds_last_error() != NULL, "last_error never NULL");

    /* bad handles and options, no collective reached */
    dds_store *s = NULL;
    CHECK(dds_create(NULL, MPI_Comm_c2f(MPI_COMM_WORLD), NULL) == DDS_EINVAL, "NULL out");
    CHECK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_NULL), NULL) == DDS_EINVAL && s == NULL, "COMM_NULL");
    CHECK(dds_create(&s, 987654, NULL) == DDS_EINVAL, "garbage handle");
    CHECK(dds_free(NULL) == DDS_OK, "free NULL");
    CHECK(dds_get(NULL, "x", NULL, 0, 0) == DDS_EINVAL, "NULL store");
    CHECK(dds_get((dds_store *)&rank, "x", NULL, 0, 0) == DDS_ESTATE, "garbage store");
    dds_options o;
    dds_options_init(&o);
    if (size > 1) {
        o.width = size + 1;
        CHECK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o) == DDS_EINVAL, "width > size");
    }
    if (size == 4) {
        o.width = 3;
        CHECK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o) == DDS_EINVAL, "width not dividing");
    }
    o.width = 0;
    o.method = 7;
    CHECK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o) == DDS_EINVAL, "bad method");

    data_suite(0);
    data_suite(1);
    if (size % 2 == 0)
        data_suite(2);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_core: %d ranks, %d checks passed\n", size, checks);
    MPI_Finalize();
    return 0;
}
