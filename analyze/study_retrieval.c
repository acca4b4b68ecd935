/* The retrieval study (study_retrieval.h): Wu et al.'s needle grid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "decode.h"
#include "json.h"
#include "metrics.h"
#include "rng.h"
#include "study_retrieval.h"
#include "utf8.h"

enum { EXTRA_STEPS = 8 }; /* decoding runs |answer| + 8 steps, never stopping early */

typedef struct {
    int32_t *needle, *question;
    int nn, nq, na; /* na: the answer's tokens, which set the steps */
    char *answer;
    int line;
} needle;

typedef struct {
    needle *v;
    int n;
} needle_set;

static void needles_free(needle_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i].needle), free(s->v[i].question), free(s->v[i].answer);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The tokens of line's string `key`, without special tokens (*n >= 1). */
static int needle_text(const cJSON *obj, const char *key, const hs_tokenizer *tk,
                       const char *path, int line, int32_t **ids, int *n, char **copy)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || !*v->valuestring)
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" must be a non-empty string", path, line, key);
    size_t got = 0;
    const size_t len = strlen(v->valuestring);
    int rc = HS_OK;
    if (tk)
        rc = hs_tokenizer_encode(tk, v->valuestring, len, 0, ids, &got);
    else if ((*ids = hs_calloc(len, sizeof **ids, "needle"))) /* a byte-level model's bytes */
        for (got = 0; got < len; got++)
            (*ids)[got] = (unsigned char)v->valuestring[got];
    else
        rc = HS_ENOMEM;
    if (rc)
        return hs_fail(rc, "%s:%d: \"%s\": %s", path, line, key, hs_last_error());
    *n = (int)got;
    if (!got)
        return hs_fail(HS_EFORMAT, "%s:%d: \"%s\" encodes to no token", path, line, key);
    if (copy && !(*copy = strdup(v->valuestring)))
        return hs_fail(HS_ENOMEM, "%s:%d: out of memory", path, line);
    return HS_OK;
}

static int parse_needle(needle *nd, const char *text, size_t len, const hs_tokenizer *tk,
                        int vocab, const char *path, int line)
{
    char what[1100];
    snprintf(what, sizeof what, "%s:%d", path, line);
    cJSON *obj;
    int rc = hs_json_parse(&obj, text, len, what);
    if (rc)
        return rc;
    nd->line = line;
    if (!cJSON_IsObject(obj))
        rc = hs_fail(HS_EFORMAT, "%s: not a JSON object with \"needle\", \"question\" and "
                     "\"answer\"", what);
    if (!rc)
        rc = needle_text(obj, "needle", tk, path, line, &nd->needle, &nd->nn, NULL);
    if (!rc)
        rc = needle_text(obj, "question", tk, path, line, &nd->question, &nd->nq, NULL);
    int32_t *answer = NULL;
    if (!rc)
        rc = needle_text(obj, "answer", tk, path, line, &answer, &nd->na, &nd->answer);
    free(answer);
    cJSON_Delete(obj);
    const int32_t *seqs[2] = { nd->needle, nd->question };
    const int lens[2] = { nd->nn, nd->nq };
    for (int k = 0; !rc && k < 2; k++)
        for (int i = 0; !rc && i < lens[k]; i++)
            if (seqs[k][i] >= vocab)
                rc = hs_fail(HS_EINVAL, "%s: token %d is outside the model's vocabulary (%d)",
                             what, seqs[k][i], vocab);
    if (!rc && hs_rouge1_recall(nd->answer, nd->answer) == 0)
        rc = hs_fail(HS_EFORMAT, "%s: \"answer\" has no word (ROUGE-1 splits at whitespace)",
                     what);
    return rc;
}

static int needles_load(needle_set *s, const char *path, const hs_tokenizer *tk, int vocab)
{
    memset(s, 0, sizeof *s);
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return HS_EIO;
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t got;
    int rc = HS_OK, line = 0, cap = 0;
    while (!rc && (got = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        if (strspn(buf, " \t\r\n") == (size_t)got)
            continue;
        if (s->n == cap) {
            needle *v = realloc(s->v, sizeof *v * (size_t)(cap = cap ? 2 * cap : 16));
            if (!v) {
                rc = hs_fail(HS_ENOMEM, "%s: out of memory reading needles", path);
                break;
            }
            s->v = v;
        }
        memset(&s->v[s->n], 0, sizeof *s->v);
        rc = parse_needle(&s->v[s->n++], buf, (size_t)got, tk, vocab, path, line);
    }
    if (!rc && ferror(f))
        rc = hs_fail(HS_EIO, "%s: read error", path);
    if (!rc && !s->n)
        rc = hs_fail(HS_EFORMAT, "%s: no needle (one JSON object a line)", path);
    free(buf);
    fclose(f);
    if (rc)
        needles_free(s);
    return rc;
}

/* The prompt's positions and the whole run's (prompt + decoding steps). */
static int prompt_len(const needle *nd, int N)
{
    return N + nd->nn + nd->nq;
}

static int run_len(const needle *nd, int N)
{
    return prompt_len(nd, N) + nd->na + EXTRA_STEPS;
}

/* floor(D N / 100), robust to D's decimal not being exact in binary (14.3
 * is 14.2999...): a product within 1e-9 below an integer counts as it. */
static int needle_offset(int N, double D)
{
    const double x = D * N / 100;
    return (int)floor(x + 1e-9 * (x > 1 ? x : 1));
}

/* Python's str.isspace: the separators str.split() cuts at. */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The words of s as (start, length) pairs into w (room for strlen(s) / 2 +
 * 1): the count. A byte that starts no UTF-8 sequence is part of a word. */
static size_t split_words(const char *s, const char **w, size_t *len)
{
    size_t n = 0, left = strlen(s);
    const char *start = NULL;
    while (left) {
        uint32_t c;
        int k = hs_utf8_decode((const unsigned char *)s, left, &c);
        if (k < 1)
            k = 1, c = 0xfffd;
        if (py_space(c) && start)
            w[n] = start, len[n++] = (size_t)(s - start), start = NULL;
        else if (!py_space(c) && !start)
            start = s;
        s += k, left -= (size_t)k;
    }
    if (start)
        w[n] = start, len[n++] = (size_t)(s - start);
    return n;
}

double hs_rouge1_recall(const char *text, const char *reference)
{
    const char *src[2] = { text, reference };
    size_t nw[2] = { 0, 0 };
    const char **ws[2] = { NULL, NULL };
    size_t *wl[2] = { NULL, NULL };
    unsigned char *used = NULL;
    double recall = 0;
    for (int k = 0; k < 2; k++) {
        const size_t room = strlen(src[k]) / 2 + 1;
        ws[k] = malloc(sizeof *ws[k] * room);
        wl[k] = malloc(sizeof *wl[k] * room);
        if (!ws[k] || !wl[k])
            goto out;
        nw[k] = split_words(src[k], ws[k], wl[k]);
    }
    /* each reference word matched against a text word not matched before */
    if (!(used = calloc(nw[0] + 1, 1)))
        goto out;
    size_t hits = 0;
    for (size_t i = 0; i < nw[1]; i++)
        for (size_t j = 0; j < nw[0]; j++)
            if (!used[j] && wl[0][j] == wl[1][i] && !memcmp(ws[0][j], ws[1][i], wl[1][i])) {
                used[j] = 1, hits++;
                break;
            }
    recall = nw[1] ? (double)hits / (double)nw[1] : 0;
out:
    free(used);
    for (int k = 0; k < 2; k++)
        free(ws[k]), free(wl[k]);
    return recall;
}

int hs_retrieval_check(hs_retrieval_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    o->n_lengths = hs_parse_ints(o->lengths, o->length, HS_RETRIEVAL_MAX_GRID, 1, c->n_ctx, 0);
    if (o->n_lengths < 1)
        return hs_fail(HS_EINVAL, "--lengths '%s': at most %d haystack lengths in tokens, "
                       "each 1 .. n_ctx (%d), separated by commas",
                       o->lengths ? o->lengths : "", HS_RETRIEVAL_MAX_GRID, c->n_ctx);
    o->n_depths = hs_parse_doubles(o->depths, o->depth, HS_RETRIEVAL_MAX_GRID);
    for (int i = 0; o->n_depths > 0 && i < o->n_depths; i++)
        if (o->depth[i] > 100)
            o->n_depths = -1;
    if (o->n_depths < 1)
        return hs_fail(HS_EINVAL, "--depths '%s': at most %d needle depths in percent, each "
                       "0 .. 100, separated by commas", o->depths ? o->depths : "",
                       HS_RETRIEVAL_MAX_GRID);
    if (c->encoder || c->mla)
        return hs_fail(HS_EINVAL, "retrieval decodes and reads each head's attention row: %s",
                       c->encoder ? "an encoder does not decode" : "latent attention (MLA) "
                       "decodes through its latent, with no per-head row");
    if (!env->tk && c->vocab_size != 256)
        return hs_fail(HS_EINVAL, "retrieval needs the tokenizer (--tokenizer PATH, or one in "
                       "the model directory): the needles are text (a byte-level model of 256 "
                       "ids reads their bytes)");
    int heads = 0, longest = 0;
    for (int l = 0; l < c->n_layer; l++)
        heads += c->n_head[l];
    for (int i = 0; i < o->n_lengths; i++)
        longest = o->length[i] > longest ? o->length[i] : longest;
    if (o->mask_top < 0 || 2 * o->mask_top > heads)
        return hs_fail(HS_EINVAL, "--mask-top %d: the top K and K random other heads must "
                       "fit the model's %d heads", o->mask_top, heads);
    if (!env->data || env->data->n < (size_t)longest)
        return hs_fail(HS_EINVAL, "--haystack %s: %zu tokens, shorter than the longest of "
                       "--lengths (%d)", env->data_name ? env->data_name : "",
                       env->data ? env->data->n : 0, longest);
    needle_set ns;
    int rc = needles_load(&ns, o->needles, env->tk, c->vocab_size);
    if (rc == HS_EINVAL) /* the file, not an option's value */
        rc = HS_EFORMAT;
    for (int i = 0; !rc && i < ns.n; i++)
        if (run_len(&ns.v[i], longest) > c->n_ctx)
            rc = hs_fail(HS_EINVAL, "%s:%d: at --lengths %d the prompt (%d tokens with the "
                         "needle and the question) and %d decoding steps (the answer's %d "
                         "tokens + %d) exceed the model's context of %d positions",
                         o->needles, ns.v[i].line, longest, prompt_len(&ns.v[i], longest),
                         ns.v[i].na + EXTRA_STEPS, ns.v[i].na, EXTRA_STEPS, c->n_ctx);
    needles_free(&ns);
    return rc;
}

/* ---- the grid ------------------------------------------------------------ */

typedef struct {
    const hs_model *m;
    const hs_tokenizer *tk;
    const hs_tokens *hay;
    hs_decoder dec;
    int heads, max_needle;
    int32_t *seq;           /* prompt + decoded tokens of the current run */
    int32_t *text_ids;      /* the decoded tokens the tokenizer knows */
    int *where, **argmax;   /* (heads): each head's argmax position; per layer */
    unsigned char *copied;  /* (heads, max_needle): needle positions copied this run */
    const hs_real **gates;  /* per layer (NULL: none) */
} grid;

static void grid_free(grid *g)
{
    hs_decoder_free(&g->dec);
    free(g->seq), free(g->text_ids), free(g->where), free(g->argmax), free(g->copied), free(g->gates);
}

static int grid_init(grid *g, const hs_study_env *env, const needle_set *ns,
                     const hs_retrieval_opts *o)
{
    memset(g, 0, sizeof *g);
    const hs_model_config *c = &env->m->cfg;
    g->m = env->m, g->tk = env->tk, g->hay = env->data;
    int max_len = 0;
    for (int i = 0; i < ns->n; i++) {
        g->max_needle = ns->v[i].nn > g->max_needle ? ns->v[i].nn : g->max_needle;
        for (int k = 0; k < o->n_lengths; k++)
            max_len = run_len(&ns->v[i], o->length[k]) > max_len ? run_len(&ns->v[i], o->length[k])
                                                                 : max_len;
    }
    for (int l = 0; l < c->n_layer; l++)
        g->heads += c->n_head[l];
    g->seq = hs_calloc((size_t)max_len, sizeof *g->seq, "retrieval sequence");
    g->text_ids = hs_calloc((size_t)max_len, sizeof *g->text_ids, "retrieval sequence");
    g->where = hs_calloc((size_t)g->heads, sizeof *g->where, "retrieval argmax");
    g->argmax = hs_calloc((size_t)c->n_layer, sizeof *g->argmax, "retrieval argmax");
    g->gates = hs_calloc((size_t)c->n_layer, sizeof *g->gates, "retrieval gates");
    g->copied = hs_calloc((size_t)g->heads * g->max_needle, 1, "retrieval copies");
    if (!g->seq || !g->text_ids || !g->where || !g->argmax || !g->gates || !g->copied)
        return HS_ENOMEM;
    for (int l = 0, k = 0; l < c->n_layer; k += c->n_head[l], l++)
        g->argmax[l] = g->where + k;
    return hs_decoder_init(&g->dec, env->m, max_len);
}

/* One run: the prompt of nd at length N and depth D decoded greedily;
 * *ok the ROUGE-1 test; with `watch`, copied[] the needle positions each
 * head copied (the copy rule of SPEC §18). */
static int run_one(grid *g, const needle *nd, int N, double D, int watch, int *ok)
{
    const int V = g->m->cfg.vocab_size, off = needle_offset(N, D), P = prompt_len(nd, N);
    const int steps = nd->na + EXTRA_STEPS;
    int32_t *s = g->seq;
    memcpy(s, g->hay->tok, sizeof *s * (size_t)off);
    memcpy(s + off, nd->needle, sizeof *s * (size_t)nd->nn);
    memcpy(s + off + nd->nn, g->hay->tok + off, sizeof *s * (size_t)(N - off));
    memcpy(s + N + nd->nn, nd->question, sizeof *s * (size_t)nd->nq);
    memset(g->copied, 0, (size_t)g->heads * g->max_needle);
    g->dec.watch = (hs_decoder_watch){ g->gates, watch ? g->argmax : NULL };
    hs_decoder_reset(&g->dec);
    const hs_sample_opts greedy = { 0 };
    int rc = hs_decoder_feed(&g->dec, s, P);
    for (int i = 0; !rc && i < steps; i++) {
        if ((rc = hs_decoder_logits_finite(&g->dec, i + 1)))
            return rc;
        const int32_t w = s[P + i] = hs_sample_token(g->dec.logits, V, &greedy, NULL);
        for (int h = 0; watch && h < g->heads; h++) {
            const int j = g->where[h];
            if (j >= off && j < off + nd->nn && s[j] == w)
                g->copied[(size_t)h * g->max_needle + (j - off)] = 1;
        }
        if (i + 1 < steps)
            rc = hs_decoder_feed(&g->dec, &s[P + i], 1);
    }
    /* ids past the tokenizer's vocabulary (a model's padded rows) decode to
     * nothing, as transformers' decode skips them */
    int kept = 0;
    for (int i = 0; !rc && i < steps; i++)
        if (!g->tk || s[P + i] < hs_tokenizer_vocab_size(g->tk))
            g->text_ids[kept++] = s[P + i];
    char *text = NULL;
    if (!rc && g->tk && !(text = hs_tokenizer_decode(g->tk, g->text_ids, (size_t)kept, 1)))
        rc = HS_EINVAL; /* the decoder's message */
    else if (!rc && !g->tk && !(text = hs_calloc((size_t)kept + 1, 1, "decoded text")))
        rc = HS_ENOMEM;
    for (int i = 0; !rc && !g->tk && i < kept; i++) /* a byte-level model's bytes */
        text[i] = (char)g->text_ids[i];
    if (!rc)
        *ok = hs_rouge1_recall(text, nd->answer) > 0.5;
    free(text);
    return rc;
}

/* The whole grid with g's gates: *succeeded runs; with acc (heads),
 * each head's per-run copied share accumulated (0 for a failed run). */
static int run_grid(grid *g, const needle_set *ns, const hs_retrieval_opts *o,
                    const hs_study_io *io, int *succeeded, hs_welford *acc)
{
    const long total = (long)ns->n * o->n_lengths * o->n_depths;
    long done = 0;
    *succeeded = 0;
    int rc = HS_OK;
    for (int i = 0; !rc && i < ns->n; i++)
        for (int a = 0; !rc && a < o->n_lengths; a++)
            for (int b = 0; !rc && b < o->n_depths; b++) {
                if (io->stop && *io->stop)
                    return HS_EINTR;
                const needle *nd = &ns->v[i];
                int ok = 0;
                rc = run_one(g, nd, o->length[a], o->depth[b], acc != NULL, &ok);
                *succeeded += ok;
                for (int h = 0; !rc && acc && h < g->heads; h++) {
                    int copied = 0;
                    for (int j = 0; j < nd->nn; j++)
                        copied += g->copied[(size_t)h * g->max_needle + j];
                    hs_welford_add(&acc[h], ok ? (double)copied / nd->nn : 0);
                }
                if (io->progress)
                    io->progress(io->ctx, (size_t)++done, (size_t)total);
            }
    return rc;
}

/* A head's score and flat index, ranked by descending score, ties to the
 * lower (layer, head). */
typedef struct {
    double score;
    int k;
} ranked;

static int by_score(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    return a->score != b->score ? (a->score < b->score) - (a->score > b->score)
                                : (a->k > b->k) - (a->k < b->k);
}

static int by_index(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    return (a->k > b->k) - (a->k < b->k);
}

static hs_head_ref head_ref(const hs_model_config *c, int k)
{
    int l = 0;
    while (k >= c->n_head[l])
        k -= c->n_head[l++];
    return (hs_head_ref){ l, k };
}

/* The grid with the heads `which` (K flat indices) masked: z set to 0. */
static int masked_grid(grid *g, const needle_set *ns, const hs_retrieval_opts *o,
                       const hs_study_io *io, const int *which, int K, hs_head_ref *refs,
                       int *succeeded)
{
    const hs_model_config *c = &g->m->cfg;
    hs_real *ones = hs_calloc((size_t)g->heads, sizeof *ones, "retrieval gates");
    if (!ones)
        return HS_ENOMEM;
    for (int h = 0; h < g->heads; h++)
        ones[h] = 1;
    for (int k = 0; k < K; k++)
        ones[which[k]] = 0, refs[k] = head_ref(c, which[k]);
    for (int l = 0, k = 0; l < c->n_layer; k += c->n_head[l], l++)
        g->gates[l] = ones + k;
    const int rc = run_grid(g, ns, o, io, succeeded, NULL);
    for (int l = 0; l < c->n_layer; l++)
        g->gates[l] = NULL;
    free(ones);
    return rc;
}

/* The causal check: the top K heads, then K random others (seeded). */
static int causal_check(hs_retrieval_result *r, grid *g, const needle_set *ns,
                        const hs_retrieval_opts *o, const hs_study_env *env, const int *order)
{
    const int K = o->mask_top, H = g->heads;
    r->k = K;
    r->top = hs_calloc((size_t)K, sizeof *r->top, "masked heads");
    r->random = hs_calloc((size_t)K, sizeof *r->random, "masked heads");
    int *others = hs_calloc((size_t)H, sizeof *others, "masked heads");
    int rc = r->top && r->random && others ? HS_OK : HS_ENOMEM;
    hs_study_phase(&env->io, "retrieval: top heads masked");
    if (!rc)
        rc = masked_grid(g, ns, o, &env->io, order, K, r->top, &r->top_succeeded);
    /* K of the other heads by a partial Fisher-Yates shuffle */
    hs_rng rng;
    hs_rng_seed(&rng, (unsigned long long)o->seed);
    const int n = H - K;
    for (int i = 0; !rc && i < n; i++)
        others[i] = order[K + i];
    for (int i = 0; !rc && i < K; i++) {
        const int j = i + (int)(hs_rng_uniform(&rng) * (n - i));
        const int t = others[i];
        others[i] = others[j], others[j] = t;
    }
    hs_study_phase(&env->io, "retrieval: random heads masked");
    if (!rc)
        rc = masked_grid(g, ns, o, &env->io, others, K, r->random, &r->random_succeeded);
    free(others);
    return rc;
}

/* What the run's cache costs (under its KV plan, if any): the decoder's
 * bytes at the longest run (r->cache_bytes, taken while it lived), and the
 * loss of the haystack's first N tokens (N the longest length, or what the
 * haystack holds past its first), a forward of its own once the decoder is
 * freed, so the two never hold memory at once. */
static int cost_rows(hs_retrieval_result *r, const hs_retrieval_opts *o, const hs_study_env *env)
{
    int N = 0;
    for (int i = 0; i < o->n_lengths; i++)
        N = o->length[i] > N ? o->length[i] : N;
    if ((size_t)N >= env->data->n)
        N = (int)env->data->n - 1;
    int rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(KV_CACHE_BYTES),
                               (double)r->cache_bytes, 0, 1);
    hs_eval_result e;
    hs_study_phase(&env->io, "retrieval: the haystack's loss");
    if (!rc && N > 0 && !(rc = hs_evaluate(&e, env->m, env->data, 1, N, 1, NULL, NULL, NULL))) {
        r->haystack_loss = e.loss;
        rc = hs_head_table_add(&r->table, -1, -1, HS_METRIC(HAYSTACK_LOSS), e.loss, e.stderr_loss,
                               (long long)e.tokens);
    }
    hs_study_phase(&env->io, NULL);
    return rc;
}

static int accuracy_row(hs_head_table *t, const char *name, int succeeded, int runs)
{
    const double p = (double)succeeded / runs;
    return hs_head_table_add(t, -1, -1, name, p, runs > 1 ? sqrt(p * (1 - p) / (runs - 1)) : 0,
                             runs);
}

int hs_retrieval_study(hs_retrieval_result *r, const hs_retrieval_opts *o,
                       const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    hs_retrieval_opts opts = *o; /* the check resolves the grid: it also stands alone */
    int rc = hs_retrieval_check(&opts, env);
    needle_set ns = { 0 };
    grid g = { 0 };
    hs_welford *acc = NULL;
    int *order = NULL;
    if (!rc)
        rc = needles_load(&ns, opts.needles, env->tk, env->m->cfg.vocab_size);
    if (!rc)
        rc = grid_init(&g, env, &ns, &opts);
    if (!rc) {
        acc = hs_calloc((size_t)g.heads, sizeof *acc, "retrieval scores");
        order = hs_calloc((size_t)g.heads, sizeof *order, "retrieval ranks");
        rc = acc && order ? HS_OK : HS_ENOMEM;
    }
    hs_study_phase(&env->io, "retrieval");
    if (!rc)
        rc = run_grid(&g, &ns, &opts, &env->io, &r->succeeded, acc);
    r->runs = ns.n * opts.n_lengths * opts.n_depths;
    r->heads = g.heads;
    ranked *rk = rc ? NULL : hs_calloc((size_t)g.heads, sizeof *rk, "retrieval ranks");
    if (!rc && !rk)
        rc = HS_ENOMEM;
    for (int h = 0; !rc && h < g.heads; h++)
        rk[h] = (ranked){ acc[h].mean, h };
    if (!rc)
        qsort(rk, (size_t)g.heads, sizeof *rk, by_score);
    for (int h = 0; !rc && h < g.heads; h++)
        order[h] = rk[h].k;
    free(rk);
    if (!rc) {
        r->best = head_ref(&env->m->cfg, order[0]);
        r->best_score = acc[order[0]].mean;
    }
    for (int h = 0; !rc && h < g.heads; h++) {
        const hs_head_ref hr = head_ref(&env->m->cfg, h);
        rc = hs_head_table_add_welford(&r->table, hr.layer, hr.head, HS_METRIC(RETRIEVAL),
                                       &acc[h]);
    }
    if (!rc)
        rc = accuracy_row(&r->table, HS_METRIC(NEEDLE_ACCURACY), r->succeeded, r->runs);
    r->cache_bytes = rc ? 0 : hs_decoder_cache_bytes(&g.dec);
    if (!rc && opts.mask_top > 0)
        rc = causal_check(r, &g, &ns, &opts, env, order);
    hs_study_phase(&env->io, NULL);
    if (!rc && opts.mask_top > 0)
        rc = accuracy_row(&r->table, HS_METRIC(NEEDLE_ACCURACY_MASKED_TOP), r->top_succeeded,
                          r->runs);
    if (!rc && opts.mask_top > 0)
        rc = accuracy_row(&r->table, HS_METRIC(NEEDLE_ACCURACY_MASKED_RANDOM),
                          r->random_succeeded, r->runs);
    free(acc), free(order);
    grid_free(&g);
    needles_free(&ns);
    if (!rc)
        rc = cost_rows(r, &opts, env);
    r->rows = (hs_study_rows){ .heads = &r->table };
    return rc;
}

void hs_retrieval_result_free(hs_retrieval_result *r)
{
    hs_head_table_free(&r->table);
    free(r->top), free(r->random);
    memset(r, 0, sizeof *r);
}

HS_STUDY_KIND(retrieval, hs_retrieval_check);

/* ---- kv-plan --------------------------------------------------------------- */

/* The run's heads per layer (a JSON array in run_params `key`) into n[]:
 * the layer count, or -1. */
static int run_heads(hs_index *ix, int64_t run, const char *key, int *n)
{
    char text[HS_MAX_LAYERS * 8];
    int found = 0, layers = -1;
    cJSON *a = NULL;
    if (hs_index_param_get(ix, run, key, text, sizeof text, &found) || !found ||
        hs_json_parse(&a, text, strlen(text), key) || !cJSON_IsArray(a))
        layers = -1;
    else
        layers = cJSON_GetArraySize(a);
    for (int l = 0; layers > 0 && l < layers; l++) {
        const cJSON *e = cJSON_GetArrayItem(a, l);
        if (l >= HS_MAX_LAYERS || !cJSON_IsNumber(e) || e->valuedouble < 1 ||
            e->valuedouble > HS_MAX_HEADS)
            layers = -1;
        else
            n[l] = (int)e->valuedouble;
    }
    cJSON_Delete(a);
    return layers;
}

static int plan_from_index(hs_kv_plan *p, hs_index *ix, int64_t run, double keep, int sink,
                           int window)
{
    memset(p, 0, sizeof *p);
    if (!(keep >= 0 && keep <= 1))
        return hs_fail(HS_EINVAL, "--keep-fraction %g: the share of kv heads kept, 0 .. 1", keep);
    if (sink < 0 || window < 1)
        return hs_fail(HS_EINVAL, "--sink %d --window %d: sinks >= 0 and a window >= 1", sink,
                       window);
    int nh[HS_MAX_LAYERS], ng[HS_MAX_LAYERS];
    const int L = run_heads(ix, run, "n_head", nh);
    if (L < 1 || run_heads(ix, run, "n_kv_head", ng) != L)
        return hs_fail(HS_EINVAL, "--run %lld: the run records no heads per layer (n_head, "
                       "n_kv_head): not a retrieval run of this version", (long long)run);
    hs_metric_grid g;
    int rc = hs_index_metric_grid(ix, run, HS_METRIC(RETRIEVAL), &g);
    if (rc)
        return rc;
    int total = 0;
    for (int l = 0; l < L; l++)
        total += ng[l];
    ranked *rk = hs_calloc((size_t)total, sizeof *rk, "kv plan ranks");
    p->full = hs_calloc((size_t)total + 1, sizeof *p->full, "kv plan");
    if (!rk || !p->full)
        rc = HS_ENOMEM;
    if (!rc && !g.count)
        rc = hs_fail(HS_EINVAL, "--run %lld has no retrieval scores (a `headscope retrieval` "
                     "run)", (long long)run);
    for (int l = 0, k = 0; !rc && l < L; l++)
        for (int j = 0; j < ng[l]; j++, k++) {
            rk[k] = (ranked){ -INFINITY, k };
            for (int h = j * (nh[l] / ng[l]); h < (j + 1) * (nh[l] / ng[l]); h++)
                if (l < g.n_layer && h < g.n_head && g.present[l * g.n_head + h] &&
                    g.cell[l * g.n_head + h].value > rk[k].score)
                    rk[k].score = g.cell[l * g.n_head + h].value;
        }
    if (!rc) {
        qsort(rk, (size_t)total, sizeof *rk, by_score);
        const double want = keep * total;
        p->n_full = (int)ceil(want - 1e-9 * (want > 1 ? want : 1));
        qsort(rk, (size_t)p->n_full, sizeof *rk, by_index); /* listed by layer, kv head */
        for (int i = 0; i < p->n_full; i++) {
            int l = 0, k = rk[i].k;
            while (k >= ng[l])
                k -= ng[l++];
            p->full[i][0] = l, p->full[i][1] = k;
        }
        p->sink = sink, p->window = window;
    }
    free(rk);
    hs_metric_grid_free(&g);
    if (rc)
        hs_kv_plan_free(p);
    return rc;
}

int hs_kv_plan_from_run(hs_kv_plan *p, const char *db, long long run, double keep, int sink,
                        int window)
{
    memset(p, 0, sizeof *p);
    hs_index *ix;
    int rc = hs_index_open_read(&ix, db);
    if (rc)
        return rc;
    rc = plan_from_index(p, ix, run, keep, sink, window);
    hs_index_close(ix);
    return rc;
}
