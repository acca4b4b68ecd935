/* Finding added tokens in a text as HF's AddedVocabulary does: an
 * Aho-Corasick automaton with MatchKind::LeftmostLongest, its matches taken
 * left to right without overlap (find_iter).
 *
 * Leftmost-longest asks, at each offset, for the longest token starting
 * there. A trie walked from every offset answers that in O(n x the longest
 * token) (2,000 nested tokens "b", "bb", ... or "bx", "bbx", ... over a
 * text of b: 2,000 steps an offset), so the automaton is built over the
 * tokens reversed and run once from the text's end to its start: after
 * reading s[i..n) backwards its state is the longest suffix of what it read
 * that is a node, and the longest token that is a suffix of that state (one
 * table lookup, computed when the automaton is built) is the longest token
 * starting at i. The scan is O(n) (failure links are followed at most as
 * often as the depth grew), the matches are then picked left to right. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static uint64_t edge_key(int32_t node, unsigned char c) { return (uint64_t)node << 8 | c; }

static size_t edge_slot(uint64_t k, size_t cap)
{
    k *= 0x9e3779b97f4a7c15ULL;
    return (size_t)(k >> 20) & (cap - 1);
}

/* the child of node by c, or -1 */
static int32_t child_of(const tk_ac *ac, int32_t node, unsigned char c)
{
    if (node == 0)
        return ac->root_next[c];
    uint64_t k = edge_key(node, c) + 1;
    for (size_t i = edge_slot(k, ac->cap);; i = (i + 1) & (ac->cap - 1)) {
        if (ac->key[i] == k)
            return ac->child[i];
        if (!ac->key[i])
            return -1;
    }
}

static void add_edge(tk_ac *ac, int32_t node, unsigned char c, int32_t child)
{
    if (node == 0) {
        ac->root_next[c] = child;
        return;
    }
    uint64_t k = edge_key(node, c) + 1;
    size_t i = edge_slot(k, ac->cap);
    while (ac->key[i])
        i = (i + 1) & (ac->cap - 1);
    ac->key[i] = k, ac->child[i] = child;
}

void tk_ac_free(tk_ac *ac)
{
    free(ac->key), free(ac->child), free(ac->fail), free(ac->best);
    memset(ac, 0, sizeof *ac);
}

static int pass_of(const tk_added *a) { return a->normalized; }

/* The automaton of one pass: a trie of the reversed match strings (node 0
 * the root; a node's token is the first added token spelling it, as HF
 * keeps the first of equal patterns), then breadth first the failure link
 * of each node and the longest token that is a suffix of it. */
static int build_pass(hs_tokenizer *t, int pass)
{
    tk_ac *ac = &t->ac[pass];
    size_t bytes = 0;
    for (int k = 0; k < t->n_added; k++)
        if (pass_of(&t->added[k]) == pass)
            bytes += t->added[k].match.n;
    size_t nodes = bytes + 1;
    if (nodes > INT32_MAX / 2)
        return hs_fail(HS_ENOMEM, "%s: added tokens of %zu bytes", t->path, bytes);
    ac->cap = 16;
    while (ac->cap < 2 * nodes)
        ac->cap *= 2;
    ac->key = calloc(ac->cap, sizeof *ac->key);
    ac->child = malloc(ac->cap * sizeof *ac->child);
    ac->fail = malloc(nodes * sizeof *ac->fail);
    ac->best = malloc(nodes * sizeof *ac->best);
    /* while building: the queue, and each node's children as a list */
    int32_t *queue = malloc(nodes * sizeof *queue);
    int32_t *first = malloc(nodes * sizeof *first), *sib = malloc(nodes * sizeof *sib);
    unsigned char *byte = malloc(nodes);
    if (!ac->key || !ac->child || !ac->fail || !ac->best || !queue || !first || !sib || !byte) {
        free(queue), free(first), free(sib), free(byte);
        return hs_fail(HS_ENOMEM, "%s: the added tokens' automaton (%zu nodes)", t->path, nodes);
    }
    first[0] = -1;
    memset(ac->root_next, 0xff, sizeof ac->root_next);
    ac->n_nodes = 1;
    ac->best[0] = -1;
    for (int k = 0; k < t->n_added; k++) {
        const tk_added *a = &t->added[k];
        if (pass_of(a) != pass || !a->match.n)
            continue;
        int32_t node = 0;
        for (size_t i = a->match.n; i-- > 0;) {
            unsigned char c = (unsigned char)a->match.s[i];
            int32_t next = child_of(ac, node, c);
            if (next < 0) {
                next = ac->n_nodes++;
                ac->best[next] = -1;
                add_edge(ac, node, c, next);
                first[next] = -1;
                sib[next] = first[node], first[node] = next, byte[next] = c;
            }
            node = next;
        }
        if (ac->best[node] < 0)
            ac->best[node] = k; /* its own string: the longest suffix there is */
    }
    /* breadth first: a node's failure link is shallower, hence done before it */
    size_t head = 0, tail = 0;
    ac->fail[0] = 0;
    for (int32_t v = first[0]; v >= 0; v = sib[v]) {
        ac->fail[v] = 0;
        queue[tail++] = v;
    }
    while (head < tail) {
        int32_t u = queue[head++];
        if (ac->best[u] < 0)
            ac->best[u] = ac->best[ac->fail[u]];
        for (int32_t v = first[u]; v >= 0; v = sib[v]) {
            int32_t f = ac->fail[u], g;
            while ((g = child_of(ac, f, byte[v])) < 0 && f)
                f = ac->fail[f];
            ac->fail[v] = g >= 0 ? g : 0;
            queue[tail++] = v;
        }
    }
    free(queue), free(first), free(sib), free(byte);
    return HS_OK;
}

int tk_ac_build(hs_tokenizer *t)
{
    int rc = build_pass(t, 0);
    return rc ? rc : build_pass(t, 1);
}

static int found_add(tk_scratch *s, size_t pos, int32_t k)
{
    if (s->found_n == s->found_cap) {
        size_t cap = s->found_cap ? 2 * s->found_cap : 64;
        tk_found *g = realloc(s->found, cap * sizeof *g);
        if (!g)
            return hs_fail(HS_ENOMEM, "tokenizer: %zu added tokens", cap);
        s->found = g, s->found_cap = cap;
    }
    s->found[s->found_n++] = (tk_found){ pos, k };
    return HS_OK;
}

int tk_ac_find(const hs_tokenizer *t, int pass, tk_scratch *sc, const char *s, size_t n)
{
    const tk_ac *ac = &t->ac[pass];
    sc->found_n = 0;
    if (ac->n_nodes <= 1 || !n)
        return HS_OK;
    int rc = tk_charge(sc, n, t->where_added);
    /* right to left: the longest token starting at each offset, kept where
     * there is one (found in decreasing offsets) */
    int32_t state = 0;
    for (size_t i = n; !rc && i-- > 0;) {
        /* at the root, a byte that ends no token leaves it there: skipped */
        while (!state && i > 0 && ac->root_next[(unsigned char)s[i]] < 0)
            i--;
        unsigned char c = (unsigned char)s[i];
        int32_t g;
        while ((g = child_of(ac, state, c)) < 0 && state)
            state = ac->fail[state];
        state = g >= 0 ? g : 0;
        if (ac->best[state] >= 0)
            rc = found_add(sc, i, ac->best[state]);
    }
    if (rc)
        return rc;
    /* left to right, leftmost first, none overlapping the one before */
    for (size_t a = 0, b = sc->found_n; a + 1 < b; a++, b--) {
        tk_found x = sc->found[a];
        sc->found[a] = sc->found[b - 1], sc->found[b - 1] = x;
    }
    size_t kept = 0, next = 0;
    for (size_t j = 0; j < sc->found_n; j++) {
        tk_found f = sc->found[j];
        if (f.pos < next)
            continue;
        sc->found[kept++] = f;
        next = f.pos + t->added[f.k].match.n;
    }
    sc->found_n = kept;
    return tk_charge(sc, kept, t->where_added);
}
