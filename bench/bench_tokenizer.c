/* Tokenizer throughput: encodes one text file with one tokenizer, R times,
 * on the calling thread, and prints the median MB/s (the open and the file
 * read excluded) as one JSON line:
 *   {"tokenizer":PATH,"bytes":N,"tokens":M,"reps":R,"median_s":S,"mb_per_s":X}
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

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    size_t n;
    char *text = slurp(argv[2], &n);
    hs_tokenizer *tok;
    if (!text || hs_tokenizer_open(&tok, argv[1])) {
        fprintf(stderr, "bench_tokenizer: %s\n", text ? hs_last_error() : "cannot read the text");
        return 1;
    }
    double t[64];
    size_t count = 0;
    reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        double t0 = now_s();
        if (hs_tokenizer_encode(tok, text, n, 0, &ids, &count)) {
            fprintf(stderr, "bench_tokenizer: %s\n", hs_last_error());
            return 1;
        }
        t[r] = now_s() - t0;
        free(ids);
    }
    double med = median(t, reps);
    printf("{\"tokenizer\":\"%s\",\"bytes\":%zu,\"tokens\":%zu,\"reps\":%d,\"median_s\":%.6f,"
           "\"mb_per_s\":%.3f}\n", argv[1], n, count, reps, med, n / med / 1e6);
    hs_tokenizer_free(tok);
    free(text);
    return 0;
}
