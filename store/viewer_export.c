/* The viewer's export (viewer_export.h): maps.bin, maps.js, data.js, rows/. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "config_file.h"
#include "maps.h"
#include "viewer_export.h"

/* The three outputs, each written to a temporary of its own (hs_tmp_fopen)
 * and moved over its name at the end. */
enum { OUT_BIN, OUT_JS, OUT_DATA, OUT_N };
static const char *const OUT_NAME[OUT_N] = { "maps.bin", "maps.js", "data.js" };

typedef struct {
    const hs_viewer_request *rq;
    hs_maps_reader *r;
    const hs_maps_info *in;
    hs_model_config cfg;
    int have_cfg;
    long long seq[HS_VIEWER_MAX_SEQS];
    int nseq;
    int li[HS_MAPS_MAX_LAYERS]; /* captured layer indices to export */
    int nli;
    long long runs[64];         /* --runs (nruns 0: any) */
    int nruns;
    int focus[16][2], nfocus;   /* --heads: (layer, head) each exported */
    FILE *f[OUT_N];
    char tmp[OUT_N][1200];
    char rows_tmp[1200];        /* the row files' folder while written ("": none yet) */
    long long rows_bytes;
    long long offset;           /* bytes of maps.bin written */
    int blocks;
    float *map;                 /* (nq, S) */
    unsigned char *buf;         /* one block's bytes */
    char *b64;
} exporter;

/* "a,b,c" of integers in [0, max) into out (at most cap); HS_EINVAL naming
 * the option otherwise. */
static int parse_list(const char *s, long long max, const char *opt, long long *out, int cap,
                      int *n)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || (*end && *end != ','))
            return hs_fail(HS_EINVAL, "%s: '%s' is not a list of integers like 0,2,5", opt, s);
        if (v >= max)
            return hs_fail(HS_EINVAL, "%s: %lld is not in the map file (it holds 0..%lld)", opt,
                           v, max - 1);
        if (*n == cap)
            return hs_fail(HS_EINVAL, "%s: more than %d entries", opt, cap);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p)
            return hs_fail(HS_EINVAL, "%s: '%s' ends with a comma", opt, s);
    }
    if (!*n)
        return hs_fail(HS_EINVAL, "%s: empty list", opt);
    return HS_OK;
}

/* --heads "L.H,...": each a head of an exported layer. */
static int select_heads(exporter *e)
{
    for (const char *p = e->rq->heads; p && *p;) {
        int layer, head, used = 0, found = 0;
        if (sscanf(p, "%d.%d%n", &layer, &head, &used) != 2 || (p[used] && p[used] != ',') ||
            e->nfocus == 16)
            return hs_fail(HS_EINVAL, "--heads: '%s' is not a list of heads like 1.6,0.3 (16 at "
                           "most)", e->rq->heads);
        for (int k = 0; k < e->nli; k++) {
            const hs_maps_layer_info *L = &e->in->layers[e->li[k]];
            for (int i = 0; L->layer == layer && i < L->nh; i++)
                found |= L->heads[i] == head;
        }
        if (!found)
            return hs_fail(HS_EINVAL, "--heads: layer %d head %d is not among the exported maps "
                           "of %s", layer, head, e->rq->maps);
        e->focus[e->nfocus][0] = layer, e->focus[e->nfocus++][1] = head;
        p += used + (p[used] == ',');
    }
    return HS_OK;
}

static int select_all(exporter *e)
{
    const hs_viewer_request *rq = e->rq;
    const hs_maps_info *in = e->in;
    if (in->n_seq < 1)
        return hs_fail(HS_EINVAL, "%s: the map file holds no sequence", rq->maps);
    if (rq->runs && parse_list(rq->runs, (long long)1 << 62, "--runs", e->runs, 64, &e->nruns))
        return HS_EINVAL;
    e->nseq = 1, e->seq[0] = 0;
    if (rq->sequences && !strcmp(rq->sequences, "all")) { /* every sentence, for the picker */
        if (in->n_seq > HS_VIEWER_MAX_SEQS)
            return hs_fail(HS_EINVAL, "--sequences all: %s holds %lld sequences, a page at most "
                           "%d: name them (0,5,9,...)", rq->maps, in->n_seq, HS_VIEWER_MAX_SEQS);
        e->nseq = (int)in->n_seq;
        for (int i = 0; i < e->nseq; i++)
            e->seq[i] = i;
    } else if (rq->sequences && parse_list(rq->sequences, in->n_seq, "--sequences", e->seq,
                                           HS_VIEWER_MAX_SEQS, &e->nseq))
        return HS_EINVAL;
    if (!rq->layers) {
        e->nli = in->n_layers;
        for (int i = 0; i < in->n_layers; i++)
            e->li[i] = i;
        return select_heads(e);
    }
    long long want[HS_MAPS_MAX_LAYERS];
    int n;
    if (parse_list(rq->layers, HS_MAPS_MAX_LAYERS, "--layers", want, HS_MAPS_MAX_LAYERS, &n))
        return HS_EINVAL;
    e->nli = 0;
    for (int k = 0; k < n; k++) {
        int found = -1;
        for (int i = 0; i < in->n_layers; i++)
            if (in->layers[i].layer == want[k])
                found = i;
        if (found < 0)
            return hs_fail(HS_EINVAL, "--layers: layer %lld is not in %s", want[k], rq->maps);
        e->li[e->nli++] = found;
    }
    return select_heads(e);
}

/* ---- token strings ------------------------------------------------------------ */

/* Display string of a token without a tokenizer: the byte of a byte-level
 * model (a lone byte >= 0x80 is no UTF-8 character: shown as <0xAB>), else
 * "#id". */
static void token_fallback(char *out, size_t n, int32_t tok, int byte_level)
{
    if (byte_level && tok >= 0 && tok < 128)
        snprintf(out, n, "%c", (char)tok);
    else if (byte_level && tok >= 128 && tok < 256)
        snprintf(out, n, "<0x%02X>", tok);
    else
        snprintf(out, n, "#%d", (int)tok);
}

/* The ids of one side of sequence n as "tokens" and their strings as "text"
 * (prefix "src_": an encoder-decoder's source) into o: the file's strings,
 * else token_fallback's. 0 on failure. */
static int side_json(exporter *e, cJSON *o, long long n, int src, int *from_file)
{
    const int T = src ? e->in->src_len : e->in->seq_len;
    const int found = src ? e->in->has_source_text : e->in->has_token_text;
    int32_t *tok = hs_calloc((size_t)T, sizeof *tok, "tokens");
    char **text = hs_calloc((size_t)T, sizeof *text, "token text");
    cJSON *jt = cJSON_CreateArray(), *js = cJSON_CreateArray();
    int ok = tok && text && jt && js &&
             !(src ? hs_maps_read_source(e->r, n, tok, found ? text : NULL)
                   : hs_maps_read_tokens(e->r, n, tok) ||
                         (found && hs_maps_read_token_text(e->r, n, text)));
    const int byte_level = e->have_cfg && e->cfg.vocab_size == 256;
    for (int t = 0; ok && t < T; t++) {
        char fb[32];
        token_fallback(fb, sizeof fb, tok[t], byte_level);
        cJSON_AddItemToArray(jt, cJSON_CreateNumber(tok[t]));
        cJSON_AddItemToArray(js, cJSON_CreateString(found ? text[t] : fb));
    }
    if (text && found)
        hs_maps_free_token_text(text, T);
    free(text);
    free(tok);
    *from_file = found;
    if (!ok) {
        cJSON_Delete(jt), cJSON_Delete(js);
        return 0;
    }
    cJSON_AddItemToObject(o, src ? "src_tokens" : "tokens", jt);
    cJSON_AddItemToObject(o, src ? "src_text" : "text", js);
    return 1;
}

static cJSON *sequence_json(exporter *e, long long n, int *from_file)
{
    cJSON *o = cJSON_CreateObject();
    int src_found = 0;
    if (o)
        cJSON_AddNumberToObject(o, "seq", (double)n);
    if (!o || !side_json(e, o, n, 0, from_file) ||
        (e->in->seq2seq && !side_json(e, o, n, 1, &src_found))) {
        cJSON_Delete(o);
        return NULL;
    }
    if (e->in->has_attention_mask) { /* a task's or --lines' padding, shown dimmed */
        int32_t *m = calloc((size_t)e->in->seq_len, sizeof *m);
        if (!m || hs_maps_read_attention_mask(e->r, n, m)) {
            free(m);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, "mask", cJSON_CreateIntArray(m, e->in->seq_len));
        free(m);
    }
    return o;
}

/* ---- blocks --------------------------------------------------------------------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t base64(char *out, const unsigned char *in, size_t n)
{
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18], out[o++] = B64[v >> 12 & 63], out[o++] = B64[v >> 6 & 63],
        out[o++] = B64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        out[o++] = B64[v >> 18], out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = '=';
    }
    return o;
}

static void put_f32(unsigned char *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    p[0] = (unsigned char)u, p[1] = (unsigned char)(u >> 8), p[2] = (unsigned char)(u >> 16),
    p[3] = (unsigned char)(u >> 24);
}

/* Keys stored for row r of a block. */
static int row_len(const hs_maps_layer_info *L, int packed, int r)
{
    const int n = L->q0 + r + 1;
    return packed && n < L->S ? n : L->S;
}

/* Rows [r0, r1) of the map in e->map as the block layout (viewer_export.h)
 * into e->buf: the whole block, or one of a long map's row files. */
static size_t encode_rows(exporter *e, const hs_maps_layer_info *L, int packed, int r0, int r1)
{
    unsigned char *p = e->buf;
    if (!e->rq->half)
        p += 4 * (size_t)(r1 - r0);
    for (int r = r0; r < r1; r++) {
        const float *row = e->map + (size_t)r * L->S;
        const int n = row_len(L, packed, r);
        if (e->rq->half) {
            for (int s = 0; s < n; s++) {
                uint16_t h = hs_float_to_half(row[s]);
                *p++ = (unsigned char)h, *p++ = (unsigned char)(h >> 8);
            }
            continue;
        }
        float mx = 0;
        for (int s = 0; s < n; s++)
            mx = row[s] > mx ? row[s] : mx;
        const float scale = mx / 255.0f;
        put_f32(e->buf + 4 * (size_t)(r - r0), scale);
        for (int s = 0; s < n; s++)
            *p++ = scale > 0 ? (unsigned char)lrintf(fminf(255.0f, fmaxf(0.0f, row[s] / scale))) : 0;
    }
    return (size_t)(p - e->buf);
}

/* 1 when every key after its query holds exactly 0. */
static int is_causal(const float *map, const hs_maps_layer_info *L)
{
    for (int r = 0; r < L->nq; r++)
        for (int s = L->q0 + r + 1; s < L->S; s++)
            if (map[(size_t)r * L->S + s] != 0.0f)
                return 0;
    return 1;
}

/* The map pooled to rows x cols cells, each the max of its entries, on 0..1
 * as u8, base64: the block's thumbnail, or a long map's overview. */
static cJSON *pooled(exporter *e, const hs_maps_layer_info *L, int rows, int cols)
{
    unsigned char *th = calloc((size_t)rows * cols, 1);
    char *out = malloc(4 * ((size_t)rows * cols / 3 + 2) + 1);
    cJSON *o = NULL;
    if (th && out) {
        for (int r = 0; r < L->nq; r++) {
            unsigned char *cell = th + (size_t)((long long)r * rows / L->nq) * cols;
            for (int s = 0; s < L->S; s++) {
                const int j = (int)((long long)s * cols / L->S);
                const float v = e->map[(size_t)r * L->S + s];
                const unsigned char q = (unsigned char)lrintf(fminf(1.0f, fmaxf(0.0f, v)) * 255.0f);
                cell[j] = q > cell[j] ? q : cell[j];
            }
        }
        out[base64(out, th, (size_t)rows * cols)] = 0;
        o = cJSON_CreateString(out);
    }
    free(th), free(out);
    return o;
}

/* A map of more cells than this (or every map, --on-demand) is written as
 * row files the page loads as it needs them, with a pooled overview. */
#define LONG_CELLS (2048LL * 2048)
enum { ROWS_PER_FILE = 16, OVERVIEW = 512 };

static int is_long(const exporter *e, const hs_maps_layer_info *L)
{
    return e->rq->on_demand || (long long)L->nq * L->S > LONG_CELLS;
}

/* rows/NAME.js: HS_ROWS<var>("NAME", "base64 of bytes"), a new file in the
 * folder this export made (mode 0700 while written). */
static int write_rows_file(exporter *e, const char *name, const char *b64, size_t n)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s.js", e->rows_tmp, name);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    const char *var = e->rq->var ? e->rq->var : "";
    const int head = f ? fprintf(f, "HS_ROWS%s(\"%s\", \"", var, name) : -1;
    int ok = head > 0 && fwrite(b64, 1, n, f) == n && fputs("\");\n", f) >= 0;
    ok = (f && !fclose(f)) && ok;
    if (!ok)
        return hs_fail(HS_EIO, "%s: write failed: %s", path, strerror(errno));
    e->rows_bytes += head + (long long)n + 4;
    return HS_OK;
}

/* A long map's row files (ROWS_PER_FILE rows each, the block layout) and
 * its overview (OVERVIEW x OVERVIEW at most, pooled), described in b. */
static int write_long_block(exporter *e, cJSON *b, const hs_maps_layer_info *L, int packed)
{
    if (!e->rows_tmp[0]) {
        char rows[1100], unused[1300];
        snprintf(rows, sizeof rows, "%s/rows", e->rq->dir);
        if (hs_tmp_dir_create(rows, "-", e->rows_tmp, sizeof e->rows_tmp, unused, sizeof unused)) {
            e->rows_tmp[0] = 0;
            return HS_EIO;
        }
    }
    char name[64];
    const int chunks = (L->nq + ROWS_PER_FILE - 1) / ROWS_PER_FILE;
    for (int c = 0; c < chunks; c++) {
        const int r0 = c * ROWS_PER_FILE, r1 = r0 + ROWS_PER_FILE < L->nq ? r0 + ROWS_PER_FILE : L->nq;
        const size_t bytes = encode_rows(e, L, packed, r0, r1);
        snprintf(name, sizeof name, "%d_%d", e->blocks, c);
        int rc = write_rows_file(e, name, e->b64, base64(e->b64, e->buf, bytes));
        if (rc)
            return rc;
    }
    const int rows = L->nq < OVERVIEW ? L->nq : OVERVIEW, cols = L->S < OVERVIEW ? L->S : OVERVIEW;
    cJSON *ov = pooled(e, L, rows, cols);
    snprintf(name, sizeof name, "%d_ov", e->blocks);
    int rc = ov ? write_rows_file(e, name, ov->valuestring, strlen(ov->valuestring))
                : hs_fail(HS_ENOMEM, "viewer overview");
    cJSON_Delete(ov);
    cJSON_AddNumberToObject(b, "rows", ROWS_PER_FILE);
    cJSON_AddNumberToObject(b, "ov_rows", rows);
    cJSON_AddNumberToObject(b, "ov_cols", cols);
    return rc;
}

static int write_block(exporter *e, cJSON *blocks, int si, int k, int hi)
{
    const hs_maps_layer_info *L = &e->in->layers[e->li[k]];
    int rc = hs_maps_read(e->r, e->li[k], e->seq[si], hi, e->map);
    if (rc)
        return rc;
    const int packed = is_causal(e->map, L), on_demand = is_long(e, L);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddItemToArray(blocks, b);
    cJSON_AddNumberToObject(b, "s", si);
    cJSON_AddNumberToObject(b, "l", k);
    cJSON_AddNumberToObject(b, "h", hi);
    cJSON_AddBoolToObject(b, "packed", packed);
    /* a long map: its row files; maps.js keeps an empty entry in its place */
    const size_t bytes = on_demand ? 0 : encode_rows(e, L, packed, 0, L->nq);
    const size_t nb64 = base64(e->b64, e->buf, bytes);
    if ((bytes && fwrite(e->buf, 1, bytes, e->f[OUT_BIN]) != bytes) ||
        fprintf(e->f[OUT_JS], "%s\"", e->blocks ? ",\n" : "") < 0 ||
        fwrite(e->b64, 1, nb64, e->f[OUT_JS]) != nb64 || fputc('"', e->f[OUT_JS]) == EOF)
        return hs_fail(HS_EIO, "%s: write failed: %s", e->rq->dir, strerror(errno));
    if (on_demand && (rc = write_long_block(e, b, L, packed)))
        return rc;
    const int rows = L->nq < HS_VIEWER_THUMB ? L->nq : HS_VIEWER_THUMB,
              cols = L->S < HS_VIEWER_THUMB ? L->S : HS_VIEWER_THUMB;
    cJSON_AddNumberToObject(b, "offset", (double)e->offset);
    cJSON_AddNumberToObject(b, "bytes", (double)bytes);
    cJSON_AddNumberToObject(b, "thumb_rows", rows);
    cJSON_AddNumberToObject(b, "thumb_cols", cols);
    cJSON_AddItemToObject(b, "thumb", pooled(e, L, rows, cols));
    e->offset += (long long)bytes;
    e->blocks++;
    return HS_OK;
}

/* ---- the JSON index ---------------------------------------------------------------- */

static cJSON *model_json(exporter *e)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "sha256", e->in->model_sha256);
    if (!e->have_cfg)
        return m;
    const hs_model_config *c = &e->cfg;
    cJSON_AddStringToObject(m, "family", hs_family_name(c->family));
    cJSON_AddNumberToObject(m, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(m, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(m, "d_model", c->d_model);
    cJSON_AddNumberToObject(m, "n_ctx", c->n_ctx);
    cJSON_AddBoolToObject(m, "mla", c->mla);
    cJSON_AddNumberToObject(m, "window", c->window);
    cJSON_AddItemToObject(m, "n_head", cJSON_CreateIntArray(c->n_head, c->n_layer));
    cJSON_AddItemToObject(m, "n_kv_head", cJSON_CreateIntArray(c->n_kv_head, c->n_layer));
    return m;
}

static cJSON *layer_json(exporter *e, int k)
{
    const hs_maps_layer_info *L = &e->in->layers[e->li[k]];
    cJSON *o = cJSON_CreateObject(), *kv = cJSON_CreateArray();
    static const char *const attn[] = { NULL, "enc", "dec", "cross" };
    cJSON_AddNumberToObject(o, "layer", L->layer);
    if (L->attn > 0 && L->attn < 4) /* an encoder-decoder's: its layer within the stack */
        cJSON_AddStringToObject(o, "attn", attn[L->attn]);
    cJSON_AddItemToObject(o, "heads", cJSON_CreateIntArray(L->heads, L->nh));
    cJSON_AddNumberToObject(o, "q0", L->q0);
    cJSON_AddNumberToObject(o, "nq", L->nq);
    cJSON_AddNumberToObject(o, "S", L->S);
    cJSON_AddStringToObject(o, "stored", L->half ? "f16" : "f32");
    /* GQA: query head h reads kv head h / (H / G) (llama2.c's kv_mul) */
    int H = 0, G = 0;
    const int ml = L->layer + (L->attn > 1 && e->have_cfg ? e->cfg.enc_layers : 0);
    if (e->have_cfg && ml < e->cfg.n_layer)
        H = e->cfg.n_head[ml], G = e->cfg.n_kv_head[ml];
    for (int i = 0; i < L->nh; i++)
        cJSON_AddItemToArray(kv, cJSON_CreateNumber(H > 0 && G > 0 && H % G == 0
                                                       ? L->heads[i] / (H / G) : L->heads[i]));
    cJSON_AddNumberToObject(o, "n_head", H);
    cJSON_AddNumberToObject(o, "n_kv_head", G);
    cJSON_AddItemToObject(o, "kv_group", kv);
    return o;
}

/* Per-head scores a head panel shows, as SPEC §5, §11 and §15 name them (the
 * query-head ones: atp_k and atp_v are per key/value head); each
 * also with the suffix _control (its random-init control) where a run has it. */
static const char *const METRICS[] = {
    "induction",  "duplicate_token", "prev_token",      "copying",
    "entropy",    "self",            "next_token",      "first_token",
    "delim",      "distance",        "loss_delta_zero", "loss_delta_mean",
    "loss_delta_resample", "importance", "importance_raw", "patch_z",
    "patch_pattern", "path_patch",   "dla",             "atp_z",
    "atp_pattern",   "atp_q",        "atp_star_z",      "atp_star_pattern",
    "atp_star_q",
};

/* One metric of one run as {name, kind, run, value[layer][head], stderr}
 * (null: absent or not finite). */
static cJSON *grid_json(const hs_metric_grid *g, const char *name, const hs_run_record *run)
{
    cJSON *o = cJSON_CreateObject(), *v = cJSON_CreateArray(), *se = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "kind", run->kind);
    cJSON_AddNumberToObject(o, "run", (double)run->run_id);
    for (int a = 0; a < g->n_layer; a++) {
        cJSON *rv = cJSON_CreateArray(), *rs = cJSON_CreateArray();
        for (int h = 0; h < g->n_head; h++) {
            const size_t c = (size_t)a * g->n_head + h;
            const hs_metric_value *x = &g->cell[c];
            int ok = g->present[c] && isfinite(x->value);
            cJSON_AddItemToArray(rv, ok ? cJSON_CreateNumber(x->value) : cJSON_CreateNull());
            ok = ok && isfinite(x->stderr_value);
            cJSON_AddItemToArray(rs, ok ? cJSON_CreateNumber(x->stderr_value) : cJSON_CreateNull());
        }
        cJSON_AddItemToArray(v, rv);
        cJSON_AddItemToArray(se, rs);
    }
    cJSON_AddItemToObject(o, "value", v);
    cJSON_AddItemToObject(o, "stderr", se);
    return o;
}

/* For each (run kind, metric), the latest complete run on this model that
 * holds it, as {name, kind, run, value[layer][head] (null: absent), stderr}. */
static cJSON *metrics_json(exporter *e, int *count)
{
    cJSON *arr = cJSON_CreateArray();
    *count = 0;
    hs_run_list l = { 0 };
    if (!e->rq->ix || hs_index_runs(e->rq->ix, NULL, "complete", &l))
        return arr;
    const int nm = (int)(sizeof METRICS / sizeof METRICS[0]);
    /* in the order of METRICS, each beside its control, the latest run first */
    for (int m = 0; m < 2 * nm; m++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", METRICS[m / 2], m % 2 ? "_control" : "");
        for (int i = l.n - 1; i >= 0; i--) {
            const hs_run_record *run = &l.runs[i];
            int chosen = !e->nruns;
            for (int k = 0; k < e->nruns; k++)
                chosen |= e->runs[k] == run->run_id;
            if (!chosen || !run->model_sha256 || strcmp(run->model_sha256, e->in->model_sha256) ||
                !run->kind)
                continue;
            int seen = 0;
            cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                seen |= !strcmp(cJSON_GetObjectItem(it, "name")->valuestring, name) &&
                        !strcmp(cJSON_GetObjectItem(it, "kind")->valuestring, run->kind);
            }
            hs_metric_grid g = { 0 };
            if (seen || hs_index_metric_grid(e->rq->ix, run->run_id, name, &g) || !g.count) {
                hs_metric_grid_free(&g);
                continue;
            }
            cJSON_AddItemToArray(arr, grid_json(&g, name, run));
            (*count)++;
            hs_metric_grid_free(&g);
        }
    }
    hs_run_list_free(&l);
    return arr;
}

static int write_data(exporter *e, cJSON *blocks, hs_viewer_summary *sum)
{
    cJSON *root = cJSON_CreateObject(), *seqs = cJSON_CreateArray(), *lays = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "format", "headscope-viewer");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "source", e->rq->maps);
    cJSON_AddStringToObject(root, "dtype", e->rq->half ? "f16" : "u8");
    cJSON_AddNumberToObject(root, "seq_len", e->in->seq_len);
    cJSON_AddNumberToObject(root, "n_seq_in_file", (double)e->in->n_seq);
    cJSON_AddBoolToObject(root, "seq2seq", e->in->seq2seq);
    if (e->rq->compare) /* view --compare: compare/data.js holds the second file's */
        cJSON_AddBoolToObject(root, "compare", 1);
    cJSON_AddItemToObject(root, "model", model_json(e));
    int ok = 1, from_file = 0;
    for (int i = 0; ok && i < e->nseq; i++) {
        cJSON *s = sequence_json(e, e->seq[i], &from_file);
        ok = s != NULL;
        if (s)
            cJSON_AddItemToArray(seqs, s);
        sum->token_text |= from_file;
    }
    cJSON_AddStringToObject(root, "token_source", sum->token_text ? "token_text" :
                            e->have_cfg && e->cfg.vocab_size == 256 ? "bytes" : "ids");
    cJSON_AddItemToObject(root, "sequences", seqs);
    for (int k = 0; k < e->nli; k++)
        cJSON_AddItemToArray(lays, layer_json(e, k));
    cJSON_AddItemToObject(root, "layers", lays);
    cJSON_AddItemToObject(root, "blocks", blocks);
    cJSON_AddItemToObject(root, "metrics", metrics_json(e, &sum->metrics));
    cJSON *focus = cJSON_CreateArray();
    for (int i = 0; i < e->nfocus; i++)
        cJSON_AddItemToArray(focus, cJSON_CreateIntArray(e->focus[i], 2));
    cJSON_AddItemToObject(root, "focus", focus);
    char *txt = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!txt)
        return ok ? hs_fail(HS_ENOMEM, "viewer index") : HS_EFORMAT;
    int rc = fprintf(e->f[OUT_DATA], "HS_DATA%s = %s;\n", e->rq->var ? e->rq->var : "", txt) < 0
                 ? hs_fail(HS_EIO, "%s: write failed: %s", e->tmp[OUT_DATA], strerror(errno)) : HS_OK;
    free(txt);
    return rc;
}

static int export_all(exporter *e, hs_viewer_summary *sum)
{
    size_t cells = 0, block_max = 0; /* a map's; the bytes encoded at once (a long map: a row file's) */
    for (int k = 0; k < e->nli; k++) {
        const hs_maps_layer_info *L = &e->in->layers[e->li[k]];
        const size_t rows = is_long(e, L) && L->nq > ROWS_PER_FILE ? ROWS_PER_FILE : (size_t)L->nq,
                     b = rows * 4 + rows * (size_t)L->S * 2;
        cells = (size_t)L->nq * L->S > cells ? (size_t)L->nq * L->S : cells;
        block_max = b > block_max ? b : block_max;
    }
    e->map = hs_calloc(cells, sizeof *e->map, "viewer map");
    e->buf = hs_calloc(block_max, 1, "viewer block");
    e->b64 = hs_calloc(block_max / 3 * 4 + 8, 1, "viewer base64");
    if (!e->map || !e->buf || !e->b64)
        return HS_ENOMEM;
    cJSON *blocks = cJSON_CreateArray();
    int rc = fprintf(e->f[OUT_JS], "HS_MAPS_B64%s = [\n", e->rq->var ? e->rq->var : "") < 0
                 ? hs_fail(HS_EIO, "maps.js") : HS_OK;
    for (int si = 0; !rc && si < e->nseq; si++)
        for (int k = 0; !rc && k < e->nli; k++)
            for (int hi = 0; !rc && hi < e->in->layers[e->li[k]].nh; hi++)
                rc = write_block(e, blocks, si, k, hi);
    if (!rc && fputs("];\n", e->f[OUT_JS]) < 0)
        rc = hs_fail(HS_EIO, "%s: write failed", e->tmp[OUT_JS]);
    if (rc) {
        cJSON_Delete(blocks);
        return rc;
    }
    sum->blocks = e->blocks, sum->sequences = e->nseq, sum->layers = e->nli;
    return write_data(e, blocks, sum);
}

/* The row folders (DIR/rows.tmp.PID.XXXXXX) an interrupted export left. */
static void remove_stale_rows(const char *dir, const char *rows)
{
    DIR *d = opendir(dir);
    for (struct dirent *en; d && (en = readdir(d));) {
        char p[1400];
        if (hs_tmp_stale(rows, en->d_name) &&
            snprintf(p, sizeof p, "%s/%s", dir, en->d_name) < (int)sizeof p)
            hs_remove_flat_dir(p);
    }
    if (d)
        closedir(d);
}

static long long file_bytes(FILE *f)
{
    return fseek(f, 0, SEEK_END) ? -1 : ftell(f);
}

int hs_viewer_export(const hs_viewer_request *rq, hs_viewer_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    exporter e = { .rq = rq };
    int rc = hs_maps_open(&e.r, rq->maps);
    if (rc)
        return rc;
    e.in = hs_maps_get_info(e.r);
    e.have_cfg = e.in->model_config && !hs_config_parse(&e.cfg, e.in->model_config, rq->maps);
    const int features = e.in->features && !e.in->n_layers;
    int one;
    long long run = e.in->features_run;
    if (features && !rq->ix)
        rc = hs_fail(HS_EINVAL, "--db: a features file's page reads its run's rows (run %d) "
                     "from the index", e.in->features_run);
    else if (features && rq->runs)
        rc = parse_list(rq->runs, INT64_MAX, "--runs", &run, 1, &one);
    else if (!features)
        rc = select_all(&e);
    char final[OUT_N][1100];
    for (int i = 0; i < OUT_N; i++)
        snprintf(final[i], sizeof final[i], "%s/%s", rq->dir, OUT_NAME[i]);
    for (int i = 0; !rc && i < OUT_N; i++)
        if (!(e.f[i] = hs_tmp_fopen(final[i], e.tmp[i], sizeof e.tmp[i])))
            rc = HS_EIO; /* the message names the file */
    if (!rc && features) { /* the page's data alone: no maps */
        rc = fputs("HS_MAPS_B64 = [];\n", e.f[OUT_JS]) < 0 ? hs_fail(HS_EIO, "maps.js") : HS_OK;
        if (!rc)
            rc = hs_viewer_features_data(e.f[OUT_DATA], e.tmp[OUT_DATA], e.r, rq->ix, run,
                                         rq->maps, &sum->features);
    } else if (!rc) {
        rc = export_all(&e, sum);
    }
    long long *bytes[OUT_N] = { &sum->bin_bytes, &sum->js_bytes, &sum->data_bytes };
    for (int i = 0; i < OUT_N; i++) {
        if (!e.f[i])
            continue;
        *bytes[i] = file_bytes(e.f[i]);
        if (fclose(e.f[i]) && !rc)
            rc = hs_fail(HS_EIO, "%s: write failed: %s", e.tmp[i], strerror(errno));
    }
    /* the row files' folder over rows/ (an earlier export's removed), then
     * each file over its final name (hs_tmp_commit removes the temporary
     * when it cannot); after a failure the rest are removed, nothing moved */
    char rows[1100];
    snprintf(rows, sizeof rows, "%s/rows", rq->dir);
    if (!rc) {
        hs_remove_flat_dir(rows);
        remove_stale_rows(rq->dir, rows);
    }
    if (!rc && e.rows_tmp[0] && (chmod(e.rows_tmp, 0755) || rename(e.rows_tmp, rows)))
        rc = hs_fail(HS_EIO, "%s: cannot move the row files there: %s", rows, strerror(errno));
    if (rc)
        hs_remove_flat_dir(e.rows_tmp);
    sum->rows_bytes = e.rows_bytes;
    for (int i = 0; i < OUT_N; i++)
        if (!rc)
            rc = hs_tmp_commit(e.tmp[i], final[i], 1);
        else if (e.f[i])
            remove(e.tmp[i]);
    free(e.map), free(e.buf), free(e.b64);
    hs_maps_close(e.r);
    return rc;
}
