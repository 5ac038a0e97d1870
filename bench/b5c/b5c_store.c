/* B5: libddstore's own read path from C, beside the bare ceilings.
 *
 *   mpiexec -n 4 build-b5c/b5c_store [--k 256] [--seconds 1] [--quick] [SIZE...]
 *
 * The loop of b5c_fabric.c (the same random remote batches, timed by duration on every
 * rank, CPU of every thread), but each batch is one dds_get_batch on a method-1 store over
 * libfabric tcp (DDSTORE_FABRIC overrides), so that B5 separates what the library costs
 * per batch from what the Python binding adds: b5c_fabric is the protocol's floor, this
 * is libddstore, b5_remote.py is PyDDStore.get_batch. Reads of methods 1/2 are not
 * collective, so the ranks need not read the same number of batches.
 *
 * Prints one JSON line per row size (rank 0), config "c_store_m1_tcp". */
#include "common.h"

#include <ddstore/ddstore.h>

static void check(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "b5c_store: %s: %s\n", what, dds_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    parse_opts(argc, argv, &o);
    int k = o.k;
    int *remote = malloc(sizeof(int) * size), nremote = remote_ranks(rank, size, remote);
    const char *fabric = getenv("DDSTORE_FABRIC") ? getenv("DDSTORE_FABRIC") : "tcp";

    dds_options opt;
    dds_options_init(&opt);
    opt.method = 1;
    opt.fabric = fabric;
    dds_store *s = NULL;
    check(dds_create(&s, MPI_Comm_c2f(MPI_COMM_WORLD), &opt), "dds_create");
    int64_t *idx = malloc(sizeof(int64_t) * k);
    for (int si = 0; si < o.nsizes; si++) {
        int rb = o.sizes[si];
        int64_t rows = rows_for(rb, o.quick);
        char name[32];
        snprintf(name, sizeof name, "b5c/%d", rb);
        uint8_t *shard = make_shard(rank, rows, rb);
        MPI_Barrier(MPI_COMM_WORLD); /* the previous size's readers are done */
        check(dds_add(s, name, shard, rows, rb, DDS_DTYPE_BYTES), "dds_add");
        uint8_t *out = malloc((size_t)k * rb);
        uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 7919;
        random_batch(&seed, remote, nremote, rows, k, idx);
        check(dds_get_batch(s, name, out, idx, k), "dds_get_batch");
        require_rows(out, idx, k, rb, "b5c_store");
        MPI_Barrier(MPI_COMM_WORLD);
        int64_t batches = 0;
        double t0 = wall_now(), c0 = cpu_now();
        do {
            random_batch(&seed, remote, nremote, rows, k, idx);
            check(dds_get_batch(s, name, out, idx, k), "dds_get_batch");
            batches++;
        } while (wall_now() - t0 < o.seconds);
        report("c_store_m1_tcp", rank, size, rb, k, batches, wall_now() - t0, cpu_now() - c0);
        free(out);
        free(shard); /* dds_add copied it */
    }
    check(dds_free(s), "dds_free");
    free(idx);
    free(remote);
    MPI_Finalize();
    return 0;
}
