/* B5 bare C ceiling, libfabric: one request and one reply per owner per batch (floor.h).
 *
 *   mpiexec -n 4 build-b5c/b5c_fabric [--k 256] [--seconds 1] [--quick] [SIZE...]
 *
 * Times floor.c's batches of K random rows held by ranks on other hosts, by duration on every
 * rank (CPU of every thread). b5_remote.py --floor-lib times the same code (libb5cfloor.so)
 * in the store's interleaved loops.
 *
 * Prints one JSON line per row size (rank 0). */
#include "common.h"
#include "floor.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    parse_opts(argc, argv, &o);
    int k = o.k, maxrb = 0;
    int *remote = malloc(sizeof(int) * size), nremote = remote_ranks(rank, size, remote);
    for (int i = 0; i < o.nsizes; i++)
        maxrb = o.sizes[i] > maxrb ? o.sizes[i] : maxrb;
    b5f_open(k, maxrb);
    int64_t *idx = malloc(sizeof(int64_t) * k);
    uint8_t *shard = NULL;
    for (int si = 0; si < o.nsizes; si++) {
        int rb = o.sizes[si];
        int64_t rows = rows_for(rb, o.quick);
        uint8_t *next = make_shard(rank, rows, rb);
        b5f_shard(next, rows, rb);
        free(shard); /* nobody reads it any more */
        shard = next;
        uint8_t *out = malloc((size_t)k * rb);
        uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 7919;
        random_batch(&seed, remote, nremote, rows, k, idx);
        b5f_batch(idx, k, out);
        require_rows(out, idx, k, rb, "b5c_fabric");
        MPI_Barrier(MPI_COMM_WORLD);
        int64_t batches = 0;
        double t0 = wall_now(), c0 = cpu_now();
        do { /* not collective: owners serve from their thread */
            random_batch(&seed, remote, nremote, rows, k, idx);
            b5f_batch(idx, k, out);
            batches++;
        } while (wall_now() - t0 < o.seconds);
        report("c_fabric_req_reply", rank, size, rb, k, batches, wall_now() - t0, cpu_now() - c0);
        free(out);
    }
    b5f_close();
    free(shard);
    free(idx);
    free(remote);
    MPI_Finalize();
    return 0;
}
