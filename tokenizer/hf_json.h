/* Between the two files that read tokenizer.json (tokenizer/ only): the
 * reading context, whose path names the field being read in every error
 * ("pre_tokenizer.pretokenizers[0].behavior"), its helpers
 * (tokenizer/hf_json.c) and the readers of the components around the model
 * (tokenizer/hf_steps.c). */
#ifndef HS_HF_JSON_H
#define HS_HF_JSON_H

#include <cjson/cJSON.h>

#include "tok_internal.h"

typedef struct {
    const char *file;
    char path[256]; /* the field being read */
} tkj_ctx;

/* HS_EFORMAT "FILE: PATH: what" */
int tkj_bad(const tkj_ctx *c, const char *what);
/* c->path extended by ".key" or "[i]"; returns the length to cut it back to */
size_t tkj_push(tkj_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* room for element n + 1 of an array of n (realloc) */
void *tkj_grow(void *p, int n, size_t size);
int tkj_dup_str(tk_str *d, const char *s, size_t n);
/* a child string / bool; absent or null: def (a missing string without a default is an error) */
int tkj_get_string(tkj_ctx *c, const cJSON *o, const char *key, const char *def, const char **out);
int tkj_get_bool(tkj_ctx *c, const cJSON *o, const char *key, int def, int *out);
const char *tkj_type_of(const cJSON *o);
int tkj_unsupported_type(tkj_ctx *c, const char *type, const char *supported);

/* each appends its steps to t (flattening Sequence); what it added is freed
 * with t, also after an error */
int tkj_read_normalizer(tkj_ctx *c, const cJSON *o, hs_tokenizer *t);
int tkj_read_pre(tkj_ctx *c, const cJSON *o, hs_tokenizer *t);
int tkj_read_dec(tkj_ctx *c, const cJSON *o, hs_tokenizer *t);
int tkj_read_post(tkj_ctx *c, const cJSON *o, hs_tokenizer *t);

#endif
