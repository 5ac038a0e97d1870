/* Methods 1 and 2: one-sided reads with libfabric fi_read over RDM
 * endpoints.
 *
 * Each process opens one domain with two endpoints:
 *  - the target endpoint, whose address is given to peers and to which the
 *    shards' memory registrations are bound. It never starts an operation, so
 *    a progress thread (for providers that move data only when the target
 *    polls, see progress_main) can drain its completion queue without ever
 *    taking a completion that belongs to a reader.
 *  - the initiator endpoint, from which every read of every thread is posted.
 *    Reads from several threads share it (the domain is FI_THREAD_SAFE); any
 *    waiting thread polls the completion queue and hands each completion to
 *    the read it belongs to (through its per-operation context), so a thread
 *    never waits for another thread's reads and no lock is held while
 *    waiting for the network. Providers whose reads are CPU copies made
 *    inside fi_read (shm) gain nothing from that and lose to lock
 *    contention: their read calls are serialised instead (measured, see
 *    dds_fab_open_domain).
 * Method 2 also publishes the endpoint addresses and the variables' keys in
 * a directory (handshake.c, fabric_publish.c) from which processes outside
 * MPI join as readers (fabric_join.c). Reads are in fabric_read.c.
 */
#include <errno.h>
#include <signal.h>
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

#include "fabric_internal.h"

/* Oldest libfabric API whose semantics this file relies on (mr_mode bits). */
#define FAB_API_VERSION FI_VERSION(1, 10)
/* Operations one read call keeps in flight at most by default, and at
 * most with DDSTORE_FABRIC_INFLIGHT. */
#define MAX_INFLIGHT 256
#define MAX_INFLIGHT_LIMIT 4096
/* Memory registration modes this file knows how to honour. */
#define SUPPORTED_MR_MODE \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

enum progress_mode { PROGRESS_NONE = 0, PROGRESS_WAIT = 1, PROGRESS_POLL = 2 };

/* How long a read call may go without a single completion before it
 * fails with DDS_ETIMEDOUT: DDSTORE_READ_TIMEOUT_S seconds (0: never).
 * Readers default to 60 s: a core rank that died while the rest of its
 * group lives on (so the publication still looks current) would otherwise
 * leave them waiting for ever on providers that never report the loss
 * (shm). Core stores default to 0: their peers are in the same MPI job,
 * which ends when one of them dies. */
uint64_t dds_fab_read_timeout_ns(bool reader)
{
    double t = reader ? 60.0 : 0.0;
    const char *e = dds_env("DDSTORE_READ_TIMEOUT_S");
    if (e) {
        char *end;
        double v = strtod(e, &end);
        if (end != e && *end == '\0' && v >= 0 && v < 1e9)
            t = v;
        else
            dds_debug("DDSTORE_READ_TIMEOUT_S='%s' is not a number of seconds; using %.0f", e, t);
    }
    return (uint64_t)(t * 1e9);
}

/* fi_enable, retried for a while on -FI_EBUSY: the shm provider refuses an
 * endpoint while a just-closed one's resources of this process are still
 * being released (seen in CI: a second store created right after a free,
 * 4 ranks on 2 cores). */
static int enable_ep(struct fid_ep *ep)
{
    int rc;
    for (int i = 0; (rc = fi_enable(ep)) == -FI_EBUSY && i < 200; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return rc;
}

int dds_fab_err(int fi_rc, const char *what)
{
    if (fi_rc < 0)
        fi_rc = -fi_rc;
    return dds_err(DDS_EFABRIC, "%s failed: %s (libfabric error %d)", what, fi_strerror(fi_rc),
                   fi_rc);
}

/* ---- provider selection ---------------------------------------------------- */

static struct fi_info *make_hints(const char *prov, uint32_t addr_format, bool tagged)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->caps = FI_RMA | FI_READ | FI_REMOTE_READ | (tagged ? FI_TAGGED : 0);
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = (int)SUPPORTED_MR_MODE;
    h->domain_attr->threading = FI_THREAD_SAFE;
    h->addr_format = addr_format;
    if (prov) {
        h->fabric_attr->prov_name = strdup(prov);
        if (!h->fabric_attr->prov_name) {
            fi_freeinfo(h);
            return NULL;
        }
    }
    return h;
}

/* `tagged`: also tagged messages (owner-side gather). */
static int getinfo_caps(const char *prov, uint32_t addr_format, bool tagged, struct fi_info **out)
{
    struct fi_info *h = make_hints(prov, addr_format, tagged);
    if (!h)
        return -FI_ENOMEM;
    int rc = fi_getinfo(FAB_API_VERSION, NULL, NULL, 0, h, out);
    fi_freeinfo(h);
    return rc;
}

static int getinfo(const char *prov, uint32_t addr_format, struct fi_info **out)
{
    return getinfo_caps(prov, addr_format, false, out);
}

/* Names users give ("tcp", "verbs") are core providers; RDM endpoints over
 * them come from the ofi_rxm utility provider. */
static int resolve_requested(const char *req, char *chosen, size_t cap)
{
    struct fi_info *list = NULL;
    int rc = getinfo(req, 0, &list);
    if (rc == 0 && list) {
        snprintf(chosen, cap, "%s", list->fabric_attr->prov_name);
        fi_freeinfo(list);
        return DDS_OK;
    }
    if (!strchr(req, ';')) {
        char alt[DDS_HS_MAX_PROV + 16];
        snprintf(alt, sizeof alt, "%s;ofi_rxm", req);
        list = NULL;
        if (getinfo(alt, 0, &list) == 0 && list) {
            snprintf(chosen, cap, "%s", list->fabric_attr->prov_name);
            fi_freeinfo(list);
            return DDS_OK;
        }
    }
    return dds_err(DDS_ENOTSUP,
                   "libfabric provider '%s' is not available here with RDM endpoints, RMA reads and "
                   "thread safety (fi_getinfo: %s); list providers with `fi_info -t FI_EP_RDM -c "
                   "FI_RMA`, or unset DDSTORE_FABRIC",
                   req, fi_strerror(rc < 0 ? -rc : FI_ENODATA));
}

/* libfabric lists the fastest providers first. Skip the ones that are
 * emulations of last resort, and shm when a peer may sit on another node. */
static int choose_auto(bool allow_shm, char *chosen, size_t cap)
{
    struct fi_info *list = NULL;
    int rc = getinfo(NULL, 0, &list);
    if (rc != 0 || !list)
        return dds_err(DDS_ENOTSUP,
                       "no libfabric provider offers RDM endpoints with RMA reads here (fi_getinfo: %s)",
                       fi_strerror(rc < 0 ? -rc : FI_ENODATA));
    const char *pick = NULL, *fallback = NULL;
    for (struct fi_info *i = list; i; i = i->next) {
        const char *p = i->fabric_attr->prov_name;
        if (!p)
            continue;
        bool slow = strstr(p, "sockets") || strstr(p, "ofi_rxd");
        bool is_shm = strcmp(p, "shm") == 0;
        if (is_shm && !allow_shm)
            continue;
        if (slow) {
            if (!fallback)
                fallback = p;
            continue;
        }
        pick = p;
        break;
    }
    if (!pick)
        pick = fallback;
    if (!pick) {
        fi_freeinfo(list);
        return dds_err(DDS_ENOTSUP, "no usable libfabric provider here (only shm, and peers may be "
                                    "on other nodes); set DDSTORE_FABRIC");
    }
    snprintf(chosen, cap, "%s", pick);
    fi_freeinfo(list);
    return DDS_OK;
}

/* ---- domain and endpoints -------------------------------------------------------- */

static const char *progress_name(int p)
{
    return p == PROGRESS_WAIT ? "thread (blocking wait)" : p == PROGRESS_POLL ? "thread (timed poll)" : "none";
}

void dds_fab_init_struct(struct dds_fabric *F)
{
    F->dirfd = F->lock_fd = F->live_fd = -1;
    pthread_mutex_init(&F->cq_lock, NULL);
    pthread_mutex_init(&F->read_lock, NULL);
    pthread_mutex_init(&F->attach_lock, NULL);
    /* Readers hold recv_lock for a whole read call; with glibc's default
     * (readers first) a thread registering a buffer while others read
     * back to back waits for ever (seen: 0 reads in 3 s for the threads
     * that registered). Writers first; no read takes it twice. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(&F->recv_lock, &ra);
    /* How long a waiting reader polls its completion queue before it
     * blocks on the queue's descriptor (DDSTORE_FABRIC_SPIN_US). Measured
     * over tcp (B5, config m1_tcp_spin0, 2 hosts x 2 ranks bound to 2
     * cores, two runs): PyDDStore.get_batch reads 2-9 % more with the 50 us
     * poll at 64 B to 4 KiB rows, at slightly less CPU per batch (a reply
     * that comes within the poll saves a sleep and a wake-up), the same
     * within 3 % at 64 KiB; a C loop calling dds_get_batch back to back
     * reads 10 % less with it (bench/b5c/b5c_store). */
    F->spin_ns = 50000;
    const char *spin = dds_env("DDSTORE_FABRIC_SPIN_US");
    if (spin) {
        char *end;
        long v = strtol(spin, &end, 10);
        if (end != spin && *end == '\0' && v >= 0 && v <= 1000000)
            F->spin_ns = (uint64_t)v * 1000;
        else
            dds_debug("DDSTORE_FABRIC_SPIN_US='%s' is not 0 to 1000000; using 50", spin);
    }
    pthread_rwlockattr_destroy(&ra);
    atomic_store(&F->next_key, 1);
}

/* A positive count from environment variable `name` (at most `max`), else `dflt`. */
static size_t env_count(const char *name, size_t dflt, size_t max)
{
    const char *e = dds_env(name);
    if (!e)
        return dflt;
    char *end;
    long v = strtol(e, &end, 10);
    if (end == e || *end != '\0' || v < 1 || (unsigned long)v > max) {
        dds_debug("%s='%s' is not a count in [1, %zu]; using %zu", name, e, max, dflt);
        return dflt;
    }
    return (size_t)v;
}

/* An endpoint on F's domain bound to address vector `av` and completion
 * queue `cq`, enabled: the initiator endpoint, or a core rank's target
 * endpoint (`target`, named so in messages). */
static int open_ep(struct dds_fabric *F, struct fid_av *av, struct fid_cq *cq, struct fid_ep **ep, bool target)
{
    char what[64];
    int rc;
    if ((rc = fi_endpoint(F->domain, F->info, ep, NULL)))
        return dds_fab_err(rc, target ? "fi_endpoint (target)" : "fi_endpoint");
    if ((rc = fi_ep_bind(*ep, &av->fid, 0))) {
        snprintf(what, sizeof what, "fi_ep_bind (%saddress vector)", target ? "target " : "");
        return dds_fab_err(rc, what);
    }
    if ((rc = fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV))) {
        snprintf(what, sizeof what, "fi_ep_bind (%scompletion queue)", target ? "target " : "");
        return dds_fab_err(rc, what);
    }
    if ((rc = enable_ep(*ep)))
        return dds_fab_err(rc, target ? "fi_enable (target)" : "fi_enable");
    return DDS_OK;
}

/* Providers that move one-sided reads in software, through the target's
 * CPU (a request and a reply per operation, as a gather request costs
 * once per owner): tcp (tcp;ofi_rxm), sockets, udp (ofi_rxd), shm (its
 * multi-transfer reads wait for the target's progress thread). Not: cxi,
 * verbs, psm, opx, efa, ucx, whose NICs serve reads without the target's
 * CPU. */
static bool rma_in_software(const char *prov)
{
    static const char *hw[] = { "cxi", "verbs", "psm", "opx", "efa", "ucx" };
    for (size_t i = 0; i < sizeof hw / sizeof *hw; i++)
        if (strstr(prov, hw[i]))
            return false;
    static const char *sw[] = { "tcp", "sockets", "udp", "shm", "rxd" };
    for (size_t i = 0; i < sizeof sw / sizeof *sw; i++)
        if (strstr(prov, sw[i]))
            return true;
    return false;
}

/* ofi_rxm over tcp sends a message eagerly up to FI_OFI_RXM_EAGER_LIMIT
 * (default 16 KiB, where dynamic receive buffers also turn segmentation
 * off) and by rendezvous above it: a request-to-send, then a read that the
 * tcp provider emulates, through the sender's progress, before the data
 * moves. A gather reply always finds its receive posted (the reader posts
 * it before sending the request), so sending every reply eagerly costs no
 * buffering and saves the rendezvous round trips: measured over 2 simulated
 * hosts x 2 ranks (bench/b5_layers.py, get_batch of 256 random rows), 512 B
 * rows 1120 -> 1870 MB/s, 4 KiB rows 2620 -> 3110 MB/s, the ranks' resident
 * memory unchanged (rxm's bounce buffers keep FI_OFI_RXM_BUFFER_SIZE).
 * libfabric reads the variable when an endpoint is opened, so it is set
 * here, before ours are, and only where the user has not set it. rxm
 * refuses connections between endpoints whose limits differ: every process
 * of a store must run with the same value (libddstore's, or the user's). */
static void rxm_eager_default(const char *prov)
{
    if (strstr(prov, "ofi_rxm") && strstr(prov, "tcp") && !getenv("FI_OFI_RXM_EAGER_LIMIT")) {
        char limit[32];
        snprintf(limit, sizeof limit, "%zu", DDS_GATHER_MAX_REPLY);
        setenv("FI_OFI_RXM_EAGER_LIMIT", limit, 0);
    }
}

/* Open fabric, domain and the initiator endpoint for provider `prov`. */
int dds_fab_open_domain(struct dds_fabric *F, const char *prov, uint32_t addr_format)
{
    /* Tagged messages carry owner-side gather (fabric_gather.c); a
     * provider without them still reads one-sided. */
    struct fi_info *list = NULL;
    int rc = getinfo_caps(prov, addr_format, true, &list);
    F->tagged = rc == 0 && list;
    if (!F->tagged) {
        if (list)
            fi_freeinfo(list);
        list = NULL;
        rc = getinfo(prov, addr_format, &list);
    }
    if (rc != 0 || !list)
        return dds_err(DDS_ENOTSUP, "libfabric provider '%s' is not available here (fi_getinfo: %s)", prov,
                       fi_strerror(rc < 0 ? -rc : FI_ENODATA));
    /* The entry of this process's NIC (nic.c); the rest of the list is not needed. */
    struct fi_info *pick = list;
    rc = dds_nic_pick(list, &F->nic, &pick);
    F->info = rc ? NULL : fi_dupinfo(pick);
    fi_freeinfo(list);
    if (rc)
        return rc;
    if (!F->info)
        return dds_err(DDS_ENOMEM, "out of memory (fi_dupinfo)");
    snprintf(F->prov, sizeof F->prov, "%s", F->info->fabric_attr->prov_name);
    F->rma_emulated = rma_in_software(F->prov);
    rxm_eager_default(F->prov);
    F->mr_mode = (uint64_t)F->info->domain_attr->mr_mode;
    F->max_msg = F->info->ep_attr->max_msg_size ? F->info->ep_attr->max_msg_size : SIZE_MAX;
    F->inject = F->info->tx_attr->inject_size;
    atomic_store(&F->next_tag, 1);
    if (F->max_msg > ((size_t)1 << 30))
        F->max_msg = (size_t)1 << 30; /* bounded chunks keep any single transfer modest */
    /* Small remote rows cost per operation, not per byte (tcp: a request
     * and a reply through the target's progress thread each): several
     * rows of one owner ride in one fi_readmsg, and many operations stay
     * in flight (measured in bench/b5_remote.py). */
    size_t tx = F->info->tx_attr->size ? F->info->tx_attr->size : MAX_INFLIGHT;
    size_t want = env_count("DDSTORE_FABRIC_INFLIGHT", MAX_INFLIGHT, MAX_INFLIGHT_LIMIT);
    F->inflight = (int)(tx < want ? tx : want);
    if (F->inflight < 1)
        F->inflight = 1;
    size_t iov = F->info->tx_attr->rma_iov_limit;
    if (F->info->tx_attr->iov_limit < iov)
        iov = F->info->tx_attr->iov_limit;
    /* shm copies a single-transfer read inside fi_read, but hands a
     * multi-transfer one to the target's progress thread (measured: 1 ms
     * per operation, the poll interval): one transfer per read there. */
    bool is_shm = strcmp(F->prov, "shm") == 0;
    size_t iov_want = env_count("DDSTORE_FABRIC_IOV", is_shm ? 1 : MAX_IOV, MAX_IOV);
    F->iov = (int)(iov < iov_want ? iov : iov_want);
    if (F->iov < 1)
        F->iov = 1;
    F->local_mr = (F->mr_mode & FI_MR_LOCAL) || dds_env_flag("DDSTORE_FABRIC_MR_LOCAL", false);
    /* Concurrent reads: with shm every fi_read is a CPU copy made inside the
     * call, so threads only contend for the provider's spin locks (measured:
     * 4 threads reach 2.5x the batch rate when serialized); other providers
     * have network latency to overlap (tcp: 1.2x with the shared endpoint).
     * DDSTORE_FABRIC_SERIALIZE=0/1 overrides. */
    F->serialize = dds_env_flag("DDSTORE_FABRIC_SERIALIZE", strcmp(F->prov, "shm") == 0);

    if ((rc = fi_fabric(F->info->fabric_attr, &F->fabric, NULL)))
        return dds_fab_err(rc, "fi_fabric");
    if ((rc = fi_domain(F->fabric, F->info, &F->domain, NULL)))
        return dds_fab_err(rc, "fi_domain");
    struct fi_av_attr ava = { .type = FI_AV_UNSPEC };
    if ((rc = fi_av_open(F->domain, &ava, &F->av, NULL)))
        return dds_fab_err(rc, "fi_av_open");
    /* A reader that waits long blocks on a file descriptor where the
     * provider has one: on a busy node the spinning reader would otherwise
     * take the CPU from the target's progress thread it waits for. */
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD };
    if (fi_cq_open(F->domain, &cqa, &F->cq, NULL) == 0) {
        F->cq_wait = true;
    } else {
        F->cq = NULL;
        cqa.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(F->domain, &cqa, &F->cq, NULL)))
            return dds_fab_err(rc, "fi_cq_open");
    }
    if ((rc = open_ep(F, F->av, F->cq, &F->ep, false)))
        return rc;
    /* Gather requests carry this address, so that owners can reply to
     * readers they have never heard of (method-2 readers). */
    F->my_alen = sizeof F->my_addr;
    if (F->tagged && fi_getname(&F->ep->fid, F->my_addr, &F->my_alen) != 0) {
        dds_debug("fabric: no initiator address (fi_getname): no owner-side gather");
        F->tagged = false;
    }
    return DDS_OK;
}

/* Does the target need to poll for peers' reads to complete? Providers
 * that report automatic progress do it themselves; the rest (tcp;ofi_rxm
 * serves reads only inside the target's calls; shm completes the copy
 * without the target but needs it to recycle its command queue and to
 * answer the first contact) get a thread. DDSTORE_FABRIC_PROGRESS=thread
 * or none overrides. */
static bool need_progress_thread(const struct dds_fabric *F)
{
    const char *o = dds_env("DDSTORE_FABRIC_PROGRESS");
    if (o && strcmp(o, "thread") == 0)
        return true;
    if (o && strcmp(o, "none") == 0)
        return false;
    /* The thread also serves owner-side gather requests. */
    return F->tagged || F->info->domain_attr->data_progress != FI_PROGRESS_AUTO ||
           F->info->domain_attr->control_progress != FI_PROGRESS_AUTO;
}

/* The target endpoint of a core rank. Its CQ gets a file-descriptor wait
 * object when a progress thread will block on it; providers without one
 * (shm) are polled at DDSTORE_FABRIC_POLL_US (default 1000) instead. */
static int open_target(struct dds_fabric *F, bool progress)
{
    int rc;
    struct fi_av_attr ava = { .type = FI_AV_UNSPEC };
    if ((rc = fi_av_open(F->domain, &ava, &F->t_av, NULL)))
        return dds_fab_err(rc, "fi_av_open (target)");
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
    F->progress = PROGRESS_NONE;
    if (progress) {
        cqa.wait_obj = FI_WAIT_FD;
        rc = fi_cq_open(F->domain, &cqa, &F->t_cq, NULL);
        if (rc == 0) {
            F->progress = PROGRESS_WAIT;
        } else {
            cqa.wait_obj = FI_WAIT_NONE;
            F->progress = PROGRESS_POLL;
            F->t_cq = NULL;
        }
    }
    if (!F->t_cq && (rc = fi_cq_open(F->domain, &cqa, &F->t_cq, NULL)))
        return dds_fab_err(rc, "fi_cq_open (target)");
    if ((rc = open_ep(F, F->t_av, F->t_cq, &F->t_ep, true)))
        return rc;
    F->poll_us = 1000;
    const char *p = dds_env("DDSTORE_FABRIC_POLL_US");
    if (p) {
        long v = strtol(p, NULL, 10);
        if (v >= 10 && v <= 1000000)
            F->poll_us = (unsigned)v;
    }
    /* Only a progress thread serves gather requests (DDSTORE_FABRIC_PROGRESS=none: no gather). */
    if (F->progress == PROGRESS_NONE)
        F->tagged = false;
    if (F->tagged)
        return dds_fab_serve_open(F);
    return DDS_OK;
}

/* Target-side progress. A blocking wait costs nothing while idle and wakes
 * when a peer's request arrives on a socket; the wait times out now and
 * then only to notice `stop` should the wake-up signal be lost. */
static void *progress_main(void *arg)
{
    struct dds_fabric *F = arg;
    struct fi_cq_tagged_entry e[8];
    double idle_s = 20e-6; /* polling: the pause grows while nothing comes */
    bool queued = false;   /* sends or re-posts wait for the provider's resources */
    while (!atomic_load(&F->stop)) {
        ssize_t n;
        if (F->progress == PROGRESS_WAIT && !queued)
            n = fi_cq_sread(F->t_cq, e, 8, NULL, 1000);
        else
            n = fi_cq_read(F->t_cq, e, 8);
        /* Completions with a context are gather requests received and
         * replies sent (fabric_serve.c); one-sided reads of the shards
         * leave none. */
        for (ssize_t i = 0; i < n; i++) {
            fab_ctx *c = e[i].op_context;
            if (c)
                c->complete(c, &e[i], NULL);
        }
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof ee);
            if (fi_cq_readerr(F->t_cq, &ee, 0) == 1) {
                dds_debug("fabric: target completion error: %s", fi_strerror(ee.err));
                if (ee.op_context) {
                    fab_ctx *c = ee.op_context;
                    c->complete(c, NULL, fi_strerror(ee.err));
                }
            }
        }
        if (F->srv)
            queued = dds_fab_serve_pass(F);
        atomic_fetch_add_explicit(&F->passes, 1, memory_order_release);
        if (n > 0) {
            idle_s = 20e-6;
        } else if (n == -FI_EAGAIN && (F->progress == PROGRESS_POLL || queued)) {
            /* Polled: back off from 20 us to the poll interval, so that a
             * burst of requests is served fast and an idle store costs
             * next to nothing. */
            sleep_s(idle_s);
            idle_s *= 2;
            if (idle_s > (double)F->poll_us * 1e-6)
                idle_s = (double)F->poll_us * 1e-6;
        }
    }
    return NULL;
}

/* Wait until the progress pass under way (if any) has ended: a reply it
 * was sending from a shard (tcp sends read data from inside the target's
 * progress call) is then out of the shard, which can be released. Passes
 * are counted rather than locked: the thread starts its next pass at
 * once, and a lock would be handed back to it every time. A blocking wait
 * is cut short with fi_cq_signal. */
static void quiesce_progress(struct dds_fabric *F)
{
    if (!F->thread_started)
        return;
    uint64_t p0 = atomic_load_explicit(&F->passes, memory_order_acquire);
    do {
        if (F->progress == PROGRESS_WAIT)
            fi_cq_signal(F->t_cq);
        sleep_s(50e-6);
    } while (atomic_load_explicit(&F->passes, memory_order_acquire) == p0);
}

static int start_progress(struct dds_fabric *F)
{
    if (F->progress == PROGRESS_NONE)
        return DDS_OK;
    /* The thread must not take signals meant for the application (SIGINT
     * in Python): block them all while it is created. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&F->stop, 0);
    int rc = pthread_create(&F->thread, NULL, progress_main, F);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return dds_err(DDS_ENOMEM, "cannot start the libfabric progress thread: %s", strerror(rc));
    F->thread_started = true;
    return DDS_OK;
}

static void stop_progress(struct dds_fabric *F)
{
    if (!F->thread_started)
        return;
    atomic_store(&F->stop, 1);
    if (F->progress == PROGRESS_WAIT)
        fi_cq_signal(F->t_cq);
    pthread_join(F->thread, NULL);
    F->thread_started = false;
}

/* Register [buf, buf+len) on the domain with `access`; binds it to `ep`
 * when the provider scopes registrations by endpoint. */
int dds_fab_reg_mr(struct dds_fabric *F, void *buf, size_t len, uint64_t access, struct fid_ep *ep,
                  struct fid_mr **mr)
{
    uint64_t key = (F->mr_mode & FI_MR_PROV_KEY) ? 0 : atomic_fetch_add(&F->next_key, 1);
    int rc = fi_mr_reg(F->domain, buf, len, access, 0, key, 0, mr, NULL);
    if (rc) {
        *mr = NULL;
        return dds_fab_err(rc, "fi_mr_reg");
    }
    if (F->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mr, &ep->fid, 0)) || (rc = fi_mr_enable(*mr))) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
            return dds_fab_err(rc, "fi_mr_bind/fi_mr_enable");
        }
    }
    return DDS_OK;
}

void dds_fab_free(struct dds_fabric *F)
{
    if (!F)
        return;
    dds_fab_token_put(F->token, false);
    F->token = NULL;
    stop_progress(F);
    for (size_t i = 0; i < F->nrecv; i++)
        if (F->recv[i].mr)
            fi_close(&F->recv[i].mr->fid);
    free(F->recv);
    /* Endpoints before the queues and address vectors bound to them, all
     * before their domain and fabric: the order libfabric wants. */
    if (F->ep)
        fi_close(&F->ep->fid);
    if (F->t_ep)
        fi_close(&F->t_ep->fid);
    dds_fab_serve_free(F); /* its buffers were posted on t_ep */
    struct fid *fids[] = { F->cq ? &F->cq->fid : NULL,         F->t_cq ? &F->t_cq->fid : NULL,
                           F->av ? &F->av->fid : NULL,         F->t_av ? &F->t_av->fid : NULL,
                           F->domain ? &F->domain->fid : NULL, F->fabric ? &F->fabric->fid : NULL };
    for (size_t i = 0; i < sizeof fids / sizeof *fids; i++)
        if (fids[i])
            fi_close(fids[i]);
    if (F->info)
        fi_freeinfo(F->info);
    int fds[] = { F->lock_fd, F->live_fd, F->dirfd };
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(F->pubdir);
    free(F->peer);
    pthread_mutex_destroy(&F->cq_lock);
    pthread_mutex_destroy(&F->read_lock);
    pthread_mutex_destroy(&F->attach_lock);
    pthread_rwlock_destroy(&F->recv_lock);
    free(F);
}

int dds_fab_insert_peers(struct dds_fabric *F, int n, uint8_t *const *addr)
{
    F->peer = calloc((size_t)n, sizeof *F->peer);
    if (!F->peer)
        return dds_err(DDS_ENOMEM, "out of memory for %d peer addresses", n);
    F->npeers = n;
    for (int i = 0; i < n; i++) {
        /* One at a time: addresses of FI_ADDR_STR providers differ in length. */
        int k = fi_av_insert(F->av, addr[i], 1, &F->peer[i], 0, NULL);
        if (k != 1)
            return dds_fab_err(k < 0 ? k : -FI_EINVAL, "fi_av_insert");
    }
    return DDS_OK;
}

/* ---- core stores: open / expose / release / close ------------------------------------ */

int dds_fab_open(dds_store *s)
{
    if (s->fab)
        return dds_err(DDS_ESTATE, "libfabric transport already open");
    struct dds_fabric *F = calloc(1, sizeof *F);
    if (!F)
        return dds_agree(s->group, dds_err(DDS_ENOMEM, "out of memory opening libfabric"));
    dds_fab_init_struct(F);
    F->method = s->method;
    F->read_timeout_ns = dds_fab_read_timeout_ns(false);
    int rc = DDS_OK, mrc;

    /* Group rank 0 chooses; the group must use one provider. */
    char chosen[DDS_HS_MAX_PROV + 1] = { 0 };
    if (s->group_rank == 0) {
        const char *req = s->fabric_name ? s->fabric_name : dds_env("DDSTORE_FABRIC");
        if (req && *req) {
            rc = resolve_requested(req, chosen, sizeof chosen);
        } else {
            int node_size = s->group_size;
            if (s->node != MPI_COMM_NULL)
                MPI_Comm_size(s->node, &node_size);
            rc = choose_auto(s->method == DDS_METHOD_FABRIC && node_size == s->group_size, chosen,
                             sizeof chosen);
        }
    }
    rc = dds_agree(s->group, rc);
    if (rc == DDS_OK) {
        mrc = MPI_Bcast(chosen, sizeof chosen, MPI_CHAR, 0, s->group);
        rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Bcast (provider)");
        chosen[sizeof chosen - 1] = '\0';
    }
    F->nic = (dds_nic){ .map = s->nic_map, .rank = s->rank, .has_rank = true };
    if (rc == DDS_OK)
        rc = dds_fab_open_domain(F, chosen, 0);
    if (rc == DDS_OK)
        rc = open_target(F, need_progress_thread(F));
    rc = dds_agree(s->group, rc);
    if (rc == DDS_OK) {
        /* Owner-side gather only where every rank of the group serves it. */
        int mine = F->tagged, all = 0;
        mrc = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, s->group);
        rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Allreduce (gather support)");
        F->tagged = all != 0;
        rc = dds_agree(s->group, rc);
    }

    /* Exchange the target endpoints' addresses. */
    char name[DDS_HS_MAX_ADDR];
    size_t nlen = sizeof name;
    int n = s->group_size;
    int *lens = NULL, *displs = NULL;
    uint8_t *all = NULL, **addr = NULL;
    uint16_t *alen = NULL;
    if (rc == DDS_OK) {
        int r = fi_getname(&F->t_ep->fid, name, &nlen);
        rc = r ? dds_fab_err(r, "fi_getname") : DDS_OK;
        if (rc == DDS_OK && (nlen == 0 || nlen > DDS_HS_MAX_ADDR))
            rc = dds_err(DDS_EFABRIC, "endpoint address of %zu bytes is out of range", nlen);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK) {
        lens = calloc((size_t)n, sizeof *lens);
        displs = calloc((size_t)n, sizeof *displs);
        addr = calloc((size_t)n, sizeof *addr);
        alen = calloc((size_t)n, sizeof *alen);
        all = malloc((size_t)n * DDS_HS_MAX_ADDR);
        rc = (lens && displs && addr && alen && all) ? DDS_OK
                                                      : dds_err(DDS_ENOMEM, "out of memory for addresses");
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK) {
        int my = (int)nlen;
        mrc = MPI_Allgather(&my, 1, MPI_INT, lens, 1, MPI_INT, s->group);
        if (mrc == MPI_SUCCESS) {
            for (int i = 0; i < n; i++)
                displs[i] = i * (int)DDS_HS_MAX_ADDR;
            mrc = MPI_Allgatherv(name, my, MPI_BYTE, all, lens, displs, MPI_BYTE, s->group);
        }
        rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Allgather (endpoint addresses)");
        for (int i = 0; rc == DDS_OK && i < n; i++) {
            addr[i] = all + (size_t)i * DDS_HS_MAX_ADDR;
            alen[i] = (uint16_t)lens[i];
        }
        if (rc == DDS_OK)
            rc = dds_fab_insert_peers(F, n, addr);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK) {
        rc = start_progress(F);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK && s->method == DDS_METHOD_FILE) {
        int n_groups = s->size / s->width;
        size_t plen = strlen(s->handshake_dir) + 32;
        F->pubdir = malloc(plen);
        if (!F->pubdir)
            rc = dds_err(DDS_ENOMEM, "out of memory");
        else if (n_groups > 1)
            snprintf(F->pubdir, plen, "%s/group%d", s->handshake_dir, s->group_index);
        else
            snprintf(F->pubdir, plen, "%s", s->handshake_dir);
        if (rc == DDS_OK && s->group_rank == 0) {
            /* Whether this run creates the directory decides whether free
             * removes it. */
            F->dir_created = access(F->pubdir, F_OK) != 0;
            rc = dds_fab_publish_store(s, F, n, alen, addr);
        }
        rc = dds_agree(s->group, rc);
        if (rc == DDS_OK) {
            /* Every core rank knows the run, for readers in its own process. */
            mrc = MPI_Bcast(F->run_id, sizeof F->run_id, MPI_BYTE, 0, s->group);
            rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Bcast (run id)");
            if (rc == DDS_OK && !(F->token = dds_fab_token_get(F->run_id, true)))
                rc = dds_err(DDS_ENOMEM, "out of memory");
            rc = dds_agree(s->group, rc);
        }
    }
    free(lens);
    free(displs);
    free(addr);
    free(alen);
    free(all);
    if (rc) {
        if (s->group_rank == 0)
            dds_fab_withdraw(F);
        dds_fab_free(F);
        return rc;
    }
    s->fab = F;
    if (s->group_rank == 0)
        dds_debug("fabric: provider %s (fabric %s, domain %s), mr_mode 0x%llx, %d in flight, %d per read, "
                  "concurrent reads: %s, target progress: %s, owner-side gather: %s%s%s",
                  F->prov, F->info->fabric_attr->name ? F->info->fabric_attr->name : "?",
                  F->info->domain_attr->name ? F->info->domain_attr->name : "?",
                  (unsigned long long)F->mr_mode, F->inflight, F->iov, F->serialize ? "serialized" : "shared endpoint",
                  progress_name(F->progress), F->tagged ? "served" : "unavailable",
                  s->method == DDS_METHOD_FILE ? ", handshake in " : "",
                  s->method == DDS_METHOD_FILE ? F->pubdir : "");
    return DDS_OK;
}

void dds_fab_var_free(struct dds_fabric_var *FV)
{
    if (!FV)
        return;
    if (FV->mr)
        fi_close(&FV->mr->fid);
    free(FV->raddr);
    free(FV->key);
    free(FV->len);
    free(FV);
}

/* Method 2: group rank 0 removes the variable's file, so that no reader
 * attaches to memory about to be released. */
static void unpublish_var(const dds_store *s, struct dds_fabric *F, const struct dds_fabric_var *FV)
{
    if (FV->published && s->group_rank == 0 && F->dirfd >= 0) {
        char fname[32];
        dds_fab_var_file_name(FV->index, fname);
        unlinkat(F->dirfd, fname, 0);
    }
}

int dds_fab_var_expose(dds_store *s, dds_var *v)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_agree(s->group, dds_err(DDS_ESTATE, "libfabric transport is not open"));
    int n = s->group_size;
    struct dds_fabric_var *FV = calloc(1, sizeof *FV);
    uint64_t *mine_all = calloc((size_t)n * 4, sizeof *mine_all);
    int rc = DDS_OK;
    if (FV) {
        FV->raddr = calloc((size_t)n, sizeof *FV->raddr);
        FV->key = calloc((size_t)n, sizeof *FV->key);
        FV->len = calloc((size_t)n, sizeof *FV->len);
    }
    if (!FV || !mine_all || !FV->raddr || !FV->key || !FV->len)
        rc = dds_err(DDS_ENOMEM, "variable '%s': out of memory exposing it", v->name);
    size_t bytes = (size_t)(v->local_rows * v->row_bytes);
    if (bytes == 0)
        bytes = 1; /* the shard holds at least one byte: every rank registers something */
    if (rc == DDS_OK && !v->base)
        rc = dds_err(DDS_ESTATE, "variable '%s': shard memory is not allocated", v->name);
    if (rc == DDS_OK)
        rc = dds_fab_reg_mr(F, v->base, bytes, FI_REMOTE_READ, F->t_ep, &FV->mr);
    rc = dds_agree(s->group, rc);
    if (rc == DDS_OK) {
        uint64_t mine[4] = { (F->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)v->base : 0,
                             fi_mr_key(FV->mr), (uint64_t)bytes, (uint64_t)v->local_rows };
        int mrc = MPI_Allgather(mine, 4, MPI_UINT64_T, mine_all, 4, MPI_UINT64_T, s->group);
        rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Allgather (memory keys)");
        for (int i = 0; rc == DDS_OK && i < n; i++) {
            FV->raddr[i] = mine_all[4 * i];
            FV->key[i] = mine_all[4 * i + 1];
            FV->len[i] = mine_all[4 * i + 2];
        }
        if (fi_mr_key(FV->mr) == FI_KEY_NOTAVAIL)
            rc = dds_err(DDS_ENOTSUP, "provider %s gives no usable memory key (FI_MR_RAW)", F->prov);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK)
        rc = dds_var_node_shared(s, v);
    if (rc == DDS_OK) {
        /* Every core rank exposes variables in the same order: the index
         * names the variable in gather requests, and method 2's files. */
        FV->index = F->next_var_index++;
        if (F->srv)
            rc = dds_fab_serve_add(F, FV->index, v->base, (uint64_t)(v->local_rows * v->row_bytes),
                                   v->node_shared ? v : NULL, n);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK && s->method == DDS_METHOD_FILE) {
        if (s->group_rank == 0) {
            dds_hs_var hv;
            memset(&hv, 0, sizeof hv);
            hv.index = FV->index;
            hv.dtype = v->dtype;
            hv.row_bytes = v->row_bytes;
            hv.n_core = (uint32_t)n;
            snprintf(hv.name, sizeof hv.name, "%s", v->name);
            hv.shards = calloc((size_t)n, sizeof *hv.shards);
            if (!hv.shards)
                rc = dds_err(DDS_ENOMEM, "out of memory");
            for (int i = 0; rc == DDS_OK && i < n; i++) {
                hv.shards[i].rows = (int64_t)mine_all[4 * i + 3];
                hv.shards[i].addr = FV->raddr[i];
                hv.shards[i].key = FV->key[i];
                hv.shards[i].len = FV->len[i];
            }
            uint8_t *buf = NULL;
            size_t len = 0;
            if (rc == DDS_OK)
                rc = dds_hs_encode_var(F->run_id, &hv, &buf, &len);
            if (rc == DDS_OK) {
                char fname[32];
                dds_fab_var_file_name(FV->index, fname);
                rc = dds_hs_write_file(F->dirfd, F->pubdir, fname, buf, len);
            }
            free(buf);
            free(hv.shards);
        }
        FV->published = true;
        rc = dds_agree(s->group, rc);
    }
    free(mine_all);
    if (rc) {
        if (FV) {
            unpublish_var(s, F, FV);
            if (F->srv && FV->mr)
                dds_fab_serve_remove(F, FV->index);
        }
        dds_fab_var_free(FV);
        return rc;
    }
    v->fab = FV;
    return DDS_OK;
}

void dds_fab_var_release(dds_store *s, dds_var *v)
{
    struct dds_fabric_var *FV = v->fab;
    if (!FV)
        return;
    struct dds_fabric *F = s->fab;
    if (!s->is_reader) {
        /* Peers may still be reading this shard until they, too, are here. */
        MPI_Barrier(s->group);
        if (F) {
            unpublish_var(s, F, FV);
            if (F->srv)
                dds_fab_serve_remove(F, FV->index); /* no gather copies from the shard after this */
            quiesce_progress(F);
        }
    }
    dds_fab_var_free(FV);
    v->fab = NULL;
}

void dds_fab_close(dds_store *s)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return;
    if (!s->is_reader) {
        dds_fab_token_put(F->token, true);
        F->token = NULL;
        if (s->group_rank == 0)
            dds_fab_withdraw(F);
        /* No peer reads from this endpoint any more once all are here. */
        MPI_Barrier(s->group);
    }
    dds_fab_free(F);
    s->fab = NULL;
}
