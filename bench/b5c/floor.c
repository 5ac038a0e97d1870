/* The request/reply floor (floor.h): the protocol behind b5c_fabric and libb5cfloor.so. */
#include "floor.h"

#include <mpi.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                            \
    do {                                                                                       \
        ssize_t rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                         \
            fprintf(stderr, "b5c floor: %s: %s\n", #call, fi_strerror((int)-rc_));             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
        }                                                                                      \
    } while (0)

/* Every operation carries one of these as its context (providers may ask for FI_CONTEXT). */
struct op {
    struct fi_context2 ctx;
    int kind; /* OP_REQ (a request arrived), OP_REPLY (a reply was sent), OP_OTHER */
    int slot;
};
enum { OP_REQ, OP_REPLY, OP_OTHER };

/* A request: who asks, how many rows, their size, then the owner-local row numbers. */
struct reqhdr {
    int32_t from, n, rb, pad;
};

static int rank, size, kmax, maxrb;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static struct fid_ep *sep, *cep; /* server and client endpoints */
static struct fid_cq *scq, *ccq;
static fi_addr_t *srv_addr, *client_addr; /* every rank's two endpoints */
static const uint8_t *_Atomic shard;      /* the current row size's rows (set between barriers) */
static int64_t shard_rows;
static int shard_rb;
static atomic_int stop;
static size_t req_bytes;
static pthread_t thread;
static int started;

/* Reader state: per owner one request buffer and a place in the bounce buffer for its reply. */
static int *cnt, *fill, *pos;
static uint8_t *reqs, *bounce;
static struct op *cops;

/* Retry while the provider has no room (tcp;ofi_rxm progresses inside the calls). */
#define RETRY(call, cq)                                                                        \
    do {                                                                                       \
        ssize_t r_;                                                                            \
        while ((r_ = (call)) == -FI_EAGAIN) {                                                  \
            struct fi_cq_tagged_entry e_;                                                      \
            (void)fi_cq_read(cq, &e_, 0);                                                      \
        }                                                                                      \
        CHECK(r_);                                                                             \
    } while (0)

static void *server(void *arg)
{
    (void)arg;
    /* One receive slot and one reply buffer per requester: a requester has at most one
     * request out to this owner, and it cannot send the next before it has our reply. The
     * slot is reposted once the reply's send has completed, so a reply buffer is never
     * overwritten while in flight. */
    int nslots = size;
    uint8_t *rbuf = malloc(req_bytes * nslots);
    uint8_t **reply = calloc(nslots, sizeof *reply);
    size_t reply_cap = (size_t)kmax * maxrb;
    struct op *rops = calloc(nslots, sizeof *rops), *sops = calloc(nslots, sizeof *sops);
    for (int s = 0; s < nslots; s++) {
        rops[s] = (struct op){ .kind = OP_REQ, .slot = s };
        sops[s] = (struct op){ .kind = OP_REPLY, .slot = s };
        RETRY(fi_trecv(sep, rbuf + req_bytes * s, req_bytes, NULL, FI_ADDR_UNSPEC, 0, ~0ull, &rops[s].ctx), scq);
    }
    struct fi_cq_tagged_entry e[8];
    while (!atomic_load(&stop)) {
        ssize_t n = fi_cq_sread(scq, e, 8, NULL, 200);
        if (n == -FI_EAGAIN)
            continue;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee = { 0 };
            fi_cq_readerr(scq, &ee, 0);
            if (!atomic_load(&stop))
                fprintf(stderr, "b5c floor: server completion error: %s\n", fi_strerror(ee.err));
            continue;
        }
        CHECK(n);
        const uint8_t *rows_base = atomic_load(&shard);
        for (ssize_t i = 0; i < n; i++) {
            struct op *o = e[i].op_context;
            int s = o->slot;
            if (o->kind == OP_REQ) {
                struct reqhdr *h = (struct reqhdr *)(rbuf + req_bytes * s);
                const int32_t *rows = (const int32_t *)(h + 1);
                size_t rb = (size_t)h->rb;
                if (!reply[s])
                    reply[s] = malloc(reply_cap);
                for (int j = 0; j < h->n; j++) /* the gather */
                    memcpy(reply[s] + j * rb, rows_base + rows[j] * rb, rb);
                RETRY(fi_tsend(sep, reply[s], h->n * rb, NULL, client_addr[h->from], (uint64_t)rank, &sops[s].ctx),
                      scq);
            } else if (o->kind == OP_REPLY) {
                RETRY(fi_trecv(sep, rbuf + req_bytes * s, req_bytes, NULL, FI_ADDR_UNSPEC, 0, ~0ull, &rops[s].ctx),
                      scq);
            }
        }
    }
    for (int s = 0; s < nslots; s++)
        free(reply[s]);
    free(reply);
    free(rbuf);
    free(rops);
    free(sops);
    return NULL;
}

void b5f_open(int k, int rbmax)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    kmax = k;
    maxrb = rbmax;
    const char *prov = getenv("B5C_PROV") ? getenv("B5C_PROV") : "tcp;ofi_rxm";
    /* The transport as libddstore configures it (fabric.c, rxm_eager_default): replies up
     * to 8 MiB go eagerly, not by rxm's rendezvous, unless the user set the limit. */
    setenv("FI_OFI_RXM_EAGER_LIMIT", "8388608", 0);
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    hints->caps = FI_TAGGED;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(prov);
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
    CHECK(fi_domain(fab, info, &dom, NULL));
    struct fi_av_attr ava = { .type = FI_AV_TABLE };
    CHECK(fi_av_open(dom, &ava, &av, NULL));
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD };
    CHECK(fi_cq_open(dom, &cqa, &scq, NULL));
    CHECK(fi_cq_open(dom, &cqa, &ccq, NULL));
    struct fid_ep *eps[2];
    struct fid_cq *cqs[2] = { scq, ccq };
    for (int i = 0; i < 2; i++) {
        CHECK(fi_endpoint(dom, info, &eps[i], NULL));
        CHECK(fi_ep_bind(eps[i], &av->fid, 0));
        CHECK(fi_ep_bind(eps[i], &cqs[i]->fid, FI_TRANSMIT | FI_RECV));
        CHECK(fi_enable(eps[i]));
    }
    fi_freeinfo(info);
    sep = eps[0];
    cep = eps[1];
    /* Addresses: every rank's server endpoint and its client endpoint. */
    char name[2][256];
    size_t len[2] = { 256, 256 };
    CHECK(fi_getname(&sep->fid, name[0], &len[0]));
    CHECK(fi_getname(&cep->fid, name[1], &len[1]));
    size_t alen = len[0] > len[1] ? len[0] : len[1];
    char *all = malloc(alen * 2 * size);
    char mine[512];
    memcpy(mine, name[0], alen);
    memcpy(mine + alen, name[1], alen);
    MPI_Allgather(mine, (int)(2 * alen), MPI_BYTE, all, (int)(2 * alen), MPI_BYTE, MPI_COMM_WORLD);
    srv_addr = malloc(sizeof(fi_addr_t) * size);
    client_addr = malloc(sizeof(fi_addr_t) * size);
    for (int r = 0; r < size; r++) {
        if (fi_av_insert(av, all + 2 * alen * r, 1, &srv_addr[r], 0, NULL) != 1 ||
            fi_av_insert(av, all + 2 * alen * r + alen, 1, &client_addr[r], 0, NULL) != 1) {
            fprintf(stderr, "b5c floor: fi_av_insert failed\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    free(all);
    req_bytes = sizeof(struct reqhdr) + sizeof(int32_t) * k;
    cnt = calloc(size, sizeof(int));
    fill = calloc(size, sizeof(int));
    pos = malloc(sizeof(int) * k);
    reqs = malloc(req_bytes * size);
    bounce = malloc((size_t)k * rbmax);
    cops = calloc(2 * size, sizeof *cops);
    for (int i = 0; i < 2 * size; i++)
        cops[i].kind = OP_OTHER;
}

void b5f_shard(const uint8_t *rows_base, int64_t rows, int rb)
{
    if (rb > maxrb) {
        fprintf(stderr, "b5c floor: %d-byte rows, opened for at most %d\n", rb, maxrb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* nobody reads the old shard any more */
    atomic_store(&shard, rows_base);
    shard_rows = rows;
    shard_rb = rb;
    if (!started) {
        pthread_create(&thread, NULL, server, NULL);
        started = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* everyone serves the new one */
}

void b5f_batch(const int64_t *idx, int k, uint8_t *out)
{
    int rb = shard_rb;
    int64_t rows = shard_rows;
    memset(cnt, 0, sizeof(int) * size);
    for (int i = 0; i < k; i++)
        cnt[idx[i] / rows]++;
    for (int r = 0, s = 0; r < size; r++) {
        fill[r] = s;
        s += cnt[r];
        struct reqhdr *h = (struct reqhdr *)(reqs + req_bytes * r);
        *h = (struct reqhdr){ .from = rank, .n = 0, .rb = rb };
    }
    for (int i = 0; i < k; i++) {
        int r = (int)(idx[i] / rows);
        struct reqhdr *h = (struct reqhdr *)(reqs + req_bytes * r);
        ((int32_t *)(h + 1))[h->n++] = (int32_t)(idx[i] - r * rows);
        pos[fill[r]++] = i;
    }
    int pending = 0;
    for (int r = 0, s = 0; r < size; s += cnt[r], r++) {
        if (!cnt[r])
            continue;
        RETRY(fi_trecv(cep, bounce + (size_t)s * rb, (size_t)cnt[r] * rb, NULL, FI_ADDR_UNSPEC, (uint64_t)r, 0,
                       &cops[r].ctx),
              ccq);
        RETRY(fi_tsend(cep, reqs + req_bytes * r, sizeof(struct reqhdr) + sizeof(int32_t) * cnt[r], NULL,
                       srv_addr[r], 0, &cops[size + r].ctx),
              ccq);
        pending += 2;
    }
    struct fi_cq_tagged_entry e[16];
    while (pending > 0) {
        ssize_t n = fi_cq_sread(ccq, e, 16, NULL, 10000);
        if (n == -FI_EAGAIN)
            continue; /* a slow owner: keep waiting (mpiexec's timeout ends a hang) */
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee = { 0 };
            fi_cq_readerr(ccq, &ee, 0);
            fprintf(stderr, "b5c floor: reader completion error: %s\n", fi_strerror(ee.err));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        CHECK(n);
        pending -= (int)n;
    }
    for (int i = 0; i < k; i++) /* into request order */
        memcpy(out + (size_t)pos[i] * rb, bounce + (size_t)i * rb, rb);
}

void b5f_close(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    atomic_store(&stop, 1);
    fi_cq_signal(scq);
    if (started)
        pthread_join(thread, NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Endpoints first, then what they are bound to. */
    fi_close(&cep->fid);
    fi_close(&sep->fid);
    fi_close(&ccq->fid);
    fi_close(&scq->fid);
    fi_close(&av->fid);
    fi_close(&dom->fid);
    fi_close(&fab->fid);
    free(srv_addr);
    free(client_addr);
    free(cnt);
    free(fill);
    free(pos);
    free(reqs);
    free(bounce);
    free(cops);
    started = 0;
    atomic_store(&stop, 0);
}
