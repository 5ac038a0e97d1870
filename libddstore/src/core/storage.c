/* File-backed shards: a store whose shards live in files under a directory
 * the user names, mapped into memory (storage.h describes the directory).
 *
 * Each variable is one file holding its rows in global row order; every
 * rank writes its own rows there with pwrite (never through the mapping,
 * so the mapping stays read-only and a partial page shared by two ranks'
 * rows is never written back whole from one node), and maps, read-only and
 * shared, the part of the file that holds its own rows and, with node
 * sharing on (DDSTORE_NODE_LOCAL), those of its node peers: a node peer's
 * rows are then a memcpy away, and remote ranks reach them through the
 * transport, which reads v->base like any shard. The kernel's page cache
 * decides what is resident; the store keeps no other copy.
 *
 * Because rows never move, a saved store is reopened at any rank count by
 * mapping other ranges of the same files (dds_open): no row is copied. A
 * directory each node sees on its own (node-local disks) is a "volume" of
 * its own: its files hold only the rows its ranks wrote, and a reopen maps
 * each rank's rows from its own node's volume, or says why it cannot.
 *
 * Locking: the job writing a directory holds an exclusive flock() on its
 * lock file (one rank per volume), jobs that reopen it a shared one (every
 * rank), so two jobs never write one directory, nor one writes while
 * another reads. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "storage.h"

#define PATH_CAP 4096
/* Writeback: start writing a shard's dirty pages after this many bytes were
 * written to it (and wait for the previous batch), so that a load larger
 * than memory never holds more than about twice this much dirty. */
#define DEFAULT_FLUSH_MB 16
/* Bytes read per pread when checksumming. */
#define CRC_READ_BYTES (4u << 20)

struct dds_storage {
    char *dir;              /* this group's directory */
    bool reopened;          /* dds_open(): read-only, as `manifest` describes */
    bool saved;             /* writer: dds_save() succeeded */
    _Atomic int changed;    /* writer: written since the last save (its manifest removed) */
    int lock_fd;
    char store_id[DDS_STORAGE_ID_HEX + 1];
    int nvolumes;
    char (*volume_ids)[DDS_STORAGE_ID_HEX + 1]; /* the group's volumes, in order of first rank */
    int *rank_volume;       /* group_size: volume of each group rank */
    int volume;             /* this rank's */
    bool volume_leader;     /* lowest group rank of its volume */
    int64_t nfiles;         /* writer: variable files made (v0 .. v<nfiles-1>) */
    uint64_t flush_bytes;   /* writeback batch (DDSTORE_STORAGE_FLUSH_MB) */
    int advice;             /* madvise() of mappings (DDSTORE_STORAGE_ADVICE) */
    dds_manifest manifest;  /* reopened: the saved store */
    int64_t **plan;         /* reopened: offsets (group_size + 1) of each variable here */
};

struct dds_shard_file {
    struct dds_storage *st;
    int64_t index;          /* v<index>.dds */
    int fd;
    char *map;              /* read-only shared mapping of this node's rows, or NULL */
    size_t map_len;
    uint64_t map_off;       /* file offset of map[0] */
    uint64_t data_off;      /* file offset of this rank's first row */
    uint64_t bytes;         /* this rank's rows */
    void *own;              /* a private page standing in for a shard of zero rows */
    _Atomic uint64_t unflushed;
    pthread_mutex_t flush_lock;
    /* Checksums kept while the rows are written in order (the usual add,
     * or init + updates front to back), so that dds_save need not read
     * them back: blocks [0, crc_at / block) are done in crcs, the running
     * one in crc_run. A write anywhere else sets crc_broken. */
    pthread_mutex_t crc_lock;
    uint64_t crc_at;
    uint32_t crc_run;
    bool crc_broken;
    uint32_t *crcs;
};

/* ---- small helpers -------------------------------------------------------------- */

static int path_in(const char *dir, const char *name, char out[PATH_CAP])
{
    int n = snprintf(out, PATH_CAP, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_CAP)
        return dds_err(DDS_EINVAL, "storage path %s/%s is too long", dir, name);
    return DDS_OK;
}

static void var_file_name(int64_t index, char out[32]) { snprintf(out, 32, "v%" PRId64 ".dds", index); }

static int path_of_var(const struct dds_storage *st, int64_t index, char out[PATH_CAP])
{
    char name[32];
    var_file_name(index, name);
    return path_in(st->dir, name, out);
}

/* (protect.c's dds_page_size sits above this file: protect.c writes
 * file-backed shards through dds_storage_write.) */
static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static double free_bytes(const char *dir)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0)
        return -1;
    return (double)vfs.f_bavail * (double)vfs.f_frsize;
}

static void random_id(char out[DDS_STORAGE_ID_HEX + 1])
{
    unsigned char b[DDS_STORAGE_ID_HEX / 2];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < sizeof b) { /* no getrandom: time, pid and address bits */
        uint64_t x = dds_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)out;
        for (size_t i = 0; i < sizeof b; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b[i] = (unsigned char)x;
        }
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* mkdir -p, mode 0700 for what it makes. */
static int make_dirs(const char *dir)
{
    char p[PATH_CAP];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return dds_err(DDS_EINVAL, "storage directory %s: path too long", dir);
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST)
            return dds_err(DDS_EIO, "cannot make storage directory %s: %s", p, strerror(errno));
        *q = c;
        if (!c)
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return dds_err(DDS_EIO, "storage directory %s is not a directory", dir);
    return DDS_OK;
}

/* Read a whole small file into a malloc'd, NUL-terminated buffer. */
static int read_file(const char *path, size_t max, char **out, size_t *len, int *err)
{
    *out = NULL;
    *err = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return dds_err(DDS_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size > max) {
        close(fd);
        return dds_err(DDS_EPROTO, "%s is larger than %zu bytes: not a ddstore file", path, max);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *b = malloc(n + 1);
    if (!b) {
        close(fd);
        return dds_err(DDS_ENOMEM, "out of memory reading %s", path);
    }
    while (got < n) {
        ssize_t r = pread(fd, b + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(b);
        return dds_err(DDS_EIO, "cannot read %s: short read", path);
    }
    b[n] = '\0';
    *out = b;
    *len = n;
    return DDS_OK;
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n == 0 ? EIO : errno;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Write buf to a new temporary file of dir, beside `name`, synced to disk:
 * its path in tmp (the caller renames or links it into place). */
static int write_temp(const char *dir, const char *name, const void *buf, size_t len, char tmp[PATH_CAP])
{
    char tname[96], id[DDS_STORAGE_ID_HEX + 1];
    random_id(id);
    snprintf(tname, sizeof tname, ".tmp-%s-%.8s", name, id);
    int rc = path_in(dir, tname, tmp);
    if (rc)
        return rc;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return dds_err(DDS_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int e = write_all(fd, buf, len, 0);
    if (!e && fsync(fd) != 0)
        e = errno;
    close(fd);
    if (e) {
        unlink(tmp);
        return dds_err(DDS_EIO, "cannot write %s: %s", tmp, strerror(e));
    }
    return DDS_OK;
}

/* Write `name` in dir atomically: a temporary file, fsync, rename. */
static int write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[PATH_CAP], tmp[PATH_CAP];
    int rc = path_in(dir, name, path);
    if (rc == DDS_OK)
        rc = write_temp(dir, name, buf, len, tmp);
    if (rc)
        return rc;
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return dds_err(DDS_EIO, "cannot write %s: %s", path, strerror(e));
    }
    fsync_dir(dir);
    return DDS_OK;
}

static int parse_advice(const char *env, int *advice)
{
    *advice = MADV_RANDOM;
    if (!env || !*env || strcmp(env, "random") == 0)
        return DDS_OK;
    if (strcmp(env, "normal") == 0)
        *advice = MADV_NORMAL;
    else if (strcmp(env, "sequential") == 0)
        *advice = MADV_SEQUENTIAL;
    else if (strcmp(env, "willneed") == 0)
        *advice = MADV_WILLNEED;
    else
        return dds_err(DDS_EINVAL, "DDSTORE_STORAGE_ADVICE='%s' is not random, normal, sequential or "
                       "willneed", env);
    return DDS_OK;
}

static int parse_flush(const char *env, uint64_t *bytes)
{
    *bytes = (uint64_t)DEFAULT_FLUSH_MB << 20;
    if (!env || !*env)
        return DDS_OK;
    char *end;
    long v = strtol(env, &end, 10);
    if (*end != '\0' || v < 1 || v > (1L << 20))
        return dds_err(DDS_EINVAL, "DDSTORE_STORAGE_FLUSH_MB='%s' is not a number of MiB from 1 to 1048576",
                       env);
    *bytes = (uint64_t)v << 20;
    return DDS_OK;
}

/* ---- volumes and the lock ----------------------------------------------------------- */

static int read_volume(const char *dir, char out[DDS_STORAGE_ID_HEX + 1], int *err)
{
    char path[PATH_CAP], *b;
    size_t n;
    *err = 0;
    int rc = path_in(dir, "volume", path);
    if (rc == DDS_OK)
        rc = read_file(path, 4096, &b, &n, err);
    if (rc)
        return rc;
    bool ok = n == DDS_STORAGE_ID_HEX + 1 && b[DDS_STORAGE_ID_HEX] == '\n';
    for (int i = 0; ok && i < DDS_STORAGE_ID_HEX; i++)
        ok = (b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f');
    if (ok) {
        memcpy(out, b, DDS_STORAGE_ID_HEX);
        out[DDS_STORAGE_ID_HEX] = '\0';
    }
    free(b);
    return ok ? DDS_OK : dds_err(DDS_EPROTO, "%s is not a ddstore volume id (foreign file)", path);
}

/* Give dir a volume id unless it has one (the first writer wins: link()). */
static int ensure_volume(const char *dir)
{
    char id[DDS_STORAGE_ID_HEX + 1];
    int err;
    int rc = read_volume(dir, id, &err);
    if (rc == DDS_OK || err != ENOENT)
        return rc;
    dds_err_clear();
    char path[PATH_CAP], tmp[PATH_CAP], text[DDS_STORAGE_ID_HEX + 2];
    random_id(id);
    snprintf(text, sizeof text, "%s\n", id);
    rc = path_in(dir, "volume", path);
    if (rc == DDS_OK)
        rc = write_temp(dir, "volume", text, strlen(text), tmp);
    if (rc)
        return rc;
    int e = 0;
    if (link(tmp, path) != 0 && errno != EEXIST) {
        e = errno;
        if (e == EPERM || e == ENOTSUP || e == EMLINK)
            e = rename(tmp, path) == 0 ? 0 : errno; /* no hard links: the last writer wins */
    }
    unlink(tmp);
    if (e)
        return dds_err(DDS_EIO, "cannot write %s: %s", path, strerror(e));
    fsync_dir(dir);
    return DDS_OK;
}

/* Every group rank's volume: node leaders give the directory an id unless
 * it has one, every rank reads its own view's. Collective over s->group;
 * agreed. */
static int find_volumes(dds_store *s)
{
    struct dds_storage *st = s->storage;
    int node_rank = 0;
    MPI_Comm_rank(s->node, &node_rank);
    int rc = DDS_OK;
    if (node_rank == 0)
        rc = ensure_volume(st->dir);
    rc = dds_agree(s->group, rc); /* also a barrier: every id made before any is read */
    if (rc)
        return rc;
    char mine[DDS_STORAGE_ID_HEX + 1] = "";
    int err;
    rc = dds_agree(s->group, read_volume(st->dir, mine, &err));
    if (rc)
        return rc;
    char (*all)[DDS_STORAGE_ID_HEX + 1] = calloc((size_t)s->group_size, sizeof *all);
    st->volume_ids = calloc((size_t)s->group_size, sizeof *st->volume_ids);
    st->rank_volume = calloc((size_t)s->group_size, sizeof *st->rank_volume);
    int ok = all && st->volume_ids && st->rank_volume;
    int all_ok = 0;
    int mrc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s->group);
    if (mrc == MPI_SUCCESS && all_ok)
        mrc = MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, s->group);
    if (mrc != MPI_SUCCESS)
        rc = dds_err_mpi(mrc, "MPI_Allgather (storage volumes)");
    else if (!all_ok)
        rc = dds_err(DDS_ENOMEM, "out of memory describing storage volumes");
    for (int g = 0; rc == DDS_OK && g < s->group_size; g++) {
        int k = 0;
        while (k < st->nvolumes && strcmp(st->volume_ids[k], all[g]) != 0)
            k++;
        if (k == st->nvolumes)
            memcpy(st->volume_ids[st->nvolumes++], all[g], sizeof all[g]);
        st->rank_volume[g] = k;
    }
    if (rc == DDS_OK) {
        st->volume = st->rank_volume[s->group_rank];
        st->volume_leader = true;
        for (int g = 0; g < s->group_rank; g++)
            if (st->rank_volume[g] == st->volume)
                st->volume_leader = false;
    }
    free(all);
    return dds_agree(s->group, rc);
}

static int take_lock(struct dds_storage *st, bool exclusive)
{
    if (!dds_env_flag("DDSTORE_STORAGE_LOCK", true))
        return DDS_OK;
    char path[PATH_CAP];
    int rc = path_in(st->dir, "lock", path);
    if (rc)
        return rc;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 && !exclusive && (errno == EACCES || errno == EROFS || errno == EPERM))
        fd = open(path, O_RDONLY | O_CLOEXEC); /* a read-only dataset directory */
    if (fd < 0) {
        if (!exclusive && errno == ENOENT)
            return DDS_OK; /* a read-only directory without a lock file: nobody can write it either */
        return dds_err(DDS_EIO, "cannot open the lock file %s: %s", path, strerror(errno));
    }
    if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            char holder[256] = "";
            ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
            holder[n > 0 ? n : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            bool readers = exclusive && flock(fd, LOCK_SH | LOCK_NB) == 0;
            close(fd);
            if (readers)
                return dds_err(DDS_ESTATE, "storage directory %s is open for reading by another job (a "
                               "store reopened from it holds its lock %s): free those stores before "
                               "writing it again", st->dir, path);
            return dds_err(DDS_ESTATE, "storage directory %s is being written by another job (%s; lock "
                           "file %s): two jobs never write one directory, and a store is reopened once "
                           "its writer has saved and freed it",
                           st->dir, holder[0] ? holder : "holder unknown", path);
        }
        close(fd);
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL)
            return dds_err(DDS_ENOTSUP, "the file system of storage directory %s does not support flock() "
                           "(%s): set DDSTORE_STORAGE_LOCK=0 to go without the lock, and make sure no two "
                           "jobs write the directory at once", st->dir, strerror(e));
        return dds_err(DDS_EIO, "cannot lock %s: %s", path, strerror(e));
    }
    if (exclusive) {
        char host[128] = "?", text[320], when[64] = "";
        gethostname(host, sizeof host - 1);
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        int n = snprintf(text, sizeof text, "written by pid %d on host %s since %s\n", (int)getpid(), host,
                         when);
        if (ftruncate(fd, 0) == 0 && n > 0)
            write_all(fd, text, (size_t)n, 0);
    }
    st->lock_fd = fd;
    return DDS_OK;
}

/* Whether `name` is one this library writes into a storage directory
 * (*is_var: a variable file). */
static bool own_file(const char *name, bool *is_var)
{
    *is_var = false;
    if (!strcmp(name, "volume") || !strcmp(name, "lock") || !strcmp(name, "manifest") ||
        !strcmp(name, "checksums") || !strncmp(name, ".tmp-", 5))
        return true;
    const char *p = name;
    if (*p == 'v' && p[1] >= '0' && p[1] <= '9') {
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
        if (!strcmp(p, ".dds")) {
            *is_var = true;
            return true;
        }
    }
    if (!strncmp(name, "group", 5) && name[5] >= '0' && name[5] <= '9') {
        for (p = name + 5; *p >= '0' && *p <= '9'; p++)
            ;
        return *p == '\0';
    }
    return false;
}

/* Empty a directory a store is about to be written into of an earlier
 * store (manifest first), refusing one that holds anything else. */
static int clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return dds_err(DDS_EIO, "cannot list storage directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = DDS_OK;
    bool is_var;
    while (rc == DDS_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !own_file(e->d_name, &is_var))
            rc = dds_err(DDS_EEXIST, "storage directory %s holds '%s', which is not a ddstore file: name an "
                         "empty or new directory (or one a store was written in)", dir, e->d_name);
    }
    char path[PATH_CAP];
    static const char *first[] = { "manifest", "checksums" };
    for (int i = 0; rc == DDS_OK && i < 2; i++)
        if (path_in(dir, first[i], path) == DDS_OK && unlink(path) != 0 && errno != ENOENT)
            rc = dds_err(DDS_EIO, "cannot remove %s: %s", path, strerror(errno));
    rewinddir(d);
    while (rc == DDS_OK && (e = readdir(d))) {
        if (own_file(e->d_name, &is_var) && (is_var || !strncmp(e->d_name, ".tmp-", 5)) &&
            path_in(dir, e->d_name, path) == DDS_OK && unlink(path) != 0 && errno != ENOENT)
            rc = dds_err(DDS_EIO, "cannot remove %s: %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}

static void drop_manifest(const char *dir)
{
    char path[PATH_CAP];
    if (path_in(dir, "manifest", path) == DDS_OK)
        unlink(path);
}

/* ---- stores: writer set-up, reopen, close -------------------------------------------- */

static struct dds_storage *storage_new(void)
{
    struct dds_storage *st = calloc(1, sizeof *st);
    if (st)
        st->lock_fd = -1;
    return st;
}

static int storage_env(struct dds_storage *st)
{
    int rc = parse_advice(dds_env("DDSTORE_STORAGE_ADVICE"), &st->advice);
    return rc ? rc : parse_flush(dds_env("DDSTORE_STORAGE_FLUSH_MB"), &st->flush_bytes);
}

int dds_storage_setup(dds_store *s, const char *opt)
{
    const char *dir = opt ? opt : dds_env("DDSTORE_STORAGE_DIR");
    int want = dir && *dir;
    int mine[2] = { want, -want }, all[2];
    int mrc = MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, s->comm);
    if (mrc != MPI_SUCCESS)
        return dds_agree(s->comm, dds_err_mpi(mrc, "MPI_Allreduce (storage directory)"));
    if (all[0] != -all[1])
        return dds_agree(s->comm, dds_err(DDS_EMISMATCH, "some ranks have a storage directory and some do "
                                          "not (this rank: %s): set storage_dir or DDSTORE_STORAGE_DIR on "
                                          "every rank or on none", want ? dir : "none"));
    if (!want)
        return DDS_OK;
    struct dds_storage *st = storage_new();
    int rc = st ? DDS_OK : dds_err(DDS_ENOMEM, "out of memory creating the store");
    s->storage = st;
    int n_groups = s->size / s->width;
    if (rc == DDS_OK) {
        char gdir[PATH_CAP];
        int n = n_groups > 1 ? snprintf(gdir, sizeof gdir, "%s/group%d", dir, s->group_index)
                             : snprintf(gdir, sizeof gdir, "%s", dir);
        st->dir = n > 0 && n < (int)sizeof gdir ? strdup(gdir) : NULL;
        if (!st->dir)
            rc = dds_err(DDS_EINVAL, "storage directory %s: path too long, or out of memory", dir);
    }
    if (rc == DDS_OK)
        rc = storage_env(st);
    if (rc == DDS_OK)
        rc = make_dirs(st->dir);
    char id[DDS_STORAGE_ID_HEX + 1] = "";
    if (s->rank == 0)
        random_id(id);
    mrc = MPI_Bcast(id, sizeof id, MPI_CHAR, 0, s->comm);
    if (mrc != MPI_SUCCESS && rc == DDS_OK)
        rc = dds_err_mpi(mrc, "MPI_Bcast (store id)");
    if (rc == DDS_OK)
        memcpy(st->store_id, id, sizeof id);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;
    rc = dds_agree(s->comm, find_volumes(s));
    if (rc)
        return rc;
    if (st->volume_leader)
        rc = take_lock(st, true);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;
    if (st->volume_leader) {
        rc = clear_dir(st->dir);
        if (rc == DDS_OK && n_groups > 1)
            drop_manifest(dir); /* a one-group store saved at the top is no longer current */
    }
    return dds_agree(s->comm, rc);
}

/* Offsets (group_size + 1) of manifest variable v for this job's group:
 * the saved layout at the same rank count, else an even split; each rank's
 * rows must be in the volume it sees. */
static int plan_var(dds_store *s, const dds_manifest_var *v, int64_t *off)
{
    const struct dds_storage *st = s->storage;
    const dds_manifest *m = &st->manifest;
    int n = s->group_size;
    int64_t G = v->global_rows;
    if (n == m->nranks)
        memcpy(off, v->offsets, ((size_t)n + 1) * sizeof *off);
    else
        for (int k = 0; k <= n; k++)
            off[k] = (int64_t)((__int128)G * k / n);
    bool ok = true;
    for (int k = 0, r = 0; ok && k < n; k++) {
        if (off[k + 1] == off[k])
            continue;
        while (v->offsets[r + 1] <= off[k])
            r++;
        for (int q = r; q < m->nranks && v->offsets[q] < off[k + 1]; q++)
            if (v->offsets[q + 1] > v->offsets[q] && m->rank_volume[q] != st->rank_volume[k])
                ok = false;
    }
    if (ok)
        return DDS_OK;
    /* Node-local volumes: the saved rows form runs by volume (in row
     * order), this job's ranks runs by volume (in rank order); each run of
     * rows goes, split evenly, to the next run of ranks on its volume. */
    int64_t at = 0;
    int k = 0;
    for (int r = 0; r < m->nranks;) {
        if (v->offsets[r + 1] == v->offsets[r]) {
            r++;
            continue;
        }
        int vol = m->rank_volume[r];
        int64_t lo = v->offsets[r];
        int q = r;
        while (q < m->nranks && (v->offsets[q + 1] == v->offsets[q] || m->rank_volume[q] == vol))
            q++;
        int64_t hi = v->offsets[q];
        while (k < n && st->rank_volume[k] != vol)
            off[k++] = at; /* ranks of another volume in between: no rows */
        if (k == n)
            return dds_err(DDS_EPROTO,
                           "variable '%s': rows [%lld, %lld) were saved in the node-local storage directory "
                           "of volume %.8s (by saved ranks %d-%d), and no rank of this job after those "
                           "holding rows [0, %lld) sees that volume as %s: reopen with ranks on the nodes "
                           "that hold these directories, in the same order, or save into a directory "
                           "every node shares",
                           v->name, (long long)lo, (long long)hi, m->volume_ids[vol], r, q - 1, (long long)lo,
                           st->dir);
        int first = k;
        while (k < n && st->rank_volume[k] == vol)
            k++;
        for (int j = first; j < k; j++)
            off[j] = lo + (int64_t)((__int128)(hi - lo) * (j - first) / (k - first));
        at = hi;
        r = q;
    }
    while (k <= n)
        off[k++] = at;
    return DDS_OK;
}

int dds_storage_reopen(dds_store *s, const char *dir)
{
    struct dds_storage *st = storage_new();
    int rc = st ? DDS_OK : dds_err(DDS_ENOMEM, "out of memory opening the store");
    s->storage = st;
    if (rc == DDS_OK) {
        st->reopened = true;
        st->dir = strdup(dir);
        if (!st->dir)
            rc = dds_err(DDS_ENOMEM, "out of memory opening the store");
    }
    if (rc == DDS_OK)
        rc = storage_env(st);
    struct stat sb;
    if (rc == DDS_OK && stat(dir, &sb) != 0)
        rc = dds_err(DDS_ENOENT, "storage directory %s: %s", dir, strerror(errno));
    else if (rc == DDS_OK && !S_ISDIR(sb.st_mode))
        rc = dds_err(DDS_ENOENT, "storage directory %s is not a directory", dir);
    if (rc == DDS_OK)
        rc = take_lock(st, false);
    char path[PATH_CAP], *text = NULL;
    size_t len = 0;
    if (rc == DDS_OK)
        rc = path_in(dir, "manifest", path);
    if (rc == DDS_OK) {
        int err;
        rc = read_file(path, DDS_MANIFEST_MAX, &text, &len, &err);
        if (rc && err == ENOENT) {
            char g0[PATH_CAP];
            if (path_in(dir, "group0/manifest", g0) == DDS_OK && access(g0, F_OK) == 0)
                rc = dds_err(DDS_ENOENT, "storage directory %s holds one store per group (group0, group1, "
                             "...): reopen one of them, e.g. %s/group0", dir, dir);
            else
                rc = dds_err(DDS_ENOENT, "storage directory %s holds no saved store (no manifest): it was "
                             "never saved, its writer did not finish, or it was written again after its "
                             "last save (dds_save / store.save() in the writing job saves it)", dir);
        }
    }
    if (rc == DDS_OK)
        rc = dds_manifest_parse(&st->manifest, text, len, path);
    free(text);
    /* The manifest must be this directory's own: one written into another
     * volume (or copied from another directory) is stale here. */
    if (rc == DDS_OK) {
        char vol[DDS_STORAGE_ID_HEX + 1];
        int err;
        const char *want = st->manifest.volume_ids[st->manifest.this_volume];
        rc = read_volume(dir, vol, &err);
        if (rc == DDS_OK && strcmp(vol, want) != 0)
            rc = dds_err(DDS_EPROTO, "storage directory %s: its manifest was written for volume %.8s but the "
                         "directory is volume %.8s (copied from another directory?): stale; save the store "
                         "again", dir, want, vol);
    }
    if (rc == DDS_OK)
        memcpy(st->store_id, st->manifest.store_id, sizeof st->store_id);
    rc = dds_agree(s->comm, rc);
    if (rc)
        return rc;

    /* Every rank of the group must see the same saved store. */
    typedef struct {
        char id[DDS_STORAGE_ID_HEX + 1];
        uint32_t common;
        int32_t volume;
    } seen_t;
    seen_t me = { .common = st->manifest.common_crc, .volume = st->manifest.this_volume }, *all;
    memcpy(me.id, st->store_id, sizeof me.id);
    all = calloc((size_t)s->group_size, sizeof *all);
    st->rank_volume = calloc((size_t)s->group_size, sizeof *st->rank_volume);
    int ok = all && st->rank_volume, all_ok = 0;
    int mrc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s->group);
    if (mrc == MPI_SUCCESS && all_ok)
        mrc = MPI_Allgather(&me, sizeof me, MPI_BYTE, all, sizeof me, MPI_BYTE, s->group);
    rc = mrc != MPI_SUCCESS ? dds_err_mpi(mrc, "MPI_Allgather (saved store)")
         : !all_ok          ? dds_err(DDS_ENOMEM, "out of memory opening the store")
                            : DDS_OK;
    for (int g = 0; rc == DDS_OK && g < s->group_size; g++) {
        if (strcmp(all[g].id, all[0].id) != 0 || all[g].common != all[0].common)
            rc = dds_err(DDS_EMISMATCH, "ranks see different saved stores in %s: group rank 0 sees store "
                         "%.8s, group rank %d store %.8s%s (node-local directories of different saves?)",
                         dir, all[0].id, g, all[g].id,
                         strcmp(all[g].id, all[0].id) ? "" : " saved differently");
        else
            st->rank_volume[g] = all[g].volume;
    }
    free(all);
    if (rc == DDS_OK) {
        st->volume = st->rank_volume[s->group_rank];
        st->nvolumes = st->manifest.nvolumes;
        st->plan = calloc(st->manifest.nvars ? (size_t)st->manifest.nvars : 1, sizeof *st->plan);
        if (!st->plan)
            rc = dds_err(DDS_ENOMEM, "out of memory opening the store");
    }
    for (int64_t i = 0; rc == DDS_OK && i < st->manifest.nvars; i++) {
        st->plan[i] = malloc(((size_t)s->group_size + 1) * sizeof **st->plan);
        rc = st->plan[i] ? plan_var(s, &st->manifest.vars[i], st->plan[i])
                         : dds_err(DDS_ENOMEM, "out of memory opening the store");
    }
    return dds_agree(s->comm, rc);
}

int64_t dds_storage_nvars(const dds_store *s)
{
    return s->storage && s->storage->reopened ? s->storage->manifest.nvars : 0;
}

int dds_storage_var(dds_store *s, int64_t i, dds_var *v)
{
    const struct dds_storage *st = s->storage;
    const dds_manifest_var *mv = &st->manifest.vars[i];
    snprintf(v->name, sizeof v->name, "%s", mv->name);
    v->dtype = mv->dtype;
    v->row_bytes = mv->row_bytes;
    v->offsets = malloc(((size_t)s->group_size + 1) * sizeof *v->offsets);
    v->peer_base = calloc((size_t)s->group_size, sizeof *v->peer_base);
    v->file = calloc(1, sizeof *v->file);
    if (!v->offsets || !v->peer_base || !v->file)
        return dds_err(DDS_ENOMEM, "out of memory opening variable '%s'", mv->name);
    memcpy(v->offsets, st->plan[i], ((size_t)s->group_size + 1) * sizeof *v->offsets);
    v->local_rows = v->offsets[s->group_rank + 1] - v->offsets[s->group_rank];
    v->file->index = i;
    v->file->fd = -1;
    return DDS_OK;
}

void dds_storage_close(dds_store *s, bool collective)
{
    struct dds_storage *st = s->storage;
    if (!st)
        return;
    /* A writer's files that no manifest describes can never be reopened:
     * they go with the store. */
    if (collective && !st->reopened && st->nfiles) {
        /* Agreed: a rank that wrote after the save knows, its peers may
         * not; also a barrier (every rank has unmapped the files). */
        int unsaved = !st->saved || atomic_load(&st->changed), any = unsaved;
        if (MPI_Allreduce(&unsaved, &any, 1, MPI_INT, MPI_MAX, s->group) != MPI_SUCCESS)
            any = 0; /* cannot agree: keep the files rather than remove them under a peer */
        if (any && st->volume_leader) {
            drop_manifest(st->dir);
            for (int64_t i = 0; i < st->nfiles; i++) {
                char path[PATH_CAP];
                if (path_of_var(st, i, path) == DDS_OK)
                    unlink(path);
            }
        }
    }
    if (st->lock_fd >= 0)
        close(st->lock_fd); /* releases the flock */
    for (int64_t i = 0; st->plan && i < st->manifest.nvars; i++)
        free(st->plan[i]);
    free(st->plan);
    dds_manifest_free(&st->manifest);
    free(st->volume_ids);
    free(st->rank_volume);
    free(st->dir);
    free(st);
    s->storage = NULL;
}

int dds_storage_check_writable(const dds_store *s, const char *name)
{
    if (s->storage && s->storage->reopened)
        return dds_err(DDS_ESTATE, "variable '%s': the store was reopened from %s and is read-only (write a "
                       "new store to change it)", name, s->storage->dir);
    return DDS_OK;
}

const char *dds_storage_dir(const dds_store *s) { return s->storage ? s->storage->dir : NULL; }

int dds_storage_state(const dds_store *s)
{
    const struct dds_storage *st = s->storage;
    if (!st)
        return 0;
    if (st->reopened)
        return 3;
    if (!st->saved || atomic_load(&st->changed))
        return 1;
    /* A peer's write after the save removed the manifest: then the
     * directory no longer holds what was saved. */
    char path[PATH_CAP];
    return path_in(st->dir, "manifest", path) == DDS_OK && access(path, F_OK) == 0 ? 2 : 1;
}

/* ---- variable files --------------------------------------------------------------------- */

static uint64_t region_bytes(const dds_var *v, int g)
{
    return (uint64_t)((v->offsets[g + 1] - v->offsets[g]) * v->row_bytes);
}

/* Writer, one rank per volume: a fresh file (header, size), after checking
 * that the volume has room for the rows its ranks will write. */
static int create_var_file(dds_store *s, dds_var *v, const char *path, int *fd_out)
{
    struct dds_storage *st = s->storage;
    uint64_t need = 0;
    int first = -1, last = -1;
    for (int g = 0; g < s->group_size; g++)
        if (st->rank_volume[g] == st->volume) {
            need += region_bytes(v, g);
            first = first < 0 ? g : first;
            last = g;
        }
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return dds_err(DDS_EIO, "variable '%s': cannot create %s: %s", v->name, path, strerror(errno));
    *fd_out = fd;
    double avail = free_bytes(st->dir);
    if (avail >= 0 && (double)need > avail)
        return dds_err(DDS_EIO, "variable '%s': storage directory %s has %.0f bytes free, and the shards of "
                       "group ranks %d-%d there need %" PRIu64 " bytes: free some space, or name a larger "
                       "directory (storage_dir / DDSTORE_STORAGE_DIR)",
                       v->name, st->dir, avail, first, last, need);
    unsigned char page[DDS_STORAGE_DATA_OFFSET];
    dds_varfile_header h = { .index = (uint64_t)v->file->index, .row_bytes = (uint64_t)v->row_bytes,
                             .global_rows = (uint64_t)v->offsets[s->group_size] };
    memcpy(h.store_id, st->store_id, sizeof h.store_id);
    dds_varfile_header_put(&h, page);
    int e = write_all(fd, page, sizeof page, 0);
    uint64_t size = DDS_STORAGE_DATA_OFFSET + (uint64_t)v->offsets[s->group_size] * (uint64_t)v->row_bytes;
    if (!e && ftruncate(fd, (off_t)size) != 0)
        e = errno;
    if (e)
        return dds_err(DDS_EIO, "variable '%s': cannot write %s: %s", v->name, path, strerror(e));
    return DDS_OK;
}

/* Reopen: check a variable file against the manifest before mapping it. */
static int check_var_file(const struct dds_storage *st, const dds_var *v, int fd, const char *path)
{
    const dds_manifest_var *mv = &st->manifest.vars[v->file->index];
    unsigned char page[DDS_STORAGE_DATA_OFFSET];
    ssize_t n = pread(fd, page, sizeof page, 0);
    dds_varfile_header h;
    int rc = dds_varfile_header_get(&h, page, n > 0 ? (size_t)n : 0, path);
    if (rc)
        return rc;
    if (strcmp(h.store_id, st->store_id) != 0)
        return dds_err(DDS_EPROTO, "%s belongs to store %.8s, not to store %.8s that its directory's manifest "
                       "describes (foreign file)", path, h.store_id, st->store_id);
    if (h.index != (uint64_t)v->file->index || h.row_bytes != (uint64_t)mv->row_bytes ||
        h.global_rows != (uint64_t)mv->global_rows)
        return dds_err(DDS_EPROTO, "%s holds %" PRIu64 " rows of %" PRIu64 " bytes as variable %" PRIu64
                       "; the manifest says variable '%s' (%" PRId64 ") has %" PRId64 " rows of %" PRId64
                       " bytes (stale or foreign file)", path, h.global_rows, h.row_bytes, h.index, mv->name,
                       v->file->index, mv->global_rows, mv->row_bytes);
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return dds_err(DDS_EIO, "cannot stat %s: %s", path, strerror(errno));
    uint64_t want = DDS_STORAGE_DATA_OFFSET + (uint64_t)mv->global_rows * (uint64_t)mv->row_bytes;
    if ((uint64_t)sb.st_size != mv->file_size || (uint64_t)sb.st_size < want)
        return dds_err(DDS_EPROTO, "%s has %lld bytes, the manifest says %" PRIu64 " (truncated or stale: "
                       "save the store again)", path, (long long)sb.st_size, mv->file_size);
    int64_t mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    if (mtime != mv->mtime_ns)
        return dds_err(DDS_EPROTO, "%s was modified after the store was saved (its time %lld.%09lld s, "
                       "saved %lld.%09lld s): stale; save the store again", path,
                       (long long)(mtime / 1000000000), (long long)(mtime % 1000000000),
                       (long long)(mv->mtime_ns / 1000000000), (long long)(mv->mtime_ns % 1000000000));
    return DDS_OK;
}

/* Whether this rank maps group rank g's rows: its own, and with node
 * sharing its node peers' on the same volume. */
static bool maps_rows_of(const dds_store *s, int g)
{
    const struct dds_storage *st = s->storage;
    return g == s->group_rank ||
           (s->shm_enabled && s->node_rank_of[g] >= 0 && st->rank_volume[g] == st->volume);
}

/* Map the rows maps_rows_of() names, read-only and shared; set v->base and
 * v->peer_base. */
static int map_rows(dds_store *s, dds_var *v, const char *path)
{
    struct dds_shard_file *f = v->file;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int g = 0; g < s->group_size; g++) {
        if (!maps_rows_of(s, g) || region_bytes(v, g) == 0)
            continue;
        uint64_t a = DDS_STORAGE_DATA_OFFSET + (uint64_t)v->offsets[g] * (uint64_t)v->row_bytes;
        lo = a < lo ? a : lo;
        hi = a + region_bytes(v, g) > hi ? a + region_bytes(v, g) : hi;
    }
    if (hi > lo) {
        size_t page = page_size();
        f->map_off = lo / page * page;
        size_t len = (size_t)(hi - f->map_off);
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, f->fd, (off_t)f->map_off);
        if (p == MAP_FAILED)
            return dds_err(DDS_ENOMEM, "variable '%s': cannot map %zu bytes of %s: %s (ulimit -v?)", v->name,
                           len, path, strerror(errno));
        f->map = p;
        f->map_len = len;
        if (f->st->advice != MADV_NORMAL)
            madvise(p, len, f->st->advice);
    }
    if (f->bytes == 0) {
        if (posix_memalign(&f->own, page_size(), page_size()) != 0)
            return dds_err(DDS_ENOMEM, "out of memory mapping variable '%s'", v->name);
        memset(f->own, 0, page_size());
    }
    for (int g = 0; g < s->group_size; g++) {
        if (!maps_rows_of(s, g))
            continue;
        if (region_bytes(v, g) == 0) {
            v->peer_base[g] = f->own ? f->own : f->map; /* never read: no rows */
            continue;
        }
        uint64_t a = DDS_STORAGE_DATA_OFFSET + (uint64_t)v->offsets[g] * (uint64_t)v->row_bytes;
        v->peer_base[g] = f->map + (a - f->map_off);
    }
    v->base = f->bytes ? v->peer_base[s->group_rank] : f->own;
    v->peer_base[s->group_rank] = v->base;
    return DDS_OK;
}

int dds_storage_map(dds_store *s, dds_var *v)
{
    struct dds_storage *st = s->storage;
    int rc = DDS_OK;
    if (!v->file) {
        v->file = calloc(1, sizeof *v->file);
        if (v->file) {
            v->file->fd = -1;
            v->file->index = s->nvars;
        }
    }
    struct dds_shard_file *f = v->file;
    char path[PATH_CAP];
    if (!f) {
        rc = dds_err(DDS_ENOMEM, "out of memory adding variable '%s'", v->name);
    } else {
        f->st = st;
        pthread_mutex_init(&f->flush_lock, NULL);
        pthread_mutex_init(&f->crc_lock, NULL);
        f->data_off = DDS_STORAGE_DATA_OFFSET + (uint64_t)v->offsets[s->group_rank] * (uint64_t)v->row_bytes;
        f->bytes = region_bytes(v, s->group_rank);
        rc = path_of_var(st, f->index, path);
    }
    if (!st->reopened) {
        if (rc == DDS_OK && st->volume_leader)
            rc = create_var_file(s, v, path, &f->fd);
        rc = dds_agree(s->group, rc); /* the file exists before the others open it */
        if (rc)
            return rc;
        if (f->index + 1 > st->nfiles)
            st->nfiles = f->index + 1;
        if (st->saved && atomic_exchange(&st->changed, 1) == 0 && st->volume_leader)
            drop_manifest(st->dir); /* a variable added after a save: that save is no longer current */
        if (f->fd < 0 && (f->fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
            rc = dds_err(DDS_EIO, "variable '%s': cannot open %s: %s", v->name, path, strerror(errno));
        if (rc == DDS_OK && f->bytes && fallocate(f->fd, 0, (off_t)f->data_off, (off_t)f->bytes) != 0) {
            int e = errno;
            if (e == ENOSPC || e == EDQUOT)
                rc = dds_err(DDS_EIO, "variable '%s': storage directory %s ran out of space reserving this "
                             "rank's %" PRIu64 " bytes (%.0f bytes free): free some space, or name a larger "
                             "directory", v->name, st->dir, f->bytes, free_bytes(st->dir));
            else if (e != EOPNOTSUPP && e != ENOSYS && e != EINVAL)
                rc = dds_err(DDS_EIO, "variable '%s': cannot reserve %" PRIu64 " bytes in %s: %s", v->name,
                             f->bytes, path, strerror(e));
        }
    } else if (rc == DDS_OK) {
        f->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (f->fd < 0 && errno == ENOENT)
            rc = dds_err(DDS_EPROTO, "variable '%s': the saved store is incomplete: %s is missing", v->name,
                         path);
        else if (f->fd < 0)
            rc = dds_err(DDS_EIO, "variable '%s': cannot open %s: %s", v->name, path, strerror(errno));
        else
            rc = check_var_file(st, v, f->fd, path);
    }
    if (rc == DDS_OK)
        rc = map_rows(s, v, path);
    return dds_agree(s->group, rc);
}

void dds_storage_unmap(dds_var *v)
{
    struct dds_shard_file *f = v->file;
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    if (f->fd >= 0)
        close(f->fd);
    if (f->st) {
        pthread_mutex_destroy(&f->flush_lock);
        pthread_mutex_destroy(&f->crc_lock);
    }
    free(f->crcs);
    free(f->own);
    free(f);
    v->file = NULL;
    v->base = NULL;
}

/* Extend f's running checksums by `len` bytes written at byte `offset` of
 * the shard, when they continue what was checksummed so far. */
static void keep_crc(struct dds_shard_file *f, uint64_t offset, const void *data, size_t len)
{
    const uint64_t B = DDS_STORAGE_BLOCK_BYTES;
    if (!len)
        return;
    pthread_mutex_lock(&f->crc_lock);
    if (!f->crc_broken && offset != f->crc_at)
        f->crc_broken = true; /* rewritten, or a gap: dds_save reads the rows back */
    if (!f->crc_broken && !f->crcs) {
        f->crcs = malloc(dds_manifest_blocks(f->bytes, B) * sizeof *f->crcs + 1);
        f->crc_broken = !f->crcs;
    }
    const unsigned char *p = data;
    while (!f->crc_broken && len) {
        uint64_t room = B - f->crc_at % B;
        size_t take = len < room ? len : (size_t)room;
        f->crc_run = dds_crc32c(f->crc_run, p, take);
        f->crc_at += take;
        p += take;
        len -= take;
        if (f->crc_at % B == 0 || f->crc_at == f->bytes) {
            f->crcs[(f->crc_at - 1) / B] = f->crc_run;
            f->crc_run = 0;
        }
    }
    pthread_mutex_unlock(&f->crc_lock);
}

int dds_storage_write(dds_var *v, size_t offset, const void *data, size_t len)
{
    struct dds_shard_file *f = v->file;
    struct dds_storage *st = f->st;
    if (st->reopened)
        return dds_err(DDS_ESTATE, "variable '%s': the store was reopened from %s and is read-only", v->name,
                       st->dir);
    if (st->saved && atomic_exchange(&st->changed, 1) == 0)
        drop_manifest(st->dir); /* written after its save: no longer what the manifest says */
    int e = write_all(f->fd, data, len, (off_t)(f->data_off + offset));
    if (e == ENOSPC || e == EDQUOT)
        return dds_err(DDS_EIO, "variable '%s': storage directory %s is full (%s) writing %zu bytes at byte "
                       "%zu of this rank's shard (%.0f bytes free)", v->name, st->dir, strerror(e), len,
                       offset, free_bytes(st->dir));
    if (e)
        return dds_err(DDS_EIO, "variable '%s': writing its file in %s failed: %s", v->name, st->dir,
                       strerror(e));
    keep_crc(f, offset, data, len);
    /* Bounded dirty memory: every flush_bytes written, wait for the
     * previous batch's writeback and start this one's. */
    if (atomic_fetch_add(&f->unflushed, len) + len >= st->flush_bytes) {
        pthread_mutex_lock(&f->flush_lock);
        if (atomic_load(&f->unflushed) >= st->flush_bytes) {
            atomic_store(&f->unflushed, 0);
            sync_file_range(f->fd, (off_t)f->data_off, (off_t)f->bytes,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE);
        }
        pthread_mutex_unlock(&f->flush_lock);
    }
    return DDS_OK;
}

/* ---- save and verify ----------------------------------------------------------------------- */

/* CRC-32C of each `block`-byte block of `bytes` bytes at file offset
 * `off` (pread through buf, CRC_READ_BYTES long). */
static int crc_blocks(int fd, uint64_t off, uint64_t bytes, uint64_t block, uint32_t *out, char *buf,
                      const char *name)
{
    for (uint64_t b = 0, pos = 0; pos < bytes; b++) {
        uint64_t end = bytes - pos > block ? pos + block : bytes;
        uint32_t crc = 0;
        while (pos < end) {
            size_t want = end - pos < CRC_READ_BYTES ? (size_t)(end - pos) : CRC_READ_BYTES;
            ssize_t n = pread(fd, buf, want, (off_t)(off + pos));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return dds_err(DDS_EIO, "variable '%s': cannot read its file back at byte %" PRIu64 ": %s",
                               name, off + pos, n == 0 ? "end of file" : strerror(errno));
            crc = dds_crc32c(crc, buf, (size_t)n);
            pos += (uint64_t)n;
        }
        out[b] = crc;
    }
    return DDS_OK;
}

/* One rank per volume: sync the files, write the checksums, then the
 * manifest (each atomically; the old manifest goes first). */
static int write_manifest(dds_store *s, const uint32_t *crcs, uint64_t ncrcs)
{
    struct dds_storage *st = s->storage;
    dds_manifest m = { 0 };
    memcpy(m.store_id, st->store_id, sizeof m.store_id);
    m.group_index = s->group_index;
    m.n_groups = s->size / s->width;
    m.nranks = s->group_size;
    m.nvolumes = st->nvolumes;
    m.volume_ids = st->volume_ids;
    m.rank_volume = st->rank_volume;
    m.block_bytes = DDS_STORAGE_BLOCK_BYTES;
    m.nvars = s->nvars;
    m.this_volume = st->volume;
    m.vars = calloc(s->nvars ? (size_t)s->nvars : 1, sizeof *m.vars);
    if (!m.vars)
        return dds_err(DDS_ENOMEM, "out of memory saving the store");
    drop_manifest(st->dir);
    int rc = DDS_OK;
    for (int64_t i = 0; rc == DDS_OK && i < s->nvars; i++) {
        const dds_var *v = s->vars[i];
        dds_manifest_var *mv = &m.vars[i];
        snprintf(mv->name, sizeof mv->name, "%s", v->name);
        mv->dtype = v->dtype;
        mv->row_bytes = v->row_bytes;
        mv->global_rows = v->offsets[s->group_size];
        mv->offsets = v->offsets;
        struct stat sb;
        if (fdatasync(v->file->fd) != 0 || fstat(v->file->fd, &sb) != 0)
            rc = dds_err(DDS_EIO, "variable '%s': cannot sync its file in %s: %s", v->name, st->dir,
                         strerror(errno));
        else {
            mv->file_size = (uint64_t)sb.st_size;
            mv->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        }
    }
    unsigned char *cks = NULL;
    size_t cks_len = 0;
    if (rc == DDS_OK)
        rc = dds_checksums_format(st->store_id, m.block_bytes, crcs, ncrcs, &cks, &cks_len);
    if (rc == DDS_OK)
        rc = write_atomic(st->dir, "checksums", cks, cks_len);
    if (rc == DDS_OK) {
        m.checksums_size = cks_len;
        m.checksums_crc = dds_crc32c(0, cks, cks_len);
    }
    free(cks);
    char *text = NULL;
    size_t len = 0;
    if (rc == DDS_OK)
        rc = dds_manifest_format(&m, &text, &len);
    if (rc == DDS_OK)
        rc = write_atomic(st->dir, "manifest", text, len);
    free(text);
    free(m.vars);
    return rc;
}

/* The gathered checksums, in rank order (each rank's variables, then
 * blocks), in the checksums file's order: variable, then rank, then block.
 * A malloc'd copy, or NULL. */
static uint32_t *by_variable(const dds_store *s, const uint32_t *crcs, const int *displs, uint64_t total)
{
    uint32_t *out = malloc((total ? total : 1) * sizeof *out);
    if (!out)
        return NULL;
    uint64_t at = 0;
    for (int64_t i = 0; i < s->nvars; i++)
        for (int g = 0; g < s->group_size; g++) {
            uint64_t skip = 0; /* blocks of rank g's variables before i */
            for (int64_t j = 0; j < i; j++)
                skip += dds_manifest_blocks(region_bytes(s->vars[j], g), DDS_STORAGE_BLOCK_BYTES);
            uint64_t n = dds_manifest_blocks(region_bytes(s->vars[i], g), DDS_STORAGE_BLOCK_BYTES);
            memcpy(out + at, crcs + displs[g] + skip, n * sizeof *out);
            at += n;
        }
    return out;
}

/* dds_save and dds_verify_saved begin alike: the group's SAVE step (which
 * fails at once on a group whose collectives are out of step), then this
 * rank's verdict rc agreed by every rank. */
static int save_step(dds_store *s, int rc)
{
    int src = dds_step(s, DDS_COLL_SAVE, rc, NULL);
    return src ? src : dds_agree(s->comm, rc);
}

DDS_API int dds_save(dds_store *s)
{
    int rc = dds_core_begin(s, "cannot save");
    if (rc)
        return rc;
    struct dds_storage *st = s->storage;
    if (!st)
        rc = dds_err(DDS_ENOTSUP, "the store keeps its shards in memory: only a store created with a storage "
                     "directory (storage_dir / DDSTORE_STORAGE_DIR) can be saved");
    else if (st->reopened)
        rc = dds_err(DDS_ESTATE, "the store was reopened from %s, where it is saved already", st->dir);
    rc = save_step(s, rc);
    if (rc)
        return rc;

    /* Every rank: its rows on disk, and their checksums, gathered by all. */
    const uint64_t B = DDS_STORAGE_BLOCK_BYTES;
    int n = s->group_size;
    int *counts = calloc((size_t)n, sizeof *counts), *displs = calloc((size_t)n, sizeof *displs);
    uint64_t total = 0;
    for (int g = 0; counts && displs && g < n; g++) {
        uint64_t c = 0;
        for (int64_t i = 0; i < s->nvars; i++)
            c += dds_manifest_blocks(region_bytes(s->vars[i], g), B);
        if (c > INT32_MAX || total > (uint64_t)INT32_MAX - c)
            rc = dds_err(DDS_EOVERFLOW, "too many checksum blocks to save");
        counts[g] = (int)c;
        displs[g] = (int)total;
        total += c;
    }
    uint32_t *crcs = malloc((total ? total : 1) * sizeof *crcs);
    char *buf = malloc(CRC_READ_BYTES);
    if (rc == DDS_OK && (!counts || !displs || !crcs || !buf))
        rc = dds_err(DDS_ENOMEM, "out of memory saving the store");
    uint32_t *mine = rc == DDS_OK ? crcs + displs[s->group_rank] : NULL;
    for (int64_t i = 0; rc == DDS_OK && i < s->nvars; i++) {
        dds_var *v = s->vars[i];
        struct dds_shard_file *f = v->file;
        if (!f) {
            rc = dds_err(DDS_ESTATE, "variable '%s' is not file-backed", v->name);
            break;
        }
        if (f->bytes && sync_file_range(f->fd, (off_t)f->data_off, (off_t)f->bytes,
                                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                            SYNC_FILE_RANGE_WAIT_AFTER) != 0)
            rc = dds_err(DDS_EIO, "variable '%s': writing its rows to %s failed: %s", v->name, st->dir,
                         strerror(errno));
        uint64_t nb = dds_manifest_blocks(f->bytes, B);
        pthread_mutex_lock(&f->crc_lock);
        bool kept = !f->crc_broken && f->crcs && f->crc_at == f->bytes;
        if (kept && rc == DDS_OK)
            memcpy(mine, f->crcs, nb * sizeof *mine); /* written in order: checksummed as written */
        pthread_mutex_unlock(&f->crc_lock);
        if (rc == DDS_OK && !kept)
            rc = crc_blocks(f->fd, f->data_off, f->bytes, B, mine, buf, v->name);
        mine += nb;
    }
    free(buf);
    rc = dds_agree(s->comm, rc); /* also: every rank's rows are written before the files are synced */
    if (rc == DDS_OK) {
        int mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, crcs, counts, displs, MPI_UINT32_T,
                                 s->group);
        if (mrc != MPI_SUCCESS)
            rc = dds_err_mpi(mrc, "MPI_Allgatherv (checksums)");
        uint32_t *ordered = NULL;
        if (rc == DDS_OK && st->volume_leader) {
            ordered = by_variable(s, crcs, displs, total);
            rc = ordered ? write_manifest(s, ordered, total)
                         : dds_err(DDS_ENOMEM, "out of memory saving the store");
        }
        free(ordered);
    }
    free(counts);
    free(displs);
    free(crcs);
    rc = dds_agree(s->comm, rc);
    if (rc == DDS_OK) {
        st->saved = true;
        atomic_store(&st->changed, 0);
    }
    return rc;
}

DDS_API int dds_verify_saved(dds_store *s, int64_t *bad_blocks)
{
    int rc = dds_core_begin(s, "cannot verify");
    if (rc)
        return rc;
    if (bad_blocks)
        *bad_blocks = 0;
    struct dds_storage *st = s->storage;
    if (!st || !st->reopened)
        rc = dds_err(DDS_ESTATE, "dds_verify_saved checks a store reopened with dds_open() against the "
                     "checksums saved with it; this store was %s", st ? "not reopened" : "made in memory");
    rc = save_step(s, rc);
    if (rc)
        return rc;
    const dds_manifest *m = &st->manifest;
    char path[PATH_CAP], *text = NULL;
    size_t len = 0;
    uint32_t *want = NULL;
    int err;
    rc = path_in(st->dir, "checksums", path);
    if (rc == DDS_OK)
        rc = read_file(path, (size_t)m->checksums_size + 64, &text, &len, &err);
    if (rc == DDS_OK)
        rc = dds_checksums_parse((const unsigned char *)text, len, m, &want, path);
    free(text);
    char *buf = rc == DDS_OK ? malloc(CRC_READ_BYTES) : NULL;
    if (rc == DDS_OK && !buf)
        rc = dds_err(DDS_ENOMEM, "out of memory verifying the store");
    int64_t bad = 0;
    char first[768] = "";
    /* Each block is checked by the rank that now holds its first row, in
     * its own view of the file (whose volume holds the block's rows). */
    uint64_t at = 0;
    for (int64_t i = 0; rc == DDS_OK && i < m->nvars; i++) {
        const dds_manifest_var *mv = &m->vars[i];
        const dds_var *v = i < s->nvars ? s->vars[i] : NULL;
        uint64_t rb = (uint64_t)mv->row_bytes;
        for (int r = 0; rc == DDS_OK && r < m->nranks; r++) {
            uint64_t bytes = (uint64_t)(mv->offsets[r + 1] - mv->offsets[r]) * rb;
            for (uint64_t b = 0, pos = 0; rc == DDS_OK && pos < bytes; b++, pos += m->block_bytes, at++) {
                int64_t row = mv->offsets[r] + (int64_t)(pos / rb);
                if (!v || !v->file || dds_owner_of(v, s->group_size, row) != s->group_rank)
                    continue;
                uint64_t n = bytes - pos < m->block_bytes ? bytes - pos : m->block_bytes;
                uint32_t got;
                rc = crc_blocks(v->file->fd, DDS_STORAGE_DATA_OFFSET + (uint64_t)mv->offsets[r] * rb + pos, n, n,
                                &got, buf, mv->name);
                if (rc == DDS_OK && got != want[at] && bad++ == 0)
                    snprintf(first, sizeof first,
                             "variable '%s': rows [%lld, %lld) (block %llu of saved shard %d) in %s/v%lld.dds "
                             "do not match their saved checksum (crc %08x, saved %08x): the file was changed "
                             "or corrupted after the store was saved",
                             mv->name, (long long)row, (long long)(row + (int64_t)((n + rb - 1) / rb)),
                             (unsigned long long)b, r, st->dir, (long long)i, got, want[at]);
            }
        }
    }
    free(buf);
    free(want);
    if (rc == DDS_OK && bad)
        rc = dds_err(DDS_EPROTO, "%s (%lld bad block%s checked on this rank)", first, (long long)bad,
                     bad > 1 ? "s" : "");
    int64_t sum = 0;
    int mrc = MPI_Allreduce(&bad, &sum, 1, MPI_INT64_T, MPI_SUM, s->comm);
    if (mrc != MPI_SUCCESS && rc == DDS_OK)
        rc = dds_err_mpi(mrc, "MPI_Allreduce (bad blocks)");
    if (bad_blocks)
        *bad_blocks = sum;
    return dds_agree(s->comm, rc);
}
