#!/usr/bin/env bash
# Fails when a tracked C++ file is not clang-formatted (run by ctest as "format").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' 2>/dev/null)
((${#files[@]})) || { echo "check-format: no tracked C++ files (not a git checkout?)" >&2; exit 1; }
bad=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (fix: clang-format -i $f)" >&2
    bad=1
  fi
done
if ((bad == 0)); then
  echo "check-format: ${#files[@]} files formatted"
fi
exit $bad
