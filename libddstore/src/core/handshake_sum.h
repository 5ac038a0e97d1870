/* The method-2 handshake format's checksum (handshake.h): FNV-1a over a
 * whole file except its checksum field (header bytes 32..39). It catches
 * torn or edited files that still parse.
 *
 * Header-only and free of the library's other internals so that the tests
 * and the fuzzer, which build and damage handshake files by hand, seal them
 * with the very function the library checks them with (meson:
 * libddstore's handshake_sum_dep) instead of a copy of it. */
#ifndef DDSTORE_HANDSHAKE_SUM_H
#define DDSTORE_HANDSHAKE_SUM_H

#include <stddef.h>
#include <stdint.h>

#define DDS_HS_LENGTH_AT 8    /* u64 total length in the header */
#define DDS_HS_CHECKSUM_AT 32 /* u64 checksum in the header */

static inline uint64_t dds_hs_checksum(const uint8_t *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        if (i >= DDS_HS_CHECKSUM_AT && i < DDS_HS_CHECKSUM_AT + 8)
            continue;
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static inline void dds_hs_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes the checksum of p[0..len) into its field (len >= 40). */
static inline void dds_hs_put_checksum(uint8_t *p, size_t len)
{
    dds_hs_put_le64(p + DDS_HS_CHECKSUM_AT, dds_hs_checksum(p, len));
}

/* Writes len into the length field, then the checksum (len >= 40): a
 * file cut or grown by hand made consistent again. */
static inline void dds_hs_seal(uint8_t *p, size_t len)
{
    dds_hs_put_le64(p + DDS_HS_LENGTH_AT, (uint64_t)len);
    dds_hs_put_checksum(p, len);
}

#endif /* DDSTORE_HANDSHAKE_SUM_H */
