/* pytorch_model.bin (model/checkpoint/pytorch.c, pickle.c): the fuzzed bytes
 * as DIR/pytorch_model.bin beside tests/fixtures/models/tinylm_h1's
 * config.json: hs_pt_open (every tensor's first and last element read, its
 * pages released) and hs_checkpoint_load through the same reader. The seeds
 * (tests/fuzz/corpus/pytorch/, tests/fuzz/pytorch_corpus.sh) are torch's own
 * zip and legacy files and the hand-written hostile ones of
 * tests/pytorch_hostile.py. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fuzz_util.h"
#include "pytorch.h"

#define FIXED HS_FIXTURE_DIR "/models/tinylm_h1/"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int copied;
    if (!copied && hs_fuzz_copy(FIXED "config.json", "config.json") != 0) abort();
    copied = 1;
    const char *path = hs_fuzz_write("pytorch_model.bin", data, size);
    hs_safetensors st;
    if (hs_pt_open(&st, path) == HS_OK) {
        for (int i = 0; i < st.n; i++) {
            const hs_st_tensor *t = &st.t[i];
            const size_t len = t->end - t->begin;
            if (t->dtype != HS_DT_OTHER && len >= hs_dtype_bytes(t->dtype)) {
                volatile double v = hs_st_get(&st, t, 0) +
                                    hs_st_get(&st, t, len / hs_dtype_bytes(t->dtype) - 1);
                (void)v;
            }
            hs_st_release(&st, t);
        }
        hs_st_close(&st);
    }
    hs_model m;
    if (hs_checkpoint_load(&m, hs_fuzz_dir()) == HS_OK) hs_model_free(&m);
    return 0;
}
