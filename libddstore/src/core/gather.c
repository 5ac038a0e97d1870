/* The read protocol: one rule that says, per read, whether the rows of
 * other nodes come by owner-side gather or by one-sided reads.
 *
 * A one-sided read costs one transport operation per transfer (per row of a
 * random batch). Where the provider emulates RMA in software (libfabric tcp
 * and shm, UCX over TCP, MPI's osc over TCP) each operation is a request and
 * a reply through both kernels, about 20 us of CPU; on real RDMA NICs it is
 * bounded by the NIC's message rate. Owner-side gather sends one request per
 * owner per batch (the row list) and gets one reply with the rows packed,
 * so the operation count scales with owners, not rows. One-sided reads stay
 * better where bytes dominate and the NIC moves them without the owner's
 * CPU (published switch points: 4-16 KiB per row).
 *
 * So, DDSTORE_GATHER=auto (the default): gather rows smaller than a switch
 * size and read larger ones one-sided. The switch: DDSTORE_GATHER_SWITCH_BYTES
 * where set; else none for a transport whose batched reads are collective
 * (method 0: the exchange costs no extra synchronisation, and MPI's
 * one-sided reads over TCP ran at half the link in B5); 32 KiB where the
 * provider emulates RMA in software (dds_transport.rma_emulated; B5 over
 * tcp: gather 1.6x one-sided at 8 KiB, 1.2x at 16 KiB, 0.5-0.8x from
 * 32 KiB, where one big reply streams worse than many reads in flight);
 * 8 KiB on hardware RDMA. "always" and "never" force the choice. The choice depends only on the variable and settings agreed
 * at dds_create, so every rank of a collective read takes the same path.
 * Transports carry the requests (dds_transport.gather). Rows of node
 * peers are a memcpy from node shared memory under either protocol. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SWITCH_BYTES_EMULATED 32768
#define SWITCH_BYTES_HARDWARE 8192
/* Rounds of a collective gather (method 0): up to this many bytes of
 * replies per rank per round, so the exchange buffers stay bounded by
 * a few MiB however large a batch is (upstream DDStore measured 2 MiB
 * rounds; over TCP, B5 measured 64 KiB rows at 0.6x method 1 with 4 MiB
 * rounds and 0.8x with 16 MiB, while rows of 64 B to 4 KiB did not
 * change: fewer, larger rounds keep the transfer streaming). */
#define DEFAULT_ROUND_BYTES (16 << 20)
#define MAX_ROUND_BYTES (1 << 30)

static const char *mode_name(int mode)
{
    return mode == DDS_GATHER_ALWAYS ? "always" : mode == DDS_GATHER_NEVER ? "never" : "auto";
}

static int parse_settings(dds_store *s)
{
    s->gather_mode = DDS_GATHER_AUTO;
    s->gather_switch_bytes = -1; /* the transport's default */
    const char *env = dds_env("DDSTORE_GATHER");
    if (env) {
        if (strcmp(env, "auto") == 0)
            s->gather_mode = DDS_GATHER_AUTO;
        else if (strcmp(env, "always") == 0)
            s->gather_mode = DDS_GATHER_ALWAYS;
        else if (strcmp(env, "never") == 0)
            s->gather_mode = DDS_GATHER_NEVER;
        else
            return dds_err(DDS_EINVAL, "DDSTORE_GATHER='%s' is not one of auto, always, never", env);
    }
    s->gather_by_node = dds_env_flag("DDSTORE_GATHER_BY_NODE", true);
    s->gather_round_bytes = DEFAULT_ROUND_BYTES;
    env = dds_env("DDSTORE_GATHER_ROUND_BYTES");
    if (env) {
        char *end;
        long long n = strtoll(env, &end, 10);
        if (end == env || *end != '\0' || n < 1 || n > MAX_ROUND_BYTES)
            return dds_err(DDS_EINVAL, "DDSTORE_GATHER_ROUND_BYTES='%s' is not a number of bytes "
                                       "from 1 to %d", env, MAX_ROUND_BYTES);
        s->gather_round_bytes = (int64_t)n;
    }
    env = dds_env("DDSTORE_GATHER_SWITCH_BYTES");
    if (env) {
        char *end;
        long long n = strtoll(env, &end, 10);
        if (end == env || *end != '\0' || n < 0)
            return dds_err(DDS_EINVAL,
                           "DDSTORE_GATHER_SWITCH_BYTES='%s' is not a number of bytes >= 0", env);
        s->gather_switch_bytes = (int64_t)n;
    }
    return DDS_OK;
}

int dds_gather_setup(dds_store *s)
{
    int rc = parse_settings(s);
    if (s->is_reader)
        return rc;
    /* Every rank of a collective read must choose alike: the settings are
     * checked equal over comm (min and max of each, and any parse error). */
    long long in[5] = { rc != DDS_OK, s->gather_mode, -(long long)s->gather_mode,
                        (long long)s->gather_switch_bytes, -(long long)s->gather_switch_bytes };
    long long out[5];
    int mrc = MPI_Allreduce(in, out, 5, MPI_LONG_LONG, MPI_MAX, s->comm);
    if (mrc != MPI_SUCCESS)
        return dds_err_mpi(mrc, "MPI_Allreduce (read protocol settings)");
    if (rc == DDS_OK && !out[0] && (out[1] != -out[2] || out[3] != -out[4]))
        rc = dds_err(DDS_EMISMATCH, "DDSTORE_GATHER or DDSTORE_GATHER_SWITCH_BYTES differs across "
                                    "ranks; set them alike in every rank's environment");
    return dds_agree(s->comm, rc);
}

/* Auto: rows from this many bytes are read one-sided (see the top). */
static int64_t switch_bytes(const dds_store *s)
{
    if (s->gather_switch_bytes >= 0)
        return s->gather_switch_bytes;
    if (s->tp->collective_reads)
        return INT64_MAX;
    return s->tp->rma_emulated && s->tp->rma_emulated(s) ? SWITCH_BYTES_EMULATED : SWITCH_BYTES_HARDWARE;
}

bool dds_gather_chosen(const dds_store *s, const dds_var *v, bool collective)
{
    if (!s->tp->gather || s->gather_mode == DDS_GATHER_NEVER)
        return false;
    /* A transport whose batched reads are collective gathers only in them. */
    if (s->tp->collective_reads && !collective)
        return false;
    if (s->gather_mode == DDS_GATHER_ALWAYS)
        return true;
    return v->row_bytes < switch_bytes(s);
}

/* The protocol without the node part (dds_gather_describe). */
static void describe_protocol(const dds_store *s, char *buf, size_t cap)
{
    if (!s->is_reader && s->node_local && s->shm_enabled) {
        snprintf(buf, cap, "node shared memory (the whole group is on one node: every read is a memcpy)");
        return;
    }
    const char *single = s->tp->collective_reads ? "; dds_get: one-sided reads" : "";
    if (!s->tp->gather)
        snprintf(buf, cap, "one-sided reads (this transport has no gather)");
    else if (s->gather_mode != DDS_GATHER_AUTO)
        snprintf(buf, cap, "%s (DDSTORE_GATHER=%s)%s",
                 s->gather_mode == DDS_GATHER_ALWAYS ? "owner-side gather" : "one-sided reads",
                 mode_name(s->gather_mode), s->gather_mode == DDS_GATHER_ALWAYS ? single : "");
    else if (switch_bytes(s) == INT64_MAX)
        snprintf(buf, cap, "owner-side gather at every row size (DDSTORE_GATHER=auto: batched reads "
                           "across nodes are collective)%s", single);
    else
        snprintf(buf, cap, "owner-side gather for rows under %lld bytes, one-sided reads from %lld "
                           "bytes (DDSTORE_GATHER=auto; %s)%s", (long long)switch_bytes(s),
                 (long long)switch_bytes(s),
                 s->gather_switch_bytes >= 0 ? "DDSTORE_GATHER_SWITCH_BYTES"
                 : s->tp->rma_emulated && s->tp->rma_emulated(s) ? "the transport moves one-sided reads in software"
                                                                 : "the transport reads one-sided in hardware",
                 single);
}

void dds_gather_describe(const dds_store *s, char *buf, size_t cap)
{
    describe_protocol(s, buf, cap);
    uint64_t node = dds_gather_possible(s) && dds_node_servers(s) ? DDS_GATHER_NODE_MAX_BYTES : 0;
    size_t len = strlen(buf);
    if (node && !(s->node_local && s->shm_enabled) && len < cap)
        snprintf(buf + len, cap - len, "; gather requests by node: one per node a batch touches, served from "
                                       "node shared memory, up to %llu KiB a node (more: one per owner; "
                                       "DDSTORE_GATHER_BY_NODE=0: always one per owner)",
                 (unsigned long long)(node >> 10));
}

const int *dds_node_servers(const dds_store *s)
{
    return s->gather_by_node && s->shm_enabled && !s->is_reader ? s->node_server : NULL;
}

bool dds_gather_possible(const dds_store *s)
{
    return s->tp->gather && s->gather_mode != DDS_GATHER_NEVER;
}

int64_t dds_gather_round_cap(const dds_store *s)
{
    /* An owner replies to at most group_size - 1 ranks per round, each
     * reply its reader's cap plus an 8-byte status: all of them must fit
     * an int of bytes (MPI counts and displacements). Each rank may cap
     * its own rounds differently: the step agrees on the largest count. */
    int64_t cap = s->gather_round_bytes;
    int64_t fit = (int64_t)(INT32_MAX / (s->group_size > 1 ? s->group_size : 1)) - 64;
    return cap < fit ? cap : fit;
}

bool dds_gather_round(const dds_store *s, const dds_read_op *const *ops, const size_t *nops, size_t nvars,
                      dds_gather_pos *at)
{
    int64_t cap = dds_gather_round_cap(s), bytes = 0, request = 0;
    bool taken = false;
    while (at->var < nvars) {
        if (at->op == nops[at->var]) {
            at->var++;
            at->op = 0;
            continue;
        }
        int64_t len = ops[at->var][at->op].len;
        if (taken && (bytes + len > cap || request + DDS_GATHER_TRANSFER_BYTES > cap))
            break;
        bytes += len;
        request += DDS_GATHER_TRANSFER_BYTES;
        taken = true;
        at->op++;
    }
    return taken;
}
