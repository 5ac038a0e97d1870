/* Which NIC (libfabric domain) a process of methods 1 and 2 opens, on nodes
 * with several (Slingshot: cxi0..cxi3; InfiniBand: mlx5_0, mlx5_1, ...).
 * nic.c; private, nothing here is part of the ABI.
 *
 * The choice, in this order of precedence:
 *  1. DDSTORE_FABRIC_DOMAIN: a domain by name ("cxi2", "mlx5_1", "eth0"), or
 *     a network interface sharing a PCI function with one ("hsn2", "ib1").
 *  2. A CPU->NIC map "iface=cpus;iface=cpus" (the original DDStore's
 *     DDSTORE_NIC_MAP format, e.g. "hsn0=0-15,64-79;hsn1=16-31,80-95"):
 *     the nic_map option of dds_create, else DDSTORE_NIC_MAP. The NIC given
 *     the most of this process's allowed CPUs wins.
 *  3. The node's topology (sysfs): the NIC whose NUMA node holds the most
 *     of this process's allowed CPUs (sched_getaffinity); when none does,
 *     the NIC nearest by NUMA distance. Only domains on the fabric
 *     libfabric lists first are candidates here (tcp: one subnet), so
 *     that every process can reach every other.
 * Ties (an unbound process sees every NIC's NUMA node; two HCAs on one
 * node; no NUMA information at all) are spread round-robin over the
 * node-local rank the launcher gives (OMPI_COMM_WORLD_LOCAL_RANK,
 * SLURM_LOCALID, ...), else over the rank in the communicator.
 * A map or domain that cannot be honoured is an error (DDS_EINVAL), never
 * a silent fallback. DDSTORE_SYSFS_ROOT (tests only) reads a fake sysfs
 * tree instead of /sys. */
#ifndef DDSTORE_NIC_H
#define DDSTORE_NIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct fi_info;

/* CPUs 0 .. DDS_NIC_MAX_CPUS-1. */
#define DDS_NIC_MAX_CPUS 8192
typedef struct dds_cpuset {
    uint64_t w[DDS_NIC_MAX_CPUS / 64];
} dds_cpuset;

/* A transport's request and result (member `nic` of struct dds_fabric). */
typedef struct dds_nic {
    /* set before dds_fab_open_domain (all zero: a reader, no map given) */
    const char *map; /* nic_map of dds_create; NULL or "": DDSTORE_NIC_MAP */
    int rank;        /* rank in the communicator: spreads ties when the launcher names no local rank */
    bool has_rank;
    /* the result, for dds_store_property ("domain", "domain_choice") */
    char domain[128];
    char why[512];
} dds_nic;

/* The inputs of one choice. */
typedef struct dds_nic_in {
    const char *sysfs;      /* sysfs root: DDSTORE_SYSFS_ROOT, else "/sys" */
    const char *domain;     /* DDSTORE_FABRIC_DOMAIN, or NULL */
    const char *map;        /* CPU->NIC map, or NULL */
    const char *map_from;   /* where the map came from, for messages ("nic_map", "DDSTORE_NIC_MAP") */
    const char *prov;       /* provider, for messages */
    const char *fabric;     /* libfabric's first fabric of the provider, for messages */
    dds_cpuset cpus;        /* CPUs this process may run on */
    int local_rank;         /* spreads ties (>= 0) */
    const char *rank_from;  /* where local_rank came from, for messages */
} dds_nic_in;

/* Parse a CPU list ("0-15,64-79"; spaces and a trailing newline allowed;
 * "" is the empty set) into *out. 0, or -1 when malformed or a CPU is
 * beyond DDS_NIC_MAX_CPUS (no error is set). */
DDS_HIDDEN int dds_nic_parse_cpus(const char *s, dds_cpuset *out);

/* Fill *in from the environment and the process: `nic`'s map, else
 * DDSTORE_NIC_MAP; DDSTORE_FABRIC_DOMAIN; DDSTORE_SYSFS_ROOT; the CPU
 * affinity; the node-local rank. */
DDS_HIDDEN int dds_nic_inputs(const dds_nic *nic, dds_nic_in *in);

/* Choose one of the domains names[0..n) (distinct; in libfabric's order;
 * auto_ok[i]: a candidate of the topology choice) as described above.
 * *pick receives its index and why[0..cap) the reason, starting with how
 * it was chosen: "DDSTORE_FABRIC_DOMAIN", the map's origin, "only",
 * "topology" or "spread". DDS_EINVAL (message set) when an override
 * cannot be honoured. Local. */
DDS_HIDDEN int dds_nic_choose(const dds_nic_in *in, const char *const *names, const bool *auto_ok,
                              size_t n, size_t *pick, char *why, size_t cap);

/* Choose among the domains of fi_getinfo's `list` (one provider) with
 * inputs `in`; *pick receives the first entry of the chosen domain (of
 * libfabric's first fabric when it has one there); nic->domain and
 * nic->why the result. */
DDS_HIDDEN int dds_nic_pick_in(struct fi_info *list, const dds_nic_in *in, dds_nic *nic, struct fi_info **pick);

/* dds_nic_inputs, then dds_nic_pick_in: what dds_fab_open_domain calls. */
DDS_HIDDEN int dds_nic_pick(struct fi_info *list, dds_nic *nic, struct fi_info **pick);

#endif /* DDSTORE_NIC_H */
