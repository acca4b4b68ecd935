/* Head-wise KV budgets (SPEC §18, DuoAttention / RazorAttention): a plan
 * file
 *
 *     {"sink": S, "window": W, "full": [[layer, kv_head], ...]}
 *
 * makes every key/value head it does not list a streaming head: its query
 * heads see keys s < S or t - W < s <= t only. Applied to a model's
 * configuration (hs_kv_plan_apply) it becomes per-head windows of W with
 * the configuration's sinks S, which every forward honours (the attention
 * kernel's sinks, attention.h) and with which a decoder gives each
 * streaming head a cache of S + W positions (decode.h). */
#ifndef HS_KV_PLAN_H
#define HS_KV_PLAN_H

#include "config.h"

typedef struct {
    int sink, window;
    int n_full;
    int (*full)[2]; /* (layer, kv_head) of each full head, as listed */
} hs_kv_plan;

/* Reads and checks the plan at path: an object with exactly "sink" (an
 * integer >= 0), "window" (an integer >= 1) and "full" (a list of distinct
 * [layer, kv_head] pairs of integers >= 0). HS_EIO, or HS_EFORMAT naming the
 * file and the key or entry. */
int hs_kv_plan_read(hs_kv_plan *p, const char *path);
void hs_kv_plan_free(hs_kv_plan *p);

/* Makes c run under p (path names the plan in errors): every query head of
 * a kv head the plan does not list gets the window p->window, the others
 * none, and c->sink = p->sink. HS_EINVAL naming the entry for a layer or kv
 * head c lacks; naming the model for one that has windows of its own, latent
 * attention or an encoder (a plan is for a decoder's kv heads). */
int hs_kv_plan_apply(hs_model_config *c, const hs_kv_plan *p, const char *path);

/* hs_kv_plan_read then hs_kv_plan_apply. */
int hs_kv_plan_load(hs_model_config *c, const char *path);

/* Writes p to path (JSON, whole under a temporary name, then renamed). */
int hs_kv_plan_write(const char *path, const hs_kv_plan *p);

#endif
