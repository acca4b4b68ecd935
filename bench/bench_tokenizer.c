/* Tokenizer throughput: encodes one text file with one tokenizer, R times,
 * on the calling thread, and prints the median MB/s (the open and the file
 * read excluded) as one JSON line:
 *   {"tokenizer":PATH,"bytes":N,"tokens":M,"reps":R,"median_s":S,"mb_per_s":X}
 * A tokenizer that refuses the text (its work budget, a file it will not
 * open) is a result too, for the hostile files of bench/tokenizer.sh: then
 *   {"tokenizer":PATH,"bytes":N,"reps":R,"median_s":S,"refused":"open|encode","message":M}
 * with the median time the refusal took (the open included when the open
 * refuses), and the exit status is 0.
 *
 *   bench_tokenizer TOKENIZER TEXT [REPS]
 */
#include <stdint.h>

#include "bench_util.h"
#include "tokenizer.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = buf ? (size_t)size : 0;
    return buf;
}

/* s as a JSON string (the message quotes patterns: quotes, backslashes) */
static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if (*c < 0x20)
            printf("\\u%04x", *c);
        else
            putchar(*c);
    putchar('"');
}

static void refused(const char *tok, size_t n, int reps, double *t, const char *at)
{
    printf("{\"tokenizer\":");
    json_str(tok);
    printf(",\"bytes\":%zu,\"reps\":%d,\"median_s\":%.6f,\"refused\":\"%s\",\"message\":", n,
           reps, median(t, reps), at);
    json_str(hs_last_error());
    printf("}\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    size_t n;
    char *text = slurp(argv[2], &n);
    if (!text) {
        fprintf(stderr, "bench_tokenizer: %s: cannot read the text\n", argv[2]);
        return 1;
    }
    double t[64];
    hs_tokenizer *tok = NULL;
    for (int r = 0; r < reps; r++) { /* a file refused at open: the open is what is timed */
        double t0 = now_s();
        if (!hs_tokenizer_open(&tok, argv[1]))
            break;
        t[r] = now_s() - t0;
        if (r == reps - 1) {
            refused(argv[1], n, reps, t, "open");
            free(text);
            return 0;
        }
    }
    size_t count = 0;
    int refusals = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        double t0 = now_s();
        int rc = hs_tokenizer_encode(tok, text, n, 0, &ids, &count);
        t[r] = now_s() - t0;
        if (!rc)
            free(ids);
        refusals += rc != HS_OK;
    }
    double med = median(t, reps);
    if (refusals)
        refused(argv[1], n, reps, t, "encode");
    else {
        printf("{\"tokenizer\":");
        json_str(argv[1]);
        printf(",\"bytes\":%zu,\"tokens\":%zu,\"reps\":%d,\"median_s\":%.6f,\"mb_per_s\":%.3f}\n",
               n, count, reps, med, n / med / 1e6);
    }
    hs_tokenizer_free(tok);
    free(text);
    return 0;
}
