/* Method-2 handshake files: binary format (pure encode/parse, no I/O) and
 * the file-system helpers that publish and read them safely.
 *
 * Layout of a publication directory:
 *   lock               held (OFD write lock) by the publishing core rank while
 *                      its store lives: two live stores never share a directory
 *   run-<id>.live      held (OFD write lock) likewise; a reader takes a
 *                      publication as current only while the file of its run id
 *                      is locked, so files left by a killed run are never used
 *   store.dds          endpoint addresses of every core rank (kind STORE)
 *   var-<index>.dds    one variable: name, dtype, rows, keys, base addresses
 * Every file is written to a temporary name and renamed into place.
 *
 * Encoding (all integers little-endian):
 *   header, 40 bytes: u32 magic "DDHS", u16 version, u16 kind, u64 total
 *   length, 16 bytes run id, u64 FNV-1a checksum of everything else.
 *   STORE payload: u32 n_core, u32 group_index, u32 addr_format, u32 pid,
 *   u64 mr_mode, u64 start_time, str provider, str host, then n_core x
 *   (u16 length, address bytes).
 *   VAR payload: u32 index, u32 dtype, i64 row_bytes, u32 n_core, u32 zero,
 *   str name, then n_core x (i64 rows, u64 addr, u64 key, u64 len).
 *   str = u16 length + bytes (no NUL).
 */
#ifndef DDSTORE_HANDSHAKE_H
#define DDSTORE_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "handshake_sum.h"
#include "internal.h"

#define DDS_HS_MAGIC 0x53484444u /* bytes "DDHS" */
#define DDS_HS_VERSION 1u
#define DDS_HS_KIND_STORE 1u
#define DDS_HS_KIND_VAR 2u
#define DDS_HS_HEADER_BYTES 40u
#define DDS_HS_RUN_ID_BYTES 16u
#define DDS_HS_MAX_FILE ((size_t)64 << 20) /* larger files are refused unread */
#define DDS_HS_MAX_CORE 1048576u           /* core ranks a publication may list */
#define DDS_HS_MAX_ADDR 4096u              /* bytes of one endpoint address */
#define DDS_HS_MAX_PROV 128u               /* provider name */
#define DDS_HS_MAX_HOST 255u               /* host name */

/* Endpoint publication of a core group. `addr[i]` points into `addr_buf`. */
typedef struct dds_hs_store {
    uint32_t n_core;
    uint32_t group_index;
    uint32_t addr_format; /* libfabric FI_ADDR_* of the addresses */
    uint32_t pid;         /* publishing process (group rank 0) */
    uint64_t mr_mode;     /* the domain's mr_mode: FI_MR_VIRT_ADDR decides remote addresses */
    uint64_t start_time;  /* publishing process's start time (clock ticks since boot) */
    char prov[DDS_HS_MAX_PROV + 1];
    char host[DDS_HS_MAX_HOST + 1];
    uint16_t *addr_len;   /* n_core entries */
    uint8_t **addr;       /* n_core entries */
    uint8_t *addr_buf;
} dds_hs_store;

/* Remote view of one core rank's shard. */
typedef struct dds_hs_shard {
    int64_t rows;
    uint64_t addr; /* remote address of the shard's first byte (VA or offset 0) */
    uint64_t key;
    uint64_t len;  /* registered bytes (>= rows x row_bytes, at least 1) */
} dds_hs_shard;

/* Variable publication. */
typedef struct dds_hs_var {
    uint32_t index;
    uint32_t dtype;
    int64_t row_bytes;
    uint32_t n_core;
    char name[DDS_NAME_MAX + 1];
    dds_hs_shard *shards; /* n_core entries */
} dds_hs_var;

/* A parsed file. */
typedef struct dds_hs_file {
    uint32_t kind; /* DDS_HS_KIND_* */
    uint8_t run_id[DDS_HS_RUN_ID_BYTES];
    dds_hs_store store; /* valid when kind == DDS_HS_KIND_STORE */
    dds_hs_var var;     /* valid when kind == DDS_HS_KIND_VAR */
} dds_hs_file;

/* Parse `len` bytes of a handshake file into *out (zeroed first). Pure: no
 * I/O, no global state apart from the error message; every field is checked
 * against `len` and the limits above before use. On success the caller
 * releases *out with dds_hs_file_clear(). Returns DDS_OK, DDS_EPROTO (corrupt,
 * truncated, foreign or hostile data: message says which field) or
 * DDS_ENOMEM. On failure *out holds nothing to release. */
DDS_HIDDEN int dds_hs_parse(const void *bytes, size_t len, dds_hs_file *out);
/* Release what dds_hs_parse() allocated; accepts a zeroed struct. */
DDS_HIDDEN void dds_hs_file_clear(dds_hs_file *f);

/* Encode a STORE or VAR publication into a malloc'd buffer (*out, *len). */
DDS_HIDDEN int dds_hs_encode_store(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], const dds_hs_store *st,
                                   uint8_t **out, size_t *len);
DDS_HIDDEN int dds_hs_encode_var(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], const dds_hs_var *var,
                                 uint8_t **out, size_t *len);

/* ---- file system ---------------------------------------------------------- */

#define DDS_HS_STORE_FILE "store.dds"
#define DDS_HS_LOCK_FILE "lock"

/* Open (creating with mode 0700 when `create`, parents included) the
 * directory `path` and check it: not a symlink, a directory owned by this
 * user, not writable by group or others. *dirfd receives an O_DIRECTORY
 * descriptor; *created tells whether this call made the last component.
 * DDS_ENOENT (no message) when it does not exist and !create. */
DDS_HIDDEN int dds_hs_open_dir(const char *path, int create, int *dirfd, int *created);
/* Read a regular file `name` under dirfd: refuses symlinks, files of another
 * user or writable by group/others, and files over DDS_HS_MAX_FILE.
 * DDS_ENOENT (no message) when absent. */
DDS_HIDDEN int dds_hs_read_file(int dirfd, const char *dir, const char *name, uint8_t **out,
                                size_t *len);
/* Write `name` atomically (temporary file 0600 + rename). */
DDS_HIDDEN int dds_hs_write_file(int dirfd, const char *dir, const char *name, const void *data,
                                 size_t len);
/* Name of a run's liveness file ("run-<hex>.live"). */
DDS_HIDDEN void dds_hs_live_name(const uint8_t run_id[DDS_HS_RUN_ID_BYTES], char name[64]);
/* 1 when the file `name` under dirfd is write-locked by another open file
 * description (a live publisher), 0 when not locked or absent, -1 when the
 * file system cannot tell (no lock support). */
DDS_HIDDEN int dds_hs_is_locked(int dirfd, const char *name);
/* Create `name` (0600) and take an OFD write lock on it; *fd keeps it.
 * DDS_EEXIST when another open file description holds it. */
DDS_HIDDEN int dds_hs_lock(int dirfd, const char *dir, const char *name, int *fd);
/* Remove publication files (store.dds, var-*.dds, run-*.live, temporaries)
 * under dirfd; `keep` (may be NULL) is spared. */
DDS_HIDDEN void dds_hs_remove_all(int dirfd, const char *keep);
/* Fill `id` with random bytes. */
DDS_HIDDEN int dds_hs_random(uint8_t *id, size_t n);
/* Start time of process `pid` in clock ticks since boot (0 when unknown). */
DDS_HIDDEN uint64_t dds_hs_proc_start(int pid);

#endif /* DDSTORE_HANDSHAKE_H */
