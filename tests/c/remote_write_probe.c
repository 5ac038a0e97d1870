/* Hostile peer for test_remote_write: a process outside the core group that
 * learned every shard's address and key (here from the method-2 handshake
 * files, which any process of the same user may read) and tries to write
 * into the store's memory with fi_write.
 *
 *   remote_write_probe <publication dir>   (the handshake directory of a
 *                                           one-group store)
 *
 * For every core rank holding rows it
 *   1. reads the first bytes of the shard with fi_read (the control: the
 *      address, key and endpoint are right, so a refused write below is
 *      refused for its access, not for a wrong key);
 *   2. writes different bytes there with fi_write, its endpoint opened with
 *      FI_WRITE capability;
 *   3. reads the bytes again.
 * Prints one line per shard: "shard <i>: write refused (<how>)" or "shard
 * <i>: WRITE ACCEPTED". Exits 0 when every write was refused and every
 * shard reads back unchanged, 1 when a write was accepted or changed data,
 * 2 when the probe itself could not run (no publication, control read
 * failed). Uses libfabric and the library's handshake parser directly; calls
 * no MPI function. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "handshake.h"

#define PROBE_BYTES 64
#define WAIT_S 3.0

/* One endpoint with what it needs; opened twice, so that a target which
 * drops the connection of a refused write does not hide the read-back. */
typedef struct conn {
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr;
    void *desc;
    fi_addr_t *peer;
} conn;

static uint8_t buf[2 * PROBE_BYTES]; /* registered: [0, 64) reads, [64, 128) the write */

static int die(const char *what, int rc)
{
    fprintf(stderr, "remote_write_probe: %s: %s (%d)\n", what, fi_strerror(rc < 0 ? -rc : rc), rc);
    exit(2);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for the one outstanding operation. Returns 0 on a successful
 * completion, the (positive) provider error of an error completion, or
 * -FI_ETIMEDOUT. */
static int wait_one(conn *c)
{
    double t0 = now();
    for (;;) {
        struct fi_cq_entry e;
        ssize_t n = fi_cq_read(c->cq, &e, 1);
        if (n == 1)
            return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof err);
            fi_cq_readerr(c->cq, &err, 0);
            return err.err ? err.err : FI_EOTHER;
        }
        if (n != -FI_EAGAIN)
            die("fi_cq_read", (int)n);
        if (now() - t0 > WAIT_S)
            return -FI_ETIMEDOUT;
    }
}

/* Post an operation (0 read, 1 write, 2 write with FI_DELIVERY_COMPLETE),
 * retrying while the provider asks for progress first. */
static ssize_t post(conn *c, int kind, void *p, size_t len, fi_addr_t peer, uint64_t addr, uint64_t key)
{
    double t0 = now();
    struct iovec iov = { p, len };
    struct fi_rma_iov riov = { addr, len, key };
    struct fi_msg_rma m = { .msg_iov = &iov, .desc = &c->desc, .iov_count = 1, .addr = peer,
                            .rma_iov = &riov, .rma_iov_count = 1 };
    for (;;) {
        ssize_t r = kind == 2   ? fi_writemsg(c->ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION)
                    : kind == 1 ? fi_write(c->ep, p, len, c->desc, peer, addr, key, NULL)
                                : fi_read(c->ep, p, len, c->desc, peer, addr, key, NULL);
        if (r != -FI_EAGAIN || now() - t0 > WAIT_S)
            return r;
        struct fi_cq_entry e;
        (void)fi_cq_read(c->cq, &e, 0);
    }
}

static void conn_open(conn *c, const dds_hs_store *st)
{
    memset(c, 0, sizeof *c);
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    if (!hints)
        die("fi_allocinfo", -FI_ENOMEM);
    hints->caps = FI_RMA | FI_READ | FI_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->addr_format = st->addr_format;
    hints->fabric_attr->prov_name = strdup(st->prov);
    int rc = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc || !info)
        die("fi_getinfo with FI_WRITE for the store's provider", rc ? rc : -FI_ENODATA);
    if ((rc = fi_fabric(info->fabric_attr, &c->fabric, NULL)))
        die("fi_fabric", rc);
    if ((rc = fi_domain(c->fabric, info, &c->domain, NULL)))
        die("fi_domain", rc);
    struct fi_av_attr ava = { .type = FI_AV_UNSPEC };
    if ((rc = fi_av_open(c->domain, &ava, &c->av, NULL)))
        die("fi_av_open", rc);
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
    if ((rc = fi_cq_open(c->domain, &cqa, &c->cq, NULL)))
        die("fi_cq_open", rc);
    if ((rc = fi_endpoint(c->domain, info, &c->ep, NULL)))
        die("fi_endpoint", rc);
    if ((rc = fi_ep_bind(c->ep, &c->av->fid, 0)) ||
        (rc = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV)))
        die("fi_ep_bind", rc);
    if ((rc = fi_enable(c->ep)))
        die("fi_enable", rc);
    if ((rc = fi_mr_reg(c->domain, buf, sizeof buf, FI_READ | FI_WRITE, 0, 0, 0, &c->mr, NULL)))
        die("fi_mr_reg (local buffer)", rc);
    if ((info->domain_attr->mr_mode & FI_MR_ENDPOINT) &&
        ((rc = fi_mr_bind(c->mr, &c->ep->fid, 0)) || (rc = fi_mr_enable(c->mr))))
        die("fi_mr_bind (local buffer)", rc);
    c->desc = fi_mr_desc(c->mr);
    fi_freeinfo(info);
    c->peer = calloc(st->n_core, sizeof *c->peer);
    if (!c->peer)
        die("calloc", -FI_ENOMEM);
    for (uint32_t i = 0; i < st->n_core; i++)
        if (fi_av_insert(c->av, st->addr[i], 1, &c->peer[i], 0, NULL) != 1)
            die("fi_av_insert", -FI_EINVAL);
}

static void conn_close(conn *c)
{
    fi_close(&c->ep->fid);
    fi_close(&c->mr->fid);
    fi_close(&c->cq->fid);
    fi_close(&c->av->fid);
    fi_close(&c->domain->fid);
    fi_close(&c->fabric->fid);
    free(c->peer);
}

/* Read n bytes of shard i into dst; 0 on success. */
static int read_shard(conn *c, uint32_t i, const dds_hs_shard *sh, size_t n, uint8_t *dst)
{
    ssize_t r = post(c, 0, buf, n, c->peer[i], sh->addr, sh->key);
    if (r)
        return (int)r;
    int e = wait_one(c);
    if (e)
        return e;
    memcpy(dst, buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: remote_write_probe <publication dir>\n");
        return 2;
    }
    const char *dir = argv[1];
    int dirfd;
    if (dds_hs_open_dir(dir, 0, &dirfd, NULL) != DDS_OK)
        die("cannot open the publication directory", -FI_ENOENT);
    uint8_t *bytes;
    size_t len;
    dds_hs_file sf, vf;
    if (dds_hs_read_file(dirfd, dir, DDS_HS_STORE_FILE, &bytes, &len) != DDS_OK ||
        dds_hs_parse(bytes, len, &sf) != DDS_OK || sf.kind != DDS_HS_KIND_STORE)
        die("store.dds unreadable", -FI_EINVAL);
    free(bytes);
    if (dds_hs_read_file(dirfd, dir, "var-00000000.dds", &bytes, &len) != DDS_OK ||
        dds_hs_parse(bytes, len, &vf) != DDS_OK || vf.kind != DDS_HS_KIND_VAR)
        die("var-00000000.dds unreadable", -FI_EINVAL);
    free(bytes);
    printf("probe: provider %s, %u core ranks, variable '%s'\n", sf.store.prov, sf.store.n_core,
           vf.var.name);

    uint32_t n_core = sf.store.n_core;
    uint8_t(*before)[PROBE_BYTES] = calloc(n_core, PROBE_BYTES);
    uint8_t(*after)[PROBE_BYTES] = calloc(n_core, PROBE_BYTES);
    char(*how)[320] = calloc(n_core, 320);
    size_t *nbytes = calloc(n_core, sizeof *nbytes);
    if (!before || !after || !how || !nbytes)
        die("calloc", -FI_ENOMEM);
    for (uint32_t i = 0; i < n_core; i++) {
        size_t n = (size_t)vf.var.shards[i].rows * (size_t)vf.var.row_bytes;
        nbytes[i] = n > PROBE_BYTES ? PROBE_BYTES : n;
    }

    /* 1: control reads. */
    conn c;
    conn_open(&c, &sf.store);
    for (uint32_t i = 0; i < n_core; i++) {
        int e = nbytes[i] ? read_shard(&c, i, &vf.var.shards[i], nbytes[i], before[i]) : 0;
        if (e)
            die("control fi_read", e);
    }
    conn_close(&c);

    /* 2: the writes, each kind on a fresh connection (a target may drop the
     * connection of a refused write). A plain fi_write lets shm copy with
     * process_vm_writev from this process (its "fast RMA" path, where the
     * target checks nothing); FI_DELIVERY_COMPLETE makes the target apply
     * the write itself, after checking the key's access. */
    static const char *const kinds[2] = { "fi_write", "fi_writemsg(FI_DELIVERY_COMPLETE)" };
    for (int k = 0; k < 2; k++) {
        conn_open(&c, &sf.store);
        for (uint32_t i = 0; i < n_core; i++) {
            const dds_hs_shard *sh = &vf.var.shards[i];
            size_t n = nbytes[i];
            if (n == 0)
                continue;
            for (size_t b = 0; b < n; b++)
                buf[PROBE_BYTES + b] = (uint8_t)~before[i][b];
            ssize_t r = post(&c, 1 + k, buf + PROBE_BYTES, n, c.peer[i], sh->addr, sh->key);
            char *h = how[i] + strlen(how[i]);
            size_t cap = 320 - (size_t)(h - how[i]);
            if (r) {
                snprintf(h, cap, "%s%s: refused at post (%s)", k ? "; " : "", kinds[k],
                         fi_strerror((int)-r));
            } else {
                int e = wait_one(&c);
                snprintf(h, cap, "%s%s: %s%s", k ? "; " : "", kinds[k],
                         e > 0 ? "error completion " : e ? "no completion in 3 s" : "completed",
                         e > 0 ? fi_strerror(e) : "");
            }
        }
        conn_close(&c);
    }

    /* 3: read back on a fresh connection. */
    conn_open(&c, &sf.store);
    int accepted = 0, refused = 0;
    for (uint32_t i = 0; i < n_core; i++) {
        size_t n = nbytes[i];
        if (n == 0)
            continue;
        int e = read_shard(&c, i, &vf.var.shards[i], n, after[i]);
        if (e)
            die("fi_read after the writes", e);
        if (memcmp(before[i], after[i], n) == 0) {
            printf("shard %u: writes not applied, %zu bytes unchanged [%s]\n", i, n, how[i]);
            refused++;
        } else {
            printf("shard %u: WRITE APPLIED, data CHANGED [%s]\n", i, how[i]);
            accepted++;
        }
    }
    conn_close(&c);
    free(before);
    free(after);
    free(how);
    free(nbytes);
    printf("probe: %d shard(s) unchanged, %d changed\n", refused, accepted);
    dds_hs_file_clear(&sf);
    dds_hs_file_clear(&vf);
    if (refused == 0 && accepted == 0)
        die("no shard with rows was published", -FI_ENODATA);
    return accepted ? 1 : 0;
}
