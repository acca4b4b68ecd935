/* What store/maps_*.c share about libhdf5 (maps_h5.h): its quiet mode, its
 * cleanup at exit, and the count of open ids the tests check. */
#include "maps_h5.h"

#include <stdlib.h>

#include <hdf5.h>

#include "common.h"
#include "maps.h"

static int h5_dangling;

static void h5_at_exit(void)
{
    if (!h5_dangling)
        H5close();
}

void hs_maps_h5_quiet(void)
{
    static int done;
    if (!done) {
        done = 1;
        if (H5dont_atexit() >= 0)
            atexit(h5_at_exit);
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void hs_maps_h5_dangling(void) { h5_dangling = 1; }

int hs_maps_h5_fail(const char *path, const char *what)
{
    return hs_fail(HS_EIO, "%s: %s failed", path, what);
}

long long hs_maps_open_ids(void)
{
    hs_maps_h5_quiet();
    return (long long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
}
