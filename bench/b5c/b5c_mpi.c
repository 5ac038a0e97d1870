/* B5 bare C ceiling, MPI: per batch one Alltoall of counts, one Alltoallv of row indices
 * to the owners, a memcpy gather on the owner and one Alltoallv of the rows back, then
 * the rows put into request order. The same protocol as b5_gather_ceiling.py without
 * Python; the store's method 0 is compared with it.
 *
 * Each collective is started non-blocking and waited for by MPI_Test and sched_yield(), as
 * the store waits: a blocking collective of MPICH 4.0 spins, and 4 spinning ranks on 2 cores
 * starve each other (measured, 2 simulated hosts x 2 ranks: 5 / 19 / 153 / 1247 MB/s at
 * 64 B / 512 B / 4 KiB / 64 KiB blocking, 64 / 331 / 1257 / 1851 MB/s yielding). Open MPI
 * yields in its own waits with mpi_yield_when_idle=1, which b5.sh sets.
 *
 *   mpiexec -n 4 build-b5c/b5c_mpi [--k 256] [--seconds 1] [--quick] [SIZE...]
 *
 * Prints one JSON line per row size (rank 0). */
#include <sched.h>

#include "common.h"

/* Wait for one request without spinning (see the top of this file). */
static void wait_yielding(MPI_Request *req)
{
    int done = 0;
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        sched_yield();
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct opts o;
    parse_opts(argc, argv, &o);
    int *remote = malloc(sizeof(int) * size), nremote = remote_ranks(rank, size, remote);
    int k = o.k;
    int *scount = calloc(size, sizeof(int)), *rcount = calloc(size, sizeof(int));
    int *sdispl = calloc(size, sizeof(int)), *rdispl = calloc(size, sizeof(int));
    int *sb = calloc(size, sizeof(int)), *rbn = calloc(size, sizeof(int));
    int *sbd = calloc(size, sizeof(int)), *rbd = calloc(size, sizeof(int));
    int *fill = calloc(size, sizeof(int));
    int64_t *idx = malloc(sizeof(int64_t) * k), *want = malloc(sizeof(int64_t) * k);
    int *pos = malloc(sizeof(int) * k);
    int64_t *req = malloc(sizeof(int64_t) * k * size); /* at most every rank's whole batch */

    for (int si = 0; si < o.nsizes; si++) {
        int rb = o.sizes[si];
        int64_t rows = rows_for(rb, o.quick);
        uint8_t *shard = make_shard(rank, rows, rb);
        uint8_t *gathered = malloc((size_t)k * size * rb), *back = malloc((size_t)k * rb);
        uint8_t *out = malloc((size_t)k * rb);
        uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(rank + 1) * 7919;
        int64_t batches = 0;
        double t0 = 0, c0 = 0;
        for (int it = -1;; it++) {
            if (it == 0) { /* the first batch (it = -1) warms up and is checked */
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = wall_now();
                c0 = cpu_now();
            }
            random_batch(&seed, remote, nremote, rows, k, idx);
            /* Group the requests by owner (counting sort), remembering each row's place. */
            memset(scount, 0, sizeof(int) * size);
            for (int i = 0; i < k; i++)
                scount[idx[i] / rows]++;
            for (int r = 0, s = 0; r < size; r++) {
                sdispl[r] = s;
                fill[r] = s;
                s += scount[r];
            }
            for (int i = 0; i < k; i++) {
                int r = (int)(idx[i] / rows), at = fill[r]++;
                want[at] = idx[i] - r * rows;
                pos[at] = i;
            }
            MPI_Request xreq;
            MPI_Ialltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD, &xreq);
            wait_yielding(&xreq);
            int nreq = 0;
            for (int r = 0; r < size; r++) {
                rdispl[r] = nreq;
                nreq += rcount[r];
            }
            MPI_Ialltoallv(want, scount, sdispl, MPI_INT64_T, req, rcount, rdispl, MPI_INT64_T, MPI_COMM_WORLD,
                           &xreq);
            wait_yielding(&xreq);
            for (int i = 0; i < nreq; i++) /* the owner's gather */
                memcpy(gathered + (size_t)i * rb, shard + req[i] * rb, rb);
            for (int r = 0; r < size; r++) {
                sb[r] = rcount[r] * rb;
                sbd[r] = rdispl[r] * rb;
                rbn[r] = scount[r] * rb;
                rbd[r] = sdispl[r] * rb;
            }
            MPI_Ialltoallv(gathered, sb, sbd, MPI_BYTE, back, rbn, rbd, MPI_BYTE, MPI_COMM_WORLD, &xreq);
            wait_yielding(&xreq);
            for (int i = 0; i < k; i++) /* into request order */
                memcpy(out + (size_t)pos[i] * rb, back + (size_t)i * rb, rb);
            if (it == -1) {
                require_rows(out, idx, k, rb, "b5c_mpi");
                continue;
            }
            batches++;
            if (batches % 8 == 0) { /* collective: every rank stops after the same batch */
                int done = wall_now() - t0 >= o.seconds, any = 0;
                MPI_Allreduce(&done, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
                if (any)
                    break;
            }
        }
        double wall = wall_now() - t0, cpu = cpu_now() - c0;
        report("c_mpi_alltoallv", rank, size, rb, k, batches, wall, cpu);
        free(shard);
        free(gathered);
        free(back);
        free(out);
    }
    /* B5C_SKIP_FINALIZE=1: leave without MPI_Finalize once everything is printed (Debian's
     * MPICH 4.0.2 over UCX tcp hangs in it now and then; b5.sh sets this for MPICH). */
    MPI_Barrier(MPI_COMM_WORLD);
    fflush(stdout);
    if (getenv("B5C_SKIP_FINALIZE") && atoi(getenv("B5C_SKIP_FINALIZE")))
        _exit(0);
    MPI_Finalize();
    return 0;
}
