"""Two map files hold the same thing (tests/test_mpi.sh): every dataset equal
element for element, every attribute of the root equal, complete = 1.
usage: python3 check_maps_same.py A.h5 B.h5"""
import sys

import h5py
import numpy as np

a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for f in (a, b):
    assert int(f.attrs["complete"]) == 1, "%s: complete is not 1" % f.filename
assert sorted(a.attrs) == sorted(b.attrs), "attributes differ"
for k in a.attrs:
    va, vb = a.attrs[k], b.attrs[k]
    assert np.array_equal(np.asarray(va), np.asarray(vb)), "attribute %s differs" % k
names = []
a.visit(names.append)
other = []
b.visit(other.append)
assert names == other, "objects differ: %s vs %s" % (names, other)
n = 0
for name in names:
    if isinstance(a[name], h5py.Dataset):
        x, y = a[name][()], b[name][()]
        assert x.dtype == y.dtype and x.shape == y.shape, "%s: type or shape differs" % name
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), "%s: values differ" % name
        n += 1
print("%d datasets equal" % n)
