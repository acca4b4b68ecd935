/* SHA-256 (FIPS 180-4) of a file, for provenance records. */
#ifndef HS_SHA256_H
#define HS_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;
    unsigned char buf[64];
    size_t used;
} hs_sha256;

void hs_sha256_init(hs_sha256 *s);
void hs_sha256_update(hs_sha256 *s, const void *data, size_t n);
/* hex: 65 bytes (64 digits + NUL). */
void hs_sha256_hex(hs_sha256 *s, char hex[65]);

/* hex digest of a file's bytes, and its size; HS_EIO naming the file. */
int hs_sha256_file(const char *path, char hex[65], uint64_t *bytes);

#endif
