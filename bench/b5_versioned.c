/* B5: cost of versioned variables, and of their hook on the plain read path.
 *
 *   mpicc -O2 bench/b5_versioned.c -Ilibddstore/include -L<libdir> -lddstore -ldl -o b5
 *   mpiexec -n 2 ./b5 [reps]        (DDSTORE_METHOD / DDSTORE_NODE_LOCAL as usual)
 *
 * dds_get_batch of K = 256 uniformly random rows (64 B and 4 KiB) of a plain
 * variable and of a versioned one (block_rows 1), loops interleaved repeat
 * by repeat after a barrier, medians over `reps` (default 7); prints ns per
 * row and the ratio versioned / plain. A third loop reads the versioned
 * variable while a writer thread on every rank rewrites one random row of
 * its own every 50 us (with method 0, only where MPI gives
 * MPI_THREAD_MULTIPLE). The versioned functions are looked up with dlsym,
 * so the same program measures the plain path of a library without them
 * (e.g. main's build, through LD_LIBRARY_PATH): bench/b5_versioned.sh
 * compares the two. */
#include <dlfcn.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ddstore/ddstore.h>

#define K 256
#define ROWS_PER_RANK 4096
#define LOOPS 200

typedef int (*init_versioned_fn)(dds_store *, const char *, int64_t, int64_t, uint32_t, int64_t);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void die(int rc, const char *what)
{
    if (rc != DDS_OK) {
        fprintf(stderr, "%s: %s\n", what, dds_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

typedef struct writer {
    dds_store *s;
    const char *name;
    int64_t rb;
    volatile int stop;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;
    char *row = calloc(1, (size_t)w->rb);
    uint64_t seed = 88172645463325252ull;
    while (!w->stop) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        die(dds_update(w->s, w->name, row, 1, (int64_t)(seed % ROWS_PER_RANK)), "dds_update");
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
    free(row);
    return NULL;
}

/* ns per row of LOOPS get_batch calls of K random rows. */
static double timed(dds_store *s, const char *name, char *out, int64_t total)
{
    int64_t rows[K];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int l = 0; l < LOOPS; l++) {
        for (int i = 0; i < K; i++)
            rows[i] = (int64_t)(rng() % (uint64_t)total);
        die(dds_get_batch(s, name, out, rows, K), "dds_get_batch");
    }
    return (now() - t0) * 1e9 / (LOOPS * K);
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 99)
        reps = 7;
    rng_state = 0x9E3779B97F4A7C15ull + (uint64_t)rank;
    init_versioned_fn init_versioned = (init_versioned_fn)dlsym(RTLD_DEFAULT, "dds_init_versioned");
    dds_store *s = NULL;
    die(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), NULL), "dds_create");
    dds_store_info si = { .size = sizeof si };
    die(dds_store_info_get(s, &si), "dds_store_info_get");
    int64_t sizes[2] = { 64, 4096 };
    int64_t total = (int64_t)ROWS_PER_RANK * size;
    char *out = malloc(K * 4096);
    char *init = calloc(ROWS_PER_RANK, 4096);
    for (int z = 0; z < 2; z++) {
        int64_t rb = sizes[z];
        char plain[32], ver[32];
        snprintf(plain, sizeof plain, "b5/plain%lld", (long long)rb);
        snprintf(ver, sizeof ver, "b5/ver%lld", (long long)rb);
        die(dds_add(s, plain, init, ROWS_PER_RANK, rb, DDS_DTYPE_BYTES), "dds_add");
        if (init_versioned)
            die(init_versioned(s, ver, ROWS_PER_RANK, rb, DDS_DTYPE_BYTES, 1), "dds_init_versioned");
        double tp[99], tv[99], tw[99];
        int writers = init_versioned && (si.method != 0 || provided == MPI_THREAD_MULTIPLE);
        timed(s, plain, out, total); /* warm-up */
        for (int r = 0; r < reps; r++) {
            tp[r] = timed(s, plain, out, total);
            if (init_versioned)
                tv[r] = timed(s, ver, out, total);
            if (writers) {
                writer w = { .s = s, .name = ver, .rb = rb };
                pthread_t th;
                pthread_create(&th, NULL, writer_main, &w);
                tw[r] = timed(s, ver, out, total);
                MPI_Barrier(MPI_COMM_WORLD);
                w.stop = 1;
                pthread_join(th, NULL);
            }
        }
        double mp = median(tp, reps), all[3] = { mp, 0, 0 }, sum[3];
        if (init_versioned)
            all[1] = median(tv, reps);
        if (writers)
            all[2] = median(tw, reps);
        MPI_Reduce(all, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("b5 method %d ranks %d node_local %d row %5lld B: plain %8.1f ns/row", si.method, size,
                   si.node_local, (long long)rb, sum[0] / size);
            if (init_versioned)
                printf(" | versioned %8.1f ns/row (x%.2f)", sum[1] / size, sum[1] / sum[0]);
            if (writers)
                printf(" | versioned+writer %8.1f ns/row (x%.2f)", sum[2] / size, sum[2] / sum[0]);
            printf("\n");
        }
    }
    free(out);
    free(init);
    die(dds_free(s), "dds_free");
    MPI_Finalize();
    return 0;
}
