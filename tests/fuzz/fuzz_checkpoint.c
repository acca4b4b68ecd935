/* safetensors header + checkpoint load (model/safetensors.c, checkpoint.c):
 * the fuzzed bytes are model.safetensors next to a fixed, valid config.json
 * (tests/fixtures/models/tinylm_h1), loaded with hs_checkpoint_load; and the
 * same file opened on its own with hs_st_open, every tensor looked up. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (hs_fuzz_copy(HS_FIXTURE_DIR "/models/tinylm_h1/config.json", "config.json") != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = hs_fuzz_write("model.safetensors", data, size);
    hs_safetensors st;
    if (hs_st_open(&st, path) == HS_OK) {
        for (int i = 0; i < st.n; i++) {
            const hs_st_tensor *t = hs_st_find(&st, st.t[i].name);
            if (!t) abort();
            size_t es = t->dtype == HS_DT_F32 ? 4 : 2, len = t->end - t->begin;
            if (t->dtype != HS_DT_OTHER && len >= es) {
                volatile double v = hs_st_get(&st, t, 0) + hs_st_get(&st, t, len / es - 1);
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
