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
 *    open_domain).
 * Method 2 also publishes the endpoint addresses and the variables' keys in
 * a directory (handshake.c) from which processes outside MPI join as readers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "handshake.h"
#include "internal.h"

/* Oldest libfabric API whose semantics this file relies on (mr_mode bits). */
#define FAB_API_VERSION FI_VERSION(1, 10)
/* Operations one read call keeps in flight at most by default, and at
 * most with DDSTORE_FABRIC_INFLIGHT. */
#define MAX_INFLIGHT 256
#define MAX_INFLIGHT_LIMIT 4096
/* Transfers one fi_readmsg carries at most (bounded by the provider's
 * rma_iov_limit and iov_limit). */
#define MAX_IOV 16
/* Memory registration modes this file knows how to honour. */
#define SUPPORTED_MR_MODE \
    (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

enum progress_mode { PROGRESS_NONE = 0, PROGRESS_WAIT = 1, PROGRESS_POLL = 2 };

typedef struct recv_reg {
    char *addr;
    size_t len;
    struct fid_mr *mr; /* NULL when the provider needs no local registration */
    int refs;
} recv_reg;

struct dds_fabric {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    /* initiator */
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    fi_addr_t *peer; /* group rank (core rank for readers) -> address of its target endpoint */
    int npeers;
    /* target (core stores only) */
    struct fid_av *t_av;
    struct fid_cq *t_cq;
    struct fid_ep *t_ep;

    uint64_t mr_mode;
    size_t max_msg;
    int inflight;      /* per read call */
    int iov;           /* transfers per read operation (fi_readmsg when > 1) */
    bool local_mr;     /* destinations must be registered (FI_MR_LOCAL, or forced) */
    _Atomic uint64_t next_key;
    pthread_mutex_t cq_lock; /* one thread drains the initiator CQ at a time */
    bool cq_wait;            /* the initiator CQ has a file-descriptor wait object */
    bool serialize;          /* one read call at a time (see open_domain) */
    pthread_mutex_t read_lock;

    pthread_rwlock_t recv_lock;
    recv_reg *recv;
    size_t nrecv, recv_cap;

    int progress;      /* enum progress_mode */
    unsigned poll_us;
    bool thread_started;
    pthread_t thread;
    _Atomic int stop;
    _Atomic uint64_t passes; /* progress passes completed (see quiesce_progress) */

    /* method 2 */
    int method;
    char *pubdir;
    int dirfd;
    bool dir_created;
    int lock_fd, live_fd;
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    char live_name[64];
    uint32_t next_var_index;
    struct run_token *token; /* this process's own publication (core) or the joined one if it is ours */
    /* readers */
    bool is_reader;
    _Atomic int broken; /* a reader gave up on reads: the store is unusable */
    double timeout_s;
    uint64_t read_timeout_ns; /* DDSTORE_READ_TIMEOUT_S; 0: wait for ever */
    pthread_mutex_t attach_lock;
    char prov[DDS_HS_MAX_PROV + 1];
};

struct dds_fabric_var {
    struct fid_mr *mr; /* this rank's shard (core stores) */
    uint64_t *raddr;   /* per peer: remote address of the shard's first byte */
    uint64_t *key;
    uint64_t *len;     /* registered bytes */
    uint32_t index;    /* method 2: publication index (var-<index>.dds) */
    bool published;
};

/* Method-2 runs published by this process. A reader in the same process
 * as a core store of the run it joined must not touch that store's
 * endpoints after they are closed (shm maps peers per process, so the
 * reader would follow a dangling mapping): reads check the token instead. */
typedef struct run_token {
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    _Atomic int alive;
    int refs; /* under run_lock */
    struct run_token *next;
} run_token;

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static run_token *runs;

static run_token *token_get(const uint8_t *run_id, bool create)
{
    pthread_mutex_lock(&run_lock);
    run_token *t = runs;
    while (t && memcmp(t->run_id, run_id, DDS_HS_RUN_ID_BYTES) != 0)
        t = t->next;
    if (!t && create) {
        t = calloc(1, sizeof *t);
        if (t) {
            memcpy(t->run_id, run_id, DDS_HS_RUN_ID_BYTES);
            atomic_init(&t->alive, 1);
            t->next = runs;
            runs = t;
        }
    }
    if (t)
        t->refs++;
    pthread_mutex_unlock(&run_lock);
    return t;
}

static void token_put(run_token *t, bool kill_run)
{
    if (!t)
        return;
    pthread_mutex_lock(&run_lock);
    if (kill_run)
        atomic_store(&t->alive, 0);
    if (--t->refs == 0) {
        run_token **pp = &runs;
        while (*pp && *pp != t)
            pp = &(*pp)->next;
        if (*pp)
            *pp = t->next;
        free(t);
    }
    pthread_mutex_unlock(&run_lock);
}

/* How long a read call may go without a single completion before it
 * fails with DDS_ETIMEDOUT: DDSTORE_READ_TIMEOUT_S seconds (0: never).
 * Readers default to 60 s: a core rank that died while the rest of its
 * group lives on (so the publication still looks current) would otherwise
 * leave them waiting for ever on providers that never report the loss
 * (shm). Core stores default to 0: their peers are in the same MPI job,
 * which ends when one of them dies. */
static uint64_t read_timeout_ns(bool reader)
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

static int fab_err(int fi_rc, const char *what)
{
    if (fi_rc < 0)
        fi_rc = -fi_rc;
    return dds_err(DDS_EFABRIC, "%s failed: %s (libfabric error %d)", what, fi_strerror(fi_rc),
                   fi_rc);
}

static double now_s(void) { return (double)dds_now_ns() * 1e-9; }

static void sleep_s(double t)
{
    if (t <= 0)
        return;
    struct timespec ts = { .tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- provider selection ---------------------------------------------------- */

static struct fi_info *make_hints(const char *prov, uint32_t addr_format)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
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

static int getinfo(const char *prov, uint32_t addr_format, struct fi_info **out)
{
    struct fi_info *h = make_hints(prov, addr_format);
    if (!h)
        return -FI_ENOMEM;
    int rc = fi_getinfo(FAB_API_VERSION, NULL, NULL, 0, h, out);
    fi_freeinfo(h);
    return rc;
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

static void fab_init_struct(struct dds_fabric *F)
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

/* Open fabric, domain and the initiator endpoint for provider `prov`. */
static int open_domain(struct dds_fabric *F, const char *prov, uint32_t addr_format)
{
    struct fi_info *list = NULL;
    int rc = getinfo(prov, addr_format, &list);
    if (rc != 0 || !list)
        return dds_err(DDS_ENOTSUP, "libfabric provider '%s' is not available here (fi_getinfo: %s)", prov,
                       fi_strerror(rc < 0 ? -rc : FI_ENODATA));
    /* The first entry of the exact provider; the rest of the list is not needed. */
    F->info = fi_dupinfo(list);
    fi_freeinfo(list);
    if (!F->info)
        return dds_err(DDS_ENOMEM, "out of memory (fi_dupinfo)");
    snprintf(F->prov, sizeof F->prov, "%s", F->info->fabric_attr->prov_name);
    F->mr_mode = (uint64_t)F->info->domain_attr->mr_mode;
    F->max_msg = F->info->ep_attr->max_msg_size ? F->info->ep_attr->max_msg_size : SIZE_MAX;
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
        return fab_err(rc, "fi_fabric");
    if ((rc = fi_domain(F->fabric, F->info, &F->domain, NULL)))
        return fab_err(rc, "fi_domain");
    struct fi_av_attr ava = { .type = FI_AV_UNSPEC };
    if ((rc = fi_av_open(F->domain, &ava, &F->av, NULL)))
        return fab_err(rc, "fi_av_open");
    /* A reader that waits long blocks on a file descriptor where the
     * provider has one: on a busy node the spinning reader would otherwise
     * take the CPU from the target's progress thread it waits for. */
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_FD };
    if (fi_cq_open(F->domain, &cqa, &F->cq, NULL) == 0) {
        F->cq_wait = true;
    } else {
        F->cq = NULL;
        cqa.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(F->domain, &cqa, &F->cq, NULL)))
            return fab_err(rc, "fi_cq_open");
    }
    if ((rc = fi_endpoint(F->domain, F->info, &F->ep, NULL)))
        return fab_err(rc, "fi_endpoint");
    if ((rc = fi_ep_bind(F->ep, &F->av->fid, 0)))
        return fab_err(rc, "fi_ep_bind (address vector)");
    if ((rc = fi_ep_bind(F->ep, &F->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fab_err(rc, "fi_ep_bind (completion queue)");
    if ((rc = enable_ep(F->ep)))
        return fab_err(rc, "fi_enable");
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
    return F->info->domain_attr->data_progress != FI_PROGRESS_AUTO ||
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
        return fab_err(rc, "fi_av_open (target)");
    struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
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
        return fab_err(rc, "fi_cq_open (target)");
    if ((rc = fi_endpoint(F->domain, F->info, &F->t_ep, NULL)))
        return fab_err(rc, "fi_endpoint (target)");
    if ((rc = fi_ep_bind(F->t_ep, &F->t_av->fid, 0)))
        return fab_err(rc, "fi_ep_bind (target address vector)");
    if ((rc = fi_ep_bind(F->t_ep, &F->t_cq->fid, FI_TRANSMIT | FI_RECV)))
        return fab_err(rc, "fi_ep_bind (target completion queue)");
    if ((rc = enable_ep(F->t_ep)))
        return fab_err(rc, "fi_enable (target)");
    F->poll_us = 1000;
    const char *p = dds_env("DDSTORE_FABRIC_POLL_US");
    if (p) {
        long v = strtol(p, NULL, 10);
        if (v >= 10 && v <= 1000000)
            F->poll_us = (unsigned)v;
    }
    return DDS_OK;
}

/* Target-side progress. A blocking wait costs nothing while idle and wakes
 * when a peer's request arrives on a socket; the wait times out now and
 * then only to notice `stop` should the wake-up signal be lost. */
static void *progress_main(void *arg)
{
    struct dds_fabric *F = arg;
    struct fi_cq_entry e[8];
    while (!atomic_load(&F->stop)) {
        ssize_t n;
        if (F->progress == PROGRESS_WAIT)
            n = fi_cq_sread(F->t_cq, e, 8, NULL, 1000);
        else
            n = fi_cq_read(F->t_cq, e, 8);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof ee);
            if (fi_cq_readerr(F->t_cq, &ee, 0) == 1)
                dds_debug("fabric: target completion error: %s", fi_strerror(ee.err));
        }
        atomic_fetch_add_explicit(&F->passes, 1, memory_order_release);
        if (n == -FI_EAGAIN && F->progress == PROGRESS_POLL)
            sleep_s((double)F->poll_us * 1e-6);
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
static int reg_mr(struct dds_fabric *F, void *buf, size_t len, uint64_t access, struct fid_ep *ep,
                  struct fid_mr **mr)
{
    uint64_t key = (F->mr_mode & FI_MR_PROV_KEY) ? 0 : atomic_fetch_add(&F->next_key, 1);
    int rc = fi_mr_reg(F->domain, buf, len, access, 0, key, 0, mr, NULL);
    if (rc) {
        *mr = NULL;
        return fab_err(rc, "fi_mr_reg");
    }
    if (F->mr_mode & FI_MR_ENDPOINT) {
        if ((rc = fi_mr_bind(*mr, &ep->fid, 0)) || (rc = fi_mr_enable(*mr))) {
            fi_close(&(*mr)->fid);
            *mr = NULL;
            return fab_err(rc, "fi_mr_bind/fi_mr_enable");
        }
    }
    return DDS_OK;
}

static void fab_free(struct dds_fabric *F)
{
    if (!F)
        return;
    token_put(F->token, false);
    F->token = NULL;
    stop_progress(F);
    for (size_t i = 0; i < F->nrecv; i++)
        if (F->recv[i].mr)
            fi_close(&F->recv[i].mr->fid);
    free(F->recv);
    if (F->ep)
        fi_close(&F->ep->fid);
    if (F->t_ep)
        fi_close(&F->t_ep->fid);
    if (F->cq)
        fi_close(&F->cq->fid);
    if (F->t_cq)
        fi_close(&F->t_cq->fid);
    if (F->av)
        fi_close(&F->av->fid);
    if (F->t_av)
        fi_close(&F->t_av->fid);
    if (F->domain)
        fi_close(&F->domain->fid);
    if (F->fabric)
        fi_close(&F->fabric->fid);
    if (F->info)
        fi_freeinfo(F->info);
    if (F->lock_fd >= 0)
        close(F->lock_fd);
    if (F->live_fd >= 0)
        close(F->live_fd);
    if (F->dirfd >= 0)
        close(F->dirfd);
    free(F->pubdir);
    free(F->peer);
    pthread_mutex_destroy(&F->cq_lock);
    pthread_mutex_destroy(&F->read_lock);
    pthread_mutex_destroy(&F->attach_lock);
    pthread_rwlock_destroy(&F->recv_lock);
    free(F);
}

static int insert_peers(struct dds_fabric *F, int n, uint8_t *const *addr)
{
    F->peer = calloc((size_t)n, sizeof *F->peer);
    if (!F->peer)
        return dds_err(DDS_ENOMEM, "out of memory for %d peer addresses", n);
    F->npeers = n;
    for (int i = 0; i < n; i++) {
        /* One at a time: addresses of FI_ADDR_STR providers differ in length. */
        int k = fi_av_insert(F->av, addr[i], 1, &F->peer[i], 0, NULL);
        if (k != 1)
            return fab_err(k < 0 ? k : -FI_EINVAL, "fi_av_insert");
    }
    return DDS_OK;
}

/* ---- method-2 publication (group rank 0) ----------------------------------------- */

static int hostname_of(char *buf, size_t cap)
{
    if (gethostname(buf, cap) != 0)
        snprintf(buf, cap, "unknown");
    buf[cap - 1] = '\0';
    for (char *p = buf; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            *p = '?';
    return DDS_OK;
}

static int publish_store(dds_store *s, struct dds_fabric *F, int n, uint16_t *alen, uint8_t **addr)
{
    int rc = dds_hs_open_dir(F->pubdir, 1, &F->dirfd, NULL);
    if (rc == DDS_ENOENT)
        rc = dds_err(DDS_EIO, "handshake directory '%s' vanished while being created", F->pubdir);
    if (rc)
        return rc;
    /* Existing directory or not: remember whether this run made it, to
     * remove it again at free. */
    rc = dds_hs_lock(F->dirfd, F->pubdir, DDS_HS_LOCK_FILE, &F->lock_fd);
    if (rc)
        return rc;
    /* Nobody else publishes here now: whatever is left is stale. */
    dds_hs_remove_all(F->dirfd, NULL);
    dds_hs_random(F->run_id, sizeof F->run_id);
    dds_hs_live_name(F->run_id, F->live_name);
    rc = dds_hs_lock(F->dirfd, F->pubdir, F->live_name, &F->live_fd);
    if (rc)
        return rc;
    dds_hs_store st;
    memset(&st, 0, sizeof st);
    st.n_core = (uint32_t)n;
    st.group_index = (uint32_t)s->group_index;
    st.addr_format = F->info->addr_format;
    st.pid = (uint32_t)getpid();
    st.mr_mode = F->mr_mode;
    st.start_time = dds_hs_proc_start((int)getpid());
    snprintf(st.prov, sizeof st.prov, "%s", F->prov);
    hostname_of(st.host, sizeof st.host);
    st.addr_len = alen;
    st.addr = addr;
    uint8_t *bytes;
    size_t len;
    rc = dds_hs_encode_store(F->run_id, &st, &bytes, &len);
    if (rc)
        return rc;
    rc = dds_hs_write_file(F->dirfd, F->pubdir, DDS_HS_STORE_FILE, bytes, len);
    free(bytes);
    if (rc == DDS_OK)
        dds_debug("fabric: published %d endpoints in '%s'", n, F->pubdir);
    return rc;
}

static void var_file_name(uint32_t index, char name[32])
{
    snprintf(name, 32, "var-%08x.dds", index);
}

static void withdraw(struct dds_fabric *F)
{
    if (F->dirfd < 0)
        return;
    /* store.dds first, so that no reader starts on a half-removed set. */
    unlinkat(F->dirfd, DDS_HS_STORE_FILE, 0);
    dds_hs_remove_all(F->dirfd, NULL);
    if (F->live_fd >= 0) {
        close(F->live_fd);
        F->live_fd = -1;
    }
    if (F->lock_fd >= 0) {
        unlinkat(F->dirfd, DDS_HS_LOCK_FILE, 0);
        close(F->lock_fd);
        F->lock_fd = -1;
    }
    close(F->dirfd);
    F->dirfd = -1;
    if (F->dir_created)
        rmdir(F->pubdir); /* fails harmlessly when the user left files there */
}

/* ---- core stores: open / expose / release / close ------------------------------------ */

int dds_fab_open(dds_store *s)
{
    if (s->fab)
        return dds_err(DDS_ESTATE, "libfabric transport already open");
    struct dds_fabric *F = calloc(1, sizeof *F);
    if (!F)
        return dds_agree(s->group, dds_err(DDS_ENOMEM, "out of memory opening libfabric"));
    fab_init_struct(F);
    F->method = s->method;
    F->read_timeout_ns = read_timeout_ns(false);
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
            rc = choose_auto(s->method == 1 && node_size == s->group_size, chosen, sizeof chosen);
        }
    }
    rc = dds_agree(s->group, rc);
    if (rc == DDS_OK) {
        mrc = MPI_Bcast(chosen, sizeof chosen, MPI_CHAR, 0, s->group);
        rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Bcast (provider)");
        chosen[sizeof chosen - 1] = '\0';
    }
    if (rc == DDS_OK)
        rc = open_domain(F, chosen, 0);
    if (rc == DDS_OK)
        rc = open_target(F, need_progress_thread(F));
    rc = dds_agree(s->group, rc);

    /* Exchange the target endpoints' addresses. */
    char name[DDS_HS_MAX_ADDR];
    size_t nlen = sizeof name;
    int n = s->group_size;
    int *lens = NULL, *displs = NULL;
    uint8_t *all = NULL, **addr = NULL;
    uint16_t *alen = NULL;
    if (rc == DDS_OK) {
        int r = fi_getname(&F->t_ep->fid, name, &nlen);
        rc = r ? fab_err(r, "fi_getname") : DDS_OK;
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
            rc = insert_peers(F, n, addr);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK) {
        rc = start_progress(F);
        rc = dds_agree(s->group, rc);
    }
    if (rc == DDS_OK && s->method == 2) {
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
            rc = publish_store(s, F, n, alen, addr);
        }
        rc = dds_agree(s->group, rc);
        if (rc == DDS_OK) {
            /* Every core rank knows the run, for readers in its own process. */
            mrc = MPI_Bcast(F->run_id, sizeof F->run_id, MPI_BYTE, 0, s->group);
            rc = mrc == MPI_SUCCESS ? DDS_OK : dds_err_mpi(mrc, "MPI_Bcast (run id)");
            if (rc == DDS_OK && !(F->token = token_get(F->run_id, true)))
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
            withdraw(F);
        fab_free(F);
        return rc;
    }
    s->fab = F;
    if (s->group_rank == 0)
        dds_debug("fabric: provider %s (fabric %s, domain %s), mr_mode 0x%llx, %d in flight, %d per read, "
                  "concurrent reads: %s, target progress: %s%s%s",
                  F->prov, F->info->fabric_attr->name ? F->info->fabric_attr->name : "?",
                  F->info->domain_attr->name ? F->info->domain_attr->name : "?",
                  (unsigned long long)F->mr_mode, F->inflight, F->iov, F->serialize ? "serialized" : "shared endpoint",
                  progress_name(F->progress),
                  s->method == 2 ? ", handshake in " : "", s->method == 2 ? F->pubdir : "");
    return DDS_OK;
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
        rc = reg_mr(F, v->base, bytes, FI_REMOTE_READ, F->t_ep, &FV->mr);
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
    if (rc == DDS_OK && s->method == 2) {
        FV->index = F->next_var_index++;
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
                var_file_name(FV->index, fname);
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
            if (FV->published && s->group_rank == 0 && F->dirfd >= 0) {
                char fname[32];
                var_file_name(FV->index, fname);
                unlinkat(F->dirfd, fname, 0);
            }
            if (FV->mr)
                fi_close(&FV->mr->fid);
            free(FV->raddr);
            free(FV->key);
            free(FV->len);
            free(FV);
        }
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
        if (F && FV->published && s->group_rank == 0 && F->dirfd >= 0) {
            char fname[32];
            var_file_name(FV->index, fname);
            unlinkat(F->dirfd, fname, 0);
        }
        if (F)
            quiesce_progress(F);
    }
    if (FV->mr)
        fi_close(&FV->mr->fid);
    free(FV->raddr);
    free(FV->key);
    free(FV->len);
    free(FV);
    v->fab = NULL;
}

void dds_fab_close(dds_store *s)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return;
    if (!s->is_reader) {
        token_put(F->token, true);
        F->token = NULL;
        if (s->group_rank == 0)
            withdraw(F);
        /* No peer reads from this endpoint any more once all are here. */
        MPI_Barrier(s->group);
    }
    fab_free(F);
    s->fab = NULL;
}

/* ---- reads ------------------------------------------------------------------------- */

struct read_batch;

/* Per-operation context: the provider may use `ctx` as scratch space
 * (FI_CONTEXT/FI_CONTEXT2), so each operation in flight owns one. */
typedef struct read_slot {
    struct fi_context2 ctx;
    struct read_batch *batch;
    _Atomic int busy;
    int owner;
    int64_t offset; /* of the first transfer, for error messages */
    size_t len;     /* of all transfers */
    int niov;
    struct iovec iov[MAX_IOV];
    struct fi_rma_iov rma[MAX_IOV];
    void *desc[MAX_IOV];
} read_slot;

/* One read call's operations. On the heap: a reader whose core group has
 * vanished gives up on operations the provider still holds, and leaves
 * the batch to them (see gave_up). */
typedef struct read_batch {
    _Atomic int pending;
    _Atomic uint64_t completions; /* progress, for the read deadline */
    int err;            /* first failure (written under cq_lock) */
    char msg[512];
    int nslots;
    read_slot slots[];
} read_batch;

/* Hand one completion to its read. The slot is freed before the count
 * drops: once `pending` reaches 0 the owning thread may return and free
 * the batch. */
static void complete_slot(read_slot *sl, const char *errmsg)
{
    read_batch *b = sl->batch;
    if (errmsg && b->err == DDS_OK) {
        b->err = DDS_EFABRIC;
        snprintf(b->msg, sizeof b->msg, "fi_read of %zu bytes at offset %lld of group rank %d's shard failed: %s",
                 sl->len, (long long)sl->offset, sl->owner, errmsg);
    }
    atomic_store_explicit(&sl->busy, 0, memory_order_release);
    atomic_fetch_add_explicit(&b->completions, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->pending, 1, memory_order_acq_rel);
}

/* Drain the initiator CQ once. Whichever thread gets the lock serves
 * everyone's completions; the others step aside. `block`: nothing came for
 * a while, so wait on the CQ's descriptor (up to 1 ms) instead of spinning. */
static void drain_cq(struct dds_fabric *F, bool block)
{
    if (pthread_mutex_trylock(&F->cq_lock) != 0) {
        if (block && F->cq_wait)
            sleep_s(20e-6);
        else
            sched_yield();
        return;
    }
    struct fi_cq_entry e[16];
    ssize_t n = fi_cq_read(F->cq, e, 16);
    if (n == -FI_EAGAIN && block && F->cq_wait)
        n = fi_cq_sread(F->cq, e, 16, NULL, 1);
    if (n > 0) {
        for (ssize_t i = 0; i < n; i++)
            complete_slot((read_slot *)e[i].op_context, NULL);
    } else if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof ee);
        if (fi_cq_readerr(F->cq, &ee, 0) == 1) {
            char pbuf[256], msg[400];
            const char *pm = fi_cq_strerror(F->cq, ee.prov_errno, ee.err_data, pbuf, sizeof pbuf);
            snprintf(msg, sizeof msg, "%s (provider: %s)", fi_strerror(ee.err), pm ? pm : "no detail");
            if (ee.op_context)
                complete_slot((read_slot *)ee.op_context, msg);
            else
                dds_debug("fabric: completion error without context: %s", msg);
        }
    } else if (n != -FI_EAGAIN && n < 0) {
        dds_debug("fabric: fi_cq_read: %s", fi_strerror((int)-n));
    }
    pthread_mutex_unlock(&F->cq_lock);
    if (n == -FI_EAGAIN && !(block && F->cq_wait))
        sched_yield();
}

/* Completions arrive within microseconds on a fast fabric: spin briefly,
 * then block. */
typedef struct waiter {
    uint64_t since;
    uint64_t stuck_since; /* first wait of this call without the reset of a posted op */
    uint64_t last_check;
    uint64_t progress_at; /* last time a completion of this call was seen */
    uint64_t seen;        /* completions counted then */
} waiter;

static void wait_some(struct dds_fabric *F, waiter *w)
{
    uint64_t t = dds_now_ns();
    if (w->since == 0)
        w->since = t;
    if (w->stuck_since == 0)
        w->stuck_since = t;
    drain_cq(F, t - w->since > 50000);
}

static int still_current(struct dds_fabric *F);

/* A reader cannot tell a slow core rank from a dead one, and some
 * providers (tcp;ofi_rxm) retry connecting to a vanished endpoint forever.
 * So a reader waiting for more than 2 s re-reads the publication every 2 s:
 * once it is withdrawn or stale, the reads can never complete. Core stores
 * never give up (their peers are in the same MPI job). */
static bool gave_up(struct dds_fabric *F, waiter *w)
{
    if (!F->is_reader || w->stuck_since == 0)
        return false;
    uint64_t t = dds_now_ns();
    if (t - w->stuck_since < 2000000000ull || t - w->last_check < 2000000000ull)
        return false;
    w->last_check = t;
    return still_current(F) == 0;
}

static int abandon(struct dds_fabric *F)
{
    atomic_store(&F->broken, 1);
    return dds_err(DDS_EFABRIC,
                   "reads from the store published in '%s' did not complete and its core group has "
                   "withdrawn the publication (store freed or job ended); join again",
                   F->pubdir);
}

/* True once the call has seen no completion for read_timeout_ns. */
static bool stalled(struct dds_fabric *F, waiter *w, read_batch *b)
{
    if (F->read_timeout_ns == 0)
        return false;
    uint64_t t = dds_now_ns();
    uint64_t c = atomic_load_explicit(&b->completions, memory_order_relaxed);
    if (w->progress_at == 0 || c != w->seen) {
        w->progress_at = t;
        w->seen = c;
        return false;
    }
    return t - w->progress_at > F->read_timeout_ns;
}

static int read_timed_out(struct dds_fabric *F, read_batch *b)
{
    int owner = -1;
    for (int i = 0; i < b->nslots && owner < 0; i++)
        if (atomic_load(&b->slots[i].busy))
            owner = b->slots[i].owner;
    /* The provider still holds the operations: the endpoint cannot be
     * trusted for new reads. */
    atomic_store(&F->broken, 1);
    return dds_err(DDS_ETIMEDOUT,
                   "reads%s%s did not complete: no completion for %.1f s (DDSTORE_READ_TIMEOUT_S) while "
                   "waiting for group rank %d, which is dead or stuck; this store can no longer read: free "
                   "it (a reader may join again)",
                   F->pubdir ? " from the store published in " : "", F->pubdir ? F->pubdir : "",
                   (double)F->read_timeout_ns * 1e-9, owner);
}

/* One wait of a reader for a slot or a completion: 0 after waiting a
 * little, or the error that ends the read (the group vanished, or no
 * progress within the read deadline); the batch is then abandoned. */
static int wait_or_fail(struct dds_fabric *F, waiter *w, read_batch *b)
{
    if (gave_up(F, w))
        return abandon(F);
    if (stalled(F, w, b))
        return read_timed_out(F, b);
    wait_some(F, w);
    return DDS_OK;
}

static void wait_reset(waiter *w) { w->since = 0; }

static const recv_reg *find_recv(const struct dds_fabric *F, const char *dst, size_t len)
{
    for (size_t i = 0; i < F->nrecv; i++) {
        const recv_reg *r = &F->recv[i];
        if (dst >= r->addr && (size_t)(dst - r->addr) <= r->len && len <= r->len - (size_t)(dst - r->addr))
            return r;
    }
    return NULL;
}

/* Destination registrations made for one call. */
typedef struct call_mr {
    char *lo, *hi;
    struct fid_mr *mr;
} call_mr;

static int cmp_range(const void *a, const void *b)
{
    const call_mr *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Register, for this call only, the destinations not covered by
 * dds_register_recv(): touching or overlapping ranges are merged first (a
 * batch into one buffer becomes one registration); ranges with a gap are
 * never bridged, since the gap may not be mapped memory. */
static int register_call_dsts(struct dds_fabric *F, const dds_read_op *ops, size_t nops, call_mr **out,
                              size_t *nout, void **desc)
{
    *out = NULL;
    *nout = 0;
    size_t n = 0;
    call_mr *r = malloc((nops ? nops : 1) * sizeof *r);
    if (!r)
        return dds_err(DDS_ENOMEM, "out of memory registering destinations");
    for (size_t i = 0; i < nops; i++) {
        const recv_reg *rr = find_recv(F, ops[i].dst, (size_t)ops[i].len);
        desc[i] = rr && rr->mr ? fi_mr_desc(rr->mr) : NULL;
        if (rr || ops[i].len == 0)
            continue;
        r[n++] = (call_mr){ .lo = ops[i].dst, .hi = ops[i].dst + ops[i].len, .mr = NULL };
    }
    if (n == 0) {
        free(r);
        return DDS_OK;
    }
    qsort(r, n, sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        int rc = reg_mr(F, r[i].lo, (size_t)(r[i].hi - r[i].lo), FI_READ, F->ep, &r[i].mr);
        if (rc) {
            for (size_t j = 0; j < i; j++)
                fi_close(&r[j].mr->fid);
            free(r);
            return rc;
        }
    }
    for (size_t i = 0; i < nops; i++) {
        if (desc[i] || ops[i].len == 0 || find_recv(F, ops[i].dst, (size_t)ops[i].len))
            continue;
        /* Binary search for the merged range holding ops[i].dst. */
        size_t lo = 0, hi = m;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (r[mid].lo <= ops[i].dst)
                lo = mid;
            else
                hi = mid;
        }
        desc[i] = fi_mr_desc(r[lo].mr);
    }
    *out = r;
    *nout = m;
    return DDS_OK;
}

/* Operations needed for `ops`: transfers of one owner that each fit in
 * one message share an operation, up to F->iov of them; longer ones are
 * split at max_msg. */
static size_t count_posts(const struct dds_fabric *F, const dds_read_op *ops, size_t nops)
{
    size_t n = 0;
    for (size_t i = 0; i < nops;) {
        if (ops[i].len == 0) {
            i++;
        } else if (F->iov > 1 && (size_t)ops[i].len <= F->max_msg) {
            int k = 0;
            size_t sum = 0;
            int owner = ops[i].owner;
            while (i < nops && k < F->iov && ops[i].owner == owner && (size_t)ops[i].len <= F->max_msg - sum) {
                sum += (size_t)ops[i].len;
                k += ops[i].len > 0;
                i++;
            }
            n++;
        } else {
            n += ((size_t)ops[i].len + F->max_msg - 1) / F->max_msg;
            i++;
        }
    }
    return n;
}

/* Fill slot `sl` with the next operation starting at ops[*i] (`*done`
 * bytes of it already posted) and advance the cursor past it. */
static void fill_slot(const struct dds_fabric *F, const struct dds_fabric_var *FV, read_slot *sl,
                      const dds_read_op *ops, size_t nops, void **desc, size_t *i, size_t *done)
{
    const dds_read_op *op = &ops[*i];
    sl->owner = op->owner;
    sl->offset = op->src_offset + (int64_t)*done;
    sl->niov = 0;
    sl->len = 0;
    if (F->iov > 1 && *done == 0 && (size_t)op->len <= F->max_msg) {
        while (*i < nops && sl->niov < F->iov && ops[*i].owner == op->owner &&
               (size_t)ops[*i].len <= F->max_msg - sl->len) {
            const dds_read_op *o = &ops[*i];
            if (o->len > 0) {
                int k = sl->niov++;
                sl->iov[k] = (struct iovec){ .iov_base = o->dst, .iov_len = (size_t)o->len };
                sl->rma[k] = (struct fi_rma_iov){ .addr = FV->raddr[o->owner] + (uint64_t)o->src_offset,
                                                  .len = (size_t)o->len,
                                                  .key = FV->key[o->owner] };
                sl->desc[k] = desc ? desc[*i] : NULL;
                sl->len += (size_t)o->len;
            }
            (*i)++;
        }
        return;
    }
    size_t total = (size_t)op->len;
    size_t chunk = total - *done < F->max_msg ? total - *done : F->max_msg;
    sl->niov = 1;
    sl->iov[0] = (struct iovec){ .iov_base = op->dst + *done, .iov_len = chunk };
    sl->rma[0] = (struct fi_rma_iov){ .addr = FV->raddr[op->owner] + (uint64_t)op->src_offset + *done,
                                      .len = chunk,
                                      .key = FV->key[op->owner] };
    sl->desc[0] = desc ? desc[*i] : NULL;
    sl->len = chunk;
    *done += chunk;
    if (*done == total) {
        (*i)++;
        *done = 0;
    }
}

static ssize_t post_slot(struct dds_fabric *F, read_slot *sl, bool have_desc)
{
    if (sl->niov == 1)
        return fi_read(F->ep, sl->iov[0].iov_base, sl->iov[0].iov_len, sl->desc[0], F->peer[sl->owner],
                       sl->rma[0].addr, sl->rma[0].key, &sl->ctx);
    struct fi_msg_rma msg = {
        .msg_iov = sl->iov,
        .desc = have_desc ? sl->desc : NULL,
        .iov_count = (size_t)sl->niov,
        .addr = F->peer[sl->owner],
        .rma_iov = sl->rma,
        .rma_iov_count = (size_t)sl->niov,
        .context = &sl->ctx,
        .data = 0,
    };
    return fi_readmsg(F->ep, &msg, 0);
}

static int read_ops(struct dds_fabric *F, struct dds_fabric_var *FV, const dds_read_op *ops, size_t nops,
                    void **desc)
{
    size_t nposts = count_posts(F, ops, nops);
    if (nposts == 0)
        return DDS_OK;
    int nslots = nposts < (size_t)F->inflight ? (int)nposts : F->inflight;
    /* malloc, not calloc: only the fields below need a value before use. */
    read_batch *bp = malloc(sizeof *bp + (size_t)nslots * sizeof(read_slot));
    if (!bp)
        return dds_err(DDS_ENOMEM, "out of memory for %d read contexts", nslots);
    read_batch *const b = bp;
    read_slot *slots = b->slots;
    atomic_init(&b->pending, 0);
    atomic_init(&b->completions, 0);
    b->err = DDS_OK;
    b->msg[0] = '\0';
    b->nslots = nslots;
    for (int i = 0; i < nslots; i++) {
        atomic_init(&slots[i].busy, 0);
        slots[i].batch = b;
        slots[i].owner = -1;
    }
    int post_rc = DDS_OK;
    int next = 0; /* where to look for a free slot */
    waiter w = { 0 };
    size_t i = 0, done = 0; /* cursor: next transfer and bytes of it posted */
    while (i < nops && post_rc == DDS_OK) {
        if (ops[i].len == 0) {
            i++;
            continue;
        }
        read_slot *sl = NULL;
        while (!sl) {
            for (int k = 0; k < nslots; k++) {
                int idx = (next + k) % nslots;
                if (!atomic_load_explicit(&slots[idx].busy, memory_order_acquire)) {
                    sl = &slots[idx];
                    next = (idx + 1) % nslots;
                    break;
                }
            }
            if (!sl && (post_rc = wait_or_fail(F, &w, b)))
                goto abandoned;
        }
        wait_reset(&w);
        fill_slot(F, FV, sl, ops, nops, desc, &i, &done);
        atomic_store(&sl->busy, 1);
        atomic_fetch_add(&b->pending, 1);
        for (;;) {
            ssize_t r = post_slot(F, sl, desc != NULL);
            if (r == 0) {
                wait_reset(&w);
                break;
            }
            if (r == -FI_EAGAIN) {
                if ((post_rc = wait_or_fail(F, &w, b))) {
                    atomic_store(&sl->busy, 0);
                    atomic_fetch_sub(&b->pending, 1);
                    goto abandoned;
                }
                continue;
            }
            atomic_store(&sl->busy, 0);
            atomic_fetch_sub(&b->pending, 1);
            post_rc = fab_err((int)r, sl->niov > 1 ? "fi_readmsg" : "fi_read");
            break;
        }
    }
    wait_reset(&w);
    while (atomic_load_explicit(&b->pending, memory_order_acquire) > 0) {
        int wrc = wait_or_fail(F, &w, b); /* post_rc may hold a failed post: keep it */
        if (wrc) {
            post_rc = wrc;
            goto abandoned;
        }
    }
    int rc = post_rc ? post_rc : b->err ? dds_err(b->err, "%s", b->msg) : DDS_OK;
    free(b);
    return rc;
abandoned:
    /* Operations may still complete into this batch: it is never freed. */
    if (atomic_load(&b->pending) == 0)
        free(b);
    return post_rc;
}

int dds_fab_read(dds_store *s, dds_var *v, const dds_read_op *ops, size_t nops)
{
    struct dds_fabric *F = s->fab;
    struct dds_fabric_var *FV = v->fab;
    if (!F || !FV)
        return dds_err(DDS_ESTATE, "variable '%s': libfabric transport is not open", v->name);
    if (atomic_load(&F->broken))
        return dds_err(DDS_ESTATE, "variable '%s': an earlier read from '%s' failed for good; join again",
                       v->name, F->pubdir);
    if (s->is_reader && F->token && !atomic_load(&F->token->alive))
        return dds_err(DDS_ESTATE, "variable '%s': the core group's store in '%s' was freed; join again",
                       v->name, F->pubdir);
    int npeers = F->npeers;
    for (size_t i = 0; i < nops; i++) {
        const dds_read_op *op = &ops[i];
        if (op->owner < 0 || op->owner >= npeers || op->src_offset < 0 || op->len < 0 ||
            (uint64_t)op->src_offset > FV->len[op->owner] ||
            (uint64_t)op->len > FV->len[op->owner] - (uint64_t)op->src_offset || (!op->dst && op->len))
            return dds_err(DDS_ERANGE,
                           "variable '%s': transfer of %lld bytes at offset %lld of rank %d is outside "
                           "its shard",
                           v->name, (long long)op->len, (long long)op->src_offset, op->owner);
    }
    if (nops == 0)
        return DDS_OK;
    if (F->serialize)
        pthread_mutex_lock(&F->read_lock);
    /* Held for reading across the call: unregister_recv waits until no
     * read uses the registration it removes. */
    pthread_rwlock_rdlock(&F->recv_lock);
    int rc = DDS_OK;
    void **desc = NULL;
    call_mr *cm = NULL;
    size_t ncm = 0;
    if (F->local_mr) {
        desc = calloc(nops, sizeof *desc);
        rc = desc ? register_call_dsts(F, ops, nops, &cm, &ncm, desc)
                  : dds_err(DDS_ENOMEM, "out of memory for %zu descriptors", nops);
    }
    if (rc == DDS_OK)
        rc = read_ops(F, FV, ops, nops, desc);
    for (size_t i = 0; i < ncm; i++)
        fi_close(&cm[i].mr->fid);
    free(cm);
    free(desc);
    pthread_rwlock_unlock(&F->recv_lock);
    if (F->serialize)
        pthread_mutex_unlock(&F->read_lock);
    if (rc)
        return rc;
    return DDS_OK;
}

/* ---- receive buffers ------------------------------------------------------------------ */

int dds_fab_register_recv(dds_store *s, void *buf, size_t len)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    if (!buf || len == 0)
        return dds_err(DDS_EINVAL, "receive buffer is NULL or empty");
    pthread_rwlock_wrlock(&F->recv_lock);
    int rc = DDS_OK;
    for (size_t i = 0; i < F->nrecv; i++) {
        if (F->recv[i].addr == buf) {
            if (F->recv[i].len == len)
                F->recv[i].refs++;
            else
                rc = dds_err(DDS_EEXIST,
                             "buffer %p is already registered with %zu bytes (not %zu): unregister it first",
                             buf, F->recv[i].len, len);
            pthread_rwlock_unlock(&F->recv_lock);
            return rc;
        }
    }
    if (F->nrecv == F->recv_cap) {
        size_t cap = F->recv_cap ? 2 * F->recv_cap : 8;
        recv_reg *r = realloc(F->recv, cap * sizeof *r);
        if (!r) {
            pthread_rwlock_unlock(&F->recv_lock);
            return dds_err(DDS_ENOMEM, "out of memory registering a receive buffer");
        }
        F->recv = r;
        F->recv_cap = cap;
    }
    recv_reg r = { .addr = buf, .len = len, .mr = NULL, .refs = 1 };
    if (F->local_mr)
        rc = reg_mr(F, buf, len, FI_READ, F->ep, &r.mr);
    if (rc == DDS_OK)
        F->recv[F->nrecv++] = r;
    pthread_rwlock_unlock(&F->recv_lock);
    return rc;
}

int dds_fab_unregister_recv(dds_store *s, void *buf)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    pthread_rwlock_wrlock(&F->recv_lock);
    int rc = dds_err(DDS_ENOENT, "buffer %p is not registered", buf);
    for (size_t i = 0; i < F->nrecv; i++) {
        if (F->recv[i].addr != buf)
            continue;
        if (--F->recv[i].refs == 0) {
            if (F->recv[i].mr)
                fi_close(&F->recv[i].mr->fid);
            F->recv[i] = F->recv[--F->nrecv];
        }
        dds_err_clear();
        rc = DDS_OK;
        break;
    }
    pthread_rwlock_unlock(&F->recv_lock);
    return rc;
}

/* ---- method-2 readers ------------------------------------------------------------------ */

/* Load store.dds from `dir` if it is a live, current publication. Returns
 * DDS_OK, 1 (not yet: `why` says what is missing), or a negative error that
 * waiting will not cure. */
static int try_store(const char *dir, int n_core, int *dirfd, dds_hs_file *f, char *why, size_t cap)
{
    *dirfd = -1;
    int fd;
    int rc = dds_hs_open_dir(dir, 0, &fd, NULL);
    if (rc == DDS_ENOENT) {
        snprintf(why, cap, "the directory does not exist (yet)");
        return 1;
    }
    if (rc)
        return rc;
    uint8_t *bytes;
    size_t len;
    rc = dds_hs_read_file(fd, dir, DDS_HS_STORE_FILE, &bytes, &len);
    if (rc == DDS_ENOENT) {
        close(fd);
        snprintf(why, cap, "no %s in it: the core group has not published (yet)", DDS_HS_STORE_FILE);
        return 1;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    rc = dds_hs_parse(bytes, len, f);
    free(bytes);
    if (rc == DDS_OK && f->kind != DDS_HS_KIND_STORE) {
        dds_hs_file_clear(f);
        rc = dds_err(DDS_EPROTO, "'%s/%s' is not a store publication", dir, DDS_HS_STORE_FILE);
    } else if (rc) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", dds_last_error());
        rc = dds_err(rc, "'%s/%s': %s", dir, DDS_HS_STORE_FILE, msg);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    char live[64];
    dds_hs_live_name(f->run_id, live);
    int locked = dds_hs_is_locked(fd, live);
    bool alive = locked == 1;
    if (locked < 0) {
        /* No lock support: judge by the publishing process when it runs here. */
        char host[DDS_HS_MAX_HOST + 1];
        hostname_of(host, sizeof host);
        if (strcmp(host, f->store.host) != 0)
            alive = true;
        else
            alive = kill((pid_t)f->store.pid, 0) == 0 &&
                    (f->store.start_time == 0 || dds_hs_proc_start((int)f->store.pid) == f->store.start_time);
    }
    if (!alive) {
        snprintf(why, cap,
                 "%s is stale: its publisher (pid %u on %s) is gone, waiting for a new core group",
                 DDS_HS_STORE_FILE, f->store.pid, f->store.host);
        dds_hs_file_clear(f);
        close(fd);
        return 1;
    }
    if (n_core > 0 && (uint32_t)n_core != f->store.n_core) {
        rc = dds_err(DDS_EMISMATCH, "'%s' holds a store of %u core ranks, %d expected (n_core / DDSTORE_N_CORE)",
                     dir, f->store.n_core, n_core);
        dds_hs_file_clear(f);
        close(fd);
        return rc;
    }
    *dirfd = fd;
    return DDS_OK;
}

/* Build a reader's variable from its publication. */
static int make_reader_var(const struct dds_fabric *F, const dds_hs_var *hv, dds_var **out)
{
    (void)F;
    int n = (int)hv->n_core;
    dds_var *v = calloc(1, sizeof *v);
    struct dds_fabric_var *FV = calloc(1, sizeof *FV);
    if (v)
        v->offsets = calloc((size_t)n + 1, sizeof *v->offsets);
    if (FV) {
        FV->raddr = calloc((size_t)n, sizeof *FV->raddr);
        FV->key = calloc((size_t)n, sizeof *FV->key);
        FV->len = calloc((size_t)n, sizeof *FV->len);
    }
    if (!v || !FV || !v->offsets || !FV->raddr || !FV->key || !FV->len) {
        if (v)
            free(v->offsets);
        free(v);
        if (FV) {
            free(FV->raddr);
            free(FV->key);
            free(FV->len);
        }
        free(FV);
        return dds_err(DDS_ENOMEM, "out of memory attaching variable '%s'", hv->name);
    }
    snprintf(v->name, sizeof v->name, "%s", hv->name);
    v->dtype = hv->dtype;
    v->row_bytes = hv->row_bytes;
    v->shm_win = v->win = MPI_WIN_NULL;
    for (int i = 0; i < n; i++) {
        v->offsets[i + 1] = v->offsets[i] + hv->shards[i].rows; /* overflow ruled out by the parser */
        FV->raddr[i] = hv->shards[i].addr;
        FV->key[i] = hv->shards[i].key;
        FV->len[i] = hv->shards[i].len;
    }
    FV->index = hv->index;
    v->fab = FV;
    *out = v;
    return DDS_OK;
}

typedef struct parsed_var {
    dds_hs_file f;
} parsed_var;

static int cmp_index(const void *a, const void *b)
{
    const parsed_var *x = a, *y = b;
    return x->f.var.index < y->f.var.index ? -1 : x->f.var.index > y->f.var.index ? 1 : 0;
}

/* Load every published variable of the joined run that the store does not
 * know yet, in the order the core group added them. */
static int load_vars(dds_store *s)
{
    struct dds_fabric *F = s->fab;
    int fd = dup(F->dirfd);
    if (fd < 0)
        return dds_err(DDS_EIO, "cannot read '%s': %s", F->pubdir, strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return dds_err(DDS_EIO, "cannot read '%s': %s", F->pubdir, strerror(errno));
    }
    rewinddir(d);
    parsed_var *pv = NULL;
    size_t n = 0, cap = 0;
    int rc = DDS_OK;
    struct dirent *e;
    while (rc == DDS_OK && (e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        if (strncmp(nm, "var-", 4) != 0 || l < 9 || strcmp(nm + l - 4, ".dds") != 0)
            continue;
        uint8_t *bytes;
        size_t len;
        int r = dds_hs_read_file(F->dirfd, F->pubdir, nm, &bytes, &len);
        if (r == DDS_ENOENT)
            continue; /* withdrawn meanwhile */
        if (r) {
            rc = r;
            break;
        }
        dds_hs_file f;
        r = dds_hs_parse(bytes, len, &f);
        free(bytes);
        if (r) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", dds_last_error());
            rc = dds_err(r, "'%s/%s': %s", F->pubdir, nm, msg);
            break;
        }
        if (f.kind != DDS_HS_KIND_VAR || memcmp(f.run_id, F->run_id, sizeof F->run_id) != 0) {
            dds_hs_file_clear(&f); /* another run's leftover: never mixed in */
            continue;
        }
        if (f.var.n_core != (uint32_t)F->npeers) {
            dds_hs_file_clear(&f);
            rc = dds_err(DDS_EPROTO, "'%s/%s' lists %u core ranks, the store has %d", F->pubdir, nm,
                         f.var.n_core, F->npeers);
            break;
        }
        if (dds_var_find(s, f.var.name)) {
            dds_hs_file_clear(&f);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            parsed_var *q = realloc(pv, nc * sizeof *q);
            if (!q) {
                dds_hs_file_clear(&f);
                rc = dds_err(DDS_ENOMEM, "out of memory");
                break;
            }
            pv = q;
            cap = nc;
        }
        pv[n++].f = f;
    }
    closedir(d);
    if (rc == DDS_OK && n > 1)
        qsort(pv, n, sizeof *pv, cmp_index);
    for (size_t i = 0; i < n; i++) {
        if (rc == DDS_OK) {
            bool dup_name = false;
            for (size_t j = 0; j < i; j++)
                if (strcmp(pv[j].f.var.name, pv[i].f.var.name) == 0)
                    dup_name = true;
            if (dup_name) {
                rc = dds_err(DDS_EPROTO, "'%s' publishes variable '%s' twice", F->pubdir, pv[i].f.var.name);
            } else {
                dds_var *v = NULL;
                rc = make_reader_var(F, &pv[i].f.var, &v);
                if (rc == DDS_OK) {
                    rc = dds_var_append(s, v);
                    if (rc) {
                        dds_fab_var_release(s, v);
                        free(v->offsets);
                        free(v);
                    }
                }
            }
        }
        dds_hs_file_clear(&pv[i].f);
    }
    free(pv);
    return rc;
}

static double resolve_timeout(double timeout_s)
{
    if (timeout_s >= 0)
        return timeout_s;
    const char *e = dds_env("DDSTORE_HANDSHAKE_TIMEOUT_S");
    if (e) {
        char *end;
        double t = strtod(e, &end);
        if (*end == '\0' && t >= 0)
            return t;
        dds_debug("DDSTORE_HANDSHAKE_TIMEOUT_S='%s' is not a number of seconds; using 300", e);
    }
    return 300.0;
}

int dds_fab_join(dds_store **out, const char *dir, int n_core, double timeout_s)
{
    *out = NULL;
    if (!dir)
        dir = dds_env("DDSTORE_HANDSHAKE_DIR");
    if (!dir)
        dir = "./ddstore_hs";
    if (n_core <= 0) {
        const char *e = dds_env("DDSTORE_N_CORE");
        if (e) {
            char *end;
            long v = strtol(e, &end, 10);
            if (*end != '\0' || v <= 0 || v > (long)DDS_HS_MAX_CORE)
                return dds_err(DDS_EINVAL, "DDSTORE_N_CORE='%s' is not a positive number of core ranks", e);
            n_core = (int)v;
        }
    }
    if (timeout_s != timeout_s)
        return dds_err(DDS_EINVAL, "timeout is NaN");
    double timeout = resolve_timeout(timeout_s);
    double deadline = now_s() + timeout;
    char why[512] = "nothing found";
    dds_hs_file f;
    int dirfd = -1;
    double pause = 0.02;
    for (;;) {
        memset(&f, 0, sizeof f);
        int rc = try_store(dir, n_core, &dirfd, &f, why, sizeof why);
        if (rc == DDS_OK)
            break;
        if (rc < 0)
            return rc;
        double left = deadline - now_s();
        if (left <= 0)
            return dds_err(DDS_ETIMEDOUT, "no current ddstore publication in '%s' after %.1f s: %s", dir,
                           timeout, why);
        sleep_s(pause < left ? pause : left);
        if (pause < 0.25)
            pause *= 2;
    }

    struct dds_fabric *F = calloc(1, sizeof *F);
    dds_store *s = calloc(1, sizeof *s);
    int rc = (F && s) ? DDS_OK : dds_err(DDS_ENOMEM, "out of memory joining '%s'", dir);
    if (F) {
        fab_init_struct(F);
        F->method = 2;
        F->is_reader = true;
        F->dirfd = dirfd;
        dirfd = -1;
        F->timeout_s = timeout;
        F->read_timeout_ns = read_timeout_ns(true);
        memcpy(F->run_id, f.run_id, sizeof F->run_id);
        F->token = token_get(F->run_id, false);
        F->pubdir = strdup(dir);
        if (!F->pubdir)
            rc = dds_err(DDS_ENOMEM, "out of memory");
    }
    if (rc == DDS_OK)
        rc = open_domain(F, f.store.prov, f.store.addr_format);
    if (rc == DDS_OK && ((uint64_t)F->mr_mode & FI_MR_VIRT_ADDR) != (f.store.mr_mode & FI_MR_VIRT_ADDR))
        rc = dds_err(DDS_ENOTSUP,
                     "provider %s here addresses remote memory differently (mr_mode 0x%llx) from the "
                     "core group's (0x%llx)",
                     F->prov, (unsigned long long)F->mr_mode, (unsigned long long)f.store.mr_mode);
    if (rc == DDS_OK)
        rc = insert_peers(F, (int)f.store.n_core, f.store.addr);
    if (rc == DDS_OK) {
        s->magic = DDS_STORE_MAGIC;
        s->is_reader = true;
        s->method = 2;
        s->comm = s->group = s->node = MPI_COMM_NULL;
        s->rank = -1;
        s->size = 0;
        s->width = (int)f.store.n_core;
        s->group_rank = -1;
        s->group_index = -1;
        s->group_size = (int)f.store.n_core;
        pthread_rwlock_init(&s->vars_lock, NULL);
        s->fabric_name = strdup(F->prov);
        s->handshake_dir = strdup(dir);
        if (!s->fabric_name || !s->handshake_dir)
            rc = dds_err(DDS_ENOMEM, "out of memory");
        s->fab = F;
    }
    if (rc == DDS_OK)
        rc = load_vars(s);
    dds_hs_file_clear(&f);
    if (dirfd >= 0)
        close(dirfd);
    if (rc) {
        if (s) {
            for (int64_t i = 0; i < s->nvars; i++) {
                dds_fab_var_release(s, s->vars[i]);
                free(s->vars[i]->offsets);
                free(s->vars[i]);
            }
            free(s->vars);
            free(s->fabric_name);
            free(s->handshake_dir);
            if (s->magic == DDS_STORE_MAGIC)
                pthread_rwlock_destroy(&s->vars_lock);
            free(s);
        }
        fab_free(F);
        return rc;
    }
    dds_debug("fabric: joined '%s': %d core ranks, provider %s, %lld variables", dir, s->group_size, F->prov,
              (long long)s->nvars);
    dds_store_track(s, true);
    *out = s;
    return DDS_OK;
}

/* Is the joined publication still the one in the directory, and live?
 * 1 yes, 0 no, negative: error reading it. */
static int still_current(struct dds_fabric *F)
{
    uint8_t *bytes;
    size_t len;
    int rc = dds_hs_read_file(F->dirfd, F->pubdir, DDS_HS_STORE_FILE, &bytes, &len);
    if (rc == DDS_ENOENT)
        return 0;
    if (rc)
        return rc;
    dds_hs_file f;
    rc = dds_hs_parse(bytes, len, &f);
    free(bytes);
    if (rc)
        return rc;
    int same = memcmp(f.run_id, F->run_id, sizeof F->run_id) == 0;
    dds_hs_file_clear(&f);
    if (same) {
        char live[64];
        dds_hs_live_name(F->run_id, live);
        if (dds_hs_is_locked(F->dirfd, live) == 0)
            same = 0; /* the publisher died without withdrawing */
    }
    return same;
}

int dds_fab_attach(dds_store *s, const char *name)
{
    struct dds_fabric *F = s->fab;
    if (!F)
        return dds_err(DDS_ESTATE, "libfabric transport is not open");
    pthread_mutex_lock(&F->attach_lock);
    double deadline = now_s() + F->timeout_s;
    double pause = 0.02;
    int rc;
    for (;;) {
        rc = load_vars(s);
        if (rc)
            break;
        if (dds_var_find(s, name))
            break;
        int cur = still_current(F);
        if (cur < 0) {
            rc = cur;
            break;
        }
        if (cur == 0) {
            rc = dds_err(DDS_ESTATE,
                         "the store published in '%s' was withdrawn (its core group freed it) before "
                         "variable '%s' appeared",
                         F->pubdir, name);
            break;
        }
        double left = deadline - now_s();
        if (left <= 0) {
            rc = dds_err(DDS_ETIMEDOUT, "variable '%s' is not published in '%s' after %.1f s", name, F->pubdir,
                         F->timeout_s);
            break;
        }
        sleep_s(pause < left ? pause : left);
        if (pause < 0.25)
            pause *= 2;
    }
    pthread_mutex_unlock(&F->attach_lock);
    return rc;
}
