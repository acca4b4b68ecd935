#!/usr/bin/env bash
# The preamble the benchmark scripts share, sourced by bench/NAME.sh:
#
#   . "$(dirname "$0")/lib.sh"
#   bench_init "threads blas tiny contend"   # the common options NAME accepts
#   threads="1 2"                             # NAME's defaults
#   while [ $# -gt 0 ]; do
#     case "$1" in
#       --reps) reps=$2; shift 2 ;;          # NAME's own options
#       *) bench_opt "$@"; shift "$bench_shift" ;;
#     esac
#   done
#   bench_build bench_x headscope_cli        # cmake configure + build ($bench_dir)
#   bench_tmp                                 # $tmp, removed on exit
#   bench_threads "$t"                        # pin OpenMP and OpenBLAS to $t
#
# Common options: --threads "1 2" (threads), --blas-autodetect (blas: unsets
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for both sides), --tiny (tiny), --contend
# (contend: one competing CPU-bound process, bench/spin.c, runs from
# bench_contend_start to the script's end; every row of the script's .jsonl
# gets "contend": true and its .md tables a line saying so), --avx2-only (isa:
# an AVX2-only CPU emulated on an AVX-512 one, see bench_isa_avx2), -h/--help
# (the script's header comment).
#
# $bench_dir is the build the script runs: build/float, or build/avx2-only
# with --avx2-only.
#
# OpenMP's wait policy: the headscope side runs with headscope's own default
# (hs_runtime_init: passive waiting unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is
# set), so bench_init unsets both; the torch side runs through bench_torch,
# at its best: OMP_WAIT_POLICY=passive (with its two thread pools spinning,
# torch at 2 threads ran up to 5x slower than at 1 on a 2-core machine) and
# glibc told to keep the memory torch frees (MALLOC_MMAP_THRESHOLD_,
# MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_: otherwise each large tensor is a
# fresh mmap whose every page faults, and page faults are expensive on these
# VMs; torch's attention forward at 1 x 2048 x 512 took 1,070 ms without them,
# 182 ms with them). Every table says so ($bench_torch_note).

# Run rather than sourced (scripts/test --slow runs every bench/*.sh --tiny):
# nothing to measure.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "bench/lib.sh: the benchmark scripts' shared functions (sourced by bench/*.sh); nothing to run" >&2
  exit 0
fi

# bench_init COMMON-OPTIONS: cd to the repository root; the script's name.
bench_init() {
  bench_opts=" $1 "
  bench_name=$(basename "$0" .sh)
  cd "$(dirname "$0")/.."
  bench_script=bench/$bench_name.sh
  tiny=0 contend=0 isa=native blas_auto=0
  bench_dir=build/float
  bench_cleanups=()
  bench_spin_pid=""
  unset OMP_WAIT_POLICY GOMP_SPINCOUNT
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# bench_opt ARGS...: one common option at the front of ARGS; sets
# $bench_shift to the words it took. Anything else: an error (exit 2).
bench_opt() {
  bench_shift=1
  case "$1" in
    --threads) bench_has threads && [ $# -ge 2 ] && { threads=$2; bench_shift=2; return; } ;;
    --blas-autodetect)
      bench_has blas && { blas_auto=1; bench_isa_check; unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; return; } ;;
    --tiny) bench_has tiny && { tiny=1; return; } ;;
    --contend) bench_has contend && { contend=1; return; } ;;
    --avx2-only) bench_has isa && { bench_isa_avx2; bench_isa_check; return; } ;;
    -h|--help) bench_help; exit 0 ;;
  esac
  bench_die "unknown option $1"
}

bench_has() { [[ "$bench_opts" == *" $1 "* ]]; }

# bench_die MESSAGE: the script's name and MESSAGE on stderr, exit 2.
bench_die() {
  echo "$bench_name.sh: $1" >&2
  exit 2
}

# The header comment (line 2 to the first line that is not a comment).
bench_help() { awk 'NR > 1 && !/^#/ { exit } NR > 1' "$bench_script"; }

# bench_isa_avx2: both sides as they run on a CPU with AVX2 and no AVX-512,
# emulated on an AVX-512 one: headscope built for Haswell (-march=haswell: no
# AVX-512 in the compiled loops) with every GEMM in OpenBLAS, which is what
# `auto` picks on such a CPU above four rows (below, when decoding, it would
# run our AVX2 kernel); OpenBLAS on its Haswell kernels for both sides;
# torch's own kernels and oneDNN capped at AVX2. Caches, memory and the
# 256-bit FMA rate are still this CPU's.
bench_isa_avx2() {
  isa=avx2-only bench_dir=build/avx2-only
  export OPENBLAS_CORETYPE=Haswell HEADSCOPE_GEMM=openblas
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2
}

# bench_isa_check: --blas-autodetect and --avx2-only, in either order, are
# an error.
bench_isa_check() {
  [ "$blas_auto" = 1 ] && [ "$isa" = avx2-only ] &&
    bench_die "--blas-autodetect and --avx2-only: the emulation runs OpenBLAS's Haswell kernels"
  return 0
}

# bench_build TARGET...: configures $bench_dir and builds the targets (and,
# with --contend, the competitor).
bench_build() {
  local extra=() flags=()
  [ "$contend" = 1 ] && extra=(bench_spin)
  [ "$isa" = avx2-only ] && flags=(-C scripts/avx2-only.cmake)
  cmake -S . -B "$bench_dir" "${flags[@]}" >/dev/null
  cmake --build "$bench_dir" -j "$(nproc)" --target "$@" "${extra[@]}" >/dev/null
}

# bench_on_exit COMMAND: run COMMAND (a string, eval'd) when the script ends.
bench_on_exit() { bench_cleanups+=("$1"); }

bench_cleanup() {
  local rc=$? c
  bench_contend_stop
  for c in "${bench_cleanups[@]}"; do
    eval "$c" || true
  done
  return $rc
}

# bench_tmp: $tmp, a new directory removed when the script ends.
bench_tmp() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/hs_bench_$bench_name.XXXXXX")
  bench_on_exit 'rm -rf "$tmp"'
}

# bench_threads N: OpenMP and OpenBLAS pinned to N threads (both sides).
bench_threads() { export OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1; }

# bench_contend_start: with --contend, starts the competing process (once).
bench_contend_start() {
  [ "$contend" = 1 ] && [ -z "$bench_spin_pid" ] || return 0
  "$bench_dir"/bench/bench_spin &
  bench_spin_pid=$!
  echo "$bench_name.sh: competing CPU-bound process $bench_spin_pid running" >&2
}

bench_contend_stop() {
  [ -n "$bench_spin_pid" ] || return 0
  kill "$bench_spin_pid" 2>/dev/null || true
  wait "$bench_spin_pid" 2>/dev/null || true
  bench_spin_pid=""
}

# bench_torch ARGS...: /usr/bin/python3 ARGS with the torch side's settings
# (above).
bench_torch() {
  OMP_WAIT_POLICY=passive MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184 \
    MALLOC_TOP_PAD_=1073741824 /usr/bin/python3 "$@"
}
bench_torch_note="torch ran with OMP_WAIT_POLICY=passive MALLOC_MMAP_THRESHOLD_=17179869184 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=1073741824 (bench/lib.sh, bench_torch)"

bench_isa_note="**AVX2 only**: an AVX2-only CPU emulated on this AVX-512 one (--avx2-only: headscope built for Haswell, GEMMs in OpenBLAS's Haswell kernels, torch capped at AVX2)"
bench_contend_note="**contend**: measured with one competing CPU-bound process (bench/spin.c) running"

# bench_ours_row JSON MODE THREADS WALL...: a headscope command's JSON
# output as one row: impl headscope, mode, threads, the median wall time
# (seconds) and every wall time (walls).
bench_ours_row() {
  /usr/bin/python3 -c 'import json, statistics, sys
r = json.loads(sys.argv[1]); w = [float(x) for x in sys.argv[4:]]
r.update(impl="headscope", mode=sys.argv[2], threads=int(sys.argv[3]), seconds=statistics.median(w), walls=w)
print(json.dumps(r))' "$@"
}

# bench_mark FILE...: with --contend, every JSON row of the files gets
# "contend": true.
bench_mark() {
  [ "$contend" = 1 ] || return 0
  local f
  for f in "$@"; do
    [ -f "$f" ] && sed -i 's/^{/{"contend":true,/' "$f"
  done
}

# ... | bench_md FILE: the table on stdin to FILE and stdout (tee), after a
# line saying so when a competing process ran or the CPU was emulated, and
# before the torch side's settings when the script has one.
bench_md() {
  {
    if [ "$contend" = 1 ]; then
      echo "$bench_contend_note"
      echo
    fi
    if [ "$isa" = avx2-only ]; then
      echo "$bench_isa_note"
      echo
    fi
    cat
    if grep -q 'bench_torch ' "$bench_script"; then
      echo
      echo "$bench_torch_note"
    fi
  } | tee "$1"
}

# bench_md_note FILE: with --contend, the same line at the top of FILE (for
# scripts that write their tables themselves).
bench_md_note() {
  [ "$contend" = 1 ] && [ -f "$1" ] || return 0
  printf '%s\n\n' "$bench_contend_note" | cat - "$1" >"$1.tmp" && mv "$1.tmp" "$1"
}

# bench_torch_weights MODEL.safetensors OUT.pt: our F32 checkpoint's tensors
# as a torch state dict under bench/train_torch.py's names (h.N. -> blocks.N.).
bench_torch_weights() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
import numpy as np, torch
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
sd = {}
for name, t in hdr.items():
    if name == "__metadata__":
        continue
    a, b = t["data_offsets"]
    arr = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    sd[("blocks." + name[2:]) if name.startswith("h.") else name] = torch.from_numpy(arr.copy())
torch.save(sd, sys.argv[2])
PY
}

# bench_prompt_pairs OUT N T: N prompt pairs of T random byte tokens (seeded),
# the corrupt prompt differing at positions 1 and T/2, and an answer and a
# wrong id: the patching benchmarks' input (SPEC §11 prompts file).
bench_prompt_pairs() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, random, sys
rnd = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        T = int(sys.argv[3])
        clean = [rnd.randrange(256) for _ in range(T)]
        corrupt = list(clean)
        for p in (1, T // 2):
            corrupt[p] = (clean[p] + 1 + rnd.randrange(255)) % 256
        a, w = rnd.sample(range(256), 2)
        f.write(json.dumps({"clean_ids": clean, "corrupt_ids": corrupt, "answer_id": a, "wrong_id": w}) + "\n")
PY
}
