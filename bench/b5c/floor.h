/* The request/reply floor of B5 (issue 24): one request and one reply per owner per batch over
 * libfabric tagged messages, the least work the store's methods 1 and 2 can do per batch on the
 * same transport. Built into b5c_fabric (a program) and into libb5cfloor.so, which
 * b5_remote.py loads to time the floor in the same interleaved loops as the store.
 *
 * Every rank opens two RDM endpoints of one provider (default "tcp;ofi_rxm", B5C_PROV
 * overrides): a server endpoint, served by a thread that blocks in fi_cq_sread, and a client
 * endpoint used by the caller. Per batch the reader sends each owner it needs one tagged
 * message (its rank and the row numbers), the owner's thread gathers those rows by memcpy into
 * one buffer and sends it back in one message (tag = owner), which lands in a per-owner bounce
 * buffer; the reader then puts the rows into request order. Waits block (FI_WAIT_FD): nobody
 * spins. Any failure aborts the MPI job (MPI_Abort), as a benchmark should.
 *
 * MPI must be initialised (any thread level: only the calling thread uses MPI), and every rank
 * of MPI_COMM_WORLD takes part. */
#ifndef B5C_FLOOR_H
#define B5C_FLOOR_H

#include <stdint.h>

/* Collective: open the endpoints and exchange addresses; batches of at most `kmax` rows of at
 * most `maxrb` bytes. */
void b5f_open(int kmax, int maxrb);
/* Collective: serve `shard` (`rows` rows of `rb` bytes, every rank the same shape; not copied:
 * the caller keeps it alive until the next b5f_shard or b5f_close). Global row g is row
 * g % rows of rank g / rows. */
void b5f_shard(const uint8_t *shard, int64_t rows, int rb);
/* Not collective: read global rows idx[0..k) into out (k rows of the current row size). */
void b5f_batch(const int64_t *idx, int k, uint8_t *out);
/* Collective: stop serving and close the endpoints. */
void b5f_close(void);

#endif
