/* A C program using an installed libddstore, built only with pkg-config:
 *
 *   mpicc consumer.c $(pkg-config --cflags --libs libddstore) -o consumer
 *   mpiexec -n 2 ./consumer
 *
 * ci/packaging.sh builds and runs it against the library that
 * packaging/scripts/build-libddstore.sh installed, so a broken header, .pc
 * file or soname in the installed tree fails CI. Exits non-zero on any
 * wrong value. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <ddstore/ddstore.h>

/* Print the library's message and abort every rank: a failing rank must not
 * leave the others waiting in a collective. */
#define CHECK(call)                                                              \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != DDS_OK) {                                                     \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, dds_strerror(rc_),    \
                    dds_last_error());                                           \
            MPI_Abort(MPI_COMM_WORLD, 1);                                        \
        }                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (dds_abi_version() != DDS_ABI_MAJOR) {
        fprintf(stderr, "ABI mismatch: header %d, library %d\n", DDS_ABI_MAJOR, dds_abi_version());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    dds_options opts;
    dds_options_init(&opts);
    opts.method = DDS_METHOD_MPI;
    dds_store *store = NULL;
    CHECK(dds_create(&store, (int)MPI_Comm_c2f(MPI_COMM_WORLD), &opts));

    /* Rank r holds rows 3r, 3r+1, 3r+2 of two doubles each: (row, -row). */
    enum { ROWS = 3 };
    double mine[ROWS][2];
    for (int i = 0; i < ROWS; i++) {
        mine[i][0] = (double)(rank * ROWS + i);
        mine[i][1] = -mine[i][0];
    }
    CHECK(dds_add(store, "xy", mine, ROWS, (int64_t)sizeof mine[0], DDS_DTYPE_FLOAT64));

    dds_var_info info = {.size = sizeof info};
    CHECK(dds_query(store, "xy", &info));
    int64_t total = info.global_rows;

    /* Every rank reads the last row, its neighbour's first row and row 0:
     * get_batch is group-collective with method 0, every rank calls it once. */
    int64_t rows[3] = {total - 1, ((rank + 1) % size) * ROWS, 0};
    double out[3][2];
    CHECK(dds_get_batch(store, "xy", out, rows, 3));
    int bad = 0;
    for (int i = 0; i < 3; i++)
        bad |= out[i][0] != (double)rows[i] || out[i][1] != -(double)rows[i];

    CHECK(dds_free(store));
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (rank == 0)
        printf("consumer: libddstore %s (ABI %d), %d ranks, %lld rows: %s\n", dds_version(),
               dds_abi_version(), size, (long long)total, any_bad ? "WRONG VALUES" : "ok");
    MPI_Finalize();
    return any_bad ? 1 : 0;
}
