/* Private definitions of file-backed shards: the on-disk format (manifest.c)
 * and what storage.c keeps per store and per variable. Nothing here is part
 * of the ABI; the format is versioned (DDS_STORAGE_FORMAT).
 *
 * A storage directory holds one store (one group's shards):
 *   volume      a random id naming this directory (the same file seen from
 *               several nodes is one volume: a shared file system; nodes
 *               that each see their own file are node-local volumes)
 *   lock        flock()ed by the job writing the store (exclusive) or by
 *               jobs reading it (shared)
 *   v<i>.dds    variable i: a header page, then its rows in global row
 *               order (every rank writes its own rows; rows never move)
 *   checksums   CRC-32C of every block of every shard (dds_save)
 *   manifest    what the store holds (dds_save), written last and
 *               atomically; removed when the store is written again. */
#ifndef DDSTORE_STORAGE_H
#define DDSTORE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define DDS_STORAGE_FORMAT 1
/* File offset of a variable's first row: one header page. */
#define DDS_STORAGE_DATA_OFFSET 4096
/* Bytes per checksummed block of a shard. */
#define DDS_STORAGE_BLOCK_BYTES (16u << 20)
/* Hex digits of store and volume ids (128 random bits). */
#define DDS_STORAGE_ID_HEX 32
/* Largest manifest a reader accepts. */
#define DDS_MANIFEST_MAX (256u << 20)

/* CRC-32C (Castagnoli) of len bytes, continuing `crc` (0 to start). */
DDS_HIDDEN uint32_t dds_crc32c(uint32_t crc, const void *buf, size_t len);

typedef struct dds_manifest_var {
    char name[DDS_NAME_MAX + 1];
    uint32_t dtype;
    int64_t row_bytes;
    int64_t global_rows;
    int64_t *offsets;   /* nranks + 1: first global row of each saved shard */
    uint64_t file_size; /* of v<i>.dds in this directory (this volume) */
    int64_t mtime_ns;   /* its modification time when saved */
} dds_manifest_var;

typedef struct dds_manifest {
    char store_id[DDS_STORAGE_ID_HEX + 1];
    int32_t group_index, n_groups; /* of the saving store (for messages) */
    int32_t nranks;                /* group size when saved */
    int32_t nvolumes;
    char (*volume_ids)[DDS_STORAGE_ID_HEX + 1];
    int32_t *rank_volume;          /* nranks: volume of each saved shard's rank */
    uint64_t block_bytes;
    int64_t nvars;
    dds_manifest_var *vars;
    uint64_t checksums_size;
    uint32_t checksums_crc;
    int32_t this_volume;           /* the volume this copy was written into */
    uint32_t common_crc;           /* CRC of the part every volume's copy shares */
} dds_manifest;

/* Text of manifest m into a malloc'd buffer (*out, *len); the per-volume
 * part (this_volume, file sizes and times) from m as well. */
DDS_HIDDEN int dds_manifest_format(const dds_manifest *m, char **out, size_t *len);
/* Parse and validate `len` bytes of a manifest into *m (zeroed first; free
 * with dds_manifest_free). DDS_EPROTO naming `path` and what is wrong:
 * foreign (not a manifest), another format version, truncated or corrupt
 * (checksum), a field out of range. */
DDS_HIDDEN int dds_manifest_parse(dds_manifest *m, const char *text, size_t len, const char *path);
DDS_HIDDEN void dds_manifest_free(dds_manifest *m);
/* Number of checksummed blocks of `bytes` bytes. */
DDS_HIDDEN uint64_t dds_manifest_blocks(uint64_t bytes, uint64_t block_bytes);
/* Checksums of all blocks of all shards in m's order (variable, then saved
 * rank, then block): total count. */
DDS_HIDDEN uint64_t dds_manifest_nchecksums(const dds_manifest *m);

/* Header page of a variable file. */
typedef struct dds_varfile_header {
    char store_id[DDS_STORAGE_ID_HEX + 1];
    uint64_t index, row_bytes, global_rows;
} dds_varfile_header;
/* Encode h into DDS_STORAGE_DATA_OFFSET bytes at page. */
DDS_HIDDEN void dds_varfile_header_put(const dds_varfile_header *h, unsigned char *page);
/* Decode and check the header bytes (magic, version, checksum); DDS_EPROTO
 * naming `path` otherwise. */
DDS_HIDDEN int dds_varfile_header_get(dds_varfile_header *h, const unsigned char *page, size_t len,
                                      const char *path);

/* The checksums file: encode `n` CRCs (malloc'd *out of *len bytes);
 * decode, checking magic, store id, count and its own CRC. */
DDS_HIDDEN int dds_checksums_format(const char *store_id, uint64_t block_bytes, const uint32_t *crcs,
                                    uint64_t n, unsigned char **out, size_t *len);
DDS_HIDDEN int dds_checksums_parse(const unsigned char *buf, size_t len, const dds_manifest *m,
                                   uint32_t **crcs, const char *path);

#endif /* DDSTORE_STORAGE_H */
