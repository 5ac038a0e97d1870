/* Shared helpers of the B5 C programs (b5c_mpi.c, b5c_fabric.c, b5c_store.c): options, the row
 * pattern, random remote batches, timing and the JSON line each program prints. */
#ifndef B5C_COMMON_H
#define B5C_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 16

struct opts {
    int k;                  /* rows per batch */
    double seconds;         /* timed per row size */
    int quick;              /* smaller shards, as b5_remote.py --quick */
    int nsizes;
    int sizes[MAX_SIZES];
};

static void parse_opts(int argc, char **argv, struct opts *o)
{
    o->k = 256;
    o->seconds = 1.0;
    o->quick = 0;
    o->nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--k") && i + 1 < argc)
            o->k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            o->seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            o->quick = 1;
        else if (o->nsizes < MAX_SIZES && atoi(argv[i]) > 0)
            o->sizes[o->nsizes++] = atoi(argv[i]);
    }
    if (o->nsizes == 0) {
        int d[] = { 64, 512, 4096, 65536 };
        for (int i = 0; i < 4; i++)
            o->sizes[o->nsizes++] = d[i];
    }
}

/* Rows per rank, as in b5_remote.py: about 16 MiB of rows, 1 Ki..64 Ki rows. */
static int64_t rows_for(int rb, int quick)
{
    int64_t r = (16 << 20) / rb;
    r = r < 1024 ? 1024 : r > 65536 ? 65536 : r;
    if (quick)
        r = r / 4 < 512 ? 512 : r / 4;
    return r;
}

/* Byte j of global row g: the reader checks what it got against this. */
static inline uint8_t pattern(int64_t g, int j) { return (uint8_t)(g * 131 + j * 7 + (g >> 8)); }

static uint8_t *make_shard(int rank, int64_t rows, int rb)
{
    uint8_t *s = malloc((size_t)rows * rb);
    if (!s) {
        fprintf(stderr, "b5c: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < rb; j++)
            s[r * rb + j] = pattern(rank * rows + r, j);
    return s;
}

static int check_rows(const uint8_t *out, const int64_t *idx, int k, int rb)
{
    for (int i = 0; i < k; i++)
        for (int j = 0; j < rb; j++)
            if (out[(size_t)i * rb + j] != pattern(idx[i], j))
                return 0;
    return 1;
}

/* Ranks on other hosts (hostnames differ; on one host: every other rank). */
/* Stop the job unless every rank's batch `out` holds rows `idx` (check_rows):
 * a ceiling that returns wrong rows measures nothing. */
static void require_rows(const uint8_t *out, const int64_t *idx, int k, int rb, const char *prog)
{
    int ok = check_rows(out, idx, k, rb), all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr, "%s: wrong rows at %d B\n", prog, rb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static int remote_ranks(int rank, int size, int *remote)
{
    char me[64] = { 0 }, *all = malloc((size_t)64 * size);
    gethostname(me, sizeof me - 1);
    MPI_Allgather(me, 64, MPI_CHAR, all, 64, MPI_CHAR, MPI_COMM_WORLD);
    int n = 0;
    for (int r = 0; r < size; r++)
        if (strcmp(all + 64 * r, me))
            remote[n++] = r;
    if (n == 0)
        for (int r = 0; r < size; r++)
            if (r != rank)
                remote[n++] = r;
    free(all);
    return n;
}

static inline uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* K random global rows, each held by a remote rank. */
static void random_batch(uint64_t *seed, const int *remote, int nremote, int64_t rows, int k, int64_t *idx)
{
    for (int i = 0; i < k; i++) {
        int owner = remote[xorshift(seed) % (uint64_t)nremote];
        idx[i] = owner * rows + (int64_t)(xorshift(seed) % (uint64_t)rows);
    }
}

static double wall_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (every thread), like Python's time.process_time(). */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One JSON line on rank 0: aggregate bytes/s (sum of the ranks' rates), median-free
 * simple figures (the loop is long enough), CPU seconds per batch over all ranks. */
static void report(const char *variant, int rank, int size, int rb, int k, int64_t batches, double wall,
                   double cpu)
{
    double rate = batches * (double)k * rb / wall, agg = 0, cpu_all = 0, us = wall / batches * 1e6, us_max = 0;
    int64_t b_all = 0;
    MPI_Reduce(&rate, &agg, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&batches, &b_all, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&us, &us_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("{\"bench\": \"B5\", \"part\": \"c_ceiling\", \"config\": \"%s\", \"row_bytes\": %d, \"k\": %d, "
               "\"ranks\": %d, \"agg_bytes_per_s\": %.1f, \"us_per_call\": %.1f, \"cpu_s_per_batch\": %.9f, "
               "\"batches\": %lld}\n",
               variant, rb, k, size, agg, us_max, cpu_all / b_all, (long long)b_all);
        fflush(stdout);
    }
}

#endif
