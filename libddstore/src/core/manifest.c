/* The on-disk format of file-backed stores (storage.h): CRC-32C, the
 * manifest (text, one keyword per line, ending with a checksum line), the
 * checksums file and variable file headers. Pure functions: no MPI, no
 * store, no file system. Every field read back is checked (counts, ranges,
 * monotone offsets, sizes that fit) before anything uses it, so a
 * truncated, corrupt or foreign file gives DDS_EPROTO, never a wrong
 * layout.
 *
 * Manifest, format 1:
 *   ddstore-storage 1
 *   store <32 hex>
 *   group <index> <n_groups>
 *   ranks <n>
 *   volumes <k> <32 hex> ...
 *   rank-volume <v_0> ... <v_n-1>
 *   block-bytes <b>
 *   vars <m>
 *   var <i> <dtype> <row_bytes> <global_rows> <name, hex>     } m times
 *   offsets <i> <o_0> ... <o_n>                               }
 *   checksums <bytes> <crc hex>
 *   this-volume <v>                   (from here on: this directory's own)
 *   file <i> <bytes> <mtime_ns>       m times
 *   end <crc hex of every byte before this line>
 * Lines before "this-volume" are the same in every volume's copy; their
 * CRC is common_crc. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

/* ---- CRC-32C --------------------------------------------------------------- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian: the low 4 bytes meet the CRC */
        c = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
            crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^
            crc_table[2][(w >> 40) & 0xFF] ^ crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c32, const unsigned char *p, size_t n)
{
    uint64_t c = c32;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

uint32_t dds_crc32c(uint32_t crc, const void *buf, size_t len)
{
    uint32_t c = ~crc;
#ifdef HAVE_HW_CRC
    static int hw = -1;
    if (hw < 0) {
        __builtin_cpu_init();
        hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (hw)
        return ~crc_hw(c, buf, len);
#endif
    pthread_once(&crc_once, crc_init);
    return ~crc_sw(c, buf, len);
}

/* ---- writing ---------------------------------------------------------------- */

typedef struct text {
    char *p;
    size_t len, cap;
    bool failed;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if (t->p && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)n;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->failed = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
}

int dds_manifest_format(const dds_manifest *m, char **out, size_t *len)
{
    text t = { 0 };
    put(&t, "ddstore-storage %d\n", DDS_STORAGE_FORMAT);
    put(&t, "store %s\n", m->store_id);
    put(&t, "group %d %d\n", (int)m->group_index, (int)m->n_groups);
    put(&t, "ranks %d\n", (int)m->nranks);
    put(&t, "volumes %d", (int)m->nvolumes);
    for (int k = 0; k < m->nvolumes; k++)
        put(&t, " %s", m->volume_ids[k]);
    put(&t, "\nrank-volume");
    for (int r = 0; r < m->nranks; r++)
        put(&t, " %d", (int)m->rank_volume[r]);
    put(&t, "\nblock-bytes %" PRIu64 "\n", m->block_bytes);
    put(&t, "vars %" PRId64 "\n", m->nvars);
    for (int64_t i = 0; i < m->nvars; i++) {
        const dds_manifest_var *v = &m->vars[i];
        put(&t, "var %" PRId64 " %u %" PRId64 " %" PRId64 " ", i, v->dtype, v->row_bytes, v->global_rows);
        for (const unsigned char *c = (const unsigned char *)v->name; *c; c++)
            put(&t, "%02x", *c);
        put(&t, "\noffsets %" PRId64, i);
        for (int r = 0; r <= m->nranks; r++)
            put(&t, " %" PRId64, v->offsets[r]);
        put(&t, "\n");
    }
    put(&t, "checksums %" PRIu64 " %08x\n", m->checksums_size, m->checksums_crc);
    put(&t, "this-volume %d\n", (int)m->this_volume);
    for (int64_t i = 0; i < m->nvars; i++)
        put(&t, "file %" PRId64 " %" PRIu64 " %" PRId64 "\n", i, m->vars[i].file_size, m->vars[i].mtime_ns);
    if (!t.failed) {
        uint32_t crc = dds_crc32c(0, t.p, t.len);
        put(&t, "end %08x\n", crc);
    }
    if (t.failed) {
        free(t.p);
        return dds_err(DDS_ENOMEM, "out of memory writing a storage manifest");
    }
    *out = t.p;
    *len = t.len;
    return DDS_OK;
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct cursor {
    const char *p, *end;
    const char *path;
    int line;
} cursor;

static int bad(cursor *c, const char *what)
{
    return dds_err(DDS_EPROTO, "storage manifest %s, line %d: %s; the directory's manifest is corrupt "
                   "(save the store again)", c->path, c->line, what);
}

/* Start the next line, which must begin with keyword `kw` and a space or
 * the line's end. */
static int keyword(cursor *c, const char *kw)
{
    c->line++;
    size_t n = strlen(kw);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, kw, n) != 0 ||
        (c->p + n < c->end && c->p[n] != ' ' && c->p[n] != '\n')) {
        char msg[96];
        snprintf(msg, sizeof msg, "expected '%s'", kw);
        return bad(c, msg);
    }
    c->p += n;
    return DDS_OK;
}

static int end_line(cursor *c)
{
    if (c->p >= c->end || *c->p != '\n')
        return bad(c, "unexpected text at the end of the line");
    c->p++;
    return DDS_OK;
}

/* A space, then a decimal number in [lo, hi]. */
static int number(cursor *c, int64_t lo, int64_t hi, int64_t *out)
{
    if (c->p >= c->end || *c->p != ' ')
        return bad(c, "missing number");
    c->p++;
    bool neg = c->p < c->end && *c->p == '-';
    if (neg)
        c->p++;
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return bad(c, "not a number");
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p++ - '0');
        if (v > (UINT64_MAX - d) / 10)
            return bad(c, "number out of range");
        v = v * 10 + d;
    }
    if (v > (uint64_t)INT64_MAX)
        return bad(c, "number out of range");
    int64_t s = neg ? -(int64_t)v : (int64_t)v;
    if (s < lo || s > hi)
        return bad(c, "number out of range");
    *out = s;
    return DDS_OK;
}

/* A whole line "<kw> <number>", the number in [lo, hi]. */
static int number_line(cursor *c, const char *kw, int64_t lo, int64_t hi, int64_t *out)
{
    int rc = keyword(c, kw);
    if (!rc)
        rc = number(c, lo, hi, out);
    return rc ? rc : end_line(c);
}

/* A space, then exactly `n` lowercase hex digits (n <= 2 * DDS_NAME_MAX)
 * into out[0..n], NUL-terminated. */
static int hex_word(cursor *c, size_t n_min, size_t n_max, char *out, size_t *n_out)
{
    if (c->p >= c->end || *c->p != ' ')
        return bad(c, "missing hex field");
    c->p++;
    size_t n = 0;
    while (c->p + n < c->end && ((c->p[n] >= '0' && c->p[n] <= '9') || (c->p[n] >= 'a' && c->p[n] <= 'f')))
        n++;
    if (n < n_min || n > n_max)
        return bad(c, "hex field of the wrong length");
    memcpy(out, c->p, n);
    out[n] = '\0';
    c->p += n;
    if (n_out)
        *n_out = n;
    return DDS_OK;
}

static unsigned hexval(char h) { return h <= '9' ? (unsigned)(h - '0') : (unsigned)(h - 'a' + 10); }

uint64_t dds_manifest_blocks(uint64_t bytes, uint64_t block_bytes)
{
    return bytes == 0 ? 0 : (bytes - 1) / block_bytes + 1;
}

uint64_t dds_manifest_nchecksums(const dds_manifest *m)
{
    uint64_t n = 0;
    for (int64_t i = 0; i < m->nvars; i++) {
        const dds_manifest_var *v = &m->vars[i];
        for (int r = 0; r < m->nranks; r++)
            n += dds_manifest_blocks((uint64_t)((v->offsets[r + 1] - v->offsets[r]) * v->row_bytes),
                                     m->block_bytes);
    }
    return n;
}

void dds_manifest_free(dds_manifest *m)
{
    if (!m)
        return;
    for (int64_t i = 0; m->vars && i < m->nvars; i++)
        free(m->vars[i].offsets);
    free(m->vars);
    free(m->volume_ids);
    free(m->rank_volume);
    memset(m, 0, sizeof *m);
}

static int parse_var(cursor *c, dds_manifest *m, int64_t i)
{
    dds_manifest_var *v = &m->vars[i];
    int64_t x = 0;
    char hex[2 * DDS_NAME_MAX + 1];
    size_t n;
    int rc = keyword(c, "var");
    if (!rc)
        rc = number(c, i, i, &x);
    if (!rc)
        rc = number(c, 0, UINT32_MAX, &x);
    v->dtype = (uint32_t)x;
    if (!rc)
        rc = number(c, 1, INT64_MAX, &v->row_bytes);
    if (!rc)
        rc = number(c, 1, INT64_MAX, &v->global_rows);
    if (!rc && v->global_rows > (INT64_MAX - DDS_STORAGE_DATA_OFFSET) / v->row_bytes)
        rc = bad(c, "variable too large");
    if (!rc)
        rc = hex_word(c, 2, 2 * DDS_NAME_MAX, hex, &n);
    if (!rc && n % 2)
        rc = bad(c, "odd-length name");
    for (size_t k = 0; !rc && k < n / 2; k++) {
        v->name[k] = (char)(hexval(hex[2 * k]) << 4 | hexval(hex[2 * k + 1]));
        if (v->name[k] == '\0')
            rc = bad(c, "NUL in a variable name");
    }
    if (!rc) {
        v->name[n / 2] = '\0';
        rc = end_line(c);
    }
    if (!rc)
        rc = keyword(c, "offsets");
    if (!rc)
        rc = number(c, i, i, &x);
    if (!rc && !(v->offsets = malloc(((size_t)m->nranks + 1) * sizeof *v->offsets)))
        rc = dds_err(DDS_ENOMEM, "out of memory reading a storage manifest");
    for (int r = 0; !rc && r <= m->nranks; r++) {
        rc = number(c, r ? v->offsets[r - 1] : 0, r ? v->global_rows : 0, &v->offsets[r]);
    }
    if (!rc && v->offsets[m->nranks] != v->global_rows)
        rc = bad(c, "offsets do not end at the variable's row count");
    return rc ? rc : end_line(c);
}

int dds_manifest_parse(dds_manifest *m, const char *buf, size_t len, const char *path)
{
    memset(m, 0, sizeof *m);
    cursor c = { buf, buf + len, path, 0 };
    static const char magic[] = "ddstore-storage ";
    if (len < sizeof magic - 1 || memcmp(buf, magic, sizeof magic - 1) != 0)
        return dds_err(DDS_EPROTO, "%s is not a ddstore storage manifest (foreign file): the directory "
                       "does not hold a saved store", path);
    /* The end line first: a truncated or altered file is reported as such
     * before any field is believed. */
    const char *endl = NULL;
    if (len >= 13 && buf[len - 1] == '\n') {
        endl = buf + len - 13; /* "end xxxxxxxx\n" */
        if (endl > buf && endl[-1] != '\n')
            endl = NULL;
    }
    if (!endl || memcmp(endl, "end ", 4) != 0)
        return dds_err(DDS_EPROTO, "storage manifest %s is truncated (no end line): its writer did not "
                       "finish; save the store again", path);
    unsigned crc_want = 0;
    if (sscanf(endl + 4, "%8x", &crc_want) != 1 || dds_crc32c(0, buf, (size_t)(endl - buf)) != crc_want)
        return dds_err(DDS_EPROTO, "storage manifest %s is corrupt (checksum mismatch); save the store "
                       "again", path);
    c.end = endl;

    int64_t x = 0;
    int rc = keyword(&c, "ddstore-storage");
    if (!rc)
        rc = number(&c, 0, INT32_MAX, &x);
    if (!rc && x != DDS_STORAGE_FORMAT)
        return dds_err(DDS_EPROTO, "storage manifest %s has format version %lld; this libddstore reads "
                       "version %d (save the store again with this version)", path, (long long)x,
                       DDS_STORAGE_FORMAT);
    if (!rc)
        rc = end_line(&c);
    if (!rc)
        rc = keyword(&c, "store");
    if (!rc)
        rc = hex_word(&c, DDS_STORAGE_ID_HEX, DDS_STORAGE_ID_HEX, m->store_id, NULL);
    if (!rc)
        rc = end_line(&c);
    if (!rc)
        rc = keyword(&c, "group");
    if (!rc)
        rc = number(&c, 0, INT32_MAX - 1, &x);
    m->group_index = (int32_t)x;
    if (!rc)
        rc = number(&c, m->group_index + 1, INT32_MAX, &x);
    m->n_groups = (int32_t)x;
    if (!rc)
        rc = end_line(&c);
    if (!rc)
        rc = number_line(&c, "ranks", 1, 1 << 24, &x);
    m->nranks = (int32_t)x;
    if (!rc)
        rc = keyword(&c, "volumes");
    if (!rc)
        rc = number(&c, 1, m->nranks, &x);
    m->nvolumes = (int32_t)x;
    if (!rc) {
        m->volume_ids = calloc((size_t)m->nvolumes, sizeof *m->volume_ids);
        m->rank_volume = calloc((size_t)m->nranks, sizeof *m->rank_volume);
        if (!m->volume_ids || !m->rank_volume)
            rc = dds_err(DDS_ENOMEM, "out of memory reading a storage manifest");
    }
    for (int k = 0; !rc && k < m->nvolumes; k++)
        rc = hex_word(&c, DDS_STORAGE_ID_HEX, DDS_STORAGE_ID_HEX, m->volume_ids[k], NULL);
    if (!rc)
        rc = end_line(&c);
    if (!rc)
        rc = keyword(&c, "rank-volume");
    for (int r = 0; !rc && r < m->nranks; r++) {
        rc = number(&c, 0, m->nvolumes - 1, &x);
        m->rank_volume[r] = (int32_t)x;
    }
    if (!rc)
        rc = end_line(&c);
    if (!rc)
        rc = number_line(&c, "block-bytes", 4096, (int64_t)1 << 40, &x);
    m->block_bytes = (uint64_t)x;
    if (!rc)
        rc = number_line(&c, "vars", 0, 1 << 24, &m->nvars);
    if (!rc && m->nvars && !(m->vars = calloc((size_t)m->nvars, sizeof *m->vars)))
        rc = dds_err(DDS_ENOMEM, "out of memory reading a storage manifest");
    for (int64_t i = 0; !rc && i < m->nvars; i++)
        rc = parse_var(&c, m, i);
    if (!rc)
        rc = keyword(&c, "checksums");
    if (!rc)
        rc = number(&c, 0, INT64_MAX, &x);
    m->checksums_size = (uint64_t)x;
    char hex[16];
    if (!rc)
        rc = hex_word(&c, 8, 8, hex, NULL);
    if (!rc) {
        m->checksums_crc = (uint32_t)strtoul(hex, NULL, 16);
        rc = end_line(&c);
    }
    const char *common_end = c.p;
    if (!rc)
        rc = number_line(&c, "this-volume", 0, m->nvolumes - 1, &x);
    m->this_volume = (int32_t)x;
    for (int64_t i = 0; !rc && i < m->nvars; i++) {
        dds_manifest_var *v = &m->vars[i];
        rc = keyword(&c, "file");
        if (!rc)
            rc = number(&c, i, i, &x);
        if (!rc)
            rc = number(&c, 0, INT64_MAX, &x);
        v->file_size = (uint64_t)x;
        if (!rc)
            rc = number(&c, INT64_MIN + 1, INT64_MAX, &v->mtime_ns);
        if (!rc)
            rc = end_line(&c);
    }
    if (!rc && c.p != c.end)
        rc = bad(&c, "unexpected lines before the end line");
    if (!rc)
        m->common_crc = dds_crc32c(0, buf, (size_t)(common_end - buf));
    if (rc)
        dds_manifest_free(m);
    return rc;
}

/* ---- variable file header and checksums file --------------------------------- */

static const char varfile_magic[8] = { 'D', 'D', 'S', 'V', 'A', 'R', '0', '1' };
static const char cksum_magic[8] = { 'D', 'D', 'S', 'C', 'K', 'S', '0', '1' };

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* Layout: magic[8] id[32] index row_bytes global_rows (u64 LE) crc (u32 LE
 * in a u64 slot) of the bytes before it. */
#define HDR_CRC_AT (8 + DDS_STORAGE_ID_HEX + 24)

void dds_varfile_header_put(const dds_varfile_header *h, unsigned char *page)
{
    memset(page, 0, DDS_STORAGE_DATA_OFFSET);
    memcpy(page, varfile_magic, 8);
    memcpy(page + 8, h->store_id, DDS_STORAGE_ID_HEX);
    put_u64(page + 8 + DDS_STORAGE_ID_HEX, h->index);
    put_u64(page + 16 + DDS_STORAGE_ID_HEX, h->row_bytes);
    put_u64(page + 24 + DDS_STORAGE_ID_HEX, h->global_rows);
    put_u64(page + HDR_CRC_AT, dds_crc32c(0, page, HDR_CRC_AT));
}

int dds_varfile_header_get(dds_varfile_header *h, const unsigned char *page, size_t len, const char *path)
{
    if (len < HDR_CRC_AT + 8 || memcmp(page, varfile_magic, 8) != 0)
        return dds_err(DDS_EPROTO, "%s is not a ddstore variable file (foreign or truncated)", path);
    if (get_u64(page + HDR_CRC_AT) != dds_crc32c(0, page, HDR_CRC_AT))
        return dds_err(DDS_EPROTO, "%s: its header is corrupt (checksum mismatch)", path);
    memcpy(h->store_id, page + 8, DDS_STORAGE_ID_HEX);
    h->store_id[DDS_STORAGE_ID_HEX] = '\0';
    h->index = get_u64(page + 8 + DDS_STORAGE_ID_HEX);
    h->row_bytes = get_u64(page + 16 + DDS_STORAGE_ID_HEX);
    h->global_rows = get_u64(page + 24 + DDS_STORAGE_ID_HEX);
    return DDS_OK;
}

/* Layout: magic[8] id[32] block_bytes count (u64 LE) crc[count] (u32 LE)
 * crc (u32 LE) of everything before it. */
int dds_checksums_format(const char *store_id, uint64_t block_bytes, const uint32_t *crcs, uint64_t n,
                         unsigned char **out, size_t *len)
{
    size_t bytes = 8 + DDS_STORAGE_ID_HEX + 16 + 4 * (size_t)n + 4;
    unsigned char *p = malloc(bytes);
    if (!p)
        return dds_err(DDS_ENOMEM, "out of memory writing %" PRIu64 " checksums", n);
    memcpy(p, cksum_magic, 8);
    memcpy(p + 8, store_id, DDS_STORAGE_ID_HEX);
    put_u64(p + 8 + DDS_STORAGE_ID_HEX, block_bytes);
    put_u64(p + 16 + DDS_STORAGE_ID_HEX, n);
    unsigned char *q = p + 24 + DDS_STORAGE_ID_HEX;
    for (uint64_t i = 0; i < n; i++, q += 4)
        for (int k = 0; k < 4; k++)
            q[k] = (unsigned char)(crcs[i] >> (8 * k));
    uint32_t c = dds_crc32c(0, p, bytes - 4);
    for (int k = 0; k < 4; k++)
        q[k] = (unsigned char)(c >> (8 * k));
    *out = p;
    *len = bytes;
    return DDS_OK;
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int dds_checksums_parse(const unsigned char *buf, size_t len, const dds_manifest *m, uint32_t **crcs,
                        const char *path)
{
    *crcs = NULL;
    uint64_t n = dds_manifest_nchecksums(m);
    size_t head = 24 + DDS_STORAGE_ID_HEX;
    if (len < head + 4 || memcmp(buf, cksum_magic, 8) != 0)
        return dds_err(DDS_EPROTO, "%s is not a ddstore checksums file (foreign or truncated)", path);
    if (len != m->checksums_size || dds_crc32c(0, buf, len) != m->checksums_crc)
        return dds_err(DDS_EPROTO, "%s does not match the manifest (%zu bytes, the manifest says %" PRIu64
                       "; or its checksum differs): stale or corrupt", path, len, m->checksums_size);
    if (memcmp(buf + 8, m->store_id, DDS_STORAGE_ID_HEX) != 0 ||
        get_u64(buf + 8 + DDS_STORAGE_ID_HEX) != m->block_bytes || get_u64(buf + 16 + DDS_STORAGE_ID_HEX) != n ||
        len != head + 4 * n + 4)
        return dds_err(DDS_EPROTO, "%s belongs to another store or layout than the manifest", path);
    if (get_u32(buf + len - 4) != dds_crc32c(0, buf, len - 4))
        return dds_err(DDS_EPROTO, "%s is corrupt (checksum mismatch)", path);
    uint32_t *c = malloc((n ? n : 1) * sizeof *c);
    if (!c)
        return dds_err(DDS_ENOMEM, "out of memory reading %s", path);
    for (uint64_t i = 0; i < n; i++)
        c[i] = get_u32(buf + head + 4 * i);
    *crcs = c;
    return DDS_OK;
}
