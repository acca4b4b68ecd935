/* The train-sae study (study_features.h): a TopK SAE on streamed activations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "metrics.h"
#include "rng.h"
#include "sae_train.h"
#include "study_features.h"
#include "transformer.h"

void hs_train_sae_result_free(hs_train_sae_result *r)
{
    free(r->curve);
    memset(r, 0, sizeof *r);
}

int hs_train_sae_check(hs_train_sae_opts *o, const hs_study_env *env)
{
    if (!o->hook || !o->out)
        return hs_fail(HS_EINVAL, "--hook NAME and --out DIR are required");
    if (env->task || env->pairs)
        return hs_fail(HS_EINVAL, "train-sae reads --data or --text");
    if (o->d_sae < 1 || o->d_sae > 1 << 20)
        return hs_fail(HS_EINVAL, "--d-sae %d: 1 .. %d", o->d_sae, 1 << 20);
    if (o->k < 1 || o->k > o->d_sae)
        return hs_fail(HS_EINVAL, "--k %d: 1 .. --d-sae (%d)", o->k, o->d_sae);
    if (o->aux_k < 0)
        return hs_fail(HS_EINVAL, "--aux-k %d: 0 or more", o->aux_k);
    if (o->steps < 1 || o->lr <= 0 || !isfinite(o->lr))
        return hs_fail(HS_EINVAL, "--steps %ld and --lr %g must be positive", o->steps, o->lr);
    if (o->b_dec_init && strcmp(o->b_dec_init, "median") && strcmp(o->b_dec_init, "mean"))
        return hs_fail(HS_EINVAL, "--b-dec-init %s: median or mean", o->b_dec_init);
    o->mean_init = o->b_dec_init && !strcmp(o->b_dec_init, "mean");
    const long step = (long)env->batch * env->seq_len;
    if (!o->buffer)
        o->buffer = 16 * step;
    if (o->buffer < step)
        return hs_fail(HS_EINVAL, "--buffer %ld: at least one step's --batch x --seq-len = %ld "
                       "tokens", o->buffer, step);
    if (!o->force && access(o->out, F_OK) == 0)
        return hs_fail(HS_EINVAL, "--out %s exists (--force replaces its files)", o->out);
    hs_sae_free(&o->sae);
    snprintf(o->sae.hook, sizeof o->sae.hook, "%s", o->hook);
    snprintf(o->sae.dir, sizeof o->sae.dir, "--hook");
    return hs_sae_bind(&o->sae, &env->m->cfg);
}

/* The activation stream: the data's batches (wrapping) through the hooked
 * forward into a buffer of rows, shuffled when refilled. */
typedef struct {
    const hs_study_env *env;
    const hs_sae *s;
    hs_acts a;
    hs_real *buf, *rows;  /* (cap, d) the buffer; (B T, d) one forward's rows */
    long cap, filled, used;
    size_t next, n_batches;
    int32_t *in, *tg;
    hs_rng rng;
} stream;

static int stream_refill(stream *st)
{
    const int d = st->s->d_in, B = st->env->batch, T = st->env->seq_len;
    const long n = (long)B * T;
    memmove(st->buf, st->buf + st->used * d, sizeof *st->buf * (size_t)(st->filled - st->used) * d);
    st->filled -= st->used, st->used = 0;
    hs_sae_hook h = { st->s, st->rows, 0, 1 }; /* the forward ends at the hook */
    hs_hooks hooks = { 0 };
    hooks.site[st->s->site] = (hs_site_hook){ hs_sae_site, &h };
    while (st->filled + n <= st->cap) {
        const size_t bi = st->next++ % st->n_batches;
        hs_batch_at(st->env->data, bi * (size_t)n, B, T, st->in, st->tg);
        int rc = hs_forward(&st->a, st->env->m, st->in, NULL, &hooks);
        if (rc && rc != HS_EDONE)
            return rc;
        memcpy(st->buf + st->filled * d, st->rows, sizeof *st->rows * (size_t)n * d);
        st->filled += n;
    }
    for (long i = st->filled - 1; i > 0; i--) { /* Fisher-Yates over rows */
        const long j = (long)(hs_rng_uniform(&st->rng) * (double)(i + 1));
        for (int c = 0; c < d && j != i; c++) {
            const hs_real t = st->buf[i * d + c];
            st->buf[i * d + c] = st->buf[j * d + c];
            st->buf[j * d + c] = t;
        }
    }
    return HS_OK;
}

/* The next n rows of the stream. */
static int stream_take(stream *st, long n, const hs_real **rows)
{
    int rc = st->filled - st->used < n ? stream_refill(st) : HS_OK;
    if (!rc && st->filled - st->used < n)
        rc = hs_fail(HS_EINVAL, "the buffer holds fewer than a step's rows");
    *rows = rc ? NULL : st->buf + st->used * st->s->d_in;
    st->used += n;
    return rc;
}

/* One step on the batch x (n rows, the same on every rank): each rank the
 * gradient of its share of the rows (hs_dist_range), the shares' gradients,
 * losses and fired latents summed across the ranks, then the same update
 * everywhere. One process: its share is the batch. */
static int sharded_step(hs_sae_trainer *t, hs_sae *s, const hs_real *x, long n,
                        unsigned char *fired, hs_sae_step_stats *ss)
{
    size_t lo, hi;
    hs_dist_range((size_t)n, hs_dist_rank(), &lo, &hi);
    int rc = hs_sae_train_grad(t, s, x, n, (long)lo, (long)hi, ss, fired);
    double sums[2] = { ss->mse, ss->aux };
    if (hs_dist_size() > 1) {
        rc = hs_dist_sum(rc, t->grad, t->n_params, sizeof(hs_real) == sizeof(double));
        rc = hs_dist_sum(rc, sums, 2, 1);
        rc = hs_dist_or(rc, fired, (size_t)s->d_sae);
        ss->mse = sums[0], ss->aux = sums[1];
        ss->explained_variance = hs_sae_explained_variance(x, n, s->d_in, sums[0] * (double)n);
    }
    if (rc)
        return rc;
    hs_sae_trainer_count(t, fired, n, s->d_sae);
    hs_sae_trainer_update(t, s);
    return HS_OK;
}

int hs_train_sae_study(hs_train_sae_result *r, const hs_train_sae_opts *o,
                       const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_sae *bound = &o->sae;
    const int B = env->batch, T = env->seq_len;
    const long n = (long)B * T;
    stream st = { env, NULL, { 0 }, NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, { 0 } };
    int rc = hs_batches_to_run(env->data, B, T, 0, &st.n_batches);
    hs_sae s = { 0 };
    if (!rc)
        rc = hs_sae_init_topk(&s, o->hook, bound->d_in, o->d_sae, o->k,
                              (unsigned long long)o->seed);
    if (!rc) { /* the bound hook's site */
        s.site = bound->site, s.layer = bound->layer, s.hook_layer = bound->hook_layer;
        s.z = bound->z, s.heads = bound->heads, s.dh = bound->dh;
        snprintf(s.dir, sizeof s.dir, "%s", o->out);
    }
    const hs_sae_train_opts to = { o->aux_k, 1.0 / 32, o->dead_tokens, o->lr, 0.9, 0.999, 1e-8 };
    hs_sae_trainer t = { 0 };
    if (!rc)
        rc = hs_sae_trainer_init(&t, &s, &to);
    st.s = &s;
    st.cap = o->buffer;
    hs_rng_seed(&st.rng, (unsigned long long)o->seed + 7);
    st.buf = hs_calloc((size_t)st.cap * s.d_in + 1, sizeof(hs_real), "activation buffer");
    st.rows = hs_calloc((size_t)n * s.d_in + 1, sizeof(hs_real), "activations");
    st.in = hs_calloc((size_t)n, sizeof(int32_t), "inputs");
    st.tg = hs_calloc((size_t)n, sizeof(int32_t), "targets");
    r->curve = hs_calloc((size_t)o->steps, sizeof *r->curve, "curve");
    unsigned char *fired = hs_calloc((size_t)o->d_sae, 1, "fired latents");
    if (!rc && !(st.buf && st.rows && st.in && st.tg && r->curve && fired))
        rc = HS_ENOMEM;
    if (!rc)
        rc = hs_acts_alloc(&st.a, &env->m->cfg, B, T, HS_ACTS_INFER);
    hs_study_phase(&env->io, "train-sae");
    const double t0 = hs_now();
    double ev_sum = 0;
    long ev_n = 0;
    for (long step = 0; !rc && step < o->steps; step++) {
        if (env->io.stop && *env->io.stop) {
            rc = hs_fail(HS_EINTR, "interrupted; %s was not written", o->out);
            break;
        }
        const hs_real *x;
        rc = stream_take(&st, n, &x);
        if (!rc && step == 0)
            hs_geometric_median(s.b_dec, x, n, s.d_in, o->mean_init ? 0 : 20);
        hs_sae_step_stats ss = { 0 };
        if (!rc)
            rc = sharded_step(&t, &s, x, n, fired, &ss);
        if (rc)
            break;
        r->curve[step] = (hs_curve_point){ step + 1, (double)(step + 1), ss.mse };
        r->steps = step + 1, r->tokens += n;
        r->mse = ss.mse, r->explained_variance = ss.explained_variance;
        if (step >= o->steps - (o->steps + 9) / 10)
            ev_sum += ss.explained_variance, ev_n++;
        if (env->io.progress)
            env->io.progress(env->io.ctx, (size_t)step + 1, (size_t)o->steps);
    }
    r->seconds = hs_now() - t0;
    hs_study_phase(&env->io, NULL);
    r->ev_last = ev_n ? ev_sum / ev_n : NAN;
    for (int j = 0; !rc && j < s.d_sae; j++)
        r->dead += t.since[j] >= o->dead_tokens;
    if (!rc && hs_dist_rank() == 0) /* rank 0 alone writes (dist.h) */
        rc = hs_sae_save(&s, o->out);
    r->rows = (hs_study_rows){ .n_curves = 1 };
    snprintf(r->rows.curve[0].name, sizeof r->rows.curve[0].name, "%s", HS_METRIC(TRAIN_LOSS));
    r->rows.curve[0].points = r->curve;
    r->rows.curve[0].n = (int)r->steps;
    hs_acts_free(&st.a);
    free(st.buf), free(st.rows), free(st.in), free(st.tg), free(fired);
    hs_sae_trainer_free(&t);
    hs_sae_free(&s);
    return rc;
}

HS_STUDY_KIND(train_sae, hs_train_sae_check);
