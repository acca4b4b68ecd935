# The AVX2 build (build/avx2-only): headscope compiled for Haswell, no AVX-512
# in any loop. One definition for the slow tier (scripts/test --slow, which runs
# the fast tier's suites in it) and for bench/*.sh --avx2-only (bench/lib.sh),
# so that the benchmarks measure the build the tests checked:
#   cmake -C scripts/avx2-only.cmake -S . -B build/avx2-only
set(HEADSCOPE_NATIVE OFF CACHE BOOL "no -march=native")
set(CMAKE_C_FLAGS "-march=haswell" CACHE STRING "AVX2 and FMA, no AVX-512")
