/* Leak test of libddstore: many create/add/init/update/get/free cycles.
 *
 * Every cycle creates a store over MPI_COMM_WORLD (alternating widths),
 * adds and initialises variables, reads them back bit-exact through get,
 * get_batch and get_ranges (inside and outside an epoch), registers and
 * unregisters a receive buffer (memory registrations with methods 1/2),
 * makes a few failing calls, and frees the store. The method is the
 * environment's (DDSTORE_METHOD, DDSTORE_FABRIC), so the same test covers
 * MPI windows and libfabric registrations.
 *
 * Leaks are caught three ways:
 *   - run under LeakSanitizer (ASan build) or valgrind, which report any
 *     block the library allocated and never freed;
 *   - resident memory (RSS) must stay flat: growth between the end of the
 *     warm-up and the last cycle is bounded by DDS_LEAK_MAX_RSS_KIB
 *     (default 2048) -- catches leaks inside MPI/libfabric objects that
 *     sanitizers suppress or cannot see (still reachable from MPI's tables);
 *   - the number of memory mappings and of open file descriptors must not
 *     grow either (DDS_LEAK_MAX_MAPS, default 8): a leaked shared-memory
 *     window or memory registration keeps a mapping or a file open.
 *
 * Usage: mpiexec -n N test_leak [cycles]   (default 1000)
 * DDS_LEAK_FAILED_ALLOC=1 also makes a huge dds_init fail on one rank in
 * every cycle (the other ranks must release what they allocated).
 */
#include <dirent.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

#include "check.h"

static int rank, size;

typedef struct usage {
    long rss_kib;
    long maps;
    long fds;
} usage;

static long count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        if (ch == '\n')
            n++;
    fclose(f);
    return n;
}

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory stream's own descriptor */
}

static usage measure(void)
{
    usage u = { -1, -1, -1 };
    long pages_total, pages_res;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages_total, &pages_res) == 2)
            u.rss_kib = pages_res * (sysconf(_SC_PAGESIZE) / 1024);
        fclose(f);
    }
    u.maps = count_lines("/proc/self/maps");
    u.fds = count_fds();
    return u;
}

static int64_t value(int k, int64_t r) { return (int64_t)k * 7919 + r * 31 + 5; }

static void cycle(int it, int64_t *local, int64_t *buf, int64_t *rows, bool failed_alloc)
{
    dds_options o;
    dds_options_init(&o);
    int widths[3] = { 0, 1, size % 2 == 0 ? 2 : 0 };
    o.width = widths[it % 3];
    dds_store *s = NULL;
    OK(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o));
    dds_store_info si = { .size = sizeof si };
    OK(dds_store_info_get(s, &si));

    /* rows per group rank: uneven, the second one empty */
    int64_t first = 0, total = 0, mine = 0;
    for (int g = 0; g < si.group_size; g++) {
        int64_t n = g == 1 ? 0 : 16 + 5 * g + it % 7;
        if (g < si.group_rank)
            first += n;
        if (g == si.group_rank)
            mine = n;
        total += n;
    }
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "leak/%d", k);
        for (int64_t i = 0; i < mine; i++)
            local[i] = value(k, first + i);
        OK(dds_add(s, name, local, mine, sizeof(int64_t), DDS_DTYPE_INT64));
    }
    OK(dds_init(s, "leak/init", mine, sizeof(int64_t), DDS_DTYPE_INT64));
    for (int64_t i = 0; i < mine; i++)
        local[i] = value(2, first + i);
    OK(dds_update(s, "leak/init", local, mine, 0));
    OK(dds_sync(s));
    OK(dds_register_recv(s, buf, (size_t)total * sizeof(int64_t)));

    const char *names[3] = { "leak/0", "leak/1", "leak/init" };
    for (int k = 0; k < 3; k++) {
        OK(dds_epoch_begin(s));
        OK(dds_get(s, names[k], buf, 0, total));
        OK(dds_epoch_end(s));
        for (int64_t r = 0; r < total; r++)
            CHECK(buf[r] == value(k, r), "cycle %d %s row %lld", it, names[k], (long long)r);
        int64_t n = 0;
        for (int64_t r = total - 1; r >= 0; r -= 3)
            rows[n++] = r;
        rows[n++] = 0;
        OK(dds_get_batch(s, names[k], buf, rows, n));
        for (int64_t i = 0; i < n; i++)
            CHECK(buf[i] == value(k, rows[i]), "cycle %d batch", it);
        int64_t st[2] = { total - 2, 1 }, ct[2] = { 2, total - 1 };
        OK(dds_get_ranges(s, names[k], buf, st, ct, 2));
        CHECK(buf[0] == value(k, total - 2) && buf[2] == value(k, 1), "cycle %d ranges", it);
    }
    OK(dds_unregister_recv(s, buf));
    /* failing calls allocate messages and scratch space too */
    CHECK(dds_get(s, "leak/none", buf, 0, 1) == DDS_ENOENT, "unknown name");
    CHECK(dds_add(s, "leak/0", local, mine, sizeof(int64_t), DDS_DTYPE_INT64) == DDS_EEXIST, "dup");
    CHECK(dds_add(s, "leak/x", local, mine, rank == 0 ? 8 : 4, DDS_DTYPE_INT64) ==
              (size > 1 ? DDS_EMISMATCH : DDS_OK),
          "mismatch");
    rows[0] = total;
    CHECK(dds_get_batch(s, "leak/0", buf, rows, 1) == DDS_ERANGE, "batch range");
    if (failed_alloc) {
        int64_t huge = rank == size - 1 ? ((int64_t)1 << 44) : 4;
        int rc = dds_init(s, "leak/huge", huge, 1, DDS_DTYPE_UINT8);
        CHECK(rc == DDS_ENOMEM || rc == DDS_EMPI, "huge init gave %d", rc);
    }
    dds_var_info vi = { .size = sizeof vi };
    OK(dds_query(s, "leak/1", &vi));
    CHECK(vi.global_rows == total, "query");
    OK(dds_free(s));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int cycles = argc > 1 ? atoi(argv[1]) : 1000;
    CHECK(cycles >= 10, "need at least 10 cycles (got %d)", cycles);
    const char *m = getenv("DDS_LEAK_MAX_RSS_KIB");
    long max_rss = m ? atol(m) : 2048;
    /* Sanitizer and valgrind runs grow RSS and mappings themselves (freed
     * blocks wait in a quarantine): they raise these limits. */
    const char *mm = getenv("DDS_LEAK_MAX_MAPS");
    long max_maps = mm ? atol(mm) : 8;
    const char *fa = getenv("DDS_LEAK_FAILED_ALLOC");
    bool failed_alloc = fa && strcmp(fa, "1") == 0;

    int64_t cap = 16 + 5 * (int64_t)size + 8;
    int64_t total_cap = cap * size;
    int64_t *local = malloc((size_t)cap * sizeof *local);
    int64_t *buf = malloc((size_t)total_cap * sizeof *buf);
    int64_t *rows = malloc((size_t)total_cap * sizeof *rows);

    /* Warm-up: MPI and libfabric allocate pools and caches on first use. */
    int warm = cycles / 10 < 50 ? cycles / 10 : 50;
    double t0 = MPI_Wtime();
    for (int it = 0; it < warm; it++)
        cycle(it, local, buf, rows, failed_alloc);
    usage a = measure();
    usage mid = a;
    for (int it = warm; it < cycles; it++) {
        cycle(it, local, buf, rows, failed_alloc);
        if (it == warm + (cycles - warm) / 2)
            mid = measure();
    }
    usage b = measure();
    double dt = MPI_Wtime() - t0;

    long grow = b.rss_kib - a.rss_kib;
    printf("test_leak: rank %d: %d cycles in %.1f s; RSS %ld -> %ld -> %ld KiB (%+ld), maps %ld -> %ld "
           "-> %ld, fds %ld -> %ld -> %ld\n",
           rank, cycles, dt, a.rss_kib, mid.rss_kib, b.rss_kib, grow, a.maps, mid.maps, b.maps,
           a.fds, mid.fds, b.fds);
    fflush(stdout);
    CHECK(grow <= max_rss, "RSS grew by %ld KiB over %d cycles (limit %ld KiB)", grow, cycles - warm,
          max_rss);
    /* Mappings and descriptors: allow a little slack for MPI's own lazily
     * created connections, but not one per cycle. */
    CHECK(b.maps - a.maps <= max_maps, "memory mappings grew from %ld to %ld (limit +%ld)", a.maps,
          b.maps, max_maps);
    CHECK(b.fds - a.fds <= 4, "open file descriptors grew from %ld to %ld", a.fds, b.fds);
    free(local);
    free(buf);
    free(rows);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_leak: %d ranks, %d cycles, no growth beyond limits\n", size, cycles);
    MPI_Finalize();
    return 0;
}
