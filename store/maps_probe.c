/* The checks of a map file made before libhdf5 reads it in this process
 * (maps.h, hs_maps_open): the global heap scan, and the whole open and a
 * first read in a child process under a time limit. */
#include "maps.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtype.h"
#include "maps_h5.h"

/* Global heap collections ("GCOL", where HDF5 keeps variable-length
 * strings) in the first GCOL_SCAN bytes of the file, checked before HDF5
 * reads any: HDF5 1.10 copies a heap object by the size the file gives,
 * unchecked. Each must lie inside the file and hold objects that lie inside
 * it (index, refcount, reserved, 8-byte size, data padded to 8). Returns the
 * offset of a bad collection, or -1 when all are sound. */
enum { GCOL_SCAN = 64 << 20, GCOL_MIN = 4096 };

static int gcol_sound(FILE *f, uint64_t at, uint64_t file_size)
{
    unsigned char h[16];
    if (fseeko(f, (off_t)at, SEEK_SET) || fread(h, 1, 16, f) != 16)
        return 0;
    const uint64_t size = hs_le_bytes(h + 8, 8);
    if (size < GCOL_MIN || size > file_size || at > file_size - size)
        return 0;
    uint64_t off = 16;
    while (off + 16 <= size) {
        unsigned char o[16];
        if (fread(o, 1, 16, f) != 16)
            return 0;
        const unsigned idx = (unsigned)(o[0] | o[1] << 8);
        const uint64_t osz = hs_le_bytes(o + 8, 8);
        if (osz > size - off - 16)
            return idx == 0 && osz <= size - off; /* free space counts its header */
        if (idx == 0)
            return 1;
        const uint64_t padded = (osz + 7) & ~(uint64_t)7;
        if (padded > size - off - 16)
            return 0;
        off += 16 + padded;
        if (fseeko(f, (off_t)(at + off), SEEK_SET))
            return 0;
    }
    return 1;
}

/* f: the file, read from its start; closed here. */
long long hs_maps_bad_global_heap(FILE *f)
{
    struct stat sb;
    long long bad = -1;
    unsigned char *buf = malloc((1 << 20) + 8);
    const uint64_t size = fstat(fileno(f), &sb) ? 0 : (uint64_t)sb.st_size;
    const uint64_t end = size < GCOL_SCAN ? size : GCOL_SCAN;
    for (uint64_t pos = 0; buf && bad < 0 && pos < end; pos += 1 << 20) {
        if (fseeko(f, (off_t)pos, SEEK_SET))
            break;
        const size_t n = fread(buf, 1, (1 << 20) + 8, f); /* 8 bytes overlap the next block */
        for (size_t i = 0; bad < 0 && i + 8 <= n && i < (1 << 20); i++)
            if (!memcmp(buf + i, "GCOL\1\0\0\0", 8) && !gcol_sound(f, pos + i, size))
                bad = (long long)(pos + i);
    }
    free(buf);
    fclose(f);
    return bad;
}

/* hs_maps_open's probe: opens the file and reads every layer's first map and
 * the first tokens in a child process, under a time limit, so that a file
 * that crashes or hangs libhdf5 is refused instead of taking the caller
 * down. HS_OK when the child got through (a refusal of the layout included:
 * the caller's own open reports it), else HS_EFORMAT with the message set. */
/* PROBE_REFUSED: the child's status for a file our checks refuse (any other
 * non-zero status, a sanitizer's report say, is a failure inside HDF5). */
enum { PROBE_SECONDS = 20, PROBE_REFUSED = 97 };

static int probe(const char *path)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return HS_OK; /* no process to spare: the caller opens it itself */
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        signal(SIGINT, SIG_DFL); /* Ctrl-C ends the probe too */
        signal(SIGTERM, SIG_DFL);
        signal(SIGALRM, SIG_DFL);
        alarm(PROBE_SECONDS);
        hs_maps_reader *r;
        if (hs_maps_open_here(&r, path))
            _exit(PROBE_REFUSED);
        const hs_maps_info *in = hs_maps_get_info(r);
        int rc = 0;
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)in->seq_len);
        if (tok && in->n_seq > 0)
            rc |= hs_maps_read_tokens(r, 0, tok);
        char **text = calloc((size_t)in->seq_len, sizeof *text);
        if (text && in->n_seq > 0 && in->has_token_text)
            rc |= hs_maps_read_token_text(r, 0, text);
        hs_maps_free_token_text(text, in->seq_len);
        free(text);
        for (int li = 0; in->n_seq > 0 && li < in->n_layers; li++) {
            float *m = malloc(sizeof(float) * (size_t)in->layers[li].nq * in->layers[li].S);
            if (m)
                rc |= hs_maps_read(r, li, 0, 0, m);
            free(m);
        }
        free(tok);
        hs_maps_close(r);
        _exit(rc ? PROBE_REFUSED : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGINT || WTERMSIG(st) == SIGTERM))
        return hs_fail(HS_EINTR, "%s: interrupted while opening", path);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library did not get through this "
                       "file in %d s", path, PROBE_SECONDS);
    if (WIFSIGNALED(st))
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library crashed reading this file "
                       "(signal %d)", path, WTERMSIG(st));
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != PROBE_REFUSED))
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library failed reading this file "
                       "(status %d)", path, WEXITSTATUS(st));
    return HS_OK;
}

int hs_maps_open(hs_maps_reader **out, const char *path)
{
    *out = NULL;
    const int rc = probe(path);
    return rc ? rc : hs_maps_open_here(out, path);
}
