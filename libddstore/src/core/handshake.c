/* Method-2 handshake files: format (see handshake.h) and safe file access.
 *
 * The parser trusts nothing: files live in a directory other jobs read, may
 * be truncated by a crash of a foreign writer, or be crafted. Every length
 * is checked against the bytes that remain before anything is copied or
 * allocated, so the parser can be fuzzed on its own. */
#include "handshake.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- encoding --------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} wbuf;

static void w_bytes(wbuf *w, const void *src, size_t n)
{
    if (w->oom)
        return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n)
            cap *= 2;
        uint8_t *q = realloc(w->p, cap);
        if (!q) {
            w->oom = 1;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void w_u16(wbuf *w, uint16_t v)
{
    uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    w_bytes(w, b, 2);
}

static void w_u32(wbuf *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, 4);
}

static void w_u64(wbuf *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    w_bytes(w, b, 8);
}

static void w_str(wbuf *w, const char *s)
{
    size_t n = strlen(s);
    w_u16(w, (uint16_t)n);
    w_bytes(w, s, n);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void w_header(wbuf *w, uint32_t kind, const uint8_t *run_id)
{
    w_u32(w, DDS_HS_MAGIC);
    w_u16(w, (uint16_t)DDS_HS_VERSION);
    w_u16(w, (uint16_t)kind);
    w_u64(w, 0); /* total length, patched by w_finish */
    w_bytes(w, run_id, DDS_HS_RUN_ID_BYTES);
    w_u64(w, 0); /* checksum, patched by w_finish */
}

static int w_finish(wbuf *w, uint8_t **out, size_t *len)
{
    if (w->oom) {
        free(w->p);
        return dds_err(DDS_ENOMEM, "out of memory encoding a handshake file");
    }
    put_u64(w->p + 8, (uint64_t)w->n);
    put_u64(w->p + 32, dds_hs_checksum(w->p, w->n));
    *out = w->p;
    *len = w->n;
    return DDS_OK;
}

int dds_hs_encode_store(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], const dds_hs_store *st,
                        uint8_t **out, size_t *len)
{
    if (strlen(st->prov) > DDS_HS_MAX_PROV || strlen(st->host) > DDS_HS_MAX_HOST ||
        st->n_core == 0 || st->n_core > DDS_HS_MAX_CORE)
        return dds_err(DDS_EINVAL, "handshake: store publication out of limits");
    wbuf w = { 0 };
    w_header(&w, DDS_HS_KIND_STORE, run_id);
    w_u32(&w, st->n_core);
    w_u32(&w, st->group_index);
    w_u32(&w, st->addr_format);
    w_u32(&w, st->pid);
    w_u64(&w, st->mr_mode);
    w_u64(&w, st->start_time);
    w_str(&w, st->prov);
    w_str(&w, st->host);
    for (uint32_t i = 0; i < st->n_core; i++) {
        if (st->addr_len[i] == 0 || st->addr_len[i] > DDS_HS_MAX_ADDR) {
            free(w.p);
            return dds_err(DDS_EINVAL, "handshake: endpoint address of rank %u has %u bytes", i,
                           (unsigned)st->addr_len[i]);
        }
        w_u16(&w, st->addr_len[i]);
        w_bytes(&w, st->addr[i], st->addr_len[i]);
    }
    return w_finish(&w, out, len);
}

int dds_hs_encode_var(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], const dds_hs_var *var, uint8_t **out,
                      size_t *len)
{
    size_t nlen = strlen(var->name);
    if (nlen == 0 || nlen > DDS_NAME_MAX || var->n_core == 0 || var->n_core > DDS_HS_MAX_CORE)
        return dds_err(DDS_EINVAL, "handshake: variable publication out of limits");
    wbuf w = { 0 };
    w_header(&w, DDS_HS_KIND_VAR, run_id);
    w_u32(&w, var->index);
    w_u32(&w, var->dtype);
    w_u64(&w, (uint64_t)var->row_bytes);
    w_u32(&w, var->n_core);
    w_u32(&w, 0);
    w_str(&w, var->name);
    for (uint32_t i = 0; i < var->n_core; i++) {
        w_u64(&w, (uint64_t)var->shards[i].rows);
        w_u64(&w, var->shards[i].addr);
        w_u64(&w, var->shards[i].key);
        w_u64(&w, var->shards[i].len);
    }
    return w_finish(&w, out, len);
}

/* ---- parsing ------------------------------------------------------------------ */

typedef struct rbuf {
    const uint8_t *p;
    size_t n, off;
    const char *field; /* what failed, for the message */
} rbuf;

static int r_need(rbuf *r, size_t n, const char *field)
{
    if (n > r->n - r->off) {
        r->field = field;
        return 0;
    }
    return 1;
}

/* An unsigned little-endian integer of `n` bytes (2, 4 or 8) into *v, a
 * uint16_t, uint32_t or uint64_t to match; *v is left alone when the
 * buffer is too short. */
static int r_uint(rbuf *r, void *v, size_t n, const char *field)
{
    if (!r_need(r, n, field))
        return 0;
    uint64_t x = 0;
    for (size_t i = n; i-- > 0;)
        x = (x << 8) | r->p[r->off + i];
    if (n == 2)
        *(uint16_t *)v = (uint16_t)x;
    else if (n == 4)
        *(uint32_t *)v = (uint32_t)x;
    else
        *(uint64_t *)v = x;
    r->off += n;
    return 1;
}

static int r_u16(rbuf *r, uint16_t *v, const char *field) { return r_uint(r, v, 2, field); }
static int r_u32(rbuf *r, uint32_t *v, const char *field) { return r_uint(r, v, 4, field); }
static int r_u64(rbuf *r, uint64_t *v, const char *field) { return r_uint(r, v, 8, field); }

/* A string of at most `max` bytes, printable ASCII only when `ascii`, no NUL. */
static int r_str(rbuf *r, char *dst, size_t max, int ascii, const char *field)
{
    uint16_t n;
    if (!r_u16(r, &n, field) || !r_need(r, n, field))
        return 0;
    if (n > max) {
        r->field = field;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = r->p[r->off + i];
        if (c == 0 || (ascii && (c < 0x20 || c > 0x7e))) {
            r->field = field;
            return 0;
        }
    }
    memcpy(dst, r->p + r->off, n);
    dst[n] = '\0';
    r->off += n;
    return 1;
}

static int proto(const char *what, size_t off)
{
    return dds_err(DDS_EPROTO, "handshake file: %s (at byte %zu)", what, off);
}

static int parse_store(rbuf *r, dds_hs_store *st)
{
    if (!r_u32(r, &st->n_core, "core rank count") || !r_u32(r, &st->group_index, "group index") ||
        !r_u32(r, &st->addr_format, "address format") || !r_u32(r, &st->pid, "process id") ||
        !r_u64(r, &st->mr_mode, "mr_mode") || !r_u64(r, &st->start_time, "start time") ||
        !r_str(r, st->prov, DDS_HS_MAX_PROV, 1, "provider name") ||
        !r_str(r, st->host, DDS_HS_MAX_HOST, 1, "host name"))
        return proto(r->field ? r->field : "bad field", r->off);
    if (st->n_core == 0 || st->n_core > DDS_HS_MAX_CORE)
        return proto("core rank count out of range", r->off);
    if (st->prov[0] == '\0')
        return proto("empty provider name", r->off);
    /* Each address takes at least 3 bytes: bound the count by what is left
     * before allocating anything. */
    if ((size_t)st->n_core > (r->n - r->off) / 3)
        return proto("core rank count exceeds the file's size", r->off);
    size_t payload = r->n - r->off;
    st->addr_len = calloc(st->n_core, sizeof *st->addr_len);
    st->addr = calloc(st->n_core, sizeof *st->addr);
    st->addr_buf = malloc(payload ? payload : 1);
    if (!st->addr_len || !st->addr || !st->addr_buf)
        return dds_err(DDS_ENOMEM, "out of memory parsing a handshake file");
    size_t used = 0;
    for (uint32_t i = 0; i < st->n_core; i++) {
        uint16_t n;
        if (!r_u16(r, &n, "endpoint address length"))
            return proto("truncated endpoint address list", r->off);
        if (n == 0 || n > DDS_HS_MAX_ADDR)
            return proto("endpoint address length out of range", r->off);
        if (!r_need(r, n, "endpoint address"))
            return proto("truncated endpoint address", r->off);
        memcpy(st->addr_buf + used, r->p + r->off, n);
        st->addr[i] = st->addr_buf + used;
        st->addr_len[i] = n;
        used += n;
        r->off += n;
    }
    return DDS_OK;
}

static int parse_var(rbuf *r, dds_hs_var *v)
{
    uint64_t row_bytes;
    uint32_t zero;
    if (!r_u32(r, &v->index, "variable index") || !r_u32(r, &v->dtype, "dtype") ||
        !r_u64(r, &row_bytes, "bytes per row") || !r_u32(r, &v->n_core, "core rank count") ||
        !r_u32(r, &zero, "reserved field") ||
        !r_str(r, v->name, DDS_NAME_MAX, 0, "variable name"))
        return proto(r->field ? r->field : "bad field", r->off);
    if (zero != 0)
        return proto("reserved field is not zero", r->off);
    if (v->name[0] == '\0')
        return proto("empty variable name", r->off);
    if (row_bytes < 1 || row_bytes > (uint64_t)INT64_MAX)
        return proto("bytes per row out of range", r->off);
    v->row_bytes = (int64_t)row_bytes;
    if (v->n_core == 0 || v->n_core > DDS_HS_MAX_CORE)
        return proto("core rank count out of range", r->off);
    if ((size_t)v->n_core > (r->n - r->off) / 32)
        return proto("core rank count exceeds the file's size", r->off);
    v->shards = calloc(v->n_core, sizeof *v->shards);
    if (!v->shards)
        return dds_err(DDS_ENOMEM, "out of memory parsing a handshake file");
    int64_t total = 0;
    for (uint32_t i = 0; i < v->n_core; i++) {
        dds_hs_shard *sh = &v->shards[i];
        uint64_t rows;
        if (!r_u64(r, &rows, "rows") || !r_u64(r, &sh->addr, "base address") ||
            !r_u64(r, &sh->key, "memory key") || !r_u64(r, &sh->len, "registered length"))
            return proto("truncated shard list", r->off);
        if (rows > (uint64_t)INT64_MAX)
            return proto("negative row count", r->off);
        sh->rows = (int64_t)rows;
        if (sh->rows > 0 && v->row_bytes > INT64_MAX / sh->rows)
            return proto("rows x bytes per row overflows", r->off);
        if ((uint64_t)(sh->rows * v->row_bytes) > sh->len || sh->len == 0)
            return proto("shard larger than its registered memory", r->off);
        if (sh->addr > UINT64_MAX - sh->len)
            return proto("shard address range wraps around", r->off);
        if (sh->rows > INT64_MAX - total)
            return proto("total row count overflows", r->off);
        total += sh->rows;
    }
    if (total > 0 && v->row_bytes > INT64_MAX / total)
        return proto("total bytes overflow", r->off);
    return DDS_OK;
}

int dds_hs_parse(const void *bytes, size_t len, dds_hs_file *out)
{
    if (!out)
        return dds_err(DDS_EINVAL, "handshake: out is NULL");
    memset(out, 0, sizeof *out);
    if (!bytes && len)
        return dds_err(DDS_EINVAL, "handshake: bytes is NULL");
    const uint8_t *p = bytes;
    if (len < DDS_HS_HEADER_BYTES)
        return proto("shorter than its header", len);
    if (len > DDS_HS_MAX_FILE)
        return proto("larger than the 64 MiB limit", 0);
    rbuf r = { .p = p, .n = len };
    uint32_t magic;
    uint16_t version, kind;
    uint64_t total, sum;
    r_u32(&r, &magic, "magic");
    r_u16(&r, &version, "version");
    r_u16(&r, &kind, "kind");
    r_u64(&r, &total, "length");
    if (magic != DDS_HS_MAGIC)
        return proto("not a ddstore handshake file (bad magic)", 0);
    if (version != DDS_HS_VERSION)
        return dds_err(DDS_EPROTO, "handshake file: format version %u, this library reads %u",
                       (unsigned)version, DDS_HS_VERSION);
    if (total != len)
        return dds_err(DDS_EPROTO, "handshake file: says %llu bytes but has %zu (truncated or extended)",
                       (unsigned long long)total, len);
    memcpy(out->run_id, p + 16, DDS_HS_RUN_ID_BYTES);
    r.off = 32;
    r_u64(&r, &sum, "checksum");
    if (sum != dds_hs_checksum(p, len))
        return proto("checksum mismatch", 32);
    int rc;
    if (kind == DDS_HS_KIND_STORE)
        rc = parse_store(&r, &out->store);
    else if (kind == DDS_HS_KIND_VAR)
        rc = parse_var(&r, &out->var);
    else
        rc = proto("unknown kind", 6);
    if (rc == DDS_OK && r.off != len)
        rc = proto("trailing bytes after the last field", r.off);
    if (rc) {
        dds_hs_file_clear(out);
        return rc;
    }
    out->kind = kind;
    return DDS_OK;
}

void dds_hs_file_clear(dds_hs_file *f)
{
    if (!f)
        return;
    free(f->store.addr_len);
    free(f->store.addr);
    free(f->store.addr_buf);
    free(f->var.shards);
    memset(f, 0, sizeof *f);
}

/* ---- file system -------------------------------------------------------------- */

static int check_dir_stat(const struct stat *st, const char *path)
{
    if (!S_ISDIR(st->st_mode))
        return dds_err(DDS_EIO, "handshake directory '%s' is not a directory", path);
    if (st->st_uid != geteuid())
        return dds_err(DDS_EIO, "handshake directory '%s' belongs to uid %u, not to this user (%u)",
                       path, (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return dds_err(DDS_EIO,
                       "handshake directory '%s' is writable by group or others (mode %03o): "
                       "refusing it (chmod 700 it or choose another directory)",
                       path, (unsigned)(st->st_mode & 0777));
    return DDS_OK;
}

/* mkdir -p with mode 0700 for the parts that do not exist. */
static int make_dirs(const char *path, int *created)
{
    char *tmp = strdup(path);
    if (!tmp)
        return dds_err(DDS_ENOMEM, "out of memory");
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    for (char *q = tmp + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            int rc = dds_err(DDS_EIO, "cannot create directory '%s': %s", tmp, strerror(e));
            free(tmp);
            return rc;
        }
        *q = '/';
    }
    *created = 0;
    if (mkdir(tmp, 0700) == 0)
        *created = 1;
    else if (errno != EEXIST) {
        int e = errno;
        int rc = dds_err(DDS_EIO, "cannot create handshake directory '%s': %s", tmp, strerror(e));
        free(tmp);
        return rc;
    }
    free(tmp);
    return DDS_OK;
}

int dds_hs_open_dir(const char *path, int create, int *dirfd, int *created)
{
    *dirfd = -1;
    if (created)
        *created = 0;
    if (!path || !*path)
        return dds_err(DDS_EINVAL, "handshake directory path is empty");
    int made = 0;
    if (create) {
        int rc = make_dirs(path, &made);
        if (rc)
            return rc;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return DDS_ENOENT;
        return dds_err(DDS_EIO, "cannot stat handshake directory '%s': %s", path, strerror(errno));
    }
    if (S_ISLNK(st.st_mode))
        return dds_err(DDS_EIO, "handshake directory '%s' is a symbolic link: refusing it", path);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return DDS_ENOENT;
        return dds_err(DDS_EIO, "cannot open handshake directory '%s': %s", path, strerror(errno));
    }
    /* Check what was opened, not what the path names now. */
    int rc = fstat(fd, &st) == 0 ? check_dir_stat(&st, path)
                                 : dds_err(DDS_EIO, "cannot stat '%s': %s", path, strerror(errno));
    if (rc) {
        close(fd);
        return rc;
    }
    *dirfd = fd;
    if (created)
        *created = made;
    return DDS_OK;
}

int dds_hs_read_file(int dirfd, const char *dir, const char *name, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return DDS_ENOENT;
        if (errno == ELOOP)
            return dds_err(DDS_EIO, "'%s/%s' is a symbolic link: refusing it", dir, name);
        return dds_err(DDS_EIO, "cannot open '%s/%s': %s", dir, name, strerror(errno));
    }
    struct stat st;
    int rc = DDS_OK;
    if (fstat(fd, &st) != 0)
        rc = dds_err(DDS_EIO, "cannot stat '%s/%s': %s", dir, name, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = dds_err(DDS_EIO, "'%s/%s' is not a regular file: refusing it", dir, name);
    else if (st.st_uid != geteuid())
        rc = dds_err(DDS_EIO, "'%s/%s' belongs to another user: refusing it", dir, name);
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        rc = dds_err(DDS_EIO, "'%s/%s' is writable by group or others: refusing it", dir, name);
    else if ((uint64_t)st.st_size > DDS_HS_MAX_FILE)
        rc = dds_err(DDS_EPROTO, "'%s/%s' has %lld bytes, over the %zu-byte limit: refusing it", dir,
                     name, (long long)st.st_size, DDS_HS_MAX_FILE);
    if (rc) {
        close(fd);
        return rc;
    }
    /* Read at most the limit plus one byte: a file that grows after fstat is
     * still bounded, and the parser sees a length mismatch. */
    size_t cap = (size_t)st.st_size + 1;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return dds_err(DDS_ENOMEM, "out of memory reading '%s/%s'", dir, name);
    }
    size_t n = 0;
    while (n < cap) {
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = dds_err(DDS_EIO, "cannot read '%s/%s': %s", dir, name, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return DDS_OK;
}

int dds_hs_write_file(int dirfd, const char *dir, const char *name, const void *data, size_t len)
{
    char tmp[96];
    uint8_t rnd[6];
    dds_hs_random(rnd, sizeof rnd);
    snprintf(tmp, sizeof tmp, ".tmp-%d-%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5]);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return dds_err(DDS_EIO, "cannot create '%s/%s': %s", dir, tmp, strerror(errno));
    int rc = DDS_OK;
    if (fchmod(fd, 0600) != 0)
        rc = dds_err(DDS_EIO, "cannot chmod '%s/%s': %s", dir, tmp, strerror(errno));
    const uint8_t *p = data;
    size_t off = 0;
    while (rc == DDS_OK && off < len) {
        ssize_t k = write(fd, p + off, len - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = dds_err(DDS_EIO, "cannot write '%s/%s': %s", dir, tmp, strerror(errno));
        else
            off += (size_t)k;
    }
    if (close(fd) != 0 && rc == DDS_OK)
        rc = dds_err(DDS_EIO, "cannot write '%s/%s': %s", dir, tmp, strerror(errno));
    if (rc == DDS_OK && renameat(dirfd, tmp, dirfd, name) != 0)
        rc = dds_err(DDS_EIO, "cannot rename '%s/%s' to '%s': %s", dir, tmp, name, strerror(errno));
    if (rc)
        unlinkat(dirfd, tmp, 0);
    return rc;
}

void dds_hs_live_name(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], char name[64])
{
    static const char hex[] = "0123456789abcdef";
    char *q = name;
    q += sprintf(q, "run-");
    for (unsigned i = 0; i < DDS_HS_RUN_ID_BYTES; i++) {
        *q++ = hex[run_id[i] >> 4];
        *q++ = hex[run_id[i] & 15];
    }
    strcpy(q, ".live");
}

#ifdef F_OFD_SETLK
#define LOCK_SET F_OFD_SETLK
#define LOCK_GET F_OFD_GETLK
#else
/* Process-associated locks: weaker (closing any descriptor of the file in
 * the owning process drops them), used only where OFD locks do not exist. */
#define LOCK_SET F_SETLK
#define LOCK_GET F_GETLK
#endif

int dds_hs_is_locked(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    int r = fcntl(fd, LOCK_GET, &fl);
    close(fd);
    if (r != 0)
        return -1;
    return fl.l_type != F_UNLCK;
}

int dds_hs_lock(int dirfd, const char *dir, const char *name, int *fdp)
{
    *fdp = -1;
    int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return dds_err(DDS_EIO, "cannot create '%s/%s': %s", dir, name, strerror(errno));
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fcntl(fd, LOCK_SET, &fl) != 0) {
        int e = errno;
        if (e == EAGAIN || e == EACCES) {
            close(fd);
            return dds_err(DDS_EEXIST,
                           "handshake directory '%s' is in use by another live store "
                           "(choose another handshake_dir, or free that store first)",
                           dir);
        }
        /* No lock support on this file system: the publication cannot be
         * told live from stale by locks; readers fall back to the process
         * id and start time recorded in store.dds. */
        dds_debug("handshake: no file locks in '%s' (%s); liveness falls back to pid checks", dir,
                  strerror(e));
    }
    *fdp = fd;
    return DDS_OK;
}

void dds_hs_remove_all(int dirfd, const char *keep)
{
    int fd = dup(dirfd);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    /* The duplicate shares the directory offset with dirfd: start over. */
    rewinddir(d);
    /* Collect first: unlinking while iterating may skip entries. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t l = strlen(nm);
        int ours = strcmp(nm, DDS_HS_STORE_FILE) == 0 || strncmp(nm, ".tmp-", 5) == 0 ||
                   (strncmp(nm, "var-", 4) == 0 && l > 8 && strcmp(nm + l - 4, ".dds") == 0) ||
                   (strncmp(nm, "run-", 4) == 0 && l > 9 && strcmp(nm + l - 5, ".live") == 0);
        if (!ours || (keep && strcmp(nm, keep) == 0))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **q = realloc(names, nc * sizeof *q);
            if (!q)
                break;
            names = q;
            cap = nc;
        }
        names[n] = strdup(nm);
        if (names[n])
            n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        unlinkat(dirfd, names[i], 0);
        free(names[i]);
    }
    free(names);
}

int dds_hs_random(uint8_t *id, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = getrandom(id + got, n - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            break;
        got += (size_t)k;
    }
    if (got == n)
        return DDS_OK;
    /* No entropy source: fall back to time and pid, still unique per run. */
    uint64_t t = dds_now_ns() ^ ((uint64_t)getpid() << 32);
    for (size_t i = got; i < n; i++) {
        t = t * 6364136223846793005ull + 1442695040888963407ull;
        id[i] = (uint8_t)(t >> 56);
    }
    return DDS_OK;
}

uint64_t dds_hs_proc_start(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* Field 22 (starttime); the command name (field 2) may hold spaces and
     * parentheses, so count from the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p + 1, ' ');
    }
    if (!p)
        return 0;
    return strtoull(p + 1, NULL, 10);
}
