#include "sha256.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int hs_sha256_file(const char *path, char hex[65], uint64_t *bytes)
{
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return HS_EIO; /* the message names the file */
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        fclose(f);
        return hs_fail(HS_ENOMEM, "%s: no memory for a read buffer", path);
    }
    hs_sha256 s;
    hs_sha256_init(&s);
    size_t n;
    while ((n = fread(buf, 1, CHUNK, f)) > 0)
        hs_sha256_update(&s, buf, n);
    int err = ferror(f);
    fclose(f);
    free(buf);
    hs_sha256_hex(&s, hex);
    if (err)
        return hs_fail(HS_EIO, "%s: read failed", path);
    if (!hex[0])
        return hs_fail(HS_ENOMEM, "%s: the SHA-256 digest failed (libcrypto)", path);
    if (bytes)
        *bytes = s.bytes;
    return HS_OK;
}
