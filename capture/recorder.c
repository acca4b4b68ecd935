#include "recorder.h"

#include <stdlib.h>

typedef struct {
    const hs_map_sink *sink;
    const unsigned char *layer_on;
} record_ctx;

static int on_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    const record_ctx *r = ctx;
    (void)T;
    if (r->layer_on && !r->layer_on[layer])
        return HS_OK;
    return r->sink->write_maps(r->sink->ctx, layer, att, B, H);
}

int hs_record(const hs_model *m, hs_batch_fn next, void *batch_ctx, const hs_map_sink *sink,
              const hs_record_opts *o)
{
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, o->B, o->T, HS_ACTS_MAPS);
    if (rc)
        return rc;
    int32_t *in = hs_calloc((size_t)o->B * o->T, sizeof(int32_t), "capture inputs");
    if (!in) {
        hs_acts_free(&a);
        return HS_ENOMEM;
    }
    record_ctx rctx = { sink, o->layer_on };
    hs_hooks hooks = { .ctx = &rctx, .on_maps = on_maps };
    for (size_t i = 0; !rc && i < o->n_batches; i++) {
        if (o->stop && *o->stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %zu of %zu batches", i, o->n_batches);
            break;
        }
        rc = next(batch_ctx, i, in);
        if (!rc)
            rc = sink->write_tokens(sink->ctx, in, o->B);
        if (!rc)
            rc = hs_forward(&a, m, in, NULL, &hooks);
        if (!rc && o->progress)
            o->progress(o->progress_ctx, i + 1, o->n_batches);
    }
    free(in);
    hs_acts_free(&a);
    return rc;
}
