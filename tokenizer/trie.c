/* A byte trie over a vocabulary's strings (tok_internal.h's tk_trie): its
 * edges in one open-addressing table keyed by (node, byte), so that walking
 * a text from a position finds every piece that starts there, one probe a
 * byte. WordPiece takes the longest piece so found, Unigram all of them. */
#include <stdlib.h>

#include "tok_internal.h"

/* nodes are numbered below 2^24, so that an edge's key is 32 bits */
#define TRIE_MAX_EDGES ((1u << 24) - 2)

/* the node of s from the root, made as needed */
static int32_t insert(tk_trie *tr, const char *s, size_t n)
{
    int32_t node = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t key = ((uint32_t)node << 8 | (unsigned char)s[k]) + 1;
        size_t i = tk_trie_slot(tr, key);
        while (tr->edge[i].key && tr->edge[i].key != key)
            i = (i + 1) & (tr->cap - 1);
        if (!tr->edge[i].key) {
            tr->edge[i] = (tk_edge){ key, tr->n_nodes };
            tr->id[tr->n_nodes++] = -1;
        }
        node = tr->edge[i].child;
    }
    return node;
}

int tk_trie_build(tk_trie *tr, const tk_str *keys, int n, const char *file, const char *field)
{
    /* every byte of every key may be an edge: the bound sizes the table */
    size_t edges = 0;
    for (int i = 0; i < n; i++)
        edges += keys[i].s ? keys[i].n : 0;
    if (edges > TRIE_MAX_EDGES)
        return hs_fail(HS_EFORMAT, "%s: %s: %zu bytes of pieces: at most %u are read", file, field,
                       edges, TRIE_MAX_EDGES);
    tr->cap = 16;
    while (tr->cap < 2 * edges)
        tr->cap *= 2;
    tr->edge = calloc(tr->cap, sizeof *tr->edge);
    tr->id = malloc((edges + 1) * sizeof *tr->id);
    if (!tr->edge || !tr->id)
        return hs_fail(HS_ENOMEM, "%s: a trie of %zu bytes of pieces", file, edges);
    tr->n_nodes = 0;
    tr->id[tr->n_nodes++] = -1; /* the root */
    for (int i = 0; i < n; i++)
        if (keys[i].s)
            tr->id[insert(tr, keys[i].s, keys[i].n)] = i;
    for (int b = 0; b < 256; b++)
        tr->root[b] = tk_trie_child(tr, 0, (unsigned char)b);
    return HS_OK;
}

int32_t tk_trie_find(const tk_trie *tr, const char *s, size_t n)
{
    int32_t node = 0;
    for (size_t i = 0; i < n && node >= 0; i++)
        node = tk_trie_child(tr, node, (unsigned char)s[i]);
    return node;
}

void tk_trie_free(tk_trie *tr)
{
    free(tr->edge), free(tr->id);
    tr->edge = NULL, tr->id = NULL;
}
