/* Loads a checkpoint, runs one forward over the bytes of a text with a map
 * observer, and prints the mean attention entropy (nats) of one head.
 *
 *   cc head_entropy.c $(pkg-config --cflags --libs headscope) -o head_entropy
 *   ./head_entropy MODEL_DIR LAYER HEAD "some text"
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "transformer.h"

typedef struct {
    int layer, head;
    double entropy; /* mean over queries */
} probe;

/* The map observer: att is (B, H, T, T) post-softmax; query t sees keys 0..t. */
static int on_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    probe *p = ctx;
    (void)B;
    if (layer != p->layer || p->head >= H)
        return 0;
    double sum = 0;
    for (int t = 0; t < T; t++) {
        const hs_real *row = att + ((size_t)p->head * T + t) * T;
        for (int s = 0; s <= t; s++)
            if (row[s] > 0)
                sum -= row[s] * log(row[s]);
    }
    p->entropy = sum / T;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL_DIR LAYER HEAD TEXT\n", argv[0]);
        return 2;
    }
    hs_model m;
    if (hs_checkpoint_load(&m, argv[1])) {
        fprintf(stderr, "%s\n", hs_last_error());
        return 1;
    }
    probe p = { atoi(argv[2]), atoi(argv[3]), NAN };
    const int T = (int)strlen(argv[4]);
    if (p.layer < 0 || p.layer >= m.cfg.n_layer || p.head < 0 || p.head >= m.cfg.n_head[p.layer] ||
        T < 1 || T > m.cfg.n_ctx) {
        fprintf(stderr, "layer/head out of range, or text not 1..%d bytes\n", m.cfg.n_ctx);
        hs_model_free(&m);
        return 2;
    }
    int32_t *tok = malloc(sizeof(int32_t) * T);
    for (int t = 0; tok && t < T; t++)
        tok[t] = (unsigned char)argv[4][t] % m.cfg.vocab_size; /* byte-level tokens */
    hs_acts a;
    hs_hooks hooks = { .ctx = &p, .on_maps = on_maps };
    int rc = !tok || hs_acts_alloc(&a, &m.cfg, 1, T, HS_ACTS_MAPS);
    if (!rc) {
        rc = hs_forward(&a, &m, tok, NULL, &hooks);
        hs_acts_free(&a);
    }
    if (rc)
        fprintf(stderr, "%s\n", hs_last_error());
    else
        printf("layer %d head %d: mean attention entropy %.4f nats over %d queries\n", p.layer,
               p.head, p.entropy, T);
    free(tok);
    hs_model_free(&m);
    return rc ? 1 : 0;
}
