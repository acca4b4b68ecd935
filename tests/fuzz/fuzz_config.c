/* config.json parsing (model/families/config_file.c): hs_config_parse on the fuzzed text;
 * a configuration it accepts is written back and must parse again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    hs_model_config *c = malloc(sizeof *c);
    if (c && hs_config_parse(c, json, "fuzz/config.json") == HS_OK) {
        char *again = hs_config_to_json(c);
        if (again) {
            hs_model_config *d = malloc(sizeof *d);
            if (d && hs_config_parse(d, again, "fuzz/again.json") != HS_OK) abort();
            free(d);
        }
        free(again);
    }
    free(c);
    free(json);
    return 0;
}
