/* Checks shared by the C tests.
 *
 * CHECK(cond, fmt, ...) counts a check; when cond is false it prints where
 * and why, with the library's last error, and ends the whole job:
 * MPI_Abort on an MPI rank (a failing rank must not leave the others
 * waiting in a collective), exit(1) in a process a test started outside
 * mpiexec (set check_in_reader there; it prints "reader <pid>").
 * OK(call) checks that a libddstore call returns DDS_OK.
 * The including test defines `int rank` (its rank in MPI_COMM_WORLD).
 * Below them, small helpers that several tests need (static inline, so a
 * test that does not use one pays nothing). */
#ifndef DDS_TEST_CHECK_H
#define DDS_TEST_CHECK_H

#include <mpi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ddstore/ddstore.h>

static _Atomic int checks;   /* checks made so far (atomic: tests check from threads) */
static int check_in_reader; /* this process runs without MPI (started by a test) */

__attribute__((format(printf, 5, 6))) static void check_failed(int rank, const char *file, int line,
                                                                const char *cond, const char *fmt, ...)
{
    if (check_in_reader)
        fprintf(stderr, "reader %d: %s:%d: check failed: %s: ", (int)getpid(), file, line, cond);
    else
        fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " [last error: %s]\n", dds_last_error());
    fflush(stderr);
    if (check_in_reader)
        exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        checks++;                                                        \
        if (!(cond))                                                     \
            check_failed(rank, __FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

#define OK(call) CHECK((call) == DDS_OK, "%s", #call)

/* Seconds on a monotonic clock. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Byte b of global row r of a variable with salt k: every byte differs
 * between neighbouring rows and variables, so a misplaced byte shows. */
static inline uint8_t byte_of(int k, int64_t r, int64_t b)
{
    uint64_t x = (uint64_t)r * 0x9E3779B97F4A7C15ull + (uint64_t)b * 0xBF58476D1CE4E5B9ull + (uint64_t)k;
    x ^= x >> 29;
    return (uint8_t)(x * 0x94D049BB133111EBull >> 56);
}

/* A new directory <base>/<prefix>-XXXXXX, made by rank 0 and named to every
 * rank of MPI_COMM_WORLD in dir[0..cap) (collective). base: the
 * DDSTORE_TEST_SHARED_DIR (a directory readers on other hosts see too: each
 * simulated host has its own /tmp), else TMPDIR, else /tmp. */
static inline void test_tmpdir(char *dir, int cap, const char *prefix)
{
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me == 0) {
        const char *base = getenv("DDSTORE_TEST_SHARED_DIR");
        if (!base || !*base)
            base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        if (snprintf(dir, (size_t)cap, "%s/%s-XXXXXX", base, prefix) >= cap || !mkdtemp(dir))
            check_failed(me, __FILE__, __LINE__, "mkdtemp", "cannot make %s/%s-XXXXXX", base, prefix);
    }
    MPI_Bcast(dir, cap, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* A store over MPI_COMM_WORLD of the given method, publishing (method 2)
 * in handshake_dir (NULL: the library's default). Collective. */
static inline dds_store *test_create(int method, const char *handshake_dir)
{
    dds_options o;
    dds_options_init(&o);
    o.method = method;
    o.handshake_dir = handshake_dir;
    dds_store *s = NULL;
    int me, rc = dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &o);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (rc != DDS_OK)
        check_failed(me, __FILE__, __LINE__, "dds_create", "method %d: %s", method, dds_strerror(rc));
    checks++;
    return s;
}

#endif /* DDS_TEST_CHECK_H */
