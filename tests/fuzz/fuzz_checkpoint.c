/* safetensors header + checkpoint load (model/checkpoint/safetensors.c, checkpoint.c),
 * in a folder of two files of tests/fixtures/models/tinylm_h1, one of them
 * replaced by the fuzzed bytes:
 *   - bytes starting with '{' are config.json, next to the fixed, valid
 *     model.safetensors: hs_checkpoint_load (sizes from the configuration
 *     must be checked against the file before anything is allocated);
 *   - any other bytes are model.safetensors, next to the fixed config.json:
 *     hs_st_open (every tensor looked up, its first and last element read)
 *     and hs_checkpoint_load. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "fuzz_util.h"
#include "safetensors.h"

#define FIXED HS_FIXTURE_DIR "/models/tinylm_h1/"

/* Which file of the folder is the fixture's now: 'c' config.json, 's'
 * model.safetensors (copied only when the mode changes). */
static char fixed_now;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hs_model m;
    if (size > 0 && data[0] == '{') {
        if (fixed_now != 's' && hs_fuzz_copy(FIXED "model.safetensors", "model.safetensors") != 0)
            abort();
        fixed_now = 's';
        hs_fuzz_write("config.json", data, size);
        if (hs_checkpoint_load(&m, hs_fuzz_dir()) == HS_OK) hs_model_free(&m);
        return 0;
    }
    if (fixed_now != 'c' && hs_fuzz_copy(FIXED "config.json", "config.json") != 0) abort();
    fixed_now = 'c';
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
    if (hs_checkpoint_load(&m, hs_fuzz_dir()) == HS_OK) hs_model_free(&m);
    return 0;
}
