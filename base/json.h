/* Every JSON text headscope reads (config.json, model.safetensors.index.json
 * and safetensors headers, tokenizer.json, vocab.json, prompts lines) is
 * parsed here, whole: Python's json module and Hugging Face read the same
 * bytes differently from cJSON in two ways that can change a result, and
 * both are refused instead of being resolved one way or the other.
 *
 * * Text after the value (`{...}{...}`, `{...}\0garbage`): cJSON stops at
 *   the end of the first value; Python refuses the text ("Extra data").
 * * A key repeated in one object: cJSON's lookups return the first, Python
 *   keeps the last. A repeated `rope_scaling` or `sliding_window` would run
 *   another model than the one Hugging Face runs.
 */
#ifndef HS_JSON_H
#define HS_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Parses the n bytes at text as one JSON value (only whitespace may follow
 * it) in which no object repeats a key, at any depth. On success *out is
 * the tree (cJSON_Delete it) and HS_OK is returned. Otherwise *out is NULL
 * and HS_EFORMAT is returned with a message naming `what` (a file, or a
 * file and line) and the byte offset of the error, the text after the
 * value, or the repeated key and the object holding it ("rope_scaling" in
 * the top-level object, "merges" in "model"). Cost: the parse, plus
 * O(k log k) per object of k keys. */
int hs_json_parse(cJSON **out, const char *text, size_t n, const char *what);

#endif
