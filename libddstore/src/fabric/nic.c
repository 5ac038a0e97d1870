/* NIC choice on nodes with several NICs (methods 1 and 2): nic.h says what
 * is chosen and in which order. This file reads sysfs (class/cxi,
 * class/cxi_user, class/infiniband, class/net for the NICs' devices,
 * devices/system/node for NUMA nodes) and the process's CPU affinity; it
 * calls nothing of the library above error.c. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>

#include "nic.h"

/* Domains considered at most (more are ignored: no node has that many NICs). */
#define MAX_CAND 64
/* Entries of a CPU->NIC map at most. */
#define MAX_MAP 64
/* Device classes whose entries name NICs (libfabric's domain names are
 * their names: cxi, verbs; tcp's are network interfaces). */
static const char *const classes[] = { "cxi", "cxi_user", "infiniband", "net" };
/* Launchers' node-local rank, first found wins. */
static const char *const local_rank_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID", "SLURM_LOCALID",
    "MV2_COMM_WORLD_LOCAL_RANK",  "PMI_LOCAL_RANK",  "FLUX_TASK_LOCAL_ID",
};

/* ---- CPU sets ------------------------------------------------------------------ */

static void cs_add(dds_cpuset *s, unsigned c) { s->w[c / 64] |= 1ull << (c % 64); }

static int cs_count(const dds_cpuset *s)
{
    int n = 0;
    for (size_t i = 0; i < DDS_NIC_MAX_CPUS / 64; i++)
        n += __builtin_popcountll(s->w[i]);
    return n;
}

static int cs_overlap(const dds_cpuset *a, const dds_cpuset *b)
{
    int n = 0;
    for (size_t i = 0; i < DDS_NIC_MAX_CPUS / 64; i++)
        n += __builtin_popcountll(a->w[i] & b->w[i]);
    return n;
}

int dds_nic_parse_cpus(const char *s, dds_cpuset *out)
{
    memset(out, 0, sizeof *out);
    const char *p = s;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0')
        return 0;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end;
        errno = 0;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '-') {
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            if (!isdigit((unsigned char)*p))
                return -1;
            hi = strtoul(p, &end, 10);
            p = end;
        }
        if (errno || hi < lo || hi >= DDS_NIC_MAX_CPUS)
            return -1;
        for (unsigned long c = lo; c <= hi; c++)
            cs_add(out, (unsigned)c);
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',') {
            p++;
            continue;
        }
        while (isspace((unsigned char)*p))
            p++;
        return *p == '\0' ? 0 : -1;
    }
}

/* "0-7,16" into buf[0..cap), ending in "..." when it does not fit. */
static void cs_format(const dds_cpuset *s, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (unsigned c = 0; c < DDS_NIC_MAX_CPUS; c++) {
        if (!(s->w[c / 64] >> (c % 64) & 1))
            continue;
        unsigned e = c;
        while (e + 1 < DDS_NIC_MAX_CPUS && (s->w[(e + 1) / 64] >> ((e + 1) % 64) & 1))
            e++;
        char item[32];
        if (e == c)
            snprintf(item, sizeof item, "%s%u", len ? "," : "", c);
        else
            snprintf(item, sizeof item, "%s%u-%u", len ? "," : "", c, e);
        size_t il = strlen(item);
        if (len + il + 4 >= cap) {
            snprintf(buf + len, cap - len, "...");
            return;
        }
        memcpy(buf + len, item, il + 1);
        len += il;
        c = e;
    }
    if (len == 0)
        snprintf(buf, cap, "none");
}

/* ---- sysfs ---------------------------------------------------------------------- */

/* The first line of a small file, without its newline; false when absent. */
static bool read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

/* CPUs of NUMA node `node`; false when unknown. */
static bool node_cpus(const char *root, int node, dds_cpuset *out)
{
    char path[PATH_MAX], line[8192];
    snprintf(path, sizeof path, "%s/devices/system/node/node%d/cpulist", root, node);
    return read_line(path, line, sizeof line) && dds_nic_parse_cpus(line, out) == 0;
}

/* NUMA distance from node `from` to node `to` (the kernel's SLIT row); -1
 * when unknown. */
static int node_distance(const char *root, int from, int to)
{
    char path[PATH_MAX], line[4096];
    snprintf(path, sizeof path, "%s/devices/system/node/node%d/distance", root, from);
    if (!read_line(path, line, sizeof line))
        return -1;
    char *p = line;
    for (int i = 0;; i++) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p)
            return -1;
        if (i == to)
            return d >= 0 && d < INT_MAX ? (int)d : -1;
        p = end;
    }
}

/* The resolved device directory of NIC `name` (class/<class>/<name>/device;
 * a verbs domain "mlx5_0-dgram" is its device "mlx5_0"); false when no
 * class has it. */
static bool device_dir(const char *root, const char *name, char *out)
{
    char path[PATH_MAX], base[128];
    snprintf(base, sizeof base, "%s", name);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            char *dash = strchr(base, '-');
            if (!dash)
                break;
            *dash = '\0';
        }
        for (size_t c = 0; c < sizeof classes / sizeof *classes; c++) {
            snprintf(path, sizeof path, "%s/class/%s/%s/device", root, classes[c], base);
            if (realpath(path, out))
                return true;
        }
    }
    return false;
}

/* Cut the last component of a path; false at the root. */
static bool parent(char *path)
{
    char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return false;
    *slash = '\0';
    return true;
}

/* NUMA node of a device: its numa_node, or its nearest parent's (a
 * virtio or auxiliary device sits below the PCI function that has one);
 * -1 when unknown (the kernel writes -1 on one-node machines and VMs). */
static int device_numa(const char *dev)
{
    char path[PATH_MAX], f[PATH_MAX + 16], line[32];
    snprintf(path, sizeof path, "%s", dev);
    for (int depth = 0; depth < 6; depth++) {
        snprintf(f, sizeof f, "%s/numa_node", path);
        if (read_line(f, line, sizeof line)) {
            char *end;
            long v = strtol(line, &end, 10);
            return (end != line && v >= 0 && v < 4096) ? (int)v : -1;
        }
        if (!parent(path))
            break;
    }
    return -1;
}

/* Is `s` a PCI address "dddd:bb:dd.f"? */
static bool is_pci_name(const char *s)
{
    unsigned a, b, c, d;
    char tail;
    return sscanf(s, "%4x:%2x:%2x.%1x%c", &a, &b, &c, &d, &tail) == 4;
}

/* The PCI function a device belongs to (the device itself, or the nearest
 * parent named like a PCI address): a network interface (hsn0, ib0) and
 * the NIC it runs on (cxi0, mlx5_0) share it. */
static void pci_function(const char *dev, char *out)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dev);
    for (int depth = 0; depth < 6; depth++) {
        const char *slash = strrchr(path, '/');
        if (slash && is_pci_name(slash + 1)) {
            snprintf(out, PATH_MAX, "%s", path);
            return;
        }
        if (!parent(path))
            break;
    }
    snprintf(out, PATH_MAX, "%s", dev);
}

/* Index of the domain that `name` designates: a domain of that name, else
 * one on the PCI function of the device called `name` (an interface of
 * the NIC); -1 when none. *via_device says which. */
static int resolve(const char *root, const char *name, const char *const *names, size_t n, bool *via_device)
{
    *via_device = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    char dev[PATH_MAX], fn[PATH_MAX], cdev[PATH_MAX], cfn[PATH_MAX];
    if (!device_dir(root, name, dev))
        return -1;
    pci_function(dev, fn);
    for (size_t i = 0; i < n; i++) {
        if (!device_dir(root, names[i], cdev))
            continue;
        pci_function(cdev, cfn);
        if (strcmp(fn, cfn) == 0) {
            *via_device = true;
            return (int)i;
        }
    }
    return -1;
}

/* ---- the process ---------------------------------------------------------------- */

static void affinity(dds_cpuset *out)
{
    memset(out, 0, sizeof *out);
    cpu_set_t *set = CPU_ALLOC(DDS_NIC_MAX_CPUS);
    size_t sz = CPU_ALLOC_SIZE(DDS_NIC_MAX_CPUS);
    if (set && sched_getaffinity(0, sz, set) == 0) {
        for (unsigned c = 0; c < DDS_NIC_MAX_CPUS; c++)
            if (CPU_ISSET_S(c, sz, set))
                cs_add(out, c);
    } else {
        /* Unknown: every online CPU (the choice then spreads over ties). */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < n && c < DDS_NIC_MAX_CPUS; c++)
            cs_add(out, (unsigned)c);
    }
    if (set)
        CPU_FREE(set);
}

int dds_nic_inputs(const dds_nic *nic, dds_nic_in *in)
{
    memset(in, 0, sizeof *in);
    in->sysfs = dds_env("DDSTORE_SYSFS_ROOT");
    if (!in->sysfs)
        in->sysfs = "/sys";
    in->domain = dds_env("DDSTORE_FABRIC_DOMAIN");
    if (nic && nic->map && *nic->map) {
        in->map = nic->map;
        in->map_from = "nic_map";
    } else if ((in->map = dds_env("DDSTORE_NIC_MAP"))) {
        in->map_from = "DDSTORE_NIC_MAP";
    }
    affinity(&in->cpus);
    in->local_rank = 0;
    in->rank_from = "no local rank from the launcher";
    for (size_t i = 0; i < sizeof local_rank_vars / sizeof *local_rank_vars; i++) {
        const char *v = dds_env(local_rank_vars[i]);
        char *end;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && *end == '\0' && r >= 0 && r < INT_MAX) {
            in->local_rank = (int)r;
            in->rank_from = local_rank_vars[i];
            return DDS_OK;
        }
    }
    if (nic && nic->has_rank && nic->rank >= 0) {
        in->local_rank = nic->rank;
        in->rank_from = "rank in the communicator";
    }
    return DDS_OK;
}

/* ---- the choice ------------------------------------------------------------------- */

/* "a, b, c" of names[idx[0..k)] into buf. */
static void list_names(const char *const *names, const size_t *idx, size_t k, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < k && len + 1 < cap; i++) {
        int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[idx[i]]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* All of names[0..n) (n <= MAX_CAND), for messages. */
static void list_all(const char *const *names, size_t n, char *buf, size_t cap)
{
    size_t all[MAX_CAND];
    for (size_t k = 0; k < n; k++)
        all[k] = k;
    list_names(names, all, n, buf, cap);
}

/* Among tied[0..k) (indices into names), the one the local rank takes;
 * appends the spreading to why. */
static size_t spread(const dds_nic_in *in, const char *const *names, const size_t *tied, size_t k, char *why,
                     size_t cap)
{
    size_t pick = tied[(size_t)in->local_rank % k];
    if (k > 1) {
        char list[384];
        list_names(names, tied, k, list, sizeof list);
        size_t len = strlen(why);
        snprintf(why + len, cap - len, "; a tie between %s: node-local rank %d (%s) takes %s", list,
                 in->local_rank, in->rank_from, names[pick]);
    }
    return pick;
}

static int choose_domain(const dds_nic_in *in, const char *const *names, size_t n, size_t *pick, char *why,
                         size_t cap)
{
    bool via;
    int i = resolve(in->sysfs, in->domain, names, n, &via);
    if (i < 0) {
        char list[384];
        list_all(names, n, list, sizeof list);
        return dds_err(DDS_EINVAL,
                       "DDSTORE_FABRIC_DOMAIN='%s' is not a domain of libfabric provider %s here, nor a "
                       "network interface of one; its domains: %s (fi_info -p '%s')",
                       in->domain, in->prov ? in->prov : "?", list, in->prov ? in->prov : "<provider>");
    }
    *pick = (size_t)i;
    if (via)
        snprintf(why, cap, "DDSTORE_FABRIC_DOMAIN=%s (an interface of %s)", in->domain, names[i]);
    else
        snprintf(why, cap, "DDSTORE_FABRIC_DOMAIN=%s", in->domain);
    return DDS_OK;
}

typedef struct map_entry {
    char name[64];
    dds_cpuset cpus;
} map_entry;

static int parse_map(const char *map, const char *from, map_entry *e, size_t *ne)
{
    *ne = 0;
    const char *p = map;
    char seg[1024];
    while (*p) {
        size_t len = strcspn(p, ";");
        if (len >= sizeof seg)
            return dds_err(DDS_EINVAL, "%s: entry '%.40s...' is too long", from, p);
        memcpy(seg, p, len);
        seg[len] = '\0';
        p += len;
        if (*p == ';')
            p++;
        char *s = seg, *end = seg + len;
        while (isspace((unsigned char)*s))
            s++;
        while (end > s && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (*s == '\0')
            continue; /* "a=0-3;" or ";;" */
        char *eq = strchr(s, '=');
        char *nend = eq;
        while (nend && nend > s && isspace((unsigned char)nend[-1]))
            nend--;
        if (!eq || nend == s || (size_t)(nend - s) >= sizeof e->name)
            return dds_err(DDS_EINVAL,
                           "%s: entry '%s' is not <interface>=<cpus> (e.g. "
                           "'hsn0=0-15,64-79;hsn1=16-31,80-95')",
                           from, s);
        if (*ne == MAX_MAP)
            return dds_err(DDS_EINVAL, "%s: more than %d entries", from, MAX_MAP);
        map_entry *m = &e[*ne];
        memcpy(m->name, s, (size_t)(nend - s));
        m->name[nend - s] = '\0';
        const char *cpus = eq + 1;
        while (isspace((unsigned char)*cpus))
            cpus++;
        if (*cpus == '\0' || dds_nic_parse_cpus(cpus, &m->cpus) != 0)
            return dds_err(DDS_EINVAL,
                           "%s: entry '%s': '%s' is not a list of CPUs below %d (e.g. 0-15,64-79)", from,
                           s, cpus, DDS_NIC_MAX_CPUS);
        for (size_t k = 0; k < *ne; k++) {
            if (cs_overlap(&e[k].cpus, &m->cpus)) {
                dds_cpuset both;
                for (size_t w = 0; w < DDS_NIC_MAX_CPUS / 64; w++)
                    both.w[w] = e[k].cpus.w[w] & m->cpus.w[w];
                char list[64];
                cs_format(&both, list, sizeof list);
                return dds_err(DDS_EINVAL, "%s: CPUs %s are given both to %s and to %s", from, list,
                               e[k].name, m->name);
            }
        }
        (*ne)++;
    }
    if (*ne == 0)
        return dds_err(DDS_EINVAL, "%s='%s' names no interface (e.g. 'hsn0=0-15;hsn1=16-31')", from, map);
    return DDS_OK;
}

static int choose_map(const dds_nic_in *in, const char *const *names, size_t n, size_t *pick, char *why,
                      size_t cap)
{
    map_entry *e = malloc(MAX_MAP * sizeof *e);
    if (!e)
        return dds_err(DDS_ENOMEM, "out of memory parsing %s", in->map_from);
    size_t ne;
    int rc = parse_map(in->map, in->map_from, e, &ne);
    int count[MAX_CAND] = { 0 };
    int via_name[MAX_CAND] = { 0 }; /* the map entry that gave each domain its first CPUs */
    char mine[128];
    cs_format(&in->cpus, mine, sizeof mine);
    int covered = 0;
    for (size_t k = 0; rc == DDS_OK && k < ne; k++) {
        int c = cs_overlap(&e[k].cpus, &in->cpus);
        if (c == 0)
            continue; /* entries for other processes' CPUs need not exist here */
        bool via;
        int i = resolve(in->sysfs, e[k].name, names, n, &via);
        if (i < 0) {
            char list[384];
            list_all(names, n, list, sizeof list);
            rc = dds_err(DDS_EINVAL,
                         "%s gives this process's CPUs to '%s', which is not a domain of libfabric "
                         "provider %s here, nor a network interface of one (its domains: %s); fix "
                         "the map, or name a domain with DDSTORE_FABRIC_DOMAIN",
                         in->map_from, e[k].name, in->prov ? in->prov : "?", list);
            break;
        }
        if (count[i] == 0)
            via_name[i] = (int)k;
        count[i] += c;
        covered += c;
    }
    if (rc == DDS_OK && covered == 0)
        rc = dds_err(DDS_EINVAL,
                     "%s gives none of this process's CPUs (%s) to a NIC; add them to the map, or name "
                     "a domain with DDSTORE_FABRIC_DOMAIN",
                     in->map_from, mine);
    if (rc == DDS_OK) {
        int best = 0;
        for (size_t i = 0; i < n; i++)
            if (count[i] > best)
                best = count[i];
        size_t tied[MAX_CAND] = { 0 }, k = 0; /* best > 0: at least one */
        for (size_t i = 0; i < n; i++)
            if (count[i] == best)
                tied[k++] = i;
        const char *first = e[via_name[tied[0]]].name;
        if (k == 1 && strcmp(first, names[tied[0]]) != 0)
            snprintf(why, cap, "%s: %s (domain %s) has %d of this process's %d CPUs (%s)", in->map_from,
                     first, names[tied[0]], best, cs_count(&in->cpus), mine);
        else
            snprintf(why, cap, "%s: %s %s %d of this process's %d CPUs (%s)", in->map_from,
                     k == 1 ? names[tied[0]] : "domains", k == 1 ? "has" : "have", best,
                     cs_count(&in->cpus), mine);
        *pick = spread(in, names, tied, k, why, cap);
    }
    free(e);
    return rc;
}

static int choose_topology(const dds_nic_in *in, const char *const *names, const bool *auto_ok, size_t n,
                           size_t *pick, char *why, size_t cap)
{
    int numa[MAX_CAND], overlap[MAX_CAND];
    size_t cand[MAX_CAND], nc = 0;
    int best = 0;
    bool any_numa = false;
    char mine[128];
    cs_format(&in->cpus, mine, sizeof mine);
    for (size_t i = 0; i < n; i++) {
        if (!auto_ok[i])
            continue;
        cand[nc++] = i;
        char dev[PATH_MAX];
        numa[i] = device_dir(in->sysfs, names[i], dev) ? device_numa(dev) : -1;
        overlap[i] = 0;
        dds_cpuset ncpus;
        if (numa[i] >= 0) {
            any_numa = true;
            if (node_cpus(in->sysfs, numa[i], &ncpus))
                overlap[i] = cs_overlap(&ncpus, &in->cpus);
        }
        if (overlap[i] > best)
            best = overlap[i];
    }
    size_t tied[MAX_CAND], k = 0;
    if (best > 0) {
        for (size_t j = 0; j < nc; j++)
            if (overlap[cand[j]] == best)
                tied[k++] = cand[j];
        if (k == 1)
            snprintf(why, cap, "topology: %s is on NUMA node %d, which holds %d of this process's %d CPUs (%s)",
                     names[tied[0]], numa[tied[0]], best, cs_count(&in->cpus), mine);
        else
            snprintf(why, cap, "topology: NUMA nodes of %zu domains hold %d each of this process's %d CPUs (%s)",
                     k, best, cs_count(&in->cpus), mine);
        *pick = spread(in, names, tied, k, why, cap);
        return DDS_OK;
    }
    if (any_numa) {
        /* No NIC on this process's NUMA nodes: the nearest by distance. */
        int dist[MAX_CAND], dbest = INT_MAX;
        char nodes[128] = "";
        size_t nlen = 0;
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/devices/system/node", in->sysfs);
        int mynodes[256], nmy = 0;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)) && nmy < 256) {
            int node;
            char tail;
            dds_cpuset ncpus;
            if (sscanf(de->d_name, "node%d%c", &node, &tail) == 1 && node >= 0 &&
                node_cpus(in->sysfs, node, &ncpus) && cs_overlap(&ncpus, &in->cpus) > 0)
                mynodes[nmy++] = node;
        }
        if (d)
            closedir(d);
        for (int a = 1; a < nmy; a++) /* in order, for the message */
            for (int b = a; b > 0 && mynodes[b - 1] > mynodes[b]; b--) {
                int t = mynodes[b];
                mynodes[b] = mynodes[b - 1];
                mynodes[b - 1] = t;
            }
        for (int m = 0; m < nmy; m++) {
            int w = snprintf(nodes + nlen, sizeof nodes - nlen, "%s%d", m ? "," : "", mynodes[m]);
            if (w > 0 && (size_t)w < sizeof nodes - nlen)
                nlen += (size_t)w;
        }
        for (size_t j = 0; j < nc; j++) {
            size_t i = cand[j];
            dist[i] = INT_MAX;
            for (int m = 0; m < nmy && numa[i] >= 0; m++) {
                int dd = node_distance(in->sysfs, mynodes[m], numa[i]);
                if (dd >= 0 && dd < dist[i])
                    dist[i] = dd;
            }
            if (dist[i] < dbest)
                dbest = dist[i];
        }
        if (dbest < INT_MAX) {
            for (size_t j = 0; j < nc; j++)
                if (dist[cand[j]] == dbest)
                    tied[k++] = cand[j];
            if (k == 1)
                snprintf(why, cap,
                         "topology: %s is on NUMA node %d, the nearest (distance %d) to this process's "
                         "NUMA node %s (CPUs %s)",
                         names[tied[0]], numa[tied[0]], dbest, nodes, mine);
            else
                snprintf(why, cap,
                         "topology: %zu domains are the nearest (distance %d) to this process's NUMA "
                         "node %s (CPUs %s)",
                         k, dbest, nodes, mine);
            *pick = spread(in, names, tied, k, why, cap);
            return DDS_OK;
        }
    }
    /* Nothing known: spread the processes of a node over the NICs. */
    for (size_t j = 0; j < nc; j++)
        tied[k++] = cand[j];
    snprintf(why, cap, "spread: no NUMA locality known for the %zu domains (sysfs %s)", k, in->sysfs);
    *pick = spread(in, names, tied, k, why, cap);
    return DDS_OK;
}

int dds_nic_choose(const dds_nic_in *in, const char *const *names, const bool *auto_ok, size_t n,
                   size_t *pick, char *why, size_t cap)
{
    if (n == 0)
        return dds_err(DDS_ENOTSUP, "libfabric provider %s offers no domain here", in->prov ? in->prov : "?");
    if (n > MAX_CAND)
        n = MAX_CAND;
    if (in->domain)
        return choose_domain(in, names, n, pick, why, cap);
    if (in->map)
        return choose_map(in, names, n, pick, why, cap);
    size_t nauto = 0, only = 0;
    for (size_t i = 0; i < n; i++)
        if (auto_ok[i]) {
            nauto++;
            only = i;
        }
    if (nauto == 0) { /* cannot happen from dds_nic_pick_in: the first domain is a candidate */
        nauto = 1;
        only = 0;
    }
    if (nauto == 1) {
        *pick = only;
        snprintf(why, cap, "only: provider %s offers one domain on fabric %s", in->prov ? in->prov : "?",
                 in->fabric ? in->fabric : "?");
        return DDS_OK;
    }
    return choose_topology(in, names, auto_ok, n, pick, why, cap);
}

/* ---- over fi_getinfo's list ------------------------------------------------------------ */

static bool same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

int dds_nic_pick_in(struct fi_info *list, const dds_nic_in *in_, dds_nic *nic, struct fi_info **pick)
{
    dds_nic_in in = *in_;
    in.prov = list && list->fabric_attr ? list->fabric_attr->prov_name : NULL;
    const char *fabric0 = list && list->fabric_attr ? list->fabric_attr->name : NULL;
    in.fabric = fabric0;
    const char *names[MAX_CAND];
    bool auto_ok[MAX_CAND];
    size_t n = 0;
    for (struct fi_info *i = list; i; i = i->next) {
        const char *d = i->domain_attr ? i->domain_attr->name : NULL;
        if (!d)
            continue;
        bool first_fabric = same(i->fabric_attr ? i->fabric_attr->name : NULL, fabric0);
        size_t k = 0;
        while (k < n && strcmp(names[k], d) != 0)
            k++;
        if (k == n) {
            if (n == MAX_CAND)
                continue;
            names[n] = d;
            auto_ok[n++] = first_fabric;
        } else if (first_fabric) {
            auto_ok[k] = true;
        }
    }
    if (n == 0) { /* a provider that names no domain: libfabric's first entry */
        *pick = list;
        snprintf(nic->domain, sizeof nic->domain, "?");
        snprintf(nic->why, sizeof nic->why, "only: provider %s names no domain", in.prov ? in.prov : "?");
        return DDS_OK;
    }
    size_t k;
    char why[sizeof nic->why];
    int rc = dds_nic_choose(&in, names, auto_ok, n, &k, why, sizeof why);
    if (rc)
        return rc;
    /* Its first entry on libfabric's first fabric, else its first entry. */
    struct fi_info *found = NULL;
    for (struct fi_info *i = list; i; i = i->next) {
        if (!i->domain_attr || !i->domain_attr->name || strcmp(i->domain_attr->name, names[k]) != 0)
            continue;
        if (same(i->fabric_attr ? i->fabric_attr->name : NULL, fabric0)) {
            found = i;
            break;
        }
        if (!found)
            found = i;
    }
    *pick = found;
    snprintf(nic->domain, sizeof nic->domain, "%s", names[k]);
    snprintf(nic->why, sizeof nic->why, "%s", why);
    return DDS_OK;
}

int dds_nic_pick(struct fi_info *list, dds_nic *nic, struct fi_info **pick)
{
    dds_nic_in in;
    int rc = dds_nic_inputs(nic, &in);
    if (rc == DDS_OK)
        rc = dds_nic_pick_in(list, &in, nic, pick);
    if (rc == DDS_OK)
        dds_debug("fabric: pid %d opens domain %s (%s)", (int)getpid(), nic->domain, nic->why);
    return rc;
}
