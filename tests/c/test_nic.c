/* Test of the NIC choice of methods 1 and 2 (nic.c) on faked sysfs trees:
 *  - "slingshot": 4 NUMA nodes of 8 CPUs, 4 cxi NICs (one per node, in a
 *    shuffled order) with their network interfaces hsn0..hsn3;
 *  - "ib": 4 NUMA nodes of 2 CPUs with SLIT distances, 2 mlx5 HCAs (on
 *    nodes 0 and 2) with ib0/ib1, a virtio eth0 (NUMA node on its PCI
 *    parent) and a RoCE-like eth1 on mlx5_1's PCI function;
 *  - "none": an empty tree (no NUMA information).
 * Each is read with several CPU affinities, node-local ranks, CPU->NIC maps
 * and DDSTORE_FABRIC_DOMAIN values; then the choice over a hand-made
 * fi_getinfo list (several fabrics), and the inputs taken from the
 * environment and the process's own affinity. No MPI, no provider: it links
 * nic.c and error.c directly (they are not exported).
 * Usage: test_nic */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rdma/fabric.h>

#include "nic.h"

static int checks, failures;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond)) {                                                                    \
            failures++;                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " [last error: %s]\n", dds_last_error());                    \
        }                                                                                 \
    } while (0)

/* ---- building trees ------------------------------------------------------------ */

static char base[PATH_MAX];

static void mkdirs(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

__attribute__((format(printf, 3, 4))) static void put(const char *root, const char *content, const char *fmt, ...)
{
    char rel[PATH_MAX], path[PATH_MAX * 2], dir[PATH_MAX * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "%s\n", content);
    fclose(f);
}

/* root/class/<cls>/<name>/device -> root/devices/<target> (created). */
static void nic(const char *root, const char *cls, const char *name, const char *target)
{
    char dir[PATH_MAX], link[PATH_MAX * 2], tgt[PATH_MAX * 2];
    snprintf(dir, sizeof dir, "%s/class/%s/%s", root, cls, name);
    mkdirs(dir);
    snprintf(tgt, sizeof tgt, "%s/devices/%s", root, target);
    mkdirs(tgt);
    snprintf(link, sizeof link, "%s/device", dir);
    if (symlink(tgt, link) != 0) {
        perror(link);
        exit(1);
    }
}

static void slingshot_tree(const char *r)
{
    static const char *cpus[] = { "0-7", "8-15", "16-23", "24-31" };
    for (int n = 0; n < 4; n++) {
        put(r, cpus[n], "devices/system/node/node%d/cpulist", n);
        put(r, n < 2 ? (n == 0 ? "10 12 20 20" : "12 10 20 20") : (n == 2 ? "20 20 10 12" : "20 20 12 10"),
            "devices/system/node/node%d/distance", n);
    }
    /* cxiK on PCI 0000:0K:00.0 (K+1), on NUMA node numa[K]: not in order. */
    static const int numa[] = { 1, 0, 3, 2 };
    for (int k = 0; k < 4; k++) {
        char pci[64], name[16], net[16], aux[96];
        snprintf(pci, sizeof pci, "pci0000:00/0000:0%d:00.0", k + 1);
        char v[8];
        snprintf(v, sizeof v, "%d", numa[k]);
        put(r, v, "devices/%s/numa_node", pci);
        snprintf(name, sizeof name, "cxi%d", k);
        nic(r, "cxi", name, pci);
        snprintf(net, sizeof net, "hsn%d", k);
        /* hsn0, hsn1 on the PCI function itself; hsn2, hsn3 on a child device. */
        snprintf(aux, sizeof aux, "%s/cxi_eth.%d", pci, k);
        nic(r, "net", net, k < 2 ? pci : aux);
    }
}

static void ib_tree(const char *r)
{
    static const char *dist[] = { "10 12 20 20", "12 10 20 20", "20 20 10 12", "20 20 12 10" };
    for (int n = 0; n < 4; n++) {
        char c[16];
        snprintf(c, sizeof c, "%d-%d", 2 * n, 2 * n + 1);
        put(r, c, "devices/system/node/node%d/cpulist", n);
        put(r, dist[n], "devices/system/node/node%d/distance", n);
    }
    put(r, "0", "devices/pci0000:40/0000:41:00.0/numa_node");
    put(r, "2", "devices/pci0000:c0/0000:c1:00.0/numa_node");
    put(r, "1", "devices/pci0000:00/0000:00:03.0/numa_node");
    nic(r, "infiniband", "mlx5_0", "pci0000:40/0000:41:00.0");
    nic(r, "infiniband", "mlx5_1", "pci0000:c0/0000:c1:00.0");
    nic(r, "net", "ib0", "pci0000:40/0000:41:00.0");
    nic(r, "net", "ib1", "pci0000:c0/0000:c1:00.0");
    nic(r, "net", "eth0", "pci0000:00/0000:00:03.0/virtio2"); /* numa_node on the parent */
    nic(r, "net", "eth1", "pci0000:c0/0000:c1:00.0");         /* a RoCE netdev of mlx5_1 */
    /* A NIC the kernel cannot place (-1). */
    put(r, "-1", "devices/pci0000:80/0000:81:00.0/numa_node");
    nic(r, "infiniband", "mlx5_2", "pci0000:80/0000:81:00.0");
}

/* ---- one choice -------------------------------------------------------------------- */

static const char *S4[] = { "cxi0", "cxi1", "cxi2", "cxi3" };
static const bool ALL[] = { true, true, true, true, true, true, true, true };

static dds_nic_in inputs(const char *root, const char *cpus, int local_rank)
{
    dds_nic_in in;
    memset(&in, 0, sizeof in);
    in.sysfs = root;
    in.prov = "test";
    in.fabric = "fab";
    in.local_rank = local_rank;
    in.rank_from = "TEST_LOCAL_RANK";
    if (dds_nic_parse_cpus(cpus, &in.cpus) != 0) {
        fprintf(stderr, "bad test cpus %s\n", cpus);
        exit(1);
    }
    return in;
}

static char why[512];

/* The domain chosen, or NULL on an error (its code in *rc). */
static const char *choose(const dds_nic_in *in, const char *const *names, const bool *auto_ok, size_t n, int *rc)
{
    size_t pick = (size_t)-1;
    why[0] = '\0';
    *rc = dds_nic_choose(in, names, auto_ok, n, &pick, why, sizeof why);
    if (*rc)
        return NULL;
    return pick < n ? names[pick] : "(out of range)";
}

#define EXPECT(in, names, auto_ok, n, want, why_has)                                                         \
    do {                                                                                                     \
        int rc_;                                                                                             \
        const char *got_ = choose(&(in), names, auto_ok, n, &rc_);                                           \
        CHECK(got_ && strcmp(got_, want) == 0, "cpus/rank -> %s, want %s (why: %s)", got_ ? got_ : "error", \
              want, why);                                                                                    \
        CHECK(strstr(why, why_has) != NULL, "why '%s' lacks '%s'", why, why_has);                           \
    } while (0)

#define EXPECT_ERR(in, names, auto_ok, n, msg_has)                                                   \
    do {                                                                                             \
        int rc_;                                                                                     \
        const char *got_ = choose(&(in), names, auto_ok, n, &rc_);                                   \
        CHECK(!got_ && rc_ == DDS_EINVAL, "want DDS_EINVAL, got %s (rc %d)", got_ ? got_ : "", rc_); \
        CHECK(strstr(dds_last_error(), msg_has) != NULL, "message lacks '%s'", msg_has);            \
    } while (0)

static void test_cpulists(void)
{
    dds_cpuset s;
    CHECK(dds_nic_parse_cpus("0-3,8, 10 - 11\n", &s) == 0, "valid list");
    CHECK(s.w[0] == 0xD0Full, "0-3,8,10-11 -> 0x%llx", (unsigned long long)s.w[0]);
    CHECK(dds_nic_parse_cpus("", &s) == 0 && s.w[0] == 0, "empty list (a node without CPUs)");
    CHECK(dds_nic_parse_cpus("8191", &s) == 0 && s.w[127] >> 63, "the last CPU");
    const char *bad[] = { "8192", "3-1", "0-", "-3", "a", "1,,2", "1 2", "0-3x", "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(dds_nic_parse_cpus(bad[i], &s) == -1, "'%s' must be refused", bad[i]);
}

static void test_slingshot(const char *r)
{
    /* One process per NUMA node: the NIC of its node (not cxi<node>). */
    static const char *node_cpus[] = { "0-7", "8-15", "16-23", "24-31" };
    static const char *want[] = { "cxi1", "cxi0", "cxi3", "cxi2" };
    for (int node = 0; node < 4; node++)
        for (int lr = 0; lr < 3; lr++) {
            dds_nic_in in = inputs(r, node_cpus[node], lr);
            EXPECT(in, S4, ALL, 4, want[node], "topology: ");
        }
    /* Mostly on one node; one CPU of a node; a subset of a node. */
    dds_nic_in in = inputs(r, "0-9", 3);
    EXPECT(in, S4, ALL, 4, "cxi1", "NUMA node 0, which holds 8 of this process's 10 CPUs (0-9)");
    in = inputs(r, "17", 0);
    EXPECT(in, S4, ALL, 4, "cxi3", "topology: cxi3 is on NUMA node 2, which holds 1 of this process's 1 CPUs (17)");
    /* Unbound: every NIC ties; node-local ranks spread round-robin. */
    for (int lr = 0; lr < 8; lr++) {
        in = inputs(r, "0-31", lr);
        EXPECT(in, S4, ALL, 4, S4[lr % 4], "a tie between cxi0, cxi1, cxi2, cxi3: node-local rank");
    }
    /* Half on node 0 (cxi1), half on node 1 (cxi0). */
    in = inputs(r, "4-11", 0);
    EXPECT(in, S4, ALL, 4, "cxi0", "a tie between cxi0, cxi1");
    in = inputs(r, "4-11", 1);
    EXPECT(in, S4, ALL, 4, "cxi1", "node-local rank 1 (TEST_LOCAL_RANK) takes cxi1");
    /* Only candidates of libfabric's first fabric are chosen from. */
    static const bool mid[] = { false, true, true, false };
    in = inputs(r, "0-31", 0);
    EXPECT(in, S4, mid, 4, "cxi1", "a tie between cxi1, cxi2:");
    in = inputs(r, "0-7", 1);
    EXPECT(in, S4, mid, 4, "cxi1", "topology: cxi1");
    in = inputs(r, "8-15", 1); /* cxi0 is out: node 1 is nearest to node 0 (cxi1) */
    EXPECT(in, S4, mid, 4, "cxi1", "nearest (distance 12)");
    static const bool one[] = { false, false, true, false };
    EXPECT(in, S4, one, 4, "cxi2", "only: provider test offers one domain on fabric fab");

    /* Maps (the original DDStore's format), by interface or domain name. */
    in = inputs(r, "0-7", 0);
    in.map = "hsn0=8-15;hsn1=0-7;hsn2=24-31;hsn3=16-23";
    in.map_from = "DDSTORE_NIC_MAP";
    EXPECT(in, S4, ALL, 4, "cxi1", "DDSTORE_NIC_MAP: hsn1 (domain cxi1) has 8 of this process's 8 CPUs");
    in.map = " hsn3 = 0-31 ; "; /* the map wins over the topology; spaces and a trailing ';' */
    EXPECT(in, S4, ALL, 4, "cxi3", "hsn3 (domain cxi3)");
    in.map = "cxi2=0-31";
    EXPECT(in, S4, ALL, 4, "cxi2", "DDSTORE_NIC_MAP: cxi2 has 8");
    in.map = "hsn2=0-3;hsn0=4-7"; /* a tie spread by rank; hsn2 through its child device */
    in.local_rank = 1;
    EXPECT(in, S4, ALL, 4, "cxi2", "a tie between cxi0, cxi2: node-local rank 1");
    in.map = "hsn2=0-5;hsn0=6-7";
    EXPECT(in, S4, ALL, 4, "cxi2", "hsn2 (domain cxi2) has 6");
    in.map = "hsn1=0-7"; /* a map entry outside the candidates of the first fabric still counts */
    EXPECT(in, S4, one, 4, "cxi1", "hsn1 (domain cxi1)");
    in.map = "hsn9=100-200;hsn1=0-7"; /* entries for other CPUs need not exist here */
    EXPECT(in, S4, ALL, 4, "cxi1", "hsn1");
    in.map = "hsn0=8-15";
    EXPECT_ERR(in, S4, ALL, 4, "gives none of this process's CPUs (0-7) to a NIC");
    in.map = "hsn9=0-31";
    EXPECT_ERR(in, S4, ALL, 4, "gives this process's CPUs to 'hsn9', which is not a domain");
    static const char *bad_maps[] = { "hsn0", "hsn0=", "=0-3", "hsn0=3-1", "hsn0=0-x", "hsn0=99999", ";;",
                                      "hsn0=0-3;hsn1=3-5" };
    static const char *bad_msgs[] = { "is not <interface>=<cpus>", "is not a list of CPUs",
                                      "is not <interface>=<cpus>", "is not a list of CPUs",
                                      "is not a list of CPUs", "is not a list of CPUs", "names no interface",
                                      "CPUs 3 are given both to hsn0 and to hsn1" };
    for (size_t i = 0; i < sizeof bad_maps / sizeof *bad_maps; i++) {
        in.map = bad_maps[i];
        EXPECT_ERR(in, S4, ALL, 4, bad_msgs[i]);
    }

    /* DDSTORE_FABRIC_DOMAIN: by name or interface, over any map. */
    in = inputs(r, "0-7", 0);
    in.domain = "cxi3";
    EXPECT(in, S4, ALL, 4, "cxi3", "DDSTORE_FABRIC_DOMAIN=cxi3");
    in.map = "hsn1=0-7";
    in.map_from = "nic_map";
    EXPECT(in, S4, ALL, 4, "cxi3", "DDSTORE_FABRIC_DOMAIN=cxi3");
    in.domain = "hsn2";
    EXPECT(in, S4, one, 4, "cxi2", "DDSTORE_FABRIC_DOMAIN=hsn2 (an interface of cxi2)");
    in.domain = "hsn0";
    EXPECT(in, S4, ALL, 4, "cxi0", "an interface of cxi0");
    in.domain = "mlx5_0";
    EXPECT_ERR(in, S4, ALL, 4, "DDSTORE_FABRIC_DOMAIN='mlx5_0' is not a domain of libfabric provider test "
                               "here, nor a network interface of one; its domains: cxi0, cxi1, cxi2, cxi3");
}

static void test_ib(const char *r)
{
    static const char *M2[] = { "mlx5_0", "mlx5_1" };
    dds_nic_in in = inputs(r, "0-1", 1);
    EXPECT(in, M2, ALL, 2, "mlx5_0", "topology: mlx5_0 is on NUMA node 0");
    in = inputs(r, "4", 0);
    EXPECT(in, M2, ALL, 2, "mlx5_1", "topology: mlx5_1 is on NUMA node 2");
    /* Nodes without an HCA: the nearest by SLIT distance. */
    in = inputs(r, "2-3", 1);
    EXPECT(in, M2, ALL, 2, "mlx5_0", "mlx5_0 is on NUMA node 0, the nearest (distance 12) to this process's "
                                     "NUMA node 1 (CPUs 2-3)");
    in = inputs(r, "6-7", 0);
    EXPECT(in, M2, ALL, 2, "mlx5_1", "nearest (distance 12)");
    in = inputs(r, "2-3,6-7", 1);
    EXPECT(in, M2, ALL, 2, "mlx5_1", "2 domains are the nearest (distance 12) to this process's NUMA node 1,3");
    /* Unbound: both HCAs tie. */
    for (int lr = 0; lr < 4; lr++) {
        in = inputs(r, "0-7", lr);
        EXPECT(in, M2, ALL, 2, M2[lr % 2], "a tie between mlx5_0, mlx5_1");
    }
    /* An HCA the kernel cannot place never wins over one it can; alone it is spread. */
    static const char *M3[] = { "mlx5_2", "mlx5_0", "mlx5_1" };
    in = inputs(r, "0-1", 0);
    EXPECT(in, M3, ALL, 3, "mlx5_0", "topology: mlx5_0");
    static const char *M20[] = { "mlx5_2", "eth9" };
    EXPECT(in, M20, ALL, 2, "mlx5_2", "spread: no NUMA locality known for the 2 domains");
    /* verbs datagram domains name their device with a suffix. */
    static const char *D2[] = { "mlx5_0-dgram", "mlx5_1-dgram" };
    in = inputs(r, "5", 0);
    EXPECT(in, D2, ALL, 2, "mlx5_1-dgram", "NUMA node 2");
    /* tcp domains are interfaces: eth0's NUMA node is on its PCI parent. */
    static const char *E2[] = { "eth1", "eth0" };
    in = inputs(r, "2-3", 0);
    EXPECT(in, E2, ALL, 2, "eth0", "topology: eth0 is on NUMA node 1");
    /* Maps by interface. */
    in = inputs(r, "0-7", 0);
    in.map = "ib1=0-7";
    in.map_from = "nic_map";
    EXPECT(in, M2, ALL, 2, "mlx5_1", "nic_map: ib1 (domain mlx5_1) has 8 of this process's 8 CPUs (0-7)");
    in.map = "ib0=0-3;ib1=4-7";
    in.local_rank = 3;
    EXPECT(in, M2, ALL, 2, "mlx5_1", "a tie between mlx5_0, mlx5_1: node-local rank 3 (TEST_LOCAL_RANK)");
    in.map = "ib0=0-4;ib1=5-7";
    EXPECT(in, M2, ALL, 2, "mlx5_0", "ib0 (domain mlx5_0) has 5");
    in.domain = "ib1";
    EXPECT(in, M2, ALL, 2, "mlx5_1", "DDSTORE_FABRIC_DOMAIN=ib1 (an interface of mlx5_1)");
}

static void test_none(const char *r)
{
    for (int lr = 0; lr < 6; lr++) {
        dds_nic_in in = inputs(r, "0-3", lr);
        EXPECT(in, S4, ALL, 4, S4[lr % 4], "spread: no NUMA locality known for the 4 domains");
    }
    static const char *LO[] = { "lo" };
    dds_nic_in in = inputs(r, "0", 2);
    EXPECT(in, LO, ALL, 1, "lo", "only: ");
    in.map = "hsn0=0";
    in.map_from = "nic_map";
    EXPECT_ERR(in, S4, ALL, 4, "'hsn0', which is not a domain");
    in.map = NULL;
    in.domain = "hsn0";
    EXPECT_ERR(in, S4, ALL, 4, "DDSTORE_FABRIC_DOMAIN='hsn0'");
}

/* ---- over an fi_getinfo list, and the inputs from the environment ------------------------- */

static struct fi_info *entry(struct fi_info *prev, const char *fabric, const char *domain)
{
    struct fi_info *i = fi_allocinfo();
    if (!i)
        exit(1);
    i->fabric_attr->prov_name = strdup("tcp;ofi_rxm");
    i->fabric_attr->name = strdup(fabric);
    i->domain_attr->name = strdup(domain);
    if (prev)
        prev->next = i;
    return i;
}

static void test_list(const char *ib)
{
    /* Like tcp's: interfaces on several fabrics (subnets), some twice. */
    struct fi_info *list = entry(NULL, "10.0.0.0/24", "eth0");
    struct fi_info *e1 = entry(list, "fe80::/64", "eth0");
    struct fi_info *e2 = entry(e1, "10.0.0.0/24", "eth1");
    struct fi_info *e3 = entry(e2, "127.0.0.1/32", "lo");
    (void)entry(e3, "fe80::/64", "eth2");
    dds_nic nic;
    memset(&nic, 0, sizeof nic);
    struct fi_info *pick = NULL;

    dds_nic_in in = inputs(ib, "4-5", 0);
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_OK && pick == e2, "eth1 (NUMA node 2) is entry 2");
    CHECK(strcmp(nic.domain, "eth1") == 0 && strncmp(nic.why, "topology: eth1", 14) == 0, "%s: %s", nic.domain,
          nic.why);
    in = inputs(ib, "0-1", 0); /* eth0's node 1 is nearer node 0 than eth1's node 2 */
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_OK && pick == list, "eth0's first-fabric entry");
    CHECK(strstr(nic.why, "nearest (distance 12)") != NULL, "%s", nic.why);
    in = inputs(ib, "0-7", 1); /* unbound: eth0 and eth1 tie (lo and eth2 are on other fabrics) */
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_OK && pick == e2, "rank 1 of the tie: eth1");
    CHECK(strstr(nic.why, "a tie between eth0, eth1: node-local rank 1") != NULL, "%s", nic.why);
    in.domain = "lo"; /* an explicit domain may be on any fabric */
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_OK && pick == e3, "lo");
    CHECK(strcmp(nic.domain, "lo") == 0 && strcmp(nic.why, "DDSTORE_FABRIC_DOMAIN=lo") == 0, "%s", nic.why);
    in.domain = "eth2";
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_OK && pick == e3->next, "eth2");
    in.domain = "wlan0";
    pick = NULL;
    CHECK(dds_nic_pick_in(list, &in, &nic, &pick) == DDS_EINVAL && !pick, "no wlan0");
    CHECK(strstr(dds_last_error(), "its domains: eth0, eth1, lo, eth2 (fi_info -p 'tcp;ofi_rxm')"), "listed");

    /* The same through the environment and this process's own affinity. */
    static const char *launcher[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                                      "SLURM_LOCALID", "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK",
                                      "FLUX_TASK_LOCAL_ID" };
    for (size_t i = 0; i < sizeof launcher / sizeof *launcher; i++)
        unsetenv(launcher[i]);
    unsetenv("DDSTORE_FABRIC_DOMAIN");
    unsetenv("DDSTORE_NIC_MAP");
    setenv("DDSTORE_SYSFS_ROOT", ib, 1);
    cpu_set_t old, one;
    sched_getaffinity(0, sizeof old, &old);
    int cpu = -1;
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
        if (CPU_ISSET(c, &old))
            cpu = c;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "pin to CPU %d", cpu);
    dds_nic_in env;
    memset(&nic, 0, sizeof nic);
    nic.rank = 5;
    nic.has_rank = true;
    CHECK(dds_nic_inputs(&nic, &env) == DDS_OK, "inputs");
    CHECK(strcmp(env.sysfs, ib) == 0 && !env.domain && !env.map, "sysfs root, no overrides");
    CHECK(env.local_rank == 5 && strcmp(env.rank_from, "rank in the communicator") == 0, "rank %d (%s)",
          env.local_rank, env.rank_from);
    dds_cpuset want;
    char c[16];
    snprintf(c, sizeof c, "%d", cpu);
    dds_nic_parse_cpus(c, &want);
    CHECK(memcmp(&want, &env.cpus, sizeof want) == 0, "the affinity is CPU %d alone", cpu);
    setenv("SLURM_LOCALID", "3", 1);
    setenv("PMI_LOCAL_RANK", "x", 1);
    setenv("DDSTORE_NIC_MAP", "eth1=0-8191", 1);
    dds_nic_inputs(&nic, &env);
    CHECK(env.local_rank == 3 && strcmp(env.rank_from, "SLURM_LOCALID") == 0, "SLURM_LOCALID");
    CHECK(env.map && strcmp(env.map, "eth1=0-8191") == 0 && strcmp(env.map_from, "DDSTORE_NIC_MAP") == 0,
          "DDSTORE_NIC_MAP");
    nic.map = "eth0=0-8191"; /* dds_create's nic_map over DDSTORE_NIC_MAP */
    dds_nic_inputs(&nic, &env);
    CHECK(strcmp(env.map, "eth0=0-8191") == 0 && strcmp(env.map_from, "nic_map") == 0, "nic_map");
    pick = NULL;
    CHECK(dds_nic_pick(list, &nic, &pick) == DDS_OK && pick == list, "eth0 by nic_map");
    CHECK(strstr(nic.why, "nic_map: eth0 has 1 of this process's 1 CPUs") == nic.why, "%s", nic.why);
    nic.map = ""; /* "" is unset: DDSTORE_NIC_MAP */
    CHECK(dds_nic_pick(list, &nic, &pick) == DDS_OK && pick == e2, "eth1 by DDSTORE_NIC_MAP");
    setenv("DDSTORE_FABRIC_DOMAIN", "lo", 1);
    CHECK(dds_nic_pick(list, &nic, &pick) == DDS_OK && pick == e3, "lo by DDSTORE_FABRIC_DOMAIN");
    unsetenv("DDSTORE_FABRIC_DOMAIN");
    unsetenv("DDSTORE_NIC_MAP");
    unsetenv("SLURM_LOCALID");
    unsetenv("PMI_LOCAL_RANK");
    unsetenv("DDSTORE_SYSFS_ROOT");
    sched_setaffinity(0, sizeof old, &old);
    fi_freeinfo(list);
}

static int rm_tree(const char *path)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/test_nic.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    char ss[PATH_MAX + 16], ib[PATH_MAX + 16], none[PATH_MAX + 16];
    snprintf(ss, sizeof ss, "%s/slingshot", base);
    snprintf(ib, sizeof ib, "%s/ib", base);
    snprintf(none, sizeof none, "%s/none", base);
    mkdirs(none);
    slingshot_tree(ss);
    ib_tree(ib);

    test_cpulists();
    test_slingshot(ss);
    test_ib(ib);
    test_none(none);
    test_list(ib);

    rm_tree(base);
    printf("test_nic: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
