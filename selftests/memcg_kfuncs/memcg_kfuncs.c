// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs: functional test of the memcg kfuncs, mainline's API
 * (mm/bpf_memcontrol.c; patches/memcg-kfuncs backports it): get and put a
 * memcg, flush, read page_state, vm_events, memory_events and usage.
 *
 * Cgroups (under the cgroup2 mount, +memory enabled where needed):
 *
 *   <cgroup2>/memcg_kfuncs.<pid>            P  subtree_control: +memory
 *   <cgroup2>/memcg_kfuncs.<pid>/child      C  the worker lives here
 *   <cgroup2>/memcg_kfuncs.<pid>/nomem      N  subtree_control: (nothing)
 *   <cgroup2>/memcg_kfuncs.<pid>/nomem/leaf L  no memory controller state
 *   <cgroup2>/memcg_kfuncs.<pid>/flushed    E  has a memcg, never any memory
 *
 * The kfuncs are called from a sleepable cgroup iterator (iter.s/cgroup),
 * one SELF_ONLY link per cgroup, which writes binary records (see
 * memcg_kfuncs.h) to its seq_file.
 *
 * Order of the checks (KTAP, one line each):
 *   1  load_sleepable_iter            the iterator with all four kfuncs loads
 *   2  cgroup_setup                   P, C, N, L, E exist; memory.stat exists
 *                                     in P, C, N, E and not in L
 *   3  bad_items_einval               out-of-range indexes give exactly
 *                                     (unsigned long)-1 on P (recorded
 *                                     -EINVAL); on L bpf_get_mem_cgroup()
 *                                     gives NULL and nothing is read.
 *                                     Run FIRST, before anything else calls
 *                                     the kfuncs: a missing check would hit
 *                                     a WARN_ONCE (the harness marks the test
 *                                     CRASHED) that fires only once per boot.
 *   4  untracked_items_einval         in-range items memcg does not track:
 *                                     PGFREE/PSWPIN events -1 on every
 *                                     kernel; NR_ISOLATED_ANON/NR_DIRTIED
 *                                     -1 where memcg tracks a subset of
 *                                     the node items (>= 6.11); on older
 *                                     kernels (the 6.1 backport) every node
 *                                     item has a counter, so they must be
 *                                     accepted (>= 0; documented limitation)
 *   5  no_memcg_enoent                bpf_get_mem_cgroup() of L (no memory
 *                                     controller) is NULL; on P the get, the
 *                                     flush, valid reads of each kind, usage,
 *                                     memory_events and the root memcg work;
 *                                     the first and last valid index are
 *                                     valid calls too (a bound one off
 *                                     would refuse them)
 *   6  nonsleepable_flush_rejected    a non-sleepable iter/cgroup program
 *                                     calling bpf_mem_cgroup_flush_stats is
 *                                     refused; the verifier log says "sleep"
 *   7  untrusted_cgroup_rejected      what the flags forbid is refused: an
 *                                     untrusted css to the get ("must be a
 *                                     rcu pointer": KF_RCU), an untrusted
 *                                     memcg to a reader and to the flush
 *                                     ("must be referenced or trusted":
 *                                     KF_TRUSTED_ARGS), a reference not put
 *                                     (KF_ACQUIRE), a put of a memcg not got
 *                                     (KF_RELEASE); skipped before 6.2
 *   8  charge_memory_in_child         a forked worker moves itself into C
 *                                     and creates 64 MiB anon (touched page
 *                                     by page), 16 MiB shmem (written to a
 *                                     memfd), 8 MiB of a tmpfs file mmapped
 *                                     MAP_SHARED and touched; it stays alive
 *   9  child_values_match_created     C's kfunc values are what was created
 *  10  child_matches_memory_stat      C: kfunc == memory.stat, per field
 *  11  parent_matches_memory_stat     P: kfunc == memory.stat, per field
 *  12  parent_includes_child          P >= C for every field, P ~= C for
 *                                     anon/file/shmem/file_mapped/pgfault
 *                                     (only C has memory): fails for a
 *                                     local-only (non-hierarchical) fetch
 *  13  flush_makes_new_memory_visible read, +32 MiB anon in C, read again:
 *                                     C's and P's anon grew by 32 MiB
 *  14  flush_keeps_no_reference       E, flushed 8 times and removed, leaves
 *                                     P's nr_dying_descendants within 10 s (a
 *                                     reference the flush keeps would not)
 *  15  cgroup_cleanup                 worker killed, tmpfs gone, cgroups
 *                                     removed (also on failure / SIGTERM)
 *
 * Tolerances.  memory.stat and the kfuncs read the same counters through
 * the same flush (bpf_mem_cgroup_flush_stats() == mem_cgroup_flush_stats(), the
 * flush reading memory.stat does).  That flush is rate limited: on 6.12 it
 * runs only when more than MEMCG_CHARGE_BATCH (64) * online CPUs updates
 * are pending in the subtree, and every CPU keeps up to 64 more updates to
 * itself before it adds them to that count (6.1: a global count with the
 * same threshold).  So a read may miss up to
 *
 *     TOL_UNITS = 2 * 64 * nr_online_cpus   updates
 *
 * and two reads can differ by that much when a flush (the 2 s periodic
 * one, or another reader's) lands between them.  One update is one page
 * for page-sized items and one event for events and the workingset
 * counts; items kept in bytes or KiB (slab, percpu, kernel stack) count
 * max(bytes / PAGE_SIZE, 1) per update, so up to 2 * PAGE_SIZE bytes per
 * update.  Per field the tolerance is therefore
 *
 *     page items:        TOL_UNITS * PAGE_SIZE bytes   (1 MiB with 2 CPUs)
 *     byte/KiB items:    2 * TOL_UNITS * PAGE_SIZE     (2 MiB with 2 CPUs)
 *     counts:            TOL_UNITS                     (256 with 2 CPUs)
 *
 * The memory created is far above that (64 MiB anon = 16384 pages, the
 * +32 MiB step = 8192 pages), so a stale or non-hierarchical value cannot
 * pass.  In practice the cgroups are quiet while they are compared (the
 * worker blocks in read()) and the values agree exactly; the diagnostics
 * print every field.  The agreement checks take up to 3 attempts (each a
 * fresh kfunc read and memory.stat read, 200 ms apart; every failed attempt
 * is printed): both sides go through the same flush, so a retry can only
 * absorb a flush that landed between the two reads, never a wrong value
 * (a local-only parent value is off by 64 MiB on every attempt).  The
 * freshness check (12) reads once; only where the flush may return before
 * the counters are folded (< 6.8, i.e. the 6.1 backport: a trylock that
 * gives up while another flush runs) it may read up to 3 times.
 *
 * Output is KTAP on stdout.  Exit 0: all run checks passed, 1: a check
 * failed, 4: everything was skipped (e.g. a kernel without the kfuncs).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "harness_test.h"
#include "memcg_kfuncs.h"
#include "memcg_kfuncs.skel.h"
#include "memcg_kfuncs_sleep_neg.skel.h"
#include "memcg_kfuncs_untrusted_neg.skel.h"


#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define MiB (1024LL * 1024)
#define MEMCG_CHARGE_BATCH 64

#define ANON_BYTES	(64 * MiB)	/* anonymous, touched page by page */
#define SHMEM_BYTES	(16 * MiB)	/* written to a memfd */
#define MAPPED_BYTES	(8 * MiB)	/* tmpfs file, mmapped and touched */
#define MORE_ANON_BYTES	(32 * MiB)	/* the staleness step */
/*
 * Memory the worker creates in C besides the above: the copy-on-write
 * copies of its stack, libc data and write buffer (it was forked before it
 * joined C, so only what it writes afterwards is charged to C).  Measured:
 * well under 1 MiB; allow 4 MiB above the expected sizes.
 */
#define SLACK_BYTES	(4 * MiB)

static const char *const kfunc_names[] = {
	"bpf_get_mem_cgroup", "bpf_get_root_mem_cgroup", "bpf_put_mem_cgroup",
	"bpf_mem_cgroup_flush_stats", "bpf_mem_cgroup_page_state",
	"bpf_mem_cgroup_vm_events", "bpf_mem_cgroup_memory_events",
	"bpf_mem_cgroup_usage",
};

/* ------------------------------------------------------------------ */
/* KTAP output                                                         */
/* ------------------------------------------------------------------ */

enum test_id {
	T_LOAD,
	T_SETUP,
	T_NEG_RANGE,
	T_NEG_UNTRACKED,
	T_NEG_ENOENT,
	T_NEG_VERIFIER,
	T_NEG_UNTRUSTED,
	T_CHARGE,
	T_AMOUNTS,
	T_AGREE_CHILD,
	T_AGREE_PARENT,
	T_HIER,
	T_STALE,
	T_NO_REF,
	T_CLEANUP,
	NUM_TESTS
};

static const char *const test_names[NUM_TESTS] = {
	[T_LOAD]	 = "load_sleepable_iter",
	[T_SETUP]	 = "cgroup_setup",
	[T_NEG_RANGE]	 = "bad_items_einval",
	[T_NEG_UNTRACKED] = "untracked_items_einval",
	[T_NEG_ENOENT]	 = "no_memcg_enoent",
	[T_NEG_VERIFIER] = "nonsleepable_flush_rejected",
	[T_NEG_UNTRUSTED] = "untrusted_cgroup_rejected",
	[T_CHARGE]	 = "charge_memory_in_child",
	[T_AMOUNTS]	 = "child_values_match_created",
	[T_AGREE_CHILD]	 = "child_matches_memory_stat",
	[T_AGREE_PARENT] = "parent_matches_memory_stat",
	[T_HIER]	 = "parent_includes_child",
	[T_STALE]	 = "flush_makes_new_memory_visible",
	[T_NO_REF]	 = "flush_keeps_no_reference",
	[T_CLEANUP]	 = "cgroup_cleanup",
};

static int next_test;
static int n_pass, n_fail, n_skip;

static void out_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out_line(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
	char buf[4096];
	char *line, *save = NULL;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		out_line("# %s", line);
}

static void diag_block(const char *prefix, const char *text)
{
	const char *p = text, *nl;

	if (!text || !*text) {
		out_line("# %s<empty>", prefix);
		return;
	}
	while (*p) {
		nl = strchr(p, '\n');
		if (!nl) {
			out_line("# %s%s", prefix, p);
			break;
		}
		out_line("# %s%.*s", prefix, (int)(nl - p), p);
		p = nl + 1;
	}
}

static void fill_gap(enum test_id t)
{
	while (next_test < (int)t) {
		out_line("not ok %d %s # internal error: not run",
			 next_test + 1, test_names[next_test]);
		n_fail++;
		next_test++;
	}
}

static void report(enum test_id t, bool ok)
{
	fill_gap(t);
	out_line("%s %d %s", ok ? "ok" : "not ok", t + 1, test_names[t]);
	if (ok)
		n_pass++;
	else
		n_fail++;
	next_test = t + 1;
}

static void report_skip(enum test_id t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void report_skip(enum test_id t, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	fill_gap(t);
	out_line("ok %d %s # SKIP %s", t + 1, test_names[t], reason);
	n_skip++;
	next_test = t + 1;
}

static void skip_range(enum test_id from, enum test_id to, const char *why)
{
	int i;

	for (i = from; i <= (int)to; i++)
		report_skip(i, "%s", why);
}

/* ------------------------------------------------------------------ */
/* libbpf log capture, kernel BTF                                      */
/* ------------------------------------------------------------------ */

static char libbpf_log[32768];
static size_t libbpf_log_len;

static int libbpf_capture(enum libbpf_print_level level, const char *fmt,
			  va_list args)
{
	int n;

	if (level == LIBBPF_DEBUG && !getenv("MEMCG_KFUNCS_DEBUG"))
		return 0;
	if (libbpf_log_len >= sizeof(libbpf_log) - 1)
		return 0;
	n = vsnprintf(libbpf_log + libbpf_log_len,
		      sizeof(libbpf_log) - libbpf_log_len, fmt, args);
	if (n > 0) {
		libbpf_log_len += n;
		if (libbpf_log_len > sizeof(libbpf_log) - 1)
			libbpf_log_len = sizeof(libbpf_log) - 1;
	}
	return 0;
}

static void libbpf_log_reset(void)
{
	libbpf_log_len = 0;
	libbpf_log[0] = '\0';
}

/* True if the kernel has the cgroup iterator and all four kfuncs; otherwise
 * false with @reason filled (=> everything is skipped). */
static bool kernel_has_kfuncs(char *reason, size_t len)
{
	struct btf *btf;
	size_t i;

	errno = 0;
	btf = btf__load_vmlinux_btf();
	if (!btf) {
		snprintf(reason, len, "kernel BTF not readable (%s); cannot tell whether the memcg kfuncs exist",
			 strerror(errno ? errno : ENOENT));
		return false;
	}
	if (btf__find_by_name_kind(btf, "bpf_iter_cgroup", BTF_KIND_FUNC) < 0) {
		snprintf(reason, len, "kernel has no cgroup BPF iterator (bpf_iter_cgroup not in vmlinux BTF)");
		btf__free(btf);
		return false;
	}
	for (i = 0; i < sizeof(kfunc_names) / sizeof(kfunc_names[0]); i++) {
		if (btf__find_by_name_kind(btf, kfunc_names[i], BTF_KIND_FUNC) < 0) {
			snprintf(reason, len,
				 "kernel has no %s kfunc (not in vmlinux BTF): memcg-kfuncs series not applied",
				 kfunc_names[i]);
			btf__free(btf);
			return false;
		}
	}
	btf__free(btf);
	return true;
}

/* ------------------------------------------------------------------ */
/* Fields: memory.stat keys, units, tolerances                         */
/* ------------------------------------------------------------------ */

enum funit {
	U_PAGES,	/* kept in pages, reported in bytes */
	U_SUBPAGE,	/* kept in bytes or KiB, reported in bytes */
	U_COUNT,	/* events and workingset counts */
};

struct fdesc {
	const char *key;	/* memory.stat key */
	const char *item;	/* the enum constant the BPF program passes */
	enum funit unit;
	bool core;		/* must be in memory.stat on every kernel */
};

static const struct fdesc fdesc[NR_FIELDS] = {
	[F_ANON]	     = { "anon", "NR_ANON_MAPPED", U_PAGES, true },
	[F_FILE]	     = { "file", "NR_FILE_PAGES", U_PAGES, true },
	[F_SHMEM]	     = { "shmem", "NR_SHMEM", U_PAGES, true },
	[F_FILE_MAPPED]	     = { "file_mapped", "NR_FILE_MAPPED", U_PAGES, true },
	[F_FILE_DIRTY]	     = { "file_dirty", "NR_FILE_DIRTY", U_PAGES, true },
	[F_INACTIVE_ANON]    = { "inactive_anon", "NR_INACTIVE_ANON", U_PAGES, true },
	[F_ACTIVE_ANON]	     = { "active_anon", "NR_ACTIVE_ANON", U_PAGES, true },
	[F_INACTIVE_FILE]    = { "inactive_file", "NR_INACTIVE_FILE", U_PAGES, true },
	[F_ACTIVE_FILE]	     = { "active_file", "NR_ACTIVE_FILE", U_PAGES, true },
	[F_UNEVICTABLE]	     = { "unevictable", "NR_UNEVICTABLE", U_PAGES, true },
	[F_KERNEL_STACK]     = { "kernel_stack", "NR_KERNEL_STACK_KB", U_SUBPAGE, true },
	[F_PAGETABLES]	     = { "pagetables", "NR_PAGETABLE", U_PAGES, true },
	[F_SLAB_RECLAIMABLE] = { "slab_reclaimable", "NR_SLAB_RECLAIMABLE_B", U_SUBPAGE, true },
	[F_SLAB_UNRECLAIMABLE] = { "slab_unreclaimable", "NR_SLAB_UNRECLAIMABLE_B", U_SUBPAGE, true },
	[F_WS_REFAULT_ANON]  = { "workingset_refault_anon", "WORKINGSET_REFAULT_ANON", U_COUNT, true },
	[F_WS_REFAULT_FILE]  = { "workingset_refault_file", "WORKINGSET_REFAULT_FILE", U_COUNT, true },
	[F_KERNEL]	     = { "kernel", "MEMCG_KMEM", U_PAGES, false },
	[F_SOCK]	     = { "sock", "MEMCG_SOCK", U_PAGES, true },
	[F_PERCPU]	     = { "percpu", "MEMCG_PERCPU_B", U_SUBPAGE, true },
	[F_VMALLOC]	     = { "vmalloc", "MEMCG_VMALLOC", U_PAGES, false },
	[F_PGFAULT]	     = { "pgfault", "PGFAULT", U_COUNT, true },
	[F_PGMAJFAULT]	     = { "pgmajfault", "PGMAJFAULT", U_COUNT, true },
	[F_PGACTIVATE]	     = { "pgactivate", "PGACTIVATE", U_COUNT, true },
	[F_PGDEACTIVATE]     = { "pgdeactivate", "PGDEACTIVATE", U_COUNT, true },
};

static long page_size;
static long long tol_units;	/* 2 * MEMCG_CHARGE_BATCH * online CPUs */

static long long tol_of(int f)
{
	switch (fdesc[f].unit) {
	case U_PAGES:
		return tol_units * page_size;
	case U_SUBPAGE:
		return 2 * tol_units * page_size;
	default:
		return tol_units;
	}
}

static const char *unit_name(int f)
{
	return fdesc[f].unit == U_COUNT ? "" : " B";
}

/* ------------------------------------------------------------------ */
/* Probes (validation)                                                 */
/* ------------------------------------------------------------------ */

enum expect { E_ZERO, E_NONNEG, E_EINVAL, E_ENOENT };

struct pdesc {
	const char *call;
	enum expect on_memcg;	/* on P */
	enum expect on_nomemcg;	/* on L */
};

/* the untracked node items are fixed up in main() for pre-6.11 kernels */
static struct pdesc pdesc[NR_PROBES] = {
	[P_FLUSH]	     = { "get_mem_cgroup(&cgrp->self) + flush_stats()", E_ZERO, E_ENOENT },
	[P_NODE_VALID]	     = { "page_state(NR_ANON_MAPPED)", E_NONNEG, E_ENOENT },
	[P_MEMCG_VALID]	     = { "page_state(MEMCG_KMEM)", E_NONNEG, E_ENOENT },
	[P_EVENT_VALID]	     = { "vm_events(PGFAULT)", E_NONNEG, E_ENOENT },
	[P_MEMEV_VALID]	     = { "memory_events(MEMCG_HIGH)", E_NONNEG, E_ENOENT },
	[P_USAGE]	     = { "usage()", E_NONNEG, E_ENOENT },
	[P_ROOT]	     = { "get_root_mem_cgroup() + page_state(anon)", E_NONNEG, E_ENOENT },
	/* every memcg_stat_item is tracked, and so is the first node item */
	[P_NODE_FIRST]	     = { "page_state(0: NR_LRU_BASE)", E_NONNEG, E_ENOENT },
	[P_MEMCG_FIRST]	     = { "page_state(first memcg item: MEMCG_SWAP)", E_NONNEG, E_ENOENT },
	[P_MEMCG_LAST]	     = { "page_state(MEMCG_NR_STAT - 1)", E_NONNEG, E_ENOENT },
	/* (unsigned long)-1, recorded -EINVAL; without a memcg nothing is called */
	[P_NODE_END]	     = { "page_state(MEMCG_NR_STAT + 1)", E_EINVAL, E_ENOENT },
	[P_NODE_END_PLUS5]   = { "page_state(MEMCG_NR_STAT + 5)", E_EINVAL, E_ENOENT },
	[P_NODE_INT_MAX]     = { "page_state(0x7fffffff)", E_EINVAL, E_ENOENT },
	[P_NODE_MINUS1]	     = { "page_state(-1)", E_EINVAL, E_ENOENT },
	[P_NODE_INT_MIN]     = { "page_state(INT_MIN)", E_EINVAL, E_ENOENT },
	[P_MEMEV_END]	     = { "memory_events(MEMCG_NR_MEMORY_EVENTS)", E_EINVAL, E_ENOENT },
	[P_MEMEV_MINUS1]     = { "memory_events(-1)", E_EINVAL, E_ENOENT },
	[P_MEMCG_END]	     = { "page_state(MEMCG_NR_STAT)", E_EINVAL, E_ENOENT },
	[P_MEMCG_END_PLUS5]  = { "page_state(MEMCG_NR_STAT + 5)", E_EINVAL, E_ENOENT },
	[P_MEMCG_INT_MAX]    = { "page_state(0x7fffffff)", E_EINVAL, E_ENOENT },
	[P_MEMCG_MINUS1]     = { "page_state(-1)", E_EINVAL, E_ENOENT },
	[P_EVENT_END]	     = { "vm_events(NR_VM_EVENT_ITEMS)", E_EINVAL, E_ENOENT },
	[P_EVENT_END_PLUS5]  = { "vm_events(NR_VM_EVENT_ITEMS + 5)", E_EINVAL, E_ENOENT },
	[P_EVENT_INT_MAX]    = { "vm_events(0x7fffffff)", E_EINVAL, E_ENOENT },
	[P_EVENT_MINUS1]     = { "vm_events(-1)", E_EINVAL, E_ENOENT },
	[P_NODE_UNTRACKED_A] = { "page_state(NR_ISOLATED_ANON)", E_EINVAL, E_ENOENT },
	[P_NODE_UNTRACKED_B] = { "page_state(NR_DIRTIED)", E_EINVAL, E_ENOENT },
	[P_EVENT_UNTRACKED_A] = { "vm_events(PGFREE)", E_EINVAL, E_ENOENT },
	[P_EVENT_UNTRACKED_B] = { "vm_events(PSWPIN)", E_EINVAL, E_ENOENT },
};

static const char *expect_str(enum expect e)
{
	switch (e) {
	case E_ZERO:	return "0";
	case E_NONNEG:	return ">= 0";
	case E_EINVAL:	return "-1 (as -EINVAL)";
	default:	return "no memcg (-ENOENT)";
	}
}

static bool expect_ok(enum expect e, long long v)
{
	switch (e) {
	case E_ZERO:	return v == 0;
	case E_NONNEG:	return v >= 0;
	case E_EINVAL:	return v == -EINVAL;
	default:	return v == -ENOENT;
	}
}

/* ------------------------------------------------------------------ */
/* cgroups                                                             */
/* ------------------------------------------------------------------ */

enum { CG_P, CG_C, CG_N, CG_L, CG_E, NUM_CG };

struct cg {
	const char *rel;
	const char *label;
	char path[PATH_MAX];
	unsigned long long ino;
	bool created;
	int fd;
	struct bpf_link *link;
};

static struct cg cgs[NUM_CG] = {
	[CG_P] = { "",		 "parent P" },
	[CG_C] = { "child",	 "child C" },
	[CG_N] = { "nomem",	 "nomem N" },
	[CG_L] = { "nomem/leaf", "no-memcg leaf L" },
	[CG_E] = { "flushed",	 "empty flushed E" },
};

static char cg_mnt[PATH_MAX];
static char own_cg_mnt[PATH_MAX];	/* set if we mounted cgroup2 */
static bool root_memory_enabled_by_us;
static char tmpfs_dir[PATH_MAX];	/* our tmpfs for the mapped file */
static bool tmpfs_mounted;
static volatile pid_t worker_pid;
static int wcmd_fd = -1, wack_fd = -1;

static int write_file(const char *path, const char *s)
{
	ssize_t n, len = strlen(s);
	int fd, err = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, s, len);
	if (n != len)
		err = n < 0 ? -errno : -EIO;
	close(fd);
	return err;
}

static int read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static bool word_in(const char *list, const char *word)
{
	size_t l = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word))) {
		if ((p == list || p[-1] == ' ' || p[-1] == '\n') &&
		    (p[l] == ' ' || p[l] == '\n' || p[l] == '\0'))
			return true;
		p += l;
	}
	return false;
}

/* Async-signal-safe: kill the worker, drop tmpfs and cgroups. */
static int teardown(int *first_errno, int *first_failed)
{
	int i, tries, failures = 0;
	pid_t pid = worker_pid;

	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		worker_pid = 0;
	}
	if (tmpfs_mounted) {
		umount2(tmpfs_dir, MNT_DETACH);
		tmpfs_mounted = false;
	}
	if (tmpfs_dir[0]) {
		rmdir(tmpfs_dir);
		tmpfs_dir[0] = '\0';
	}
	for (i = NUM_CG - 1; i >= 0; i--) {
		if (!cgs[i].created)
			continue;
		for (tries = 0; tries < 100; tries++) {
			if (!rmdir(cgs[i].path) || errno == ENOENT) {
				cgs[i].created = false;
				break;
			}
			if (errno != EBUSY)
				break;
			usleep(20000);	/* a just-reaped task keeps it busy briefly */
		}
		if (cgs[i].created) {
			if (!failures && first_errno)
				*first_errno = errno;
			if (!failures && first_failed)
				*first_failed = i;
			failures++;
		}
	}
	return failures;
}

static void release_cg_mount(void)
{
	char path[PATH_MAX + 32];

	if (root_memory_enabled_by_us && cg_mnt[0]) {
		/* best effort: leave the root as we found it */
		snprintf(path, sizeof(path), "%s/cgroup.subtree_control", cg_mnt);
		write_file(path, "-memory");
		root_memory_enabled_by_us = false;
	}
	if (own_cg_mnt[0]) {
		umount2(own_cg_mnt, MNT_DETACH);
		rmdir(own_cg_mnt);
		own_cg_mnt[0] = '\0';
	}
}

static void on_signal(int sig)
{
	(void)sig;
	teardown(NULL, NULL);
	_exit(KSFT_FAIL);
}

/* 0, or -errno with @reason; *@skip: environment lacks cgroup2/memcg */
static int setup_cgroups(char *reason, size_t len, bool *skip)
{
	char path[PATH_MAX + 64], buf[512];
	struct statfs sfs;
	struct stat st;
	int i, err;

	*skip = false;
	if (!ht_cgroup2_mount(cg_mnt, sizeof(cg_mnt))) {
		snprintf(own_cg_mnt, sizeof(own_cg_mnt), "/tmp/memcg_kfuncs.cg.XXXXXX");
		if (!mkdtemp(own_cg_mnt)) {
			err = -errno;
			snprintf(reason, len, "no cgroup2 mount; mkdtemp: %s", strerror(errno));
			own_cg_mnt[0] = '\0';
			return err;
		}
		if (mount("cgroup2", own_cg_mnt, "cgroup2", 0, NULL)) {
			err = -errno;
			snprintf(reason, len, "no cgroup2 mount and mount(cgroup2) failed: %s",
				 strerror(errno));
			*skip = errno == ENODEV || errno == EPERM;
			rmdir(own_cg_mnt);
			own_cg_mnt[0] = '\0';
			return err;
		}
		snprintf(cg_mnt, sizeof(cg_mnt), "%s", own_cg_mnt);
		diag("no cgroup2 mount found; mounted one at %s", cg_mnt);
	}

	snprintf(path, sizeof(path), "%s/cgroup.controllers", cg_mnt);
	if ((err = read_small(path, buf, sizeof(buf)))) {
		snprintf(reason, len, "read %s: %s", path, strerror(-err));
		return err;
	}
	if (!word_in(buf, "memory")) {
		snprintf(reason, len, "memory controller not available on %s (controllers: %s)",
			 cg_mnt, buf);
		*skip = true;
		return -ENOENT;
	}
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", cg_mnt);
	if ((err = read_small(path, buf, sizeof(buf)))) {
		snprintf(reason, len, "read %s: %s", path, strerror(-err));
		return err;
	}
	if (!word_in(buf, "memory")) {
		if ((err = write_file(path, "+memory"))) {
			snprintf(reason, len, "enabling +memory in %s: %s", path, strerror(-err));
			return err;
		}
		root_memory_enabled_by_us = true;
	}

	for (i = 0; i < NUM_CG; i++) {
		if (snprintf(cgs[i].path, sizeof(cgs[i].path), "%s/memcg_kfuncs.%d%s%s",
			     cg_mnt, (int)getpid(), cgs[i].rel[0] ? "/" : "",
			     cgs[i].rel) >= (int)sizeof(cgs[i].path)) {
			snprintf(reason, len, "cgroup path too long");
			return -ENAMETOOLONG;
		}
	}
	for (i = 0; i < NUM_CG; i++) {
		if (mkdir(cgs[i].path, 0755)) {
			if (errno != EEXIST) {
				err = -errno;
				snprintf(reason, len, "mkdir(%s): %s", cgs[i].path, strerror(errno));
				return err;
			}
			/* leftover of an earlier run with our pid: reuse */
		}
		cgs[i].created = true;
		if (stat(cgs[i].path, &st)) {
			err = -errno;
			snprintf(reason, len, "stat(%s): %s", cgs[i].path, strerror(errno));
			return err;
		}
		cgs[i].ino = st.st_ino;
		cgs[i].fd = open(cgs[i].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cgs[i].fd < 0) {
			err = -errno;
			snprintf(reason, len, "open(%s): %s", cgs[i].path, strerror(errno));
			return err;
		}
		if (i == CG_P) {
			if (statfs(cgs[i].path, &sfs) ||
			    (unsigned long)sfs.f_type != CGROUP2_SUPER_MAGIC) {
				snprintf(reason, len, "%.4000s is not on cgroup2", cgs[i].path);
				return -EINVAL;
			}
			/* memory for P's children (C and N), not for N's (L) */
			snprintf(path, sizeof(path), "%.4000s/cgroup.subtree_control", cgs[i].path);
			if ((err = write_file(path, "+memory"))) {
				snprintf(reason, len, "enabling +memory in %s: %s", path,
					 strerror(-err));
				return err;
			}
		}
	}
	/* memory.stat must be there exactly where a memcg is */
	for (i = 0; i < NUM_CG; i++) {
		bool want = i != CG_L, have;

		snprintf(path, sizeof(path), "%s/memory.stat", cgs[i].path);
		have = access(path, F_OK) == 0;
		if (have != want) {
			snprintf(reason, len, "%s: memory.stat %s, expected it %s",
				 cgs[i].path, have ? "exists" : "missing",
				 want ? "to exist" : "not to exist (no +memory in nomem's subtree_control)");
			return -EINVAL;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* memory.stat                                                         */
/* ------------------------------------------------------------------ */

struct mstat {
	char buf[16384];
	size_t len;
};

static int read_memstat(int cgi, struct mstat *m)
{
	char path[PATH_MAX + 16];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/memory.stat", cgs[cgi].path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	m->len = 0;
	while (m->len < sizeof(m->buf) - 1) {
		n = read(fd, m->buf + m->len, sizeof(m->buf) - 1 - m->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		m->len += n;
	}
	close(fd);
	m->buf[m->len] = '\0';
	return m->len ? 0 : -EIO;
}

static bool mstat_get(const struct mstat *m, const char *key, long long *v)
{
	size_t kl = strlen(key);
	const char *p = m->buf;

	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == ' ') {
			*v = strtoll(p + kl + 1, NULL, 10);
			return true;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* The iterator                                                        */
/* ------------------------------------------------------------------ */

static struct memcg_kfuncs_bpf *skel;

static int attach_link(int cgi, char *reason, size_t len)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;

	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cgs[cgi].fd;
	linfo.cgroup.order = BPF_CGROUP_ITER_SELF_ONLY;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	libbpf_log_reset();
	cgs[cgi].link = bpf_program__attach_iter(skel->progs.memcg_read, &opts);
	if (!cgs[cgi].link) {
		int err = errno ? -errno : -EINVAL;

		snprintf(reason, len, "attaching a SELF_ONLY iterator link to %s: %s",
			 cgs[cgi].path, strerror(-err));
		return err;
	}
	return 0;
}

static struct bpf_link *walk_link;	/* DESCENDANTS_PRE from P, for MK_MODE_TARGET */

/* One walk of a link; the one record lands in @buf (exactly @len bytes). */
static int link_run(struct bpf_link *link, int cgi, int mode, void *buf, size_t len,
		    char *msg, size_t mlen)
{
	size_t off = 0;
	char extra[64];
	int fd, err = 0;
	ssize_t n;

	if (!link) {
		snprintf(msg, mlen, "%s: no iterator link", cgs[cgi].label);
		return -EINVAL;
	}
	skel->bss->mode = mode;
	skel->bss->records = 0;
	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0) {
		err = -errno;
		snprintf(msg, mlen, "bpf_iter_create(%s): %s", cgs[cgi].label, strerror(errno));
		return err;
	}
	while (off < len) {
		n = read(fd, (char *)buf + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			snprintf(msg, mlen, "read(iter %s): %s", cgs[cgi].label, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		off += n;
	}
	if (!err) {
		do {
			n = read(fd, extra, sizeof(extra));
		} while (n < 0 && errno == EINTR);
		if (n != 0 || off != len) {
			snprintf(msg, mlen, "iterator on %s wrote %zu%s bytes, expected exactly %zu (one record)",
				 cgs[cgi].label, off, n > 0 ? "+more" : "", len);
			err = -EPROTO;
		}
	}
	close(fd);
	if (!err && skel->bss->records != 1) {
		snprintf(msg, mlen, "iterator on %s: BPF program counted %u records, expected 1",
			 cgs[cgi].label, skel->bss->records);
		err = -EPROTO;
	}
	return err;
}

static int attach_walk_link(char *reason, size_t len)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;

	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cgs[CG_P].fd;
	linfo.cgroup.order = BPF_CGROUP_ITER_DESCENDANTS_PRE;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	libbpf_log_reset();
	walk_link = bpf_program__attach_iter(skel->progs.memcg_read, &opts);
	if (!walk_link) {
		snprintf(reason, len, "attaching a DESCENDANTS_PRE iterator link to %s: %s",
			 cgs[CG_P].path, strerror(errno));
		return -errno;
	}
	return 0;
}

/* One walk of @cgi's own SELF_ONLY link. */
static int iter_run(int cgi, int mode, void *buf, size_t len, char *msg, size_t mlen)
{
	return link_run(cgs[cgi].link, cgi, mode, buf, len, msg, mlen);
}

static int check_read_rec(int cgi, int mode, struct mk_read_rec *r, char *msg, size_t mlen);

static int read_rec(int cgi, int mode, struct mk_read_rec *r, char *msg, size_t mlen)
{
	int err;

	memset(r, 0, sizeof(*r));
	err = iter_run(cgi, mode, r, sizeof(*r), msg, mlen);
	return err ? err : check_read_rec(cgi, mode, r, msg, mlen);
}

/* @cgi read (flush + fetches) through P's descendants walk: no link pins it. */
static int read_target(int cgi, struct mk_read_rec *r, char *msg, size_t mlen)
{
	int err;

	memset(r, 0, sizeof(*r));
	skel->bss->target_cgid = cgs[cgi].ino;
	err = link_run(walk_link, cgi, MK_MODE_TARGET, r, sizeof(*r), msg, mlen);
	return err ? err : check_read_rec(cgi, MK_MODE_READ, r, msg, mlen);
}

static int check_read_rec(int cgi, int mode, struct mk_read_rec *r, char *msg, size_t mlen)
{
	int f;

	if (r->magic != MK_MAGIC_READ || r->cgid != cgs[cgi].ino) {
		snprintf(msg, mlen, "%s: bad record (magic 0x%llx, cgroup id %llu, expected id %llu)",
			 cgs[cgi].label, (unsigned long long)r->magic,
			 (unsigned long long)r->cgid, cgs[cgi].ino);
		return -EPROTO;
	}
	if (mode == MK_MODE_READ && r->flush_ret != 0) {
		snprintf(msg, mlen, "%s: get + flush gave %lld, expected 0 (-2: bpf_get_mem_cgroup() returned NULL)",
			 cgs[cgi].label, (long long)r->flush_ret);
		return -EPROTO;
	}
	for (f = 0; f < NR_FIELDS; f++) {
		if (r->val[f] < 0) {
			snprintf(msg, mlen, "%s: read of %s (%s = %lld) gave %lld (%s), expected a value >= 0",
				 cgs[cgi].label, fdesc[f].key, fdesc[f].item,
				 (long long)r->item[f], (long long)r->val[f],
				 strerror((int)-r->val[f]));
			return -EPROTO;
		}
	}
	return 0;
}

static int read_probe(int cgi, struct mk_probe_rec *p, char *msg, size_t mlen)
{
	int err;

	memset(p, 0, sizeof(*p));
	err = iter_run(cgi, MK_MODE_PROBE, p, sizeof(*p), msg, mlen);
	if (err)
		return err;
	if (p->magic != MK_MAGIC_PROBE || p->cgid != cgs[cgi].ino) {
		snprintf(msg, mlen, "%s: bad probe record (magic 0x%llx, id %llu, expected %llu)",
			 cgs[cgi].label, (unsigned long long)p->magic,
			 (unsigned long long)p->cgid, cgs[cgi].ino);
		return -EPROTO;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* The worker in C                                                     */
/* ------------------------------------------------------------------ */

enum { W_ANON = 1, W_SHMEM, W_MAPFILE };

struct wmsg {
	int op;
	int err;
	long long arg;
};

static int touch_pages(char *p, long long bytes)
{
	long long off;

	for (off = 0; off < bytes; off += page_size)
		p[off] = (char)(off / page_size) | 1;	/* a write: a real page */
	return 0;
}

static void worker_main(int cfd, int afd, const char *procs, const char *map_path)
{
	static char chunk[65536];
	struct wmsg m = { 0 };
	char pid[32];
	int fd, k;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* 1. move ourselves into C */
	k = snprintf(pid, sizeof(pid), "%d", (int)getpid());
	fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, pid, k) != k)
		m.err = errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	if (write(afd, &m, sizeof(m)) != sizeof(m) || m.err)
		_exit(1);

	for (;;) {
		ssize_t n = read(cfd, &m, sizeof(m));
		char *p;

		if (n < 0 && errno == EINTR)
			continue;
		if (n != sizeof(m))
			_exit(0);	/* parent closed the pipe */
		m.err = 0;
		switch (m.op) {
		case W_ANON:
			p = mmap(NULL, m.arg, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				m.err = errno;
				break;
			}
			madvise(p, m.arg, MADV_NOHUGEPAGE);	/* one fault per page */
			touch_pages(p, m.arg);
			break;		/* kept mapped until we die */
		case W_SHMEM: {
			long long done = 0;

			fd = memfd_create("memcg_kfuncs_shmem", MFD_CLOEXEC);
			if (fd < 0) {
				m.err = errno;
				break;
			}
			memset(chunk, 0x5a, sizeof(chunk));
			while (done < m.arg) {
				size_t want = m.arg - done < (long long)sizeof(chunk) ?
					      (size_t)(m.arg - done) : sizeof(chunk);

				n = write(fd, chunk, want);
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0) {
					m.err = n < 0 ? errno : EIO;
					break;
				}
				done += n;
			}
			break;		/* fd kept open: the pages stay */
		}
		case W_MAPFILE:
			if (map_path[0])
				fd = open(map_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			else
				fd = memfd_create("memcg_kfuncs_mapped", MFD_CLOEXEC);
			if (fd < 0 || ftruncate(fd, m.arg)) {
				m.err = errno;
				break;
			}
			p = mmap(NULL, m.arg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p == MAP_FAILED) {
				m.err = errno;
				break;
			}
			touch_pages(p, m.arg);	/* kept mapped: file_mapped */
			close(fd);
			break;
		default:
			m.err = EINVAL;
		}
		if (write(afd, &m, sizeof(m)) != sizeof(m))
			_exit(1);
	}
}

static int wait_ack(struct wmsg *m, int timeout_ms)
{
	struct pollfd pfd = { .fd = wack_fd, .events = POLLIN };
	ssize_t n;
	int r;

	do {
		r = poll(&pfd, 1, timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return -errno;
	do {
		n = read(wack_fd, m, sizeof(*m));
	} while (n < 0 && errno == EINTR);
	if (n != sizeof(*m))
		return -EPIPE;	/* worker died */
	return m->err ? -m->err : 0;
}

static int worker_do(int op, long long arg)
{
	struct wmsg m = { .op = op, .arg = arg };

	if (write(wcmd_fd, &m, sizeof(m)) != sizeof(m))
		return -EPIPE;
	return wait_ack(&m, 60000);
}

static int start_worker(char *reason, size_t len)
{
	char procs[PATH_MAX + 16], map_path[PATH_MAX + 32] = "";
	int c[2], a[2], err;
	struct wmsg m;
	pid_t pid;

	/* our own tmpfs for the file we map (memfd if we cannot mount) */
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "/tmp/memcg_kfuncs.tmpfs.XXXXXX");
	if (!mkdtemp(tmpfs_dir)) {
		diag("mkdtemp(/tmp): %s; the mapped file will be a memfd", strerror(errno));
		tmpfs_dir[0] = '\0';
	} else if (mount("tmpfs", tmpfs_dir, "tmpfs", 0, "size=64m,mode=0700")) {
		diag("mount(tmpfs, %s): %s; the mapped file will be a memfd",
		     tmpfs_dir, strerror(errno));
	} else {
		tmpfs_mounted = true;
		snprintf(map_path, sizeof(map_path), "%s/mapped", tmpfs_dir);
	}

	snprintf(procs, sizeof(procs), "%s/cgroup.procs", cgs[CG_C].path);
	if (pipe2(c, O_CLOEXEC) || pipe2(a, O_CLOEXEC)) {
		err = -errno;
		snprintf(reason, len, "pipe: %s", strerror(errno));
		return err;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		snprintf(reason, len, "fork: %s", strerror(errno));
		return err;
	}
	if (pid == 0) {
		close(c[1]);
		close(a[0]);
		worker_main(c[0], a[1], procs, map_path);
		_exit(0);
	}
	worker_pid = pid;
	close(c[0]);
	close(a[1]);
	wcmd_fd = c[1];
	wack_fd = a[0];
	err = wait_ack(&m, 30000);
	if (err) {
		snprintf(reason, len, "worker could not move itself into %s: %s",
			 cgs[CG_C].path, strerror(-err));
		return err;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Checks                                                              */
/* ------------------------------------------------------------------ */

static int kernel_major, kernel_minor;
/* the kernel's flush may return before folding the counters (6.1) */
static bool weak_flush;

static void check_probes(bool loaded)
{
	struct mk_probe_rec pr[2];
	const int on[2] = { CG_P, CG_L };
	char msg[512];
	bool ok_range = true, ok_untr = true, ok_enoent = true, got = true;
	int i, k;

	if (!loaded) {
		skip_range(T_NEG_RANGE, T_NEG_ENOENT, "iterator not loaded / cgroups not set up");
		return;
	}
	for (k = 0; k < 2; k++) {
		if (read_probe(on[k], &pr[k], msg, sizeof(msg))) {
			diag("%s", msg);
			got = false;
		}
	}
	if (!got) {
		report(T_NEG_RANGE, false);
		report(T_NEG_UNTRACKED, false);
		report(T_NEG_ENOENT, false);
		return;
	}

	diag("probe results (item = the enum value the BPF program passed):");
	diag("  %-44s %11s  %-14s %-14s  %-14s %-14s", "call", "item",
	     "on P: got", "expected", "on L: got", "expected");
	for (i = 0; i < NR_PROBES; i++) {
		bool ok0 = expect_ok(pdesc[i].on_memcg, pr[0].res[i]);
		bool ok1 = expect_ok(pdesc[i].on_nomemcg, pr[1].res[i]);

		diag("  %-44s %11lld  %-14lld %-14s  %-14lld %-14s%s", pdesc[i].call,
		     (long long)pr[0].item[i], (long long)pr[0].res[i],
		     expect_str(pdesc[i].on_memcg), (long long)pr[1].res[i],
		     expect_str(pdesc[i].on_nomemcg), ok0 && ok1 ? "" : "   <-- WRONG");
		if (ok0 && ok1)
			continue;
		if (i >= P_FIRST_UNTRACKED)
			ok_untr = false;
		else if (i >= P_FIRST_RANGE)
			ok_range = false;
		else
			ok_enoent = false;
	}
	report(T_NEG_RANGE, ok_range);
	report(T_NEG_UNTRACKED, ok_untr);
	report(T_NEG_ENOENT, ok_enoent);
}

/*
 * Verifier messages: not the echoed source (';') nor instruction dumps
 * (digits).  The negative program's name has no "sleep" in it, so a line
 * naming the program cannot satisfy the check.
 */
static bool is_verifier_message(const char *line)
{
	return line[0] && line[0] != ';' && !(line[0] >= '0' && line[0] <= '9');
}

static int verifier_lines_matching(const char *log, const char *needle, bool print)
{
	const char *p = log, *nl;
	char line[512];
	int matches = 0;
	size_t l;

	while (p && *p) {
		nl = strchr(p, '\n');
		l = nl ? (size_t)(nl - p) : strlen(p);
		if (l >= sizeof(line))
			l = sizeof(line) - 1;
		memcpy(line, p, l);
		line[l] = '\0';
		if (is_verifier_message(line) && strcasestr(line, needle)) {
			matches++;
			if (print)
				diag("verifier: %s", line);
		}
		p = nl ? nl + 1 : NULL;
	}
	return matches;
}

static void check_verifier_rejects(void)
{
	static char vlog[65536];
	struct memcg_kfuncs_sleep_neg_bpf *neg;
	LIBBPF_OPTS(bpf_object_open_opts, oopts,
		.kernel_log_buf = vlog,
		.kernel_log_size = sizeof(vlog),
		.kernel_log_level = 0,	/* libbpf retries with level 1 on failure */
	);
	int err;

	vlog[0] = '\0';
	libbpf_log_reset();
	neg = memcg_kfuncs_sleep_neg_bpf__open_opts(&oopts);
	if (!neg) {
		diag("opening the negative object failed: %s", strerror(errno));
		diag_block("", libbpf_log);
		report(T_NEG_VERIFIER, false);
		return;
	}
	err = memcg_kfuncs_sleep_neg_bpf__load(neg);
	memcg_kfuncs_sleep_neg_bpf__destroy(neg);
	if (!err) {
		diag("non-sleepable iter/cgroup program calling bpf_mem_cgroup_flush_stats loaded; expected the verifier to refuse it");
		report(T_NEG_VERIFIER, false);
		return;
	}
	if (!vlog[0]) {
		diag("load failed (%d: %s) without a verifier log; expected a verifier rejection",
		     err, strerror(-err));
		diag_block("", libbpf_log);
		report(T_NEG_VERIFIER, false);
		return;
	}
	if (!verifier_lines_matching(vlog, "sleep", false)) {
		diag("load failed (%d: %s) but no verifier message mentions 'sleep'; log:",
		     err, strerror(-err));
		diag_block("verifier: ", vlog);
		report(T_NEG_VERIFIER, false);
		return;
	}
	diag("refused as expected (%d: %s):", err, strerror(-err));
	verifier_lines_matching(vlog, "sleep", true);
	report(T_NEG_VERIFIER, true);
}

/*
 * A cgroup pointer the verifier cannot vouch for (memcg_kfuncs_untrusted_neg.bpf.c)
 * must be refused by every kfunc, for the flag it registers: KF_RCU for the
 * get, KF_TRUSTED_ARGS for the readers and the flush, and the acquire/release
 * pairing.  Each program is loaded alone.
 */
static void check_untrusted_rejected(void)
{
	static const struct {
		const char *prog;
		const char *needle;
	} cases[] = {
		{ "get_untrusted", "must be a rcu pointer" },
		{ "read_untrusted", "must be referenced or trusted" },
		{ "vm_events_untrusted", "must be referenced or trusted" },
		{ "memory_events_untrusted", "must be referenced or trusted" },
		{ "usage_untrusted", "must be referenced or trusted" },
		{ "flush_untrusted", "must be referenced or trusted" },
		{ "leak", "Unreleased reference" },
		{ "put_unreferenced", "must be referenced or trusted" },
	};
	static char vlog[65536];
	bool ok = true;
	size_t c;

	if (kernel_major < 6 || (kernel_major == 6 && kernel_minor < 2)) {
		/* no KF_RCU, no bpf_rcu_read_lock(): the backport registers no flags */
		report_skip(T_NEG_UNTRUSTED, "kernel < 6.2: the kfuncs carry no KF_RCU or "
			    "KF_TRUSTED_ARGS there (see the 6.1 cover letter)");
		return;
	}
	for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		LIBBPF_OPTS(bpf_object_open_opts, oopts,
			.kernel_log_buf = vlog,
			.kernel_log_size = sizeof(vlog),
			.kernel_log_level = 0,
		);
		struct memcg_kfuncs_untrusted_neg_bpf *neg;
		struct bpf_program *prog;
		int err;

		vlog[0] = '\0';
		libbpf_log_reset();
		neg = memcg_kfuncs_untrusted_neg_bpf__open_opts(&oopts);
		if (!neg) {
			diag("opening the untrusted-pointer object failed: %s", strerror(errno));
			diag_block("", libbpf_log);
			ok = false;
			break;
		}
		bpf_object__for_each_program(prog, neg->obj)
			bpf_program__set_autoload(prog, !strcmp(bpf_program__name(prog),
								cases[c].prog));
		err = memcg_kfuncs_untrusted_neg_bpf__load(neg);
		memcg_kfuncs_untrusted_neg_bpf__destroy(neg);
		if (!err) {
			diag("%s loaded: the kfunc took a pointer that is neither trusted nor RCU "
			     "protected (its KF_ flag is missing?)", cases[c].prog);
			ok = false;
		} else if (!verifier_lines_matching(vlog, cases[c].needle, false)) {
			diag("%s refused (%d: %s), but no verifier message says '%s'; log:",
			     cases[c].prog, err, strerror(-err), cases[c].needle);
			diag_block("verifier: ", vlog);
			ok = false;
		} else {
			diag("%s refused as expected:", cases[c].prog);
			verifier_lines_matching(vlog, cases[c].needle, true);
		}
	}
	report(T_NEG_UNTRUSTED, ok);
}

/* nr_dying_descendants of @cgi's cgroup.stat, or -1 */
static long long dying_descendants(int cgi)
{
	char path[PATH_MAX + 32], buf[512], *p;

	snprintf(path, sizeof(path), "%.4000s/cgroup.stat", cgs[cgi].path);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return -1;
	p = strstr(buf, "nr_dying_descendants ");
	return p ? strtoll(p + strlen("nr_dying_descendants "), NULL, 10) : -1;
}

/*
 * bpf_get_mem_cgroup() pins the memcg and bpf_put_mem_cgroup() must drop
 * that reference: get, flush and put an empty cgroup E (nothing ever charged
 * to it) a few times, remove it, and E must be gone from P's dying
 * descendants within seconds.  A reference kept (a put that drops nothing,
 * a get that takes two) keeps E dying for good.  E is reached through P's
 * DESCENDANTS_PRE link, never a link of its own: a link pins its cgroup until
 * it is freed, after an RCU tasks-trace grace period for a sleepable program
 * (seen: E stayed dying for over 10 s after its link was destroyed).
 */
static bool check_no_reference(void)
{
	struct mk_read_rec r;
	char msg[512];
	long long before, now = -1;
	int k, tries;

	before = dying_descendants(CG_P);
	if (before < 0) {
		diag("cannot read nr_dying_descendants of %s/cgroup.stat", cgs[CG_P].path);
		return false;
	}
	for (k = 0; k < 8; k++) {
		if (read_target(CG_E, &r, msg, sizeof(msg))) {
			diag("%s", msg);
			return false;
		}
		if (r.flush_ret != 0) {
			diag("flush of %s returned %lld, expected 0", cgs[CG_E].label,
			     (long long)r.flush_ret);
			return false;
		}
	}
	if (cgs[CG_E].fd >= 0) {
		close(cgs[CG_E].fd);
		cgs[CG_E].fd = -1;
	}
	if (rmdir(cgs[CG_E].path)) {
		diag("rmdir(%s): %s", cgs[CG_E].path, strerror(errno));
		return false;
	}
	cgs[CG_E].created = false;
	for (tries = 0; tries < 100; tries++) {	/* 10 s */
		now = dying_descendants(CG_P);
		if (now >= 0 && now <= before)
			break;
		usleep(100000);
	}
	diag("P's nr_dying_descendants: %lld before removing E (flushed 8 times), %lld after %d.%d s",
	     before, now, tries / 10, tries % 10);
	if (now < 0 || now > before) {
		diag("E is still dying: a reference to its memcg (or cgroup) was never dropped");
		return false;
	}
	return true;
}

static void diag_rec(const char *who, const struct mk_read_rec *r)
{
	int f;

	diag("%s (cgroup id %llu, flush %lld):", who, (unsigned long long)r->cgid,
	     (long long)r->flush_ret);
	for (f = 0; f < NR_FIELDS; f++)
		diag("  %-24s %-24s (%3lld) %14lld%s", fdesc[f].key, fdesc[f].item,
		     (long long)r->item[f], (long long)r->val[f], unit_name(f));
}

/* expected range check, in bytes or counts */
static bool in_range(const char *what, long long v, long long lo, long long hi)
{
	bool ok = v >= lo && v <= hi;

	diag("  %-34s %14lld  expected [%lld, %lld]%s", what, v, lo, hi,
	     ok ? "" : "   <-- WRONG");
	return ok;
}

static bool check_amounts(void)
{
	struct mk_read_rec r;
	long long tp = tol_units * page_size, te = tol_units;
	char msg[512];
	bool ok = true;

	if (read_rec(CG_C, MK_MODE_READ, &r, msg, sizeof(msg))) {
		diag("%s", msg);
		return false;
	}
	diag_rec("child C via kfuncs", &r);
	diag("created in C: %lld MiB anon, %lld MiB shmem (memfd), %lld MiB mapped tmpfs file; tolerance %lld B (%lld pages), slack %lld MiB for the worker's own pages",
	     ANON_BYTES / MiB, SHMEM_BYTES / MiB, MAPPED_BYTES / MiB, tp, tol_units,
	     SLACK_BYTES / MiB);
	ok &= in_range("anon", r.val[F_ANON], ANON_BYTES - tp, ANON_BYTES + SLACK_BYTES + tp);
	ok &= in_range("shmem (memfd + mapped file)", r.val[F_SHMEM],
		       SHMEM_BYTES + MAPPED_BYTES - tp, SHMEM_BYTES + MAPPED_BYTES + tp);
	ok &= in_range("file", r.val[F_FILE], SHMEM_BYTES + MAPPED_BYTES - tp,
		       SHMEM_BYTES + MAPPED_BYTES + SLACK_BYTES + tp);
	ok &= in_range("file_mapped", r.val[F_FILE_MAPPED], MAPPED_BYTES - tp,
		       MAPPED_BYTES + SLACK_BYTES + tp);
	ok &= in_range("pgfault (>= pages touched)", r.val[F_PGFAULT],
		       (ANON_BYTES + MAPPED_BYTES) / page_size - te, LLONG_MAX);
	/* shmem pages are swap-backed: on the anon LRUs with the anon pages */
	ok &= in_range("inactive_anon + active_anon",
		       r.val[F_INACTIVE_ANON] + r.val[F_ACTIVE_ANON],
		       ANON_BYTES + SHMEM_BYTES + MAPPED_BYTES - 2 * tp, LLONG_MAX);
	/*
	 * Not a check: kernel memory is charged to C only with kmem
	 * accounting (6.1 tinyconfig builds use SLOB and have no
	 * CONFIG_MEMCG_KMEM); checks 9-11 compare it with memory.stat.
	 */
	diag("  %-34s %14lld  (informational: 0 without kmem accounting)",
	     "kernel (page tables, slab)", (long long)r.val[F_KERNEL]);
	return ok;
}

/* Compare one kfunc record with memory.stat; returns the number of mismatches. */
static int compare_memstat(const struct mk_read_rec *r, const struct mstat *m,
			   bool print_all, int *missing_core)
{
	int f, bad = 0;
	long long v;

	*missing_core = 0;
	if (print_all)
		diag("  %-24s %14s %14s %10s %10s", "field", "kfunc", "memory.stat",
		     "diff", "tolerance");
	for (f = 0; f < NR_FIELDS; f++) {
		long long d, tol = tol_of(f);

		if (!mstat_get(m, fdesc[f].key, &v)) {
			if (fdesc[f].core) {
				(*missing_core)++;
				bad++;
				diag("  %-24s %14lld %14s  <-- not in memory.stat", fdesc[f].key,
				     (long long)r->val[f], "-");
			} else if (print_all) {
				diag("  %-24s %14lld %14s  (not in this kernel's memory.stat)",
				     fdesc[f].key, (long long)r->val[f], "-");
			}
			continue;
		}
		d = r->val[f] - v;
		if (d > tol || d < -tol) {
			bad++;
			diag("  %-24s %14lld %14lld %10lld %10lld   <-- WRONG", fdesc[f].key,
			     (long long)r->val[f], v, d, tol);
		} else if (print_all) {
			diag("  %-24s %14lld %14lld %10lld %10lld", fdesc[f].key,
			     (long long)r->val[f], v, d, tol);
		}
	}
	return bad;
}

/* kfunc read + memory.stat read of @cgi agree; up to 3 attempts. */
static bool check_agreement(int cgi)
{
	struct mk_read_rec r;
	struct mstat *m = malloc(sizeof(*m));
	int attempt, bad = -1, missing = 0, err;
	char msg[512];

	if (!m)
		return false;
	for (attempt = 1; attempt <= 3; attempt++) {
		if (read_rec(cgi, MK_MODE_READ, &r, msg, sizeof(msg))) {
			diag("%s", msg);
			bad = -1;
			break;
		}
		if ((err = read_memstat(cgi, m))) {
			diag("reading %s/memory.stat: %s", cgs[cgi].path, strerror(-err));
			bad = -1;
			break;
		}
		diag("%s, attempt %d: kfuncs (flush + fetch) vs memory.stat:",
		     cgs[cgi].label, attempt);
		bad = compare_memstat(&r, m, attempt == 1, &missing);
		if (!bad || missing)
			break;
		diag("%d field(s) outside tolerance; retrying in 200 ms", bad);
		usleep(200000);
	}
	if (!bad && attempt > 1)
		diag("agreed on attempt %d", attempt);
	free(m);
	return bad == 0;
}

static bool check_hierarchy(void)
{
	static const int close_fields[] = { F_ANON, F_FILE, F_SHMEM, F_FILE_MAPPED, F_PGFAULT };
	struct mk_read_rec p, c;
	char msg[512];
	bool ok = true;
	size_t i;
	int f;

	if (read_rec(CG_C, MK_MODE_READ, &c, msg, sizeof(msg)) ||
	    read_rec(CG_P, MK_MODE_READ, &p, msg, sizeof(msg))) {
		diag("%s", msg);
		return false;
	}
	diag("hierarchy: every field of P must be >= C - tolerance; anon/file/shmem/file_mapped/pgfault of P must be C +- tolerance (only C has tasks)");
	diag("  %-24s %14s %14s %10s %10s", "field", "parent P", "child C", "P - C", "tolerance");
	for (f = 0; f < NR_FIELDS; f++) {
		long long d = p.val[f] - c.val[f], tol = tol_of(f);
		bool close_req = false, bad;

		for (i = 0; i < sizeof(close_fields) / sizeof(close_fields[0]); i++)
			close_req |= close_fields[i] == f;
		bad = d < -tol || (close_req && d > tol);
		ok &= !bad;
		diag("  %-24s %14lld %14lld %10lld %10lld%s%s", fdesc[f].key,
		     (long long)p.val[f], (long long)c.val[f], d, tol,
		     close_req ? "  (P ~= C)" : "",
		     bad ? "   <-- WRONG" : "");
	}
	if (!ok)
		diag("P's values do not include C's: a non-hierarchical (local-only) fetch?");
	return ok;
}

static bool grown(long long before, long long after, long long lo, long long hi)
{
	return after - before >= lo && after - before <= hi;
}

static bool check_staleness(void)
{
	struct mk_read_rec c0, p0, cnf, c1, p1;
	long long tp = tol_units * page_size, te = tol_units;
	long long want = MORE_ANON_BYTES, want_faults = MORE_ANON_BYTES / page_size;
	int err, missing, attempt, max_attempts = weak_flush ? 3 : 1;
	struct mstat *m;
	char msg[512];
	bool ok = true;

	if (read_rec(CG_C, MK_MODE_READ, &c0, msg, sizeof(msg)) ||
	    read_rec(CG_P, MK_MODE_READ, &p0, msg, sizeof(msg))) {
		diag("%s", msg);
		return false;
	}
	if ((err = worker_do(W_ANON, MORE_ANON_BYTES))) {
		diag("worker: +%lld MiB anon failed: %s", MORE_ANON_BYTES / MiB, strerror(-err));
		return false;
	}
	/* right away: first without a flush (informational), then with */
	if (read_rec(CG_C, MK_MODE_NOFLUSH, &cnf, msg, sizeof(msg))) {
		diag("%s", msg);
		return false;
	}
	diag("+%lld MiB anon (%lld pages) touched in C; growth must be that +- %lld B (%lld pages), plus up to %lld MiB for the worker's own pages",
	     want / MiB, want / page_size, tp, tol_units, SLACK_BYTES / MiB);
	diag("  without a flush (informational): C anon grew by %lld B (%lld pages)%s",
	     (long long)(cnf.val[F_ANON] - c0.val[F_ANON]),
	     (long long)(cnf.val[F_ANON] - c0.val[F_ANON]) / page_size,
	     cnf.val[F_ANON] - c0.val[F_ANON] < want - tp ?
	     " - stale, as expected before a flush" :
	     " - already folded in (the periodic flusher ran or the threshold logic flushed)");
	/*
	 * With the flush: fresh on the first read.  Only where the flush may
	 * return before the counters are folded (6.1: a trylock that gives up
	 * while another flush runs; cover letter, "What 6.1 cannot guarantee",
	 * 3.) a second and third read, 200 ms apart, are allowed.
	 */
	for (attempt = 1; attempt <= max_attempts; attempt++) {
		if (read_rec(CG_C, MK_MODE_READ, &c1, msg, sizeof(msg)) ||
		    read_rec(CG_P, MK_MODE_READ, &p1, msg, sizeof(msg))) {
			diag("%s", msg);
			return false;
		}
		ok = grown(c0.val[F_ANON], c1.val[F_ANON], want - tp, want + SLACK_BYTES + tp) &&
		     grown(p0.val[F_ANON], p1.val[F_ANON], want - tp, want + SLACK_BYTES + tp) &&
		     grown(c0.val[F_PGFAULT], c1.val[F_PGFAULT], want_faults - te, LLONG_MAX) &&
		     grown(p0.val[F_PGFAULT], p1.val[F_PGFAULT], want_faults - te, LLONG_MAX);
		if (ok || attempt == max_attempts)
			break;
		diag("  attempt %d: not fresh yet (C anon +%lld B, P anon +%lld B); the flush of this kernel may return early, retrying",
		     attempt, (long long)(c1.val[F_ANON] - c0.val[F_ANON]),
		     (long long)(p1.val[F_ANON] - p0.val[F_ANON]));
		usleep(200000);
	}
	ok = true;
	ok &= in_range("C anon growth after flush", c1.val[F_ANON] - c0.val[F_ANON],
		       want - tp, want + SLACK_BYTES + tp);
	ok &= in_range("P anon growth after flush", p1.val[F_ANON] - p0.val[F_ANON],
		       want - tp, want + SLACK_BYTES + tp);
	ok &= in_range("C pgfault growth", c1.val[F_PGFAULT] - c0.val[F_PGFAULT],
		       want_faults - te, LLONG_MAX);
	ok &= in_range("P pgfault growth", p1.val[F_PGFAULT] - p0.val[F_PGFAULT],
		       want_faults - te, LLONG_MAX);

	m = malloc(sizeof(*m));
	if (!m)
		return false;
	if ((err = read_memstat(CG_C, m))) {
		diag("reading C's memory.stat: %s", strerror(-err));
		ok = false;
	} else {
		diag("C after the step, kfuncs vs memory.stat (mismatches only):");
		if (compare_memstat(&c1, m, false, &missing))
			ok = false;
	}
	if ((err = read_memstat(CG_P, m))) {
		diag("reading P's memory.stat: %s", strerror(-err));
		ok = false;
	} else {
		diag("P after the step, kfuncs vs memory.stat (mismatches only):");
		if (compare_memstat(&p1, m, false, &missing))
			ok = false;
	}
	free(m);
	return ok;
}

/* ------------------------------------------------------------------ */

int main(void)
{
	char reason[2 * PATH_MAX];
	bool loaded = false, setup_ok = false, charged = false, skip;
	struct sigaction sa;
	struct utsname u;
	int err, i;

	out_line("TAP version 13");
	out_line("1..%d", NUM_TESTS);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	for (i = 0; i < NUM_CG; i++)
		cgs[i].fd = -1;

	libbpf_set_print(libbpf_capture);
	page_size = sysconf(_SC_PAGESIZE);
	tol_units = 2LL * MEMCG_CHARGE_BATCH * sysconf(_SC_NPROCESSORS_ONLN);
	if (!uname(&u))
		sscanf(u.release, "%d.%d", &kernel_major, &kernel_minor);

	/* 0. the kernel must have the kfuncs; otherwise skip everything */
	if (!kernel_has_kfuncs(reason, sizeof(reason))) {
		for (i = 0; i < NUM_TESTS; i++)
			report_skip(i, "%s", reason);
		out_line("# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:%d error:0", n_skip);
		return KSFT_SKIP;
	}
	diag("kernel %s, %ld online CPUs, page size %ld: tolerance %lld updates = %lld B for page items, %lld B for byte/KiB items, %lld for counts",
	     u.release, sysconf(_SC_NPROCESSORS_ONLN), page_size, tol_units,
	     tol_units * page_size, 2 * tol_units * page_size, tol_units);

	/*
	 * Before 6.11 memcg has a counter for every node stat item (the 6.1
	 * backport accepts them all; see the cover letter, "What 6.1 cannot
	 * guarantee", 2.).  From 6.11 on it tracks a subset and the others
	 * must be refused.
	 */
	/*
	 * Before 6.8 mem_cgroup_flush_stats() flushes everything under a
	 * trylock and gives up while another flush runs (the 6.1 backport
	 * inherits that); from 6.8 on it waits for the per-subtree flush.
	 */
	weak_flush = kernel_major < 6 || (kernel_major == 6 && kernel_minor < 8);
	if (weak_flush)
		diag("kernel < 6.8: a flush may return before the counters are folded; the freshness check may read up to 3 times");
	if (kernel_major < 6 || (kernel_major == 6 && kernel_minor < 11)) {
		for (i = P_NODE_UNTRACKED_A; i <= P_NODE_UNTRACKED_B; i++) {
			pdesc[i].on_memcg = E_NONNEG;
			pdesc[i].on_nomemcg = E_ENOENT;
		}
		diag("kernel < 6.11: memcg keeps every node stat item, so NR_ISOLATED_ANON/NR_DIRTIED must be accepted (>= 0) here");
	}

	/* 1. load */
	libbpf_log_reset();
	skel = memcg_kfuncs_bpf__open();
	if (!skel) {
		diag("opening the iterator object failed: %s", strerror(errno));
		diag_block("", libbpf_log);
		report(T_LOAD, false);
	} else if ((err = memcg_kfuncs_bpf__load(skel))) {
		diag("loading the sleepable iter.s/cgroup program failed: %d (%s)", err,
		     strerror(-err));
		diag_block("", libbpf_log);
		report(T_LOAD, false);
		memcg_kfuncs_bpf__destroy(skel);
		skel = NULL;
	} else {
		loaded = true;
		report(T_LOAD, true);
	}

	/* 2. cgroups */
	if (!loaded) {
		report_skip(T_SETUP, "iterator not loaded");
	} else if ((err = setup_cgroups(reason, sizeof(reason), &skip))) {
		if (skip) {
			report_skip(T_SETUP, "%s", reason);
		} else {
			diag("%s", reason);
			report(T_SETUP, false);
		}
	} else {
		setup_ok = true;
		/* E is read only through P's walk (see check_no_reference()) */
		for (i = 0; i < NUM_CG && setup_ok; i++) {
			if (i != CG_E && attach_link(i, reason, sizeof(reason))) {
				diag("%s", reason);
				diag_block("", libbpf_log);
				setup_ok = false;
			}
		}
		if (setup_ok && attach_walk_link(reason, sizeof(reason))) {
			diag("%s", reason);
			diag_block("", libbpf_log);
			setup_ok = false;
		}
		for (i = 0; i < NUM_CG; i++)
			diag("%-16s %s (id %llu)", cgs[i].label, cgs[i].path, cgs[i].ino);
		report(T_SETUP, setup_ok);
	}

	/* 3-5. the validation, before anything else calls the kfuncs */
	check_probes(loaded && setup_ok);

	/* 6. the verifier */
	check_verifier_rejects();
	check_untrusted_rejected();

	/* 7. memory in C */
	if (!setup_ok) {
		report_skip(T_CHARGE, "cgroups not set up");
	} else if ((err = start_worker(reason, sizeof(reason)))) {
		diag("%s", reason);
		report(T_CHARGE, false);
	} else {
		const char *step = "anon";

		err = worker_do(W_ANON, ANON_BYTES);
		if (!err) {
			step = "shmem";
			err = worker_do(W_SHMEM, SHMEM_BYTES);
		}
		if (!err) {
			step = "mapped file";
			err = worker_do(W_MAPFILE, MAPPED_BYTES);
		}
		if (err)
			diag("worker (pid %d in %s): %s step failed: %s", (int)worker_pid,
			     cgs[CG_C].path, step, strerror(-err));
		else
			diag("worker pid %d in %s: %lld MiB anon, %lld MiB shmem, %lld MiB mapped %s",
			     (int)worker_pid, cgs[CG_C].path, ANON_BYTES / MiB,
			     SHMEM_BYTES / MiB, MAPPED_BYTES / MiB,
			     tmpfs_mounted ? "tmpfs file" : "memfd");
		charged = !err;
		report(T_CHARGE, charged);
	}

	/* 8-12 */
	if (!charged) {
		skip_range(T_AMOUNTS, T_STALE, "no memory charged to the child");
	} else {
		report(T_AMOUNTS, check_amounts());
		report(T_AGREE_CHILD, check_agreement(CG_C));
		report(T_AGREE_PARENT, check_agreement(CG_P));
		report(T_HIER, check_hierarchy());
		report(T_STALE, check_staleness());
	}
	if (!setup_ok)
		report_skip(T_NO_REF, "cgroups not set up");
	else
		report(T_NO_REF, check_no_reference());

	/* 15. cleanup */
	bpf_link__destroy(walk_link);
	walk_link = NULL;
	for (i = 0; i < NUM_CG; i++) {
		bpf_link__destroy(cgs[i].link);
		cgs[i].link = NULL;
		if (cgs[i].fd >= 0)
			close(cgs[i].fd);
		cgs[i].fd = -1;
	}
	if (wcmd_fd >= 0)
		close(wcmd_fd);
	if (wack_fd >= 0)
		close(wack_fd);
	memcg_kfuncs_bpf__destroy(skel);
	skel = NULL;
	{
		bool any = false;
		int first_errno = 0, first_failed = -1, failures;

		for (i = 0; i < NUM_CG; i++)
			any |= cgs[i].created;
		failures = teardown(&first_errno, &first_failed);
		release_cg_mount();
		if (!any) {
			report_skip(T_CLEANUP, "no cgroups were created");
		} else if (failures) {
			diag("%d cgroup(s) not removed; first: rmdir(%s): %s", failures,
			     cgs[first_failed].path, strerror(first_errno));
			report(T_CLEANUP, false);
		} else {
			report(T_CLEANUP, true);
		}
	}

	fill_gap(NUM_TESTS);
	out_line("# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0",
		 n_pass, n_fail, n_skip);
	if (n_fail)
		return KSFT_FAIL;
	if (!n_pass && n_skip)
		return KSFT_SKIP;
	return KSFT_PASS;
}
