/* Tagged, bounded agreement: the first step of every group-collective call.
 *
 * Method-0 reads are group-collective where they need the target's help
 * (measured: Open MPI's osc/pt2pt and osc/ucx over TCP, and MPICH without
 * MPICH_ASYNC_PROGRESS, serve a passive-target MPI_Get only while the target
 * is inside MPI). A plain MPI_Allreduce there turns the most common mistake
 * of data-parallel code, one rank reading one batch more than the others,
 * into a hang: that rank waits in its read for ever while the others wait
 * in free(), in epoch_end() or in a collective of their own.
 *
 * So every group-collective call starts with one nonblocking allreduce that
 * carries the kind of call each rank is in (and its error verdict), polled
 * with a deadline. Two ranks in different calls meet in it (same
 * communicator, same datatype, same operation), see the difference and
 * raise together; a rank whose peers never arrive gives up after
 * DDSTORE_COLLECTIVE_TIMEOUT_S instead of waiting for ever. A rank in
 * free() that meets reads takes part in them, so unequal numbers of reads
 * before free() simply work.
 *
 * The plain agreement dds_agree() (untagged, unbounded) is here too, at the
 * end: both are the ground floor of every collective call. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define DEFAULT_TIMEOUT_S 1800.0

static const char *kind_name(int kind)
{
    static const char *names[DDS_COLL_NKINDS] = {
        "get_batch/get_ranges", "epoch_begin", "epoch_end", "sync", "add/init", "free", "save/verify_saved",
    };
    return kind >= 0 && kind < DDS_COLL_NKINDS ? names[kind] : "?";
}

int dds_step_setup(dds_store *s)
{
    double t = DEFAULT_TIMEOUT_S;
    const char *env = dds_env("DDSTORE_COLLECTIVE_TIMEOUT_S");
    if (env) {
        char *end;
        t = strtod(env, &end);
        if (end == env || *end != '\0' || !(t >= 0) || t > 1e9)
            return dds_err(DDS_EINVAL,
                           "DDSTORE_COLLECTIVE_TIMEOUT_S='%s' is not a number of seconds >= 0 "
                           "(0: wait for ever)", env);
    }
    s->coll_timeout_ns = (uint64_t)(t * 1e9);
    return DDS_OK;
}

static int timed_out(dds_store *s, int kind, const char *what)
{
    s->broken = true;
    return dds_err(DDS_ETIMEDOUT,
                   "rank %d: %s (%s %lld) waited %.0f s for %s; a rank "
                   "probably stopped reading early or left the loop (every rank must call "
                   "get_batch the same number of times). The store cannot be used any more. "
                   "DDSTORE_COLLECTIVE_TIMEOUT_S sets this limit",
                   s->rank, kind_name(kind),
                   kind == DDS_COLL_READ ? "its collective read" : "after collective reads:",
                   (long long)s->coll_reads + (kind == DDS_COLL_READ), (double)s->coll_timeout_ns * 1e-9,
                   what);
}

/* Poll until done or the store's deadline, without spinning: a few polls
 * first (the common case is a peer a few microseconds late), then polls
 * with sched_yield() for up to YIELD_NS (any other runnable thread of the
 * core runs first), then sleeps that double from 8 us to 256 us between
 * polls. Ranks often share cores with each other and with loader and
 * compute threads (issue 24: MPI ranks spinning on a node with fewer cores
 * than busy threads moved 5 MB/s where the same exchange with yielding
 * waits moved 99 MB/s), and a rank waits long for a peer that is
 * computing; it still drives MPI progress at every poll (its peers' reads
 * and exchanges may need it).
 *
 * A wait for the group's other ranks to arrive (a step, an exchange of
 * requests: `arrival`) lasts as long as the slowest rank is late. Yielding
 * only pays where such waits usually end within the yield window: where
 * they typically last longer (a running mean of them,
 * s->wait_typical_ns), the window is mostly spent in full and a thread
 * polling its core keeps the kernel from moving runnable threads there, so
 * those stores' arrival waits sleep at once. A wait for data to move
 * (replies, RMA reads) always yields first: MPI moves a large message
 * only while the ranks poll (Open MPI over TCP), so sleeping there stalls
 * the transfer itself. Measured, 2 simulated hosts x 2 ranks on 2 cores,
 * method 0: get_batch of 256 rows of 64 B (waits of tens of us) ran 2.2x
 * slower with every wait sleeping at once; at 4 KiB (most waits 0.25-1 ms)
 * 0.75-0.78x of method 1 with every wait sleeping at once, 0.87-0.97x
 * yielding first; ThreadDataLoader's collective reads (15 batches each,
 * most waits 0.5-4 ms) ran 10 % faster with 10 % less CPU per batch with
 * every wait sleeping at once (three alternated pairs of 6 s runs,
 * samples/s per rank 489k / 412k / 506k against 399k / 457k / 458k), and
 * 6 % faster with the arrival waits alone sleeping at once (15 s runs,
 * 422k / 477k / 478k against 436k / 436k / 420k). */
#define YIELD_NS 1000000u

static void note_wait(dds_store *s, uint64_t waited)
{
    /* A mean over about the last 8 waits, each counted as at most 4 ms
     * so that one long wait (a peer computing for seconds) turns yielding
     * off for a few waits at most; racy updates from concurrent waiters
     * only blur it. */
    if (waited > 4 * YIELD_NS)
        waited = 4 * YIELD_NS;
    uint64_t m = atomic_load_explicit(&s->wait_typical_ns, memory_order_relaxed);
    m = m - m / 8 + waited / 8;
    atomic_store_explicit(&s->wait_typical_ns, m, memory_order_relaxed);
}

static int poll_bounded(dds_store *s, int (*poll)(void *ctx, bool *done), void *ctx, int kind, const char *what,
                        bool arrival)
{
    uint64_t t0 = dds_now_ns();
    bool yield = !arrival || atomic_load_explicit(&s->wait_typical_ns, memory_order_relaxed) < YIELD_NS;
    long sleep_ns = 8000;
    for (int polls = 0;; polls++) {
        bool done = false;
        int rc = poll(ctx, &done);
        if (rc != DDS_OK)
            return rc;
        if (done) {
            if (arrival)
                note_wait(s, dds_now_ns() - t0);
            return DDS_OK;
        }
        if (polls < 16)
            continue;
        uint64_t waited = dds_now_ns() - t0;
        if (s->coll_timeout_ns && waited > s->coll_timeout_ns)
            return timed_out(s, kind, what);
        if (yield && waited < YIELD_NS) {
            sched_yield();
            continue;
        }
        struct timespec ts = { 0, sleep_ns };
        nanosleep(&ts, NULL);
        if (sleep_ns < 256000)
            sleep_ns *= 2;
    }
}

int dds_poll_bounded(dds_store *s, int (*poll)(void *ctx, bool *done), void *ctx, int kind, const char *what)
{
    return poll_bounded(s, poll, ctx, kind, what, true);
}

typedef struct request_set {
    int n;
    MPI_Request *reqs;
} request_set;

static int test_all(void *ctx, bool *done)
{
    request_set *rs = ctx;
    int flag = 0;
    int mrc = MPI_Testall(rs->n, rs->reqs, &flag, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Testall (collective step)");
    *done = flag != 0;
    return DDS_OK;
}

int dds_wait_bounded(dds_store *s, int n, MPI_Request *reqs, int kind, const char *what)
{
    request_set rs = { n, reqs };
    return poll_bounded(s, test_all, &rs, kind, what, false);
}

/* Every rank's call and read count, in one message: "rank 0 in get_batch/
 * get_ranges (read 5), ranks 1, 3 in free (after 4 reads)". Blocking: every
 * rank of the group is known to be in this step. */
static int describe_mismatch(dds_store *s, int kind)
{
    int n = s->group_size;
    long long mine[2] = { kind, (long long)s->coll_reads }, *all = malloc((size_t)n * sizeof mine);
    if (!all)
        return dds_err(DDS_ENOMEM, "collective calls out of step (out of memory naming them)");
    int mrc = MPI_Allgather(mine, 2, MPI_LONG_LONG, all, 2, MPI_LONG_LONG, s->group);
    if (mrc != MPI_SUCCESS) {
        free(all);
        return dds_err_mpi(mrc, "MPI_Allgather (collective step)");
    }
    char msg[900];
    size_t len = 0;
    for (int k = 0; k < DDS_COLL_NKINDS; k++) {
        int shown = 0, count = 0;
        for (int g = 0; g < n; g++)
            if (all[2 * g] == k)
                count++;
        if (!count)
            continue;
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s ", len ? "; " : "",
                                count > 1 ? "ranks" : "rank");
        for (int g = 0; g < n && len < sizeof msg - 64; g++) {
            if (all[2 * g] != k)
                continue;
            if (shown == 6) {
                len += (size_t)snprintf(msg + len, sizeof msg - len, ", ... (%d in all)", count);
                break;
            }
            long long reads = all[2 * g + 1];
            int world = s->group_index * s->width + g;
            if (k == DDS_COLL_READ)
                len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%d (read %lld)",
                                        shown ? ", " : "", world, reads + 1);
            else
                len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%d (after %lld reads)",
                                        shown ? ", " : "", world, reads);
            shown++;
        }
        if (len < sizeof msg)
            len += (size_t)snprintf(msg + len, sizeof msg - len, " in %s", kind_name(k));
        if (len >= sizeof msg)
            break;
    }
    free(all);
    return dds_err(DDS_EMISMATCH,
                   "collective calls of the store out of step in group %d: %s. Every rank of a "
                   "group must call get_batch/get_ranges (method 0) the same number of times "
                   "between the store's other collective calls",
                   s->group_index, msg);
}

/* The lowest failing rank's code and message on every rank ("rank k: ..."). */
static int spread_error(dds_store *s, int rc, int failing)
{
    char msg[1024];
    int code = rc;
    if (s->group_rank == failing) {
        size_t len;
        snprintf(msg, sizeof msg, "%s", dds_err_buf(&len));
    }
    int mrc = MPI_Bcast(&code, 1, MPI_INT, failing, s->group);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Bcast(msg, sizeof msg, MPI_CHAR, failing, s->group);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Bcast (collective step)");
    msg[sizeof msg - 1] = '\0';
    if (s->group_rank == failing)
        return code;
    int world = s->group_index * s->width + failing;
    /* Messages that already name their rank (an agreement further down) keep it. */
    if (strncmp(msg, "rank ", 5) == 0)
        return dds_err(code, "%s", msg);
    return dds_err(code, "rank %d: %s", world, msg);
}

int dds_step_val(dds_store *s, int kind, int rc, bool *served, int64_t *val)
{
    if (served)
        *served = false;
    int64_t mine = val ? *val : 0;
    if (val)
        *val = 0;
    if (s->broken)
        return dds_err(DDS_ESTATE, "an earlier collective call of this store timed out (its ranks "
                                   "are out of step); the store cannot be used any more");
    /* [k] = 1 when some rank is in a call of kind k; then the lowest failing
     * rank (group_size - rank, 0 when none failed), then the caller's value.
     * One MPI_MAX allreduce serves every kind of call, so any two of them
     * match. */
    int64_t in[DDS_COLL_NKINDS + 2] = { 0 }, out[DDS_COLL_NKINDS + 2];
    in[kind] = 1;
    in[DDS_COLL_NKINDS] = rc == DDS_OK ? 0 : s->group_size - s->group_rank;
    in[DDS_COLL_NKINDS + 1] = mine;
    static const char *const waits_for = "the other ranks of its group to make a collective call of this store";
    int wrc;
    if (s->steps_by_message) {
        wrc = s->tp->step_exchange(s, kind, in, out, DDS_COLL_NKINDS + 2, waits_for);
    } else {
        MPI_Request req;
        int mrc = MPI_Iallreduce(in, out, DDS_COLL_NKINDS + 2, MPI_INT64_T, MPI_MAX, s->group, &req);
        if (mrc != MPI_SUCCESS)
            return dds_err_mpi(mrc, "MPI_Iallreduce (collective step)");
        request_set rs = { 1, &req };
        wrc = poll_bounded(s, test_all, &rs, kind, waits_for, true);
    }
    if (wrc)
        return wrc;
    if (kind == DDS_COLL_READ)
        s->coll_reads++;
    int kinds = 0;
    for (int k = 0; k < DDS_COLL_NKINDS; k++)
        kinds += (int)out[k];
    int failing = out[DDS_COLL_NKINDS] ? s->group_size - (int)out[DDS_COLL_NKINDS] : -1;
    /* The value stands only where the step succeeds everywhere. */
    if (val && failing < 0)
        *val = out[DDS_COLL_NKINDS + 1];
    if (kinds > 1) {
        if (kinds == 2 && out[DDS_COLL_READ] && out[DDS_COLL_FREE]) {
            /* free() meets reads: the freeing ranks serve them (with the
             * value, the caller learns what the read needs of them); the
             * readers' result stands as if every rank had read. */
            if (kind == DDS_COLL_FREE) {
                s->coll_reads++;
                *served = true;
            }
            int arc = failing >= 0 ? spread_error(s, rc, failing) : DDS_OK;
            return kind == DDS_COLL_FREE ? DDS_OK : arc;
        }
        if (val)
            *val = 0;
        if (kind == DDS_COLL_READ)
            s->coll_reads--; /* name the read by its number, not after it */
        int drc = describe_mismatch(s, kind);
        if (kind == DDS_COLL_READ)
            s->coll_reads++;
        return drc;
    }
    return failing >= 0 ? spread_error(s, rc, failing) : DDS_OK;
}

int dds_step(dds_store *s, int kind, int rc, bool *served)
{
    return dds_step_val(s, kind, rc, served, NULL);
}

/* ---- plain agreement --------------------------------------------------------
 * The untagged, unbounded form, for steps that every rank reaches by
 * construction (create, add after its tagged step, shard allocation). */

int dds_agree(MPI_Comm comm, int rc)
{
    int rank;
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS)
        return dds_err(DDS_EMPI, "MPI_Comm_rank failed while agreeing on a result");
    struct { int ok; int rank; } in = { rc == DDS_OK ? 1 : 0, rank }, out;
    int mrc = MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Allreduce (agreement)");
    if (out.ok)
        return DDS_OK;
    /* The lowest failing rank tells everyone its code and message, so every
     * rank reports the same error. */
    size_t len;
    char *buf = dds_err_buf(&len);
    char msg[1024 + 32];
    int code = rc;
    if (rank == out.rank) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", buf);
        snprintf(msg, sizeof msg, "%s", tmp);
    }
    mrc = MPI_Bcast(&code, 1, MPI_INT, out.rank, comm);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Bcast(msg, 1024, MPI_CHAR, out.rank, comm);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Bcast (agreement)");
    msg[1023] = '\0';
    if (rank == out.rank)
        return code;
    return dds_err(code, "rank %d: %s", out.rank, msg);
}
