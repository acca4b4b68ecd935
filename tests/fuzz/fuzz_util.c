#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static void remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        /* nothing more to do at exit */
    }
}

const char *hs_fuzz_dir(void) {
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/hs-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir;
}

const char *hs_fuzz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", hs_fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

int hs_fuzz_copy(const char *src, const char *name) {
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    hs_fuzz_write(name, buf, n);
    return 0;
}
