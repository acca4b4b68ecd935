/* SHA-256 (FIPS 180-4) of a file, for provenance records, through OpenSSL's
 * libcrypto (its SHA-NI / AVX2 code is 5-10x a portable C loop; a checkpoint of
 * a few hundred MiB is hashed in well under a second). */
#ifndef HS_SHA256_H
#define HS_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct evp_md_ctx_st; /* OpenSSL's EVP_MD_CTX; callers need no OpenSSL headers */

typedef struct {
    struct evp_md_ctx_st *ctx; /* NULL: init failed (out of memory) */
    uint64_t bytes;
    int failed;
} hs_sha256;

/* init allocates the digest context; hs_sha256_hex finishes and frees it, so
 * every init is followed by one hex. */
void hs_sha256_init(hs_sha256 *s);
void hs_sha256_update(hs_sha256 *s, const void *data, size_t n);
/* hex: 65 bytes (64 digits + NUL); an empty string when the digest failed. */
void hs_sha256_hex(hs_sha256 *s, char hex[65]);

/* hex digest of a file's bytes, and its size; HS_EIO naming the file. */
int hs_sha256_file(const char *path, char hex[65], uint64_t *bytes);

/* The same of the file open at fd, read from its start whatever its offset
 * (pread): the digest of that file, whatever its name now names. name is
 * for messages. */
int hs_sha256_fd(int fd, const char *name, char hex[65], uint64_t *bytes);

#endif
