/* The patterns of a tokenizer file (Split, Replace, ByteLevel's GPT-2
 * regex) run in PCRE2, under the call's work budget (tok_internal.h).
 *
 * A per-attempt match limit alone bounds backtracking, not the bytes an
 * attempt reads: "a(?=a*!)|a" matches one character at a time and reads to
 * the end of the text at every one, quadratic in the text at one match-limit
 * step an attempt; in "a*a*b" one step of the first a* makes the second
 * scan the rest of the a's again. So the work is counted two ways.
 *
 * * The search runs in a window of sc->window bytes with PCRE2_PARTIAL_HARD
 *   and a match limit of at most TK_LIMIT_FAST steps an offset: hard
 *   partial matching stops an attempt as soon as any of its paths touches
 *   the window's end (a lookahead, \b and $ there included), so a result
 *   that is neither partial nor out of steps is exactly the result on the
 *   whole text, and it cost at most that many steps of at most a window
 *   each, an offset. Real patterns settle nearly every match this way, at
 *   JIT speed.
 * * Anything else (a match that reaches past the window, an offset that
 *   backtracks more) is finished alone, anchored, by a second compilation
 *   with PCRE2_AUTO_CALLOUT: a callout before every item of the pattern,
 *   each charged one unit plus how far the subject position moved since the
 *   last, which is what a scan, a lookahead or a give-back read. It stops
 *   the attempt, not only the next one, when the budget is spent. What a
 *   callout cannot see, a backreference compared in vain, is bounded by the
 *   CPU time of these attempts (TK_NS_PER_UNIT a unit of the budget). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tok_internal.h"

/* Under valgrind: memcheck cannot follow PCRE2's JIT code (it reads whole
 * words past a subject's end on purpose and reports them as uninitialised),
 * so the patterns run interpreted, with the same results; and the CPU-time
 * bound of the counted attempts allows for valgrind's slowdown
 * (TK_VALGRIND_SLOWDOWN), and for a sanitizer's (TK_SANITIZER_SLOWDOWN: the
 * callout itself is instrumented), so that the same texts pass. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TK_UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef TK_UNDER_VALGRIND
#define TK_UNDER_VALGRIND() 0
#endif
#define TK_VALGRIND_SLOWDOWN 200
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define TK_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(TK_SANITIZED)
#define TK_SANITIZED 1
#endif
#ifdef TK_SANITIZED
#define TK_SANITIZER_SLOWDOWN 20
#else
#define TK_SANITIZER_SLOWDOWN 1
#endif
/* The least CPU time the counted attempts of one text may take: below a few
 * milliseconds, a cold cache or a page fault would refuse a short text. */
#define TK_SLOW_FLOOR_NS 20000000u

/* CPU nanoseconds the counted attempts may take per unit of the budget. */
static uint64_t ns_per_unit(void)
{
    return (uint64_t)TK_NS_PER_UNIT * TK_SANITIZER_SLOWDOWN *
           (TK_UNDER_VALGRIND() ? TK_VALGRIND_SLOWDOWN : 1);
}

/* the CPU time the counted attempts of the text may take in all */
static uint64_t slow_bound_ns(const tk_scratch *sc)
{
    const uint64_t b = sc->budget * ns_per_unit();
    return b > TK_SLOW_FLOOR_NS ? b : TK_SLOW_FLOOR_NS;
}

int tk_regex(tk_re *re, const char *pat, size_t n, int is_literal, const char *field)
{
    const uint32_t opts = is_literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    int err;
    PCRE2_SIZE at;
    re->any = pcre2_compile((PCRE2_SPTR)pat, n, opts, &err, &at, NULL);
    re->at = re->any ? pcre2_compile((PCRE2_SPTR)pat, n, opts | PCRE2_ANCHORED | PCRE2_AUTO_CALLOUT,
                                     &err, &at, NULL)
                     : NULL;
    if (!re->at) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        tk_regex_free(re);
        return hs_fail(err == PCRE2_ERROR_NOMEMORY ? HS_ENOMEM : HS_EFORMAT,
                       "%s: regex error at offset %zu: %s", field, (size_t)at, (char *)msg);
    }
    /* the interpreter when JIT is not there */
    if (!TK_UNDER_VALGRIND())
        pcre2_jit_compile(re->any, PCRE2_JIT_PARTIAL_HARD | PCRE2_JIT_COMPLETE);
    /* the counted attempts are few: interpreted, they cost nothing to open */
    return HS_OK;
}

void tk_regex_free(tk_re *re)
{
    pcre2_code_free(re->any);
    pcre2_code_free(re->at);
    re->any = re->at = NULL;
}

int tk_spent(const tk_scratch *s, const char *who)
{
    return hs_fail(HS_EINVAL, "%s: the work budget of this text is spent (%u units a byte of its "
                   "%zu bytes): the file's steps do more work than a tokenizer does, refused "
                   "instead of run on", who, TK_WORK_PER_BYTE, s->text_n);
}

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int tk_regex_callout(pcre2_callout_block *cb, void *data)
{
    tk_scratch *sc = data;
    size_t p = cb->current_position;
    sc->spent += 1 + (p > sc->co_pos ? p - sc->co_pos : sc->co_pos - p);
    sc->co_pos = p;
    if (sc->spent > sc->budget)
        return PCRE2_ERROR_CALLOUT;
    if (!(++sc->co_calls & 255) && sc->slow_ns + (cpu_ns() - sc->co_t0) >
                                       slow_bound_ns(sc)) {
        sc->co_slow = 1;
        return PCRE2_ERROR_CALLOUT;
    }
    return 0;
}

static int pcre2_error(int rc, const char *who, size_t pos, size_t n)
{
    PCRE2_UCHAR msg[200];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return hs_fail(HS_EINVAL, "%s: the pattern fails at byte %zu of a %zu-byte text: %s", who, pos,
                   n, (char *)msg);
}

/* The search from pos in the window up to end: *rc a match, no match
 * before end, PCRE2_ERROR_PARTIAL (ovector[0]: where the attempt that
 * reached end starts, or before it by what a lookbehind read) or
 * PCRE2_ERROR_MATCHLIMIT (an offset needed more than TK_LIMIT_FAST steps).
 * The limit starts at TK_LIMIT0 and doubles while an offset needs more;
 * each search is charged its limit for every offset it may have tried (one
 * that ran out: its limit), and the bytes of a match. */
static int search(const tk_re *re, const char *who, tk_scratch *sc, const char *s, size_t n,
                  size_t pos, size_t end, int *rc)
{
    const uint32_t opts = PCRE2_NO_UTF_CHECK | (end < n ? PCRE2_PARTIAL_HARD : 0);
    for (uint32_t limit = TK_LIMIT0;; limit *= 2) {
        pcre2_set_match_limit(sc->mc, limit);
        *rc = pcre2_match(re->any, (PCRE2_SPTR)s, end, pos, opts, sc->md, sc->mc);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t tried = *rc == PCRE2_ERROR_MATCHLIMIT ? 1
                       : *rc >= 0 || *rc == PCRE2_ERROR_PARTIAL
                           ? (ov[0] > pos ? ov[0] - pos : 0) + 1
                           : end - pos + 1;
        int r = tk_charge(sc, tried * limit + (*rc >= 0 ? ov[1] - pos : 0), who);
        if (r || *rc != PCRE2_ERROR_MATCHLIMIT || limit >= TK_LIMIT_FAST)
            return r;
    }
}

/* The match attempt at pos alone, anchored, on the whole text, counted by
 * its callouts: *rc a match or PCRE2_ERROR_NOMATCH. */
static int finish_at(const tk_re *re, const char *who, tk_scratch *sc, const char *s, size_t n,
                     size_t pos, int *rc)
{
    const uint64_t left = sc->budget > sc->spent ? sc->budget - sc->spent : 0;
    sc->co_pos = pos, sc->co_slow = 0, sc->co_t0 = cpu_ns();
    pcre2_set_match_limit(sc->mc, left > UINT32_MAX ? UINT32_MAX : (uint32_t)left + 1);
    *rc = pcre2_match(re->at, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, sc->md, sc->mc);
    sc->slow_ns += cpu_ns() - sc->co_t0;
    if (*rc == PCRE2_ERROR_CALLOUT && sc->co_slow)
        return hs_fail(HS_EINVAL, "%s: the work budget of this text is spent (its long match "
                       "attempts took %.0f ms of CPU time, over the %.0f ms its %zu bytes "
                       "allow): refused instead of run on", who, sc->slow_ns / 1e6,
                       slow_bound_ns(sc) / 1e6, sc->text_n);
    if (*rc == PCRE2_ERROR_CALLOUT || *rc == PCRE2_ERROR_MATCHLIMIT)
        return tk_charge(sc, left + 1, who); /* spent: the message */
    if (*rc < 0 && *rc != PCRE2_ERROR_NOMATCH)
        return pcre2_error(*rc, who, pos, n);
    size_t me = *rc >= 0 ? pcre2_get_ovector_pointer(sc->md)[1] : sc->co_pos;
    return tk_charge(sc, 1 + (me > sc->co_pos ? me - sc->co_pos : sc->co_pos - me), who);
}

static size_t char_len(const char *s, size_t n, size_t i)
{
    uint32_t cp;
    int l = i < n ? tk_utf8_next(s + i, n - i, &cp) : 0;
    return l ? (size_t)l : 1;
}

/* the end of a window of w bytes from pos: a character boundary (PCRE2
 * reads whole characters, unchecked), n at the most */
static size_t window_end(const char *s, size_t n, size_t pos, size_t w)
{
    if (w >= n - pos)
        return n;
    size_t e = pos + w;
    while (e < n && ((unsigned char)s[e] & 0xc0) == 0x80)
        e++;
    return e;
}

int tk_regex_each(const tk_re *re, const char *who, tk_scratch *sc, const char *s, size_t n,
                  int (*fn)(void *, size_t, size_t), void *ctx)
{
    const size_t w = sc->window ? sc->window : TK_WINDOW;
    size_t pos = 0;
    while (pos <= n) {
        size_t end = window_end(s, n, pos, w);
        int rc, r = search(re, who, sc, s, n, pos, end, &rc);
        if (r)
            return r;
        if (rc == PCRE2_ERROR_PARTIAL || rc == PCRE2_ERROR_MATCHLIMIT) {
            /* From q on, each offset is finished alone until one matches:
             * q is where the attempt that reached the window's end starts
             * (or before it, by what a lookbehind read; the offsets before
             * it have no match), or pos when some offset ran out of steps. */
            size_t q = rc == PCRE2_ERROR_PARTIAL ? pcre2_get_ovector_pointer(sc->md)[0] : pos;
            q = q > pos ? q : pos;
            for (;;) {
                if ((r = finish_at(re, who, sc, s, n, q, &rc)))
                    return r;
                if (rc >= 0 || q >= end)
                    break;
                q += char_len(s, n, q);
            }
            if (rc < 0) { /* none up to the window's end */
                if (end >= n)
                    return HS_OK;
                pos = end;
                continue;
            }
        } else if (rc == PCRE2_ERROR_NOMATCH) {
            if (end >= n)
                return HS_OK;
            pos = end; /* no match starts before the window's end */
            continue;
        } else if (rc < 0)
            return pcre2_error(rc, who, pos, n);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
        size_t ms = ov[0], me = ov[1];
        if ((r = fn(ctx, ms, me)))
            return r;
        if (me > ms)
            pos = me;
        else if (ms >= n) /* an empty match at the end: the last */
            return HS_OK;
        else /* an empty match: on by one character */
            pos = ms + char_len(s, n, ms);
    }
    return HS_OK;
}
