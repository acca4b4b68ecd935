/* Helpers shared by the libFuzzer targets: the fuzzed bytes as a file in a
 * private temporary folder (the parsers under test take paths). The folder is
 * made once per process and removed at exit; every input overwrites the same
 * file, so nothing accumulates. */
#ifndef HS_FUZZ_UTIL_H
#define HS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The private folder (created on the first call). */
const char *hs_fuzz_dir(void);

/* Writes data to hs_fuzz_dir()/name and returns its path (static buffer). */
const char *hs_fuzz_write(const char *name, const uint8_t *data, size_t size);

/* Copies src to hs_fuzz_dir()/name (once per process). 0 on success. */
int hs_fuzz_copy(const char *src, const char *name);

#endif
