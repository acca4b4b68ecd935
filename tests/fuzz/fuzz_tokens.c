/* Token shard read + batching (store/tokens.c): the fuzzed bytes as a shard,
 * read with hs_tokens_read; an accepted shard is cut into batches of a few
 * shapes (whole batches and training's wrapped ones), each batch read. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = hs_fuzz_write("shard.bin", data, size);
    hs_tokens t;
    if (hs_tokens_read(&t, path) != HS_OK) return 0;
    static const int shapes[][2] = {{1, 1}, {1, 4}, {2, 3}, {4, 16}, {3, 7}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int B = shapes[k][0], T = shapes[k][1];
        int32_t *in = malloc(sizeof *in * (size_t)B * (size_t)T);
        int32_t *tg = malloc(sizeof *tg * (size_t)B * (size_t)T);
        if (!in || !tg) abort();
        size_t nb = 0;
        if (hs_batches_to_run(&t, B, T, 8, &nb) == HS_OK) {
            if (nb > hs_batch_count(&t, B, T)) abort();
            for (size_t i = 0; i < nb; i++)
                hs_batch_at(&t, i * (size_t)B * (size_t)T, B, T, in, tg);
            for (size_t step = 0; step < 5; step++)
                hs_batch_at(&t, hs_batch_start_wrapped(&t, B, T, step), B, T, in, tg);
        }
        free(in);
        free(tg);
    }
    hs_tokens_free(&t);
    return 0;
}
