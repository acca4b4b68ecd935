/* Private to store/maps_*.c: what the map file's writer, reader and probe
 * share about libhdf5. Nothing outside store/ includes it. */
#ifndef HS_MAPS_H5_H
#define HS_MAPS_H5_H

#include <stdio.h>

/* HDF5 quiet on this thread: no automatic printing of its error stack (we
 * report one line of our own). The first call also makes HDF5's cleanup at
 * exit ours (see hs_maps_h5_dangling). Call before any other HDF5 call. */
void hs_maps_h5_quiet(void);

/* Records that an H5Fclose failed: HDF5 1.10 then leaves a half-freed file
 * id behind, and its cleanup at exit would crash on it, so it is skipped. */
void hs_maps_h5_dangling(void);

/* HS_EIO "PATH: WHAT failed". */
int hs_maps_h5_fail(const char *path, const char *what);

/* The offset of the first malformed global heap collection (where HDF5
 * keeps variable-length strings) in the file f, or -1 when all are sound;
 * f is read from its start and closed (maps_probe.c). */
long long hs_maps_bad_global_heap(FILE *f);

#endif
