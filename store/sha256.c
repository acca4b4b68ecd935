#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common.h"

void hs_sha256_init(hs_sha256 *s)
{
    s->bytes = 0;
    s->ctx = EVP_MD_CTX_new();
    s->failed = !s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1;
}

void hs_sha256_update(hs_sha256 *s, const void *data, size_t n)
{
    s->bytes += n;
    if (!s->failed && n && EVP_DigestUpdate(s->ctx, data, n) != 1)
        s->failed = 1;
}

void hs_sha256_hex(hs_sha256 *s, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!s->failed && EVP_DigestFinal_ex(s->ctx, md, &len) != 1)
        s->failed = 1;
    EVP_MD_CTX_free(s->ctx);
    s->ctx = NULL;
    hex[0] = '\0';
    if (s->failed || len != 32)
        return;
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

int hs_sha256_fd(int fd, const char *name, char hex[65], uint64_t *bytes)
{
    enum { CHUNK = 1 << 20 };
    hex[0] = 0;
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        return hs_fail(HS_ENOMEM, "%s: no memory for a read buffer", name);
    hs_sha256 s;
    hs_sha256_init(&s);
    ssize_t n;
    off_t at = 0;
    while ((n = pread(fd, buf, CHUNK, at)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) {
            hs_sha256_update(&s, buf, (size_t)n);
            at += n;
        }
    const int err = n < 0 ? errno : 0;
    free(buf);
    hs_sha256_hex(&s, hex);
    if (err)
        return hs_fail(HS_EIO, "%s: read failed: %s", name, strerror(err));
    if (!hex[0])
        return hs_fail(HS_ENOMEM, "%s: the SHA-256 digest failed (libcrypto)", name);
    if (bytes)
        *bytes = s.bytes;
    return HS_OK;
}

int hs_sha256_file(const char *path, char hex[65], uint64_t *bytes)
{
    const int fd = hs_open_regular(path, NULL);
    if (fd < 0)
        return HS_EIO; /* the message names the file */
    const int rc = hs_sha256_fd(fd, path, hex, bytes);
    close(fd);
    return rc;
}
