/* Plain-C test of method 2's handshake directory through the public header.
 *
 * Run under mpiexec (2 or more ranks) with DDSTORE_FABRIC=shm or tcp
 * (FI_TCP_IFACE=lo). The MPI ranks form the core group; rank 0 starts reader
 * processes of this same program (`--reader`) with posix_spawn, outside
 * mpiexec: they call no MPI function, join from the directory and read every
 * row bit-exact. Across hosts: DDS_TEST_READER_LAUNCHER starts the readers
 * through a command (on another host), DDSTORE_TEST_SHARED_DIR is where the
 * handshake directories go (default $TMPDIR, else /tmp). Checks:
 *  - an empty or missing directory times out in the configured time, with a
 *    message naming the directory;
 *  - files left by an earlier run (no live publisher) are never used: a
 *    reader started before the core group waits, then reads the new run;
 *  - a variable added after a reader joined is found by dds_attach;
 *  - corrupt, truncated, oversized, hostile (valid checksum, absurd counts),
 *    foreign-version and symlinked files, and a directory writable by
 *    others, give clean errors;
 *  - freeing the store withdraws the publication.
 * Any failure aborts the whole job. */
#include <mpi.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include <ddstore/ddstore.h>

#include "check.h"
#include "handshake_sum.h"

extern char **environ;

static int rank = -1, size;

/* Rows per core rank: uneven, rank 1 holds none. */
static int64_t rows_of(int r) { return r == 1 ? 0 : 4 + 5 * r; }

static void add_var(dds_store *s, const char *name, int k, int64_t rb)
{
    int64_t first = 0;
    for (int r = 0; r < rank; r++)
        first += rows_of(r);
    int64_t n = rows_of(rank);
    uint8_t *buf = malloc((size_t)((n + 1) * rb));
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < rb; b++)
            buf[i * rb + b] = byte_of(k, first + i, b);
    OK(dds_add(s, name, buf, n, rb, DDS_DTYPE_BYTES));
    free(buf);
}

/* Read every row of `name` (salt k) through get, get_batch and get_ranges. */
static void check_var(dds_store *s, const char *name, int k, int64_t rb, int n_core)
{
    dds_var_info vi = { .size = sizeof vi };
    OK(dds_query(s, name, &vi));
    int64_t total = 0;
    for (int r = 0; r < n_core; r++)
        total += rows_of(r);
    CHECK(vi.global_rows == total && vi.row_bytes == rb && vi.group_size == n_core,
          "%s: %lld rows of %lld bytes over %d shards", name, (long long)vi.global_rows,
          (long long)vi.row_bytes, vi.group_size);
    uint8_t *out = malloc((size_t)(total * rb));
    OK(dds_get(s, name, out, 0, total));
    for (int64_t i = 0; i < total * rb; i++)
        CHECK(out[i] == byte_of(k, i / rb, i % rb), "%s: byte %lld", name, (long long)i);
    int64_t *rows = malloc((size_t)total * sizeof *rows);
    for (int64_t i = 0; i < total; i++)
        rows[i] = (i * 7 + 3) % total;
    memset(out, 0, (size_t)(total * rb));
    OK(dds_get_batch(s, name, out, rows, total));
    for (int64_t i = 0; i < total; i++)
        for (int64_t b = 0; b < rb; b++)
            CHECK(out[i * rb + b] == byte_of(k, rows[i], b), "%s: batch row %lld", name, (long long)rows[i]);
    int64_t starts[2] = { total - 1, 0 }, counts[2] = { 1, total - 1 };
    OK(dds_get_ranges(s, name, out, starts, counts, 2));
    for (int64_t b = 0; b < rb; b++)
        CHECK(out[b] == byte_of(k, total - 1, b), "%s: range", name);
    free(rows);
    free(out);
}

/* ---- reader process (no MPI) ------------------------------------------------- */

static int reader_main(const char *dir, int n_core)
{
    check_in_reader = 1;
    double t0 = now();
    dds_store *s = NULL;
    OK(dds_join(&s, dir, n_core, 60.0));
    dds_store_info si = { .size = sizeof si };
    OK(dds_store_info_get(s, &si));
    CHECK(si.is_reader == 1 && si.method == 2 && si.group_size == n_core && si.rank == -1, "reader info");
    OK(dds_attach(s, "hs/a"));
    OK(dds_attach(s, "hs/b"));
    check_var(s, "hs/a", 1, 16, n_core);
    check_var(s, "hs/b", 2, 4099, n_core);
    /* The stale run's variable must not have leaked in. */
    int64_t count = 0;
    OK(dds_var_count(s, &count));
    for (int64_t i = 0; i < count; i++) {
        char name[DDS_NAME_MAX + 1];
        OK(dds_var_name(s, i, name, sizeof name));
        CHECK(strcmp(name, "stale/x") != 0, "variable of the stale run is visible");
    }
    /* Added by the core group after this reader joined. */
    OK(dds_attach(s, "hs/late"));
    check_var(s, "hs/late", 3, 8, n_core);
    CHECK(dds_attach(s, "") == DDS_EINVAL, "empty name");
    /* A reader cannot write. */
    CHECK(dds_add(s, "x", "a", 1, 1, 0) == DDS_ESTATE, "add on a reader");
    OK(dds_free(s));
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    printf("reader %d on %s: joined and read every row in %.2f s (%d checks)\n", (int)getpid(), host,
           now() - t0, checks);
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Joins, says so by creating <dir>.ready, waits for <dir>.freed (the core
 * group has freed its store), then reads: over tcp the read must fail
 * (with the provider's message, or, when the provider keeps retrying to
 * connect, once the publication is seen withdrawn), never hang or return
 * garbage silently. Over shm
 * the owners' processes still live and their memory stays readable by
 * address, so only the absence of a crash is checked. */
static int dead_reader_main(const char *dir, int n_core)
{
    check_in_reader = 1;
    dds_store *s = NULL;
    OK(dds_join(&s, dir, n_core, 60.0));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%.3000s.ready", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0, "create %s", path);
    close(fd);
    snprintf(path, sizeof path, "%.3000s.freed", dir);
    double t0 = now();
    while (!file_exists(path)) {
        CHECK(now() - t0 < 60, "the core group never freed its store");
        usleep(20000);
    }
    dds_var_info vi = { .size = sizeof vi };
    OK(dds_query(s, "hs/a", &vi));
    uint8_t *out = malloc((size_t)(vi.global_rows * vi.row_bytes));
    int rc = dds_get(s, "hs/a", out, 0, vi.global_rows);
    const char *fab = getenv("DDSTORE_FABRIC");
    if (fab && strncmp(fab, "tcp", 3) == 0)
        CHECK(rc == DDS_EFABRIC && (strstr(dds_last_error(), "fi_read") || strstr(dds_last_error(), "withdrawn")),
              "read from a freed store gave %d", rc);
    else
        CHECK(rc == DDS_OK || rc == DDS_EFABRIC, "read from a freed store gave %d", rc);
    free(out);
    OK(dds_free(s));
    return 0;
}

/* Readers are children of rank 0; with DDS_TEST_READER_LAUNCHER set (words
 * separated by spaces, e.g. "tests/cluster/host-exec 3") they are started
 * through that command instead, so that they can run on a host with no core
 * rank (tests/cluster/README.md). The launcher must exec the reader, whose
 * exit status is the launcher's. */
static pid_t spawn_reader(const char *self, const char *dir, int n_core, const char *mode)
{
    char n[16];
    snprintf(n, sizeof n, "%d", n_core);
    static char words[1024];
    char *args[24];
    int k = 0;
    const char *launcher = getenv("DDS_TEST_READER_LAUNCHER");
    if (launcher && *launcher) {
        CHECK(strlen(launcher) < sizeof words, "DDS_TEST_READER_LAUNCHER too long");
        strcpy(words, launcher);
        for (char *t = strtok(words, " "); t; t = strtok(NULL, " ")) {
            CHECK(k < 19, "DDS_TEST_READER_LAUNCHER has too many words");
            args[k++] = t;
        }
    }
    args[k++] = (char *)self;
    args[k++] = (char *)mode;
    args[k++] = (char *)dir;
    args[k++] = n;
    args[k] = NULL;
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], NULL, NULL, args, environ);
    CHECK(rc == 0, "posix_spawnp %s: %s", args[0], strerror(rc));
    return pid;
}

/* Wait for a child up to `limit` seconds; returns its exit status or -1. */
static int wait_child(pid_t pid, double limit)
{
    double t0 = now();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (now() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
}

/* ---- file helpers (rank 0) ------------------------------------------------------ */

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n, "read %s", path);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Replace `path` atomically with `len` bytes, mode 0600. */
static void put(const char *path, const void *data, size_t len)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%.3500s.testtmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0, "create %s", tmp);
    CHECK(write(fd, data, len) == (ssize_t)len, "write %s", tmp);
    close(fd);
    CHECK(rename(tmp, path) == 0, "rename %s", tmp);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void expect_join_error(const char *dir, int n_core, int code, const char *needle, const char *what)
{
    dds_store *r = NULL;
    double t0 = now();
    int rc = dds_join(&r, dir, n_core, 2.0);
    CHECK(rc == code, "%s: dds_join gave %d (%s), expected %d", what, rc, dds_strerror(rc), code);
    CHECK(r == NULL, "%s: no store on failure", what);
    CHECK(now() - t0 < 1.5, "%s: error should be immediate, took %.2f s", what, now() - t0);
    if (needle)
        CHECK(strstr(dds_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, dds_last_error(),
              needle);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = slurp(from, &n);
    put(to, b, n);
    free(b);
}

/* Copy the publication files of `from` into `to`: what a killed run leaves
 * behind (files present, nobody holding their locks). */
static void copy_publication(const char *from, const char *to)
{
    DIR *d = opendir(from);
    CHECK(d != NULL, "opendir %s", from);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "lock") == 0)
            continue;
        char a[PATH_MAX], b[PATH_MAX];
        snprintf(a, sizeof a, "%.3000s/%.255s", from, e->d_name);
        snprintf(b, sizeof b, "%.3000s/%.255s", to, e->d_name);
        copy_file(a, b);
    }
    closedir(d);
}

static int count_dds_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 4 && (strcmp(e->d_name + l - 4, ".dds") == 0 || strcmp(e->d_name + l - 5, ".live") == 0))
            n++;
    }
    closedir(d);
    return n;
}

/* ---- the core group's tests ------------------------------------------------------ */

static void timeouts(const char *base)
{
    if (rank != 0)
        return;
    char empty[PATH_MAX], missing[PATH_MAX];
    snprintf(empty, sizeof empty, "%.3000s/empty", base);
    snprintf(missing, sizeof missing, "%.3000s/missing", base);
    CHECK(mkdir(empty, 0700) == 0, "mkdir");
    dds_store *r = NULL;
    double t0 = now();
    int rc = dds_join(&r, empty, size, 1.0);
    double t = now() - t0;
    CHECK(rc == DDS_ETIMEDOUT, "empty directory gave %d", rc);
    CHECK(t >= 0.95 && t < 3.0, "timeout of 1 s took %.2f s", t);
    CHECK(strstr(dds_last_error(), empty) && strstr(dds_last_error(), "store.dds"),
          "message names the directory and what is missing: %s", dds_last_error());
    rc = dds_join(&r, missing, size, 0.3);
    CHECK(rc == DDS_ETIMEDOUT && strstr(dds_last_error(), "does not exist"), "missing directory: %d %s", rc,
          dds_last_error());
    /* The environment's timeout applies when none is given. */
    setenv("DDSTORE_HANDSHAKE_TIMEOUT_S", "0.5", 1);
    t0 = now();
    rc = dds_join(&r, empty, size, -1.0);
    t = now() - t0;
    unsetenv("DDSTORE_HANDSHAKE_TIMEOUT_S");
    CHECK(rc == DDS_ETIMEDOUT && t >= 0.45 && t < 2.5, "DDSTORE_HANDSHAKE_TIMEOUT_S=0.5: %d after %.2f s", rc, t);
}

static void corrupt_files(const char *dir)
{
    if (rank != 0)
        return;
    char store[PATH_MAX], var[PATH_MAX], link[PATH_MAX];
    snprintf(store, sizeof store, "%.3000s/store.dds", dir);
    snprintf(var, sizeof var, "%.3000s/var-00000000.dds", dir);
    snprintf(link, sizeof link, "%.3000s/elsewhere.dds", dir);
    size_t n, vn;
    uint8_t *orig = slurp(store, &n);
    uint8_t *vorig = slurp(var, &vn);
    uint8_t *b = malloc(n + 4096);

    /* Sanity: the untouched publication joins. */
    dds_store *r = NULL;
    OK(dds_join(&r, dir, size, 5.0));
    OK(dds_free(r));

    put(store, orig, 20);
    expect_join_error(dir, size, DDS_EPROTO, "header", "shorter than the header");
    put(store, orig, n - 7);
    expect_join_error(dir, size, DDS_EPROTO, "truncated", "truncated");
    memcpy(b, orig, n);
    b[n - 3] ^= 0x40;
    put(store, b, n);
    expect_join_error(dir, size, DDS_EPROTO, "checksum", "flipped bit");
    for (size_t i = 0; i < 4096; i++)
        b[i] = (uint8_t)(i * 131 + 7);
    put(store, b, 4096);
    expect_join_error(dir, size, DDS_EPROTO, "magic", "garbage");
    memcpy(b, orig, n);
    b[4] = 99; /* version */
    dds_hs_put_checksum(b, n);
    put(store, b, n);
    expect_join_error(dir, size, DDS_EPROTO, "version", "future version");
    memcpy(b, orig, n);
    put_u32(b + 40, 0xFFFFFFFFu); /* n_core, with a valid checksum */
    dds_hs_put_checksum(b, n);
    put(store, b, n);
    expect_join_error(dir, size, DDS_EPROTO, "core rank count", "hostile rank count");
    memcpy(b, orig, n);
    memset(b + n, 0xAB, 16); /* trailing bytes, length field updated */
    dds_hs_put_le64(b + 8, n + 16);
    dds_hs_put_checksum(b, n + 16);
    put(store, b, n + 16);
    expect_join_error(dir, size, DDS_EPROTO, "trailing", "trailing bytes");
    {
        /* Oversized: refused before reading (sparse file). */
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%.3500s.big", store);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)65 << 20) == 0, "sparse file");
        close(fd);
        CHECK(rename(tmp, store) == 0, "rename");
        expect_join_error(dir, size, DDS_EPROTO, "limit", "oversized");
    }
    /* A symbolic link in place of the file. */
    put(link, orig, n);
    unlink(store);
    CHECK(symlink("elsewhere.dds", store) == 0, "symlink");
    expect_join_error(dir, size, DDS_EIO, "symbolic link", "symlinked file");
    unlink(store);
    unlink(link);
    put(store, orig, n);
    /* A file others may write. */
    chmod(store, 0666);
    expect_join_error(dir, size, DDS_EIO, "writable", "world-writable file");
    chmod(store, 0600);
    /* A directory others may write. */
    chmod(dir, 0777);
    expect_join_error(dir, size, DDS_EIO, "writable", "world-writable directory");
    chmod(dir, 0700);
    /* Wrong number of core ranks. */
    expect_join_error(dir, size + 1, DDS_EMISMATCH, "core ranks", "n_core mismatch");

    /* Corrupt variable files: the store joins, the variable does not load. */
    uint8_t *vb = malloc(vn + 64);
    memcpy(vb, vorig, vn);
    vb[vn / 2] ^= 1;
    put(var, vb, vn);
    expect_join_error(dir, size, DDS_EPROTO, "var-00000000.dds", "corrupt variable");
    memcpy(vb, vorig, vn);
    /* First shard's row count beyond its registered memory, checksum valid.
     * Layout: 40 header + 24 fixed + 2 + name, then 32 bytes per shard. */
    size_t name_len = (size_t)(vorig[64] | (vorig[65] << 8));
    dds_hs_put_le64(vb + 66 + name_len, (uint64_t)1 << 40);
    dds_hs_put_checksum(vb, vn);
    put(var, vb, vn);
    expect_join_error(dir, size, DDS_EPROTO, "registered memory", "shard beyond its memory");
    memcpy(vb, vorig, vn);
    dds_hs_put_le64(vb + 66 + name_len, (uint64_t)1 << 63); /* negative rows */
    dds_hs_put_checksum(vb, vn);
    put(var, vb, vn);
    expect_join_error(dir, size, DDS_EPROTO, NULL, "negative rows");
    put(var, vorig, vn);
    OK(dds_join(&r, dir, size, 5.0));
    OK(dds_free(r));
    free(vb);
    free(b);
    free(orig);
    free(vorig);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--reader") == 0)
        return reader_main(argv[2], atoi(argv[3]));
    if (argc == 4 && strcmp(argv[1], "--dead-reader") == 0)
        return dead_reader_main(argv[2], atoi(argv[3]));

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!dds_has_fabric()) {
        if (rank == 0)
            printf("test_handshake: libddstore built without libfabric: skipped\n");
        MPI_Finalize();
        return 77;
    }
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(sl > 0, "readlink /proc/self/exe");
    self[sl] = '\0';

    /* One private base directory for the whole job. */
    char base[PATH_MAX] = { 0 };
    test_tmpdir(base, sizeof base, "dds-hs-test");
    char old_dir[PATH_MAX], dir[PATH_MAX];
    snprintf(old_dir, sizeof old_dir, "%.3000s/old", base);
    snprintf(dir, sizeof dir, "%.3000s/pub", base);

    timeouts(base);
    MPI_Barrier(MPI_COMM_WORLD);

    /* An earlier run's leftovers in `dir`. */
    dds_store *old = test_create(DDS_METHOD_FILE, old_dir);
    add_var(old, "stale/x", 9, 8);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
        copy_publication(old_dir, dir);
    }
    OK(dds_free(old));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        struct stat st;
        CHECK(stat(old_dir, &st) != 0, "free removes the directory it created");
        dds_store *r = NULL;
        int rc = dds_join(&r, dir, size, 1.0);
        CHECK(rc == DDS_ETIMEDOUT && strstr(dds_last_error(), "stale"), "stale publication: %d %s", rc,
              dds_last_error());
    }

    /* Reader A starts before the core group; reader B after it published. */
    pid_t a = -1, b = -1;
    if (rank == 0)
        a = spawn_reader(self, dir, size, "--reader");
    if (rank == 0)
        usleep(500000);
    MPI_Barrier(MPI_COMM_WORLD);
    dds_store *s = test_create(DDS_METHOD_FILE, dir);
    add_var(s, "hs/a", 1, 16);
    add_var(s, "hs/b", 2, 4099);
    if (rank == 0)
        b = spawn_reader(self, dir, size, "--reader");
    if (rank == 0)
        sleep(1);
    MPI_Barrier(MPI_COMM_WORLD);
    add_var(s, "hs/late", 3, 8);
    int status[2] = { 0, 0 };
    if (rank == 0) {
        status[0] = wait_child(a, 90);
        status[1] = wait_child(b, 90);
    }
    MPI_Bcast(status, 2, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(status[0] == 0, "reader started before the core group exited with %d", status[0]);
    CHECK(status[1] == 0, "reader started after publication exited with %d", status[1]);
    /* Core ranks read each other like method 1. */
    check_var(s, "hs/a", 1, 16, size);

    corrupt_files(dir);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Readers of a store that is then freed: one in this process, one in
     * another. */
    dds_store *mine = NULL;
    pid_t c = -1;
    char ready[PATH_MAX], freed[PATH_MAX];
    snprintf(ready, sizeof ready, "%.3000s.ready", dir);
    snprintf(freed, sizeof freed, "%.3000s.freed", dir);
    if (rank == 0) {
        OK(dds_join(&mine, dir, size, 5.0));
        c = spawn_reader(self, dir, size, "--dead-reader");
        double t0 = now();
        while (!file_exists(ready)) {
            CHECK(now() - t0 < 60, "dead reader never joined");
            usleep(20000);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    OK(dds_free(s));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        uint8_t row[16];
        CHECK(dds_get(mine, "hs/a", row, 0, 1) == DDS_ESTATE, "read through a reader of a freed store");
        OK(dds_free(mine));
        int fd = open(freed, O_WRONLY | O_CREAT, 0600);
        CHECK(fd >= 0, "create %s", freed);
        close(fd);
    }
    int cst = 0;
    if (rank == 0)
        cst = wait_child(c, 60);
    MPI_Bcast(&cst, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(cst == 0, "reader of a freed store exited with %d", cst);
    if (rank == 0) {
        unlink(ready);
        unlink(freed);
        CHECK(count_dds_files(dir) == 0, "free withdraws the publication");
        dds_store *r = NULL;
        CHECK(dds_join(&r, dir, size, 0.3) == DDS_ETIMEDOUT, "join after free");
        char empty[PATH_MAX];
        snprintf(empty, sizeof empty, "%.3000s/empty", base);
        rmdir(empty);
        CHECK(rmdir(dir) == 0, "publication directory left non-empty");
        CHECK(rmdir(base) == 0, "test directory left non-empty");
        printf("test_handshake: %d core ranks, %d checks passed\n", size, checks);
    }
    MPI_Finalize();
    return 0;
}
