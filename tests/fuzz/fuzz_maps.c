/* Map file open + read (store/maps_read.c and maps_probe.c, through
 * libhdf5): the fuzzed bytes as an HDF5 file, opened with hs_maps_open; for
 * an accepted one, the first and last map of every captured layer and the
 * first sequence's tokens are read. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "maps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = hs_fuzz_write("maps.h5", data, size);
    hs_maps_reader *r = NULL;
    if (hs_maps_open(&r, path) != HS_OK) return 0;
    const hs_maps_info *info = hs_maps_get_info(r);
    for (int li = 0; li < info->n_layers; li++) {
        const hs_maps_layer_info *L = &info->layers[li];
        size_t n = (size_t)L->nq * (size_t)L->S;
        if (L->nq <= 0 || L->S <= 0 || n > ((size_t)1 << 24)) continue;
        float *out = malloc(sizeof *out * n);
        if (!out) abort();
        if (info->n_seq > 0 && L->nh > 0) {
            (void)hs_maps_read(r, li, 0, 0, out);
            (void)hs_maps_read(r, li, info->n_seq - 1, L->nh - 1, out);
        }
        free(out);
    }
    if (info->n_seq > 0 && info->seq_len > 0 && info->seq_len <= (1 << 20)) {
        int32_t *tok = malloc(sizeof *tok * (size_t)info->seq_len);
        if (!tok) abort();
        (void)hs_maps_read_tokens(r, 0, tok);
        free(tok);
    }
    hs_maps_close(r);
    return 0;
}
