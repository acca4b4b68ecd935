#!/usr/bin/env bash
# Writes the seeds of the pytorch fuzz target (tests/fuzz/corpus/pytorch/):
# tests/fixtures/models/tinylm_h1 as torch.save writes it (zip and legacy,
# with buffers, views and parameters; Debian's python3-torch) and as
# tests/pytorch_hostile.py assembles it opcode by opcode, valid and hostile.
# Run from anywhere; the committed files are what it wrote.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/tests/fuzz/corpus/pytorch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$root/tests/fixtures/models/tinylm_h1
py=/usr/bin/python3
$py "$root/tests/pytorch_files.py" "$src" "$tmp/zip" "$tmp/st" --buffers --views
$py "$root/tests/pytorch_files.py" "$src" "$tmp/legacy" "$tmp/st" --format legacy --buffers \
    --parameters
$py "$root/tests/pytorch_hostile.py" "$src" "$tmp/hostile" /nonexistent/marker
rm -rf "$out"
mkdir -p "$out"
cp "$tmp/zip/pytorch_model.bin" "$out/torch-zip.bin"
cp "$tmp/legacy/pytorch_model.bin" "$out/torch-legacy.bin"
for c in valid valid_legacy reduce_os_system stack_global_eval legacy_os_system \
    view_past_storage overflowing_sizes int64_beyond_size transposed_stride memo_slot_huge \
    deep_lists deep_marks out_of_band_buffer deflated_member path_traversal two_pickles \
    legacy_count_lies legacy_view_outside bool_parameter; do
    cp "$tmp/hostile/$c/pytorch_model.bin" "$out/hand-$c.bin"
done
du -sh "$out"
