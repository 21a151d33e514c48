#!/bin/sh
# Guest side of the harness: runs each planned test with its own timeout, its output
# to a file on the shared read-write directory (never over the console, where forked
# kselftests lose and duplicate lines), and brackets it in the kernel log so splats can
# be attributed to the test that was running.
#
# usage: runner.sh OUTDIR PLANFILE [OUTPUT_CAP_BYTES [FAIL_FAST [GCOV]]]
# PLANFILE lines: NAME<TAB>TIMEOUT_S<TAB>CWD<TAB>NEEDS<TAB>SHELL_COMMAND (NEEDS: swap,scratch or -)
# The host reads what this writes with harness/guest/protocol.py: keep the two in step.
set -u
out=$1
plan=$2
# Each test's output is kept up to this many bytes; the rest is counted and dropped, so a
# test that loops printing cannot fill the host's disk through the shared directory.
cap=${3:-8388608}
# 1: stop after a test that made the kernel die (taint D, an oops): what would run next on
# that kernel proves nothing and may hang (harness mutate)
fail_fast=${4:-0}
# 1: a gcov kernel (harness run --coverage): its counters are reset before each test and
# copied after it to OUTDIR/gcov/NAME/, so that each line is credited to the tests that ran it
gcov=${5:-0}
status=$out/status.tsv
: > "$status"

kmsg() { echo "harness: $*" > /dev/kmsg 2>/dev/null || true; }
# Under TCG every program started costs 50-100 ms of the guest's time (its loading and
# linking, over 9p): what the shell can read itself, it reads with builtins. Not a
# sysctl: the builtin reads a byte at a time, and a number's sysctl file read at an
# offset past 0 says nothing (32768 reads as "3"): those are read with cat.
# mounted DIR [FSTYPE]: whether DIR is a mount point (of FSTYPE)
mounted() {
	while read -r _ at fs _; do
		[ "$at" = "$1" ] && [ "$fs" = "${2:-$fs}" ] && return 0
	done < /proc/mounts
	return 1
}
# The kernel log before this line is the boot's; the host judges it as the "boot" result.
kmsg "runner-start"

mounted /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
mounted /sys/fs/cgroup cgroup2 || {
	mkdir -p /sys/fs/cgroup
	mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null
}
# Set up on first use by a test that declares it needs them (plan column 5), so a boot
# whose tests need neither pays nothing:
# - swap on zram, so anonymous and shmem memory is reclaimable (without it memcg reclaim
#   finds nothing to reclaim in a guest whose page cache lives on tmpfs);
# - a scratch ext2 file system on a loop device (its image in guest RAM): real page cache
#   for tests that need a disk-backed file system, found in $HARNESS_SCRATCH.
export HARNESS_SCRATCH=/tmp
# swaps [DEVICE]: the swap areas as "DEVICE SIZE_KB ..."; with DEVICE, whether it is one
swaps() {
	list=""
	{ read -r _; while read -r dev _ kb _; do
		[ -z "${1:-}" ] || [ "$dev" != "$1" ] || return 0
		list="$list$dev $kb "
	done; } < /proc/swaps
	[ -z "${1:-}" ] || return 1
}
setup_swap() {
	[ -e /sys/block/zram0/disksize ] && ! swaps /dev/zram0 || return 0
	echo 1G > /sys/block/zram0/disksize 2>/dev/null &&
		mkswap /dev/zram0 > /dev/null 2>&1 && swapon /dev/zram0 2>/dev/null
	swaps
	echo "swap	$list" >> "$out/guest-info.tsv"
}
setup_scratch() {
	[ "$HARNESS_SCRATCH" = /tmp ] || return 0
	scratch=/run/harness-scratch
	# mkfs.ext2 is e2fsprogs'; a guest root of busybox (another arch's) has its mke2fs
	if [ -e /dev/loop-control ] && mkdir -p $scratch && truncate -s 1G /run/harness-scratch.img &&
		{ mkfs.ext2 -q -F /run/harness-scratch.img > /dev/null 2>&1 ||
		  mke2fs -F /run/harness-scratch.img > /dev/null 2>&1; } &&
		mount -o loop /run/harness-scratch.img $scratch 2>/dev/null; then
		HARNESS_SCRATCH=$scratch
		echo "scratch	$scratch ext2" >> "$out/guest-info.tsv"
	else
		echo "scratch	none: /tmp" >> "$out/guest-info.tsv"
	fi
}
# The output past the cap: its size, and how many failed result lines it held (a failure
# there must still fail the test). fold bounds the line awk holds for output without
# newlines (its count is then a little high).
count_rest() {
	fold -b -w 65536 | awk '{ n += length($0) + 1 } /^[ \t#]*not ok/ { f++ } END { print n + 0, f + 0 }'
}
# What a test left running outside timeout's process group (setsid, a daemon) and still
# writing to the output pipe: killed too, or the reader would wait for it. Called in the
# subshell whose stdout is that pipe (a builtin's /proc/self is the shell itself).
kill_pipe_holders() {
	read -r me _ < /proc/self/stat
	for fd in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2; do
		# -ef: the same file as this shell's stdout, the pipe (test's builtin stats both)
		[ "$fd" -ef /proc/self/fd/1 ] || continue
		p=${fd#/proc/}
		p=${p%%/*}
		[ "$p" = "$me" ] || kill -KILL "$p" 2>/dev/null
	done
}
# Hung tasks and soft lockups must be reported while a test runs.
echo 30 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null || true
# The runner's own files (a test's exit status, what the cap cut) stay in the guest, in
# its /run (no directory of their own: a mkdir less): each write to the shared directory
# is a round trip to the host.
own=/run/harness-runner
# What the guest really got: the kernel command line (the user's --append last), CPUs, RAM;
# one write.
read -r uptime _ < /proc/uptime
read -r _ _ release _ < /proc/version
IFS= read -r cmdline < /proc/cmdline
cpus=0
while read -r key _; do [ "$key" != processor ] || cpus=$((cpus + 1)); done < /proc/cpuinfo
while read -r key kb _; do [ "$key" != MemTotal: ] || break; done < /proc/meminfo
tainted=$(cat /proc/sys/kernel/tainted)
printf 'uname\t%s\ncmdline\t%s\ncpus\t%s\nmemory_kb\t%s\ntainted_at_boot\t%s\nready\t%s\n' \
	"$release" "$cmdline" "$cpus" "$kb" "$tainted" "$uptime" >> "$out/guest-info.tsv"

# The counters of /sys/kernel/debug/gcov, copied by reading them: debugfs reports every
# .gcda file's size as 0, so cp and tar would copy nothing.
gcov_save() {
	[ -d /sys/kernel/debug/gcov ] || return 0
	find /sys/kernel/debug/gcov -name '*.gcda' | while read -r f; do
		rel=${f#/sys/kernel/debug/gcov/}
		mkdir -p "$out/gcov/$1/${rel%/*}" && cat "$f" > "$out/gcov/$1/$rel"
	done
}

# what ran before the first test (initcalls, the boot): credited to "boot"
[ "$gcov" = 1 ] && gcov_save boot

tab=$(printf '\t')
while IFS="$tab" read -r name tmo dir needs cmd; do
	[ -n "$name" ] || continue
	case ",$needs," in *,swap,*) setup_swap ;; esac
	case ",$needs," in *,scratch,*) setup_scratch ;; esac
	t0=$(cat /proc/sys/kernel/tainted)
	read -r s0 _ < /proc/uptime
	printf '%s\tstarted\t%s\n' "$name" "$s0" >> "$status"
	[ "$gcov" = 1 ] && echo 1 > /sys/kernel/debug/gcov/reset 2>/dev/null
	kmsg "test-start $name"
	: > "$out/$name.out"
	# a result file of an earlier run in this directory
	[ ! -e "$out/$name.json" ] || rm -f "$out/$name.json"
	# A test may write measurements (JSON) here; they go into results.json as "metrics".
	export HARNESS_METRICS="$out/$name.metrics.json"
	# ...and result files of their own, named after the test (test_progs -J: $name.json).
	export HARNESS_OUT="$out"
	# The output goes through a pipe that keeps the first $cap bytes. timeout(1) leads a
	# process group of its own: what the test left running is killed with it, or it would
	# hold the pipe open (and disturb the next test). Append mode: kselftest's runner
	# reopens /dev/stdout with >> for the inner test's output.
	: > "$own.rc"
	: > "$own.cut"
	( cd "$dir" || { echo 127 > "$own.rc"; exit; }
	  timeout -k 5 "$tmo" sh -c "$cmd" < /dev/null 2>&1 &
	  pid=$!
	  wait $pid
	  echo $? > "$own.rc"
	  kill -KILL -$pid 2>/dev/null
	  kill_pipe_holders ) | { head -c "$cap"; count_rest > "$own.cut"; } >> "$out/$name.out"
	read -r rc < "$own.rc" || rc=125
	read -r cut failed < "$own.cut" || cut=0
	[ "${cut:-0}" -gt 0 ] 2>/dev/null &&
		printf '\n[harness: output cut: %s bytes over the %s-byte cap were discarded, %s failed result lines among them]\n' \
			"$cut" "$cap" "${failed:-0}" >> "$out/$name.out"
	read -r s1 _ < /proc/uptime
	t1=$(cat /proc/sys/kernel/tainted)
	kmsg "test-end $name rc=$rc"
	[ "$gcov" = 1 ] && gcov_save "$name"
	printf '%s\tended\t%s\t%s\t%s\t%s\t%s\n' "$name" "$s1" "$rc" "$t0" "$t1" "$s0" >> "$status"
	if [ "$fail_fast" = 1 ] && [ $((t1 & 128)) -ne 0 ] && [ $((t0 & 128)) -eq 0 ]; then
		echo "stopped	$name" >> "$out/guest-info.tsv"
		break
	fi
done < "$plan"
echo "tainted_at_end	$(cat /proc/sys/kernel/tainted)" >> "$out/guest-info.tsv"
# What the kernel prints after this line (power-off, reboot notifiers) reaches only the
# console: the host judges it there as the "shutdown" result.
kmsg "runner-done"
dmesg > "$out/dmesg.txt" 2>&1
echo "done" > "$out/runner-done"
