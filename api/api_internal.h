/* What the api/ files share beyond hs_api.h: the library structures behind
 * its handles. Internal to api/. */
#ifndef HS_API_INTERNAL_H
#define HS_API_INTERNAL_H

#include "hs_api.h"
#include "prompts.h"
#include "tokens.h"

/* The tokens of a handle, and the shard they were read from (NULL: ids the
 * caller holds). */
const hs_tokens *hs_api_tokens_of(const hs_api_tokens *t);
const char *hs_api_tokens_path(const hs_api_tokens *t);

/* The prompt set of a handle (pairs added one by one are grouped and checked
 * against m at the first use) and the tokenizer that encoded its text (NULL:
 * none); the file it was read from (NULL: pairs added). */
int hs_api_prompts_of(const hs_prompt_set **ps, const hs_tokenizer **tk, hs_api_prompts *p,
                      const hs_model *m);
const char *hs_api_prompts_path(const hs_api_prompts *p);

/* The task of a handle and the file it was read from. */
const struct hs_task *hs_api_task_of(const hs_api_task *t);
const char *hs_api_task_path(const hs_api_task *t);

#endif
