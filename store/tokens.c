#include "tokens.h"
#include "rng.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers.h"  /* HS_TARGET_IGNORE */
#include "tokenizer.h"
#include "weights.h" /* hs_rng */

enum { HEADER_INTS = 256, MAGIC_U16 = 20240520, MAGIC_U32 = 20240801 };

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int hs_tokens_read(hs_tokens *t, const char *path)
{
    memset(t, 0, sizeof *t);
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return HS_EIO; /* the message names the file */
    unsigned char header[HEADER_INTS * 4];
    struct stat sb;
    if (fstat(fileno(f), &sb) || fread(header, 1, sizeof header, f) != sizeof header) {
        fclose(f);
        return hs_fail(HS_EFORMAT, "%s: shorter than the 1024-byte token-shard header", path);
    }
    int32_t magic = le32(header), version = le32(header + 4), count = le32(header + 8);
    size_t width = magic == MAGIC_U16 && version == 1 ? 2 : magic == MAGIC_U32 && version == 7 ? 4 : 0;
    if (!width) {
        fclose(f);
        return hs_fail(HS_EFORMAT,
                       "%s: not a token shard (magic %d version %d; expected 20240520/1 or "
                       "20240801/7)",
                       path, magic, version);
    }
    if (count < 0 || (size_t)sb.st_size != sizeof header + (size_t)count * width) {
        fclose(f);
        return hs_fail(HS_EFORMAT, "%s: header says %d tokens (%zu bytes) but the file has %lld",
                       path, count, sizeof header + (size_t)(count < 0 ? 0 : count) * width,
                       (long long)sb.st_size);
    }
    unsigned char *raw = hs_calloc((size_t)count, width, path);
    t->tok = hs_calloc((size_t)count, sizeof(int32_t), path);
    if (!raw || !t->tok || fread(raw, width, (size_t)count, f) != (size_t)count) {
        int rc = raw && t->tok ? hs_fail(HS_EIO, "%s: read failed", path) : HS_ENOMEM;
        free(raw);
        free(t->tok);
        t->tok = NULL;
        fclose(f);
        return rc;
    }
    fclose(f);
    for (size_t i = 0; i < (size_t)count; i++) {
        t->tok[i] = width == 2 ? (int32_t)(raw[2 * i] | raw[2 * i + 1] << 8) : le32(raw + 4 * i);
        /* a uint32 id past INT32_MAX would read as a negative int32 id, and
         * ids index embeddings */
        if (t->tok[i] < 0) {
            const int rc = hs_fail(HS_EFORMAT, "%s: token %u at %zu exceeds the largest id a "
                                   "shard may hold (%d)", path, (uint32_t)t->tok[i], i,
                                   INT32_MAX);
            free(raw);
            hs_tokens_free(t);
            return rc;
        }
    }
    free(raw);
    t->n = (size_t)count;
    t->version = version;
    return HS_OK;
}

void hs_tokens_free(hs_tokens *t)
{
    free(t->tok);
    free(t->valid);
    memset(t, 0, sizeof *t);
}

int hs_tokens_adopt(hs_tokens *t, int32_t *ids, size_t n)
{
    memset(t, 0, sizeof *t);
    int version = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0)
            return hs_fail(HS_EINVAL, "token %d at %zu is negative", ids[i], i);
        if (ids[i] > 65535)
            version = 7;
    }
    *t = (hs_tokens){ .tok = ids, .n = n, .version = version };
    return HS_OK;
}

int hs_tokens_read_bytes(int32_t **ids, size_t *n, const char *path, size_t stream_cap)
{
    char *text;
    size_t len;
    *ids = NULL, *n = 0;
    int rc = hs_read_file(&text, &len, path, (size_t)1 << 30, stream_cap);
    int32_t *tok = rc ? NULL : hs_calloc(len ? len : 1, sizeof(int32_t), path);
    for (size_t i = 0; tok && i < len; i++)
        tok[i] = (unsigned char)text[i];
    free(text);
    if (!rc && !tok)
        return HS_ENOMEM;
    *ids = tok, *n = tok ? len : 0;
    return rc;
}

int hs_tokens_write(const char *path, const int32_t *tok, size_t n)
{
    return hs_tokens_write_version(path, tok, n, 1);
}

int hs_tokens_write_version(const char *path, const int32_t *tok, size_t n, int version)
{
    if (version != 1 && version != 7)
        return hs_fail(HS_EINVAL, "%s: shard version %d (1 or 7)", path, version);
    const int wide = version == 7; /* uint32 tokens */
    if (n > INT32_MAX)
        return hs_fail(HS_EINVAL, "%s: %zu tokens do not fit a shard header", path, n);
    char tmp[1100];
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp); /* never through a planted symlink */
    if (!f)
        return HS_EIO;
    unsigned char header[HEADER_INTS * 4] = { 0 };
    const int32_t head[3] = { wide ? MAGIC_U32 : MAGIC_U16, version, (int32_t)n };
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++)
            header[4 * k + b] = (unsigned char)((uint32_t)head[k] >> (8 * b));
    int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    for (size_t i = 0; ok && i < n; i++) {
        if (tok[i] < 0 || (!wide && tok[i] > 65535)) {
            fclose(f);
            unlink(tmp);
            return hs_fail(HS_EINVAL, "%s: token %d at %zu does not fit uint%d", path, tok[i], i,
                           wide ? 32 : 16);
        }
        unsigned char le[4];
        for (int b = 0; b < 4; b++)
            le[b] = (unsigned char)((uint32_t)tok[i] >> (8 * b));
        ok = fwrite(le, 1, wide ? 4 : 2, f) == (wide ? 4u : 2u);
    }
    if (fclose(f))
        ok = 0;
    if (!ok) {
        const int err = errno;
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: write failed: %s", path, strerror(err));
    }
    return hs_tmp_commit(tmp, path, 1);
}

size_t hs_batch_count(const hs_tokens *t, int B, int T)
{
    size_t span = (size_t)B * T;
    return t->n < span + 1 ? 0 : (t->n - 1) / span;
}

int hs_batches_to_run(const hs_tokens *t, int B, int T, size_t max_batches, size_t *nb)
{
    *nb = hs_batch_count(t, B, T);
    if (max_batches && max_batches < *nb)
        *nb = max_batches;
    if (!*nb)
        return hs_fail(HS_EINVAL, "%zu tokens hold no batch of %d x %d (+1) tokens", t->n, B, T);
    return HS_OK;
}

size_t hs_batch_start_wrapped(const hs_tokens *t, int B, int T, size_t step)
{
    /* The loader advances by B*T and returns to 0 when a batch would need
     * tokens past the end: the starts cycle through the whole batches. */
    size_t per_pass = hs_batch_count(t, B, T);
    return per_pass ? step % per_pass * (size_t)B * T : 0;
}

/* splitmix64's finaliser: a well-mixed 64-bit value of x. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* A uniform [0, 1) from the top 53 bits of x. */
static double unit(uint64_t x)
{
    return (double)(x >> 11) / 9007199254740992.0;
}

static int is_special(const hs_mlm *m, int32_t id)
{
    for (int k = 0; k < m->n_special; k++)
        if (m->special[k] == id)
            return 1;
    return 0;
}

/* The masked-LM batch of hs_batch_at: position i of the data at `at`. */
static void mlm_position(const hs_mlm *m, size_t at, int t, int32_t tok, int32_t *in,
                         int32_t *tg)
{
    *in = tok;
    *tg = HS_TARGET_IGNORE;
    if (is_special(m, tok))
        return;
    if (m->every > 0) {
        if (t % m->every == m->offset)
            *in = m->mask_id, *tg = tok;
        return;
    }
    const uint64_t h = mix64(mix64(m->seed) ^ (uint64_t)at);
    if (!(unit(h) < m->prob))
        return;
    *tg = tok;
    const double kind = unit(mix64(h + 1));
    if (kind < 0.8)
        *in = m->mask_id;
    else if (kind < 0.9) /* uniform over the whole vocabulary, as HF's collator draws */
        *in = (int32_t)(unit(mix64(h + 2)) * m->vocab);
}

void hs_batch_at(const hs_tokens *t, size_t start, int B, int T, int32_t *inputs, int32_t *targets)
{
    size_t span = (size_t)B * T;
    if (t->mlm.on) {
        for (size_t i = 0; i < span; i++) {
            if (t->valid && !t->valid[start + i]) { /* padding stays padding, no target */
                inputs[i] = t->tok[start + i], targets[i] = HS_TARGET_IGNORE;
                continue;
            }
            mlm_position(&t->mlm, start + i, (int)(i % (size_t)T), t->tok[start + i], &inputs[i],
                         &targets[i]);
        }
        return;
    }
    for (size_t i = 0; i < span; i++) {
        inputs[i] = t->tok[start + i];
        targets[i] = t->tok[start + i + 1];
        if (t->valid && ((i + 1) % (size_t)T == 0 || !t->valid[start + i + 1]))
            targets[i] = HS_TARGET_IGNORE;
    }
}

size_t hs_tokens_plant_repeats(int32_t *tok, size_t n, int T, double share, int lo, int hi,
                               double random_share, int vocab, unsigned long long seed)
{
    hs_rng g;
    hs_rng_seed(&g, seed);
    if (hi > T / 2)
        hi = T / 2;
    size_t changed = 0;
    for (size_t i = 0; lo >= 1 && lo <= hi && i + (size_t)T <= n; i += (size_t)T) {
        /* every draw is made for every sequence: the choice for sequence i
         * does not depend on what earlier sequences drew */
        const double u_share = hs_rng_uniform(&g), u_random = hs_rng_uniform(&g);
        const int len = lo + (int)(hs_rng_uniform(&g) * (hi - lo + 1));
        const int p = (int)(hs_rng_uniform(&g) * (T - 2 * len + 1));
        if (u_share >= share)
            continue;
        int32_t *seg = tok + i + p;
        if (u_random < random_share)
            for (int j = 0; j < len; j++)
                seg[j] = (int32_t)(hs_rng_uniform(&g) * vocab);
        for (int j = 0; j < len; j++)
            seg[len + j] = seg[j];
        changed++;
    }
    return changed;
}

int hs_tokens_recipe_check(const hs_tokens_recipe *r, int *lo, int *hi)
{
    const int T = r->seq_len;
    *lo = 8, *hi = T / 2;
    if (!r->in || !r->out)
        return hs_fail(HS_EINVAL, "--in TEXT and --out FILE.bin are required");
    if (r->share > 1 || r->random_share > 1)
        return hs_fail(HS_EINVAL, "--repeat-share and --random-share are shares in [0, 1]");
    if (r->share > 0 && !T)
        return hs_fail(HS_EINVAL, "--repeat-share needs --seq-len T (the length batches read)");
    if (r->repeat_len &&
        (sscanf(r->repeat_len, "%d:%d", lo, hi) != 2 || *lo < 1 || *hi < *lo || 2 * *hi > T))
        return hs_fail(HS_EINVAL, "--repeat-len '%s': MIN:MAX with 1 <= MIN <= MAX <= T/2 "
                       "expected", r->repeat_len);
    if (r->share > 0 && *lo > *hi)
        return hs_fail(HS_EINVAL, "--seq-len %d leaves no room for segments of %d tokens twice",
                       T, *lo);
    return HS_OK;
}

int hs_tokens_make(hs_tokens_made *m, const hs_tokens_recipe *r)
{
    memset(m, 0, sizeof *m);
    int lo, hi, rc = hs_tokens_recipe_check(r, &lo, &hi);
    if (rc)
        return rc;
    if ((rc = hs_output_free(r->out, r->force)))
        return rc;
    int32_t *tok = NULL;
    hs_tokenizer *tk = NULL;
    m->vocab = 256;
    if (r->tokenizer && !(rc = hs_tokenizer_open(&tk, r->tokenizer))) {
        m->vocab = hs_tokenizer_vocab_size(tk);
        rc = hs_tokenizer_encode_file(tk, r->in, r->stream_cap, r->special, &tok, &m->n);
        hs_tokenizer_free(tk);
    } else if (!r->tokenizer) {
        rc = hs_tokens_read_bytes(&tok, &m->n, r->in, r->stream_cap);
    }
    const int T = r->seq_len;
    if (!rc && r->share > 0 && m->n < (size_t)T)
        rc = hs_fail(HS_EINVAL, "%s: %zu bytes hold no sequence of %d", r->in, m->n, T);
    else if (!rc && r->share > 0)
        m->planted = hs_tokens_plant_repeats(tok, m->n, T, r->share, lo, hi, r->random_share,
                                             m->vocab, r->seed);
    if (!rc)
        rc = m->n < 2 ? hs_fail(HS_EINVAL, "%s: %zu %s is too short for any batch", r->in, m->n,
                                r->tokenizer ? "tokens" : "bytes")
                      : hs_tokens_write_version(r->out, tok, m->n, m->vocab < 65536 ? 1 : 7);
    free(tok);
    return rc;
}
