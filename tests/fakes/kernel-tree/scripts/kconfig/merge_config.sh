#!/bin/sh
# merge_config.sh -m -O DIR BASE FRAGMENT...: the base then the fragments, in order
# (olddefconfig keeps the last value of each symbol).
[ "$1" = -m ] && shift
[ "$1" = -O ] && { out=$2; shift 2; }
base=$1; shift
cat "$base" "$@" > "$out/.config.merged" && mv "$out/.config.merged" "$out/.config"
