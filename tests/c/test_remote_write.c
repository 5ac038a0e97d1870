/* Store memory is exposed for remote reads only: a process that knows every
 * shard's address and key cannot write into it.
 *
 *   mpiexec -n N test_remote_write <path of remote_write_probe>
 *
 * with DDSTORE_FABRIC=<provider> (FI_TCP_IFACE=lo for tcp). The MPI ranks
 * form a method-2 core group publishing in a fresh handshake directory and
 * add a variable of known bytes; rank 0 then starts remote_write_probe, a
 * process outside the job holding an FI_WRITE-capable endpoint of the same
 * provider, which reads each shard (control), tries fi_write on it and reads
 * it back. Passes when the probe reports every write refused, and every
 * rank then finds its whole shard, and every other shard, unchanged through
 * the store's own reads. Then the read-only pages must not get in the
 * store's own way: two threads of every rank dds_update() interleaved rows
 * of a zero-initialised variable spanning several pages, and after
 * dds_sync() every rank reads every row back. Any failure aborts the whole
 * job. */
#include <mpi.h>
#include <pthread.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
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

static int rank = -1, size;

#define ROW_BYTES 24

static uint8_t pattern_byte(int64_t row, int64_t b) { return (uint8_t)(row * 131 + b * 7 + 5); }
static int64_t rows_of(int r) { return 3 + 2 * r; }

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

#define UPD_ROWS 1000 /* x ROW_BYTES: several pages per shard */

static uint8_t upd_byte(int r, int64_t row, int64_t b) { return (uint8_t)(r * 17 + row * 3 + b + 1); }

typedef struct upd_arg {
    dds_store *s;
    int parity;
    int ok;
} upd_arg;

/* Update every other row of this rank's shard, one call per row. */
static void *updater(void *p)
{
    upd_arg *a = p;
    uint8_t row[ROW_BYTES];
    a->ok = 1;
    for (int64_t i = a->parity; i < UPD_ROWS; i += 2) {
        for (int64_t b = 0; b < ROW_BYTES; b++)
            row[b] = upd_byte(rank, i, b);
        if (dds_update(a->s, "updated", row, 1, i) != DDS_OK)
            a->ok = 0;
    }
    return NULL;
}

/* Run the probe on rank 0, killing it after `limit` seconds; its exit code. */
static int run_probe(const char *probe, const char *pubdir, double limit)
{
    char *args[] = { (char *)probe, (char *)pubdir, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, probe, NULL, NULL, args, environ);
    CHECK(rc == 0, "posix_spawn %s: %s", probe, strerror(rc));
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 2, "usage: test_remote_write <path of remote_write_probe>");
    if (!dds_has_fabric()) {
        if (rank == 0)
            printf("test_remote_write: libddstore built without libfabric: skipped\n");
        MPI_Finalize();
        return 77;
    }

    char dir[512];
    test_tmpdir(dir, sizeof dir, "ddstore-rw");
    dds_store *s = test_create(DDS_METHOD_FILE, dir);

    int64_t first = 0, total = 0;
    for (int r = 0; r < size; r++) {
        if (r < rank)
            first += rows_of(r);
        total += rows_of(r);
    }
    int64_t n = rows_of(rank);
    uint8_t *mine = malloc((size_t)(n * ROW_BYTES));
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < ROW_BYTES; b++)
            mine[i * ROW_BYTES + b] = pattern_byte(first + i, b);
    OK(dds_add(s, "target", mine, n, ROW_BYTES, DDS_DTYPE_BYTES));
    MPI_Barrier(MPI_COMM_WORLD);

    int probe_rc = 0;
    if (rank == 0) {
        /* One group: it publishes in the directory itself. */
        fflush(stdout);
        probe_rc = run_probe(argv[1], dir, 120.0);
    }
    MPI_Bcast(&probe_rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(probe_rc == 0, "remote_write_probe exited %d (1: a remote write was accepted; 2: the probe "
          "could not run; -1: killed after 120 s)", probe_rc);

    /* Whatever the probe reported, the store's own view must be intact. */
    uint8_t *all = malloc((size_t)(total * ROW_BYTES));
    OK(dds_get(s, "target", all, 0, total));
    for (int64_t i = 0; i < total * ROW_BYTES; i++)
        CHECK(all[i] == pattern_byte(i / ROW_BYTES, i % ROW_BYTES), "row %lld byte %lld changed",
              (long long)(i / ROW_BYTES), (long long)(i % ROW_BYTES));

    OK(dds_init(s, "updated", UPD_ROWS, ROW_BYTES, DDS_DTYPE_BYTES));
    pthread_t th[2];
    upd_arg ua[2];
    for (int t = 0; t < 2; t++) {
        ua[t] = (upd_arg){ .s = s, .parity = t };
        CHECK(pthread_create(&th[t], NULL, updater, &ua[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        CHECK(ua[t].ok, "dds_update from thread %d failed", t);
    }
    OK(dds_sync(s));
    uint8_t *upd = malloc((size_t)size * UPD_ROWS * ROW_BYTES);
    CHECK(upd != NULL, "malloc");
    OK(dds_get(s, "updated", upd, 0, (int64_t)size * UPD_ROWS));
    for (int64_t i = 0; i < (int64_t)size * UPD_ROWS * ROW_BYTES; i++) {
        int64_t row = i / ROW_BYTES;
        CHECK(upd[i] == upd_byte((int)(row / UPD_ROWS), row % UPD_ROWS, i % ROW_BYTES),
              "updated row %lld byte %lld", (long long)row, (long long)(i % ROW_BYTES));
    }
    free(upd);
    OK(dds_free(s));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        if (nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) != 0)
            fprintf(stderr, "test_remote_write: could not remove %s\n", dir);
        printf("test_remote_write: %d ranks: remote writes refused, %lld rows intact, updates through read-only pages\n", size,
               (long long)total);
    }
    free(all);
    free(mine);
    MPI_Finalize();
    return 0;
}
