/* Loads a checkpoint, runs one forward over a text with a map observer, and
 * prints the mean attention entropy (nats) of one head. The text goes
 * through the model directory's tokenizer (tokenizer.json, or vocab.json +
 * merges.txt); a directory without one is read as byte-level (each byte one
 * token, said on stderr), a byte the vocabulary does not hold refused.
 *
 *   cc head_entropy.c $(pkg-config --cflags --libs headscope) -o head_entropy
 *   ./head_entropy MODEL_DIR LAYER HEAD "some text"
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "tokenizer.h"
#include "transformer.h"

typedef struct {
    int layer, head;
    double entropy; /* mean over queries */
} probe;

/* The text's tokens into *tok (malloc'd), their count into *T: the model
 * directory's tokenizer, or the bytes; 0, or 1 with the reason printed. */
static int tokens_of(int32_t **tok, int *T, const char *dir, const hs_model_config *c,
                     const char *text)
{
    size_t n = strlen(text);
    *tok = NULL;
    if (hs_tokenizer_present(dir)) {
        hs_tokenizer *tk;
        int rc = hs_tokenizer_open(&tk, dir);
        if (!rc)
            rc = hs_tokenizer_encode(tk, text, n, 1, tok, &n);
        if (!rc)
            hs_tokenizer_free(tk);
        if (rc)
            fprintf(stderr, "%s\n", hs_last_error());
        *T = (int)n;
        return rc != 0;
    }
    fprintf(stderr, "note: %s has no tokenizer: the text's bytes are its tokens\n", dir);
    for (size_t t = 0; t < n; t++)
        if ((unsigned char)text[t] >= c->vocab_size) {
            fprintf(stderr, "byte %u of the text is no id of the model's vocabulary of %d\n",
                    (unsigned char)text[t], c->vocab_size);
            return 1;
        }
    if (!(*tok = malloc(sizeof(int32_t) * (n ? n : 1))))
        return 1;
    for (size_t t = 0; t < n; t++)
        (*tok)[t] = (unsigned char)text[t]; /* byte-level tokens */
    *T = (int)n;
    return 0;
}

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
    int32_t *tok;
    int T;
    if (tokens_of(&tok, &T, argv[1], &m.cfg, argv[4])) {
        hs_model_free(&m);
        return 1;
    }
    if (p.layer < 0 || p.layer >= m.cfg.n_layer || p.head < 0 || p.head >= m.cfg.n_head[p.layer] ||
        T < 1 || T > m.cfg.n_ctx) {
        fprintf(stderr, "layer/head out of range, or the text not 1..%d tokens (%d)\n",
                m.cfg.n_ctx, T);
        free(tok);
        hs_model_free(&m);
        return 2;
    }
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
