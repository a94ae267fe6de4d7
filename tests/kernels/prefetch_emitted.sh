#!/usr/bin/env bash
# The attention forward prefetches the next key block (kernels/attention_schedule.h, prefetch_line).
# g++ 12 once deleted the __builtin_prefetch loop that did it, silently: the kernels held no prefetch
# instruction and the forward ran 5-17% slower. Every attention path's object in the kernels archive
# must hold one.
# Usage: prefetch_emitted.sh <libodyssey_kernels.a>
set -euo pipefail
archive=$1
command -v objdump >/dev/null || { echo "objdump not found (binutils)"; exit 1; }
counts=$(objdump -d "$archive" | awk '
  /file format/ { member = $1; sub(/:$/, "", member) }
  /prefetcht0/ { n[member]++ }
  END { for (m in n) print m, n[m] }')
fail=0
for path in attention_avx512 attention_avx2 attention_portable; do
  n=$(awk -v p="$path.cpp.o" '$1 == p { print $2 }' <<<"$counts")
  if [ -n "$n" ] && [ "$n" -gt 0 ]; then
    echo "ok: $path: $n prefetcht0"
  else
    echo "FAIL: $path.cpp.o in $archive holds no prefetcht0"
    fail=1
  fi
done
exit $fail
