#!/bin/sh
# Installs everything the harness needs on Debian 12 (root): Debian packages, the venv,
# the harness itself. Idempotent and quick when already done.
#   ./bootstrap.sh [--quiet] [-- COMMAND...]   (runs COMMAND afterwards)
set -eu
cd "$(dirname "$0")"
quiet=
[ "${1:-}" = "--quiet" ] && { quiet=1; shift; }
[ "${1:-}" = "--" ] && shift
say() { [ -n "$quiet" ] || echo "bootstrap: $*" >&2; }

PKGS="git make gcc ccache flex bison bc xz-utils lz4 perl cpio kmod file rsync
libelf-dev libssl-dev openssl zlib1g-dev dwarves clang-19 llvm-19 lld-19 libbpf-dev bpftool
qemu-system-x86 linux-source-6.12 python3-venv busybox-static python3-ply python3-git
e2fsprogs util-linux chromium chromium-driver iputils-ping bubblewrap"

missing=
for p in $PKGS; do
	dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "bootstrap: missing Debian packages:$missing; run: sudo apt-get install -y$missing" >&2
		exit 2
	fi
	say "installing Debian packages:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends $missing >&2
fi

stamp=.venv/.harness-installed
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
	say "creating .venv and installing the harness"
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip >&2
	.venv/bin/pip install -q -e '.[test]' tox >&2
	echo "$want" > $stamp
	say "ready: .venv/bin/harness (or '. .venv/bin/activate' to call it harness); next: .venv/bin/harness run"
fi
[ $# -gt 0 ] && exec "$@"
exit 0
