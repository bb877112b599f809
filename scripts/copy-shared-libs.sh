#!/usr/bin/env bash
# Copies the shared libraries that OBJECTs link (as ldd resolves them on this machine) into
# DEST, less those whose names match SKIP (an extended regular expression over the library's
# name, e.g. the C library's own, which every target has). Fails naming a library ldd cannot
# find. Used by stage-runtime.sh (the container image) and stage-hardware-checks.sh (the
# hardware checks' archive).
# usage: scripts/copy-shared-libs.sh DEST SKIP OBJECT...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 DEST SKIP OBJECT..." >&2; exit 2; }
dest=$1 skip=$2
shift 2
mkdir -p "$dest"
for object in "$@"; do
  ldd "$object" | while read -r name arrow path rest; do
    if [ "$arrow" != "=>" ]; then continue; fi
    if [[ "$name" =~ $skip ]]; then continue; fi
    if [ "$path" = "not" ]; then echo "copy-shared-libs: $name not found" >&2; exit 1; fi
    cp -L "$path" "$dest/$name"
  done
done
