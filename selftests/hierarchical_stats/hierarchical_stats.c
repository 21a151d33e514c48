// SPDX-License-Identifier: GPL-2.0
/*
 * hierarchical_stats: BPF-collected, rstat-aggregated hierarchical memcg
 * reclaim statistics, checked against what the test itself caused and
 * against memory.stat.
 *
 * BPF (hierarchical_stats.bpf.c): tp_btf/mm_vmscan_memcg_reclaim_{begin,end}
 * record per cgroup and CPU the number of memcg reclaims, their time and
 * the pages they reclaimed, charged to the cgroup of the task that asked for
 * the reclaim, and call cgroup_rstat_updated(); fentry/bpf_rstat_flush
 * folds a (cgroup, CPU) delta into the cgroup's total and pushes it to the
 * parent; a sleepable cgroup iterator (one SELF_ONLY link per cgroup) calls
 * cgroup_rstat_flush() and prints the cgroup's totals.
 *
 * Per run (--runs N repeats it with a fresh tree each time):
 *
 *   <cgroup2>/hierarchical_stats.<pid>.<run>          +memory
 *                                  /a                 +memory
 *                                  /a/a1, /a/a2       leaves
 *                                  /b                 +memory
 *                                  /b/b1, /b/b2       leaves
 *
 *   In every leaf a worker process moves itself into the leaf (checked in
 *   /proc/self/cgroup), writes a --file-mb file on $HARNESS_SCRATCH (ext2:
 *   real page cache) and fsyncs it (clean pages: memcg reclaim does not
 *   write back dirty file pages), faults in --anon-mb of anonymous memory
 *   (reclaimable: the guest has zram swap), and then writes --reclaim-mb to
 *   the leaf's memory.reclaim in NCHUNKS writes, each pinned to another CPU,
 *   so the reclaim runs in the worker's context, in the leaf, on several
 *   CPUs.  A write that fails with EAGAIN ("could not reclaim enough") or
 *   EINTR is retried at most --max-retries times, after re-creating the
 *   memory; each retry is logged with the leaf's memory.current and
 *   memory.stat at that moment and counted (HARNESS_METRICS).  The four
 *   workers run at the same time.
 *
 * Checks (KTAP; one nested block per run):
 *   tree_setup              tree created, iterator links attached, every
 *                           cgroup of the fresh tree reads all-zero
 *   reclaim_induced         every worker ran in its leaf and every
 *                           memory.reclaim write succeeded within its retries
 *   leaf_X_events           count > 0, pages > 0, time_ns > 0, and what the
 *                           worker knows for certain: count >= its
 *                           memory.reclaim writes (each write calls
 *                           try_to_free_mem_cgroup_pages() at least once),
 *                           pages >= the pages its successful writes asked
 *                           for (memory_reclaim() returns success only when
 *                           the sum of try_to_free_mem_cgroup_pages()'s
 *                           results, which are the end events'
 *                           nr_reclaimed, reached the request), time_ns <=
 *                           the wall time it spent inside those writes (the
 *                           events happen inside them, CLOCK_MONOTONIC ==
 *                           bpf_ktime_get_ns()); a leaf's total == its own
 *   parent_X_equals_sum     a, b and the test root: total == sum of the
 *                           children's totals + own, exactly, for all three
 *                           statistics; own == 0 (no task ran in a parent)
 *   hierarchy_root_covers_tree  the cgroup2 root's totals grew by at least
 *                           the test root's totals during the run
 *   leaf_X_pages_vs_pgsteal see TOLERANCE below
 *   reread_stable           a second read of every cgroup (top-down after
 *                           the first bottom-up one) without new reclaim
 *                           returns the same numbers
 *   bpf_bookkeeping         no map update failed, no end event without its
 *                           begin, no program run missed (recursion), the
 *                           cgroup from task->cgroups->dfl_cgrp equals
 *                           bpf_get_current_cgroup_id()
 *   tree_cleanup            tree removed, files unlinked
 *
 * TOLERANCE of leaf_X_pages_vs_pgsteal (mm/vmscan.c, 6.12):
 *   Every page a memcg reclaim frees is counted in shrink_inactive_list() as
 *   PGSTEAL_KSWAPD + reclaimer_offset() on the memcg of the folio's lruvec:
 *   pgsteal_direct for any task that is neither kswapd nor khugepaged, so
 *   also for memory.reclaim (6.12 has no pgsteal_proactive; newer kernels
 *   count proactive reclaim there, which is why it is added when present).
 *   sc.nr_reclaimed, which try_to_free_mem_cgroup_pages() returns and the
 *   end tracepoint reports, is the sum of those same shrink_folio_list()
 *   results (flush_reclaim_state() adds slab pages only for root reclaim).
 *   A leaf has no descendants, so memcg reclaim targeting it reclaims from
 *   its own lruvecs only.  Hence, over the run,
 *       pgsteal_direct(leaf) = BPF pages(leaf) + pages taken from the leaf
 *                              by reclaimers not in the leaf
 *   and those others are: global direct reclaim by any task (counted in
 *   /proc/vmstat pgsteal_direct too, because it is not cgroup reclaim),
 *   memcg reclaim by tasks elsewhere targeting an ancestor (recorded by the
 *   BPF programs on those tasks' cgroups, so contained in the growth of the
 *   cgroup2 root's totals beyond the test root's), kswapd and khugepaged
 *   (their own counters, not compared).  So the check is
 *       BPF pages <= pgsteal_direct delta <= BPF pages + slack,
 *       slack = /proc/vmstat pgsteal_direct delta
 *             + (root pages delta - test root pages)
 *   which is 0 on a quiet guest, i.e. exact.  Before 6.4, memcg reclaim also
 *   added the slab pages freed meanwhile to sc.nr_reclaimed (6.1: +8 of 6830
 *   pages seen), so there the lower bound is BPF pages - slab slack, the slab
 *   slack being the buffer heads of the reclaimed file pages plus 16 pages
 *   (see reclaim_counts_slab).  memory.stat is read after the
 *   iterator's cgroup_rstat_flush() of the leaf, which also flushes the
 *   memcg's per-CPU event counters, so its numbers are not stale.
 *   Assumed: nothing but our workers writes memory.reclaim/high/max of the
 *   tree, and the test root's ancestors have no memory.high/max (checked and
 *   reported for the cgroup2 root).
 *
 * --broken runs the same checks with the BROKEN_NO_PROPAGATE build
 * (hierarchical_stats_broken.bpf.c); its parent checks must fail.
 *
 * Exit 0: all checks passed, 1: a check failed, 4: everything was skipped
 * (kernel without bpf_rstat_flush / the rstat kfuncs / the cgroup iterator /
 * the memcg reclaim tracepoints, or without the memory controller).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "harness_test.h"
#include "hierarchical_stats.h"
#include "hierarchical_stats.skel.h"
#include "hierarchical_stats_broken.skel.h"


#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#define EXT2_SUPER_MAGIC_ 0xEF53
#define TMPFS_MAGIC_ 0x01021994

#ifndef ENOTSUPP
#define ENOTSUPP 524
#endif

#define NUM_LEAVES 4
#define NCHUNKS 2		/* memory.reclaim writes per worker */
#define WORKER_TIMEOUT_S 120	/* alarm() in each worker */
#define MIB (1024LL * 1024)

static struct {
	int runs;
	bool broken;
	long long file_mb;
	long long anon_mb;
	long long reclaim_mb;
	int max_retries;
} opt = {
	.runs = 1,
	.broken = false,
	.file_mb = 32,
	.anon_mb = 16,
	.reclaim_mb = 16,
	.max_retries = 5,
};

static long page_size;

/* ------------------------------------------------------------------ */
/* KTAP output                                                         */
/* ------------------------------------------------------------------ */

static int indent;		/* 0 at top level, 4 inside a run */
static int n_pass, n_fail, n_skip;	/* leaf results, all levels */

static void out_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out_line(const char *fmt, ...)
{
	va_list ap;

	printf("%*s", indent, "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* "# " diagnostic; multi-line text gets a "# " on every line */
static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
	char buf[8192];
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

	if (!text || !*text)
		return;
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

struct level {
	const char *const *names;
	int count;
	int next;		/* index of the next result line */
	bool failed;
	int passed;
};

static void fill_gap(struct level *l, int id)
{
	while (l->next < id) {
		out_line("not ok %d %s # internal error: not run", l->next + 1,
			 l->names[l->next]);
		n_fail++;
		l->failed = true;
		l->next++;
	}
}

static void report(struct level *l, int id, bool ok)
{
	fill_gap(l, id);
	out_line("%s %d %s", ok ? "ok" : "not ok", id + 1, l->names[id]);
	if (ok) {
		n_pass++;
		l->passed++;
	} else {
		n_fail++;
		l->failed = true;
	}
	l->next = id + 1;
}

static void report_skip(struct level *l, int id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void report_skip(struct level *l, int id, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	fill_gap(l, id);
	out_line("ok %d %s # SKIP %s", id + 1, l->names[id], reason);
	n_skip++;
	l->next = id + 1;
}

static void skip_rest(struct level *l, int upto, const char *why)
{
	while (l->next < upto)
		report_skip(l, l->next, "%s", why);
}

/* ------------------------------------------------------------------ */
/* libbpf log capture                                                  */
/* ------------------------------------------------------------------ */

static char libbpf_log[32768];
static size_t libbpf_log_len;

static int libbpf_capture(enum libbpf_print_level level, const char *fmt,
			  va_list args)
{
	int n;

	if (level == LIBBPF_DEBUG && !getenv("HIERARCHICAL_STATS_DEBUG"))
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

/* ------------------------------------------------------------------ */
/* Small file helpers                                                  */
/* ------------------------------------------------------------------ */

static int write_file(const char *path, const char *s)
{
	ssize_t n, len = strlen(s);
	int fd, err = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, s, len);
	if (n < 0)
		err = -errno;
	else if (n != len)
		err = -EIO;
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
	if (n < 0) {
		n = -errno;
		close(fd);
		return (int)n;
	}
	close(fd);
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

static bool word_in(const char *list, const char *word)
{
	size_t wl = strlen(word);
	const char *p = list;

	while ((p = strstr(p, word))) {
		if ((p == list || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == '\0' ||
						    p[wl] == '\n'))
			return true;
		p += wl;
	}
	return false;
}

/* "key value" lines (memory.stat, /proc/vmstat): 1 found, 0 absent, <0 error */
static int read_key(const char *path, const char *key, long long *val)
{
	char line[256];
	size_t kl = strlen(key);
	int found = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, kl) && line[kl] == ' ') {
			*val = strtoll(line + kl + 1, NULL, 10);
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* Kernel feature probe (vmlinux BTF)                                  */
/* ------------------------------------------------------------------ */

static const struct btf_type *func_proto_of_func(const struct btf *btf,
						 const char *name)
{
	const struct btf_type *t;
	int id;

	id = btf__find_by_name_kind(btf, name, BTF_KIND_FUNC);
	if (id < 0)
		return NULL;
	t = btf__type_by_id(btf, id);
	t = t ? btf__type_by_id(btf, t->type) : NULL;
	return t && btf_is_func_proto(t) ? t : NULL;
}

/* typedef void (*btf_trace_<tp>)(void *, args...) -> its FUNC_PROTO */
static const struct btf_type *func_proto_of_tp(const struct btf *btf,
					       const char *tp)
{
	const struct btf_type *t;
	char name[128];
	int id;

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	id = btf__find_by_name_kind(btf, name, BTF_KIND_TYPEDEF);
	if (id < 0)
		return NULL;
	t = btf__type_by_id(btf, id);
	t = t ? btf__type_by_id(btf, t->type) : NULL;	/* PTR */
	if (!t || !btf_is_ptr(t))
		return NULL;
	t = btf__type_by_id(btf, t->type);
	return t && btf_is_func_proto(t) ? t : NULL;
}

static bool param_is_int_of_size(const struct btf *btf,
				 const struct btf_type *proto, int i, int size)
{
	const struct btf_param *p = btf_params(proto) + i;
	const struct btf_type *t;
	int id;

	id = btf__resolve_type(btf, p->type);
	if (id < 0)
		return false;
	t = btf__type_by_id(btf, id);
	return t && btf_is_int(t) && (int)t->size == size;
}

/*
 * true: everything the programs need is in the kernel.  false: @reason says
 * what is missing (=> SKIP).  Checks the signatures the programs are
 * compiled for, so that a kernel where the hook or a tracepoint changed its
 * arguments is skipped with a reason instead of read wrongly.
 */
static bool kernel_has_features(char *reason, size_t len)
{
	static const char *const funcs[] = {
		"cgroup_rstat_updated", "cgroup_rstat_flush", "bpf_iter_cgroup",
	};
	const struct btf_type *proto;
	struct btf *btf;
	size_t i;

	errno = 0;
	btf = btf__load_vmlinux_btf();
	if (!btf) {
		snprintf(reason, len, "kernel BTF not readable (%s): no tp_btf/fentry programs possible",
			 strerror(errno ? errno : ENOENT));
		return false;
	}
	proto = func_proto_of_func(btf, "bpf_rstat_flush");
	if (!proto) {
		snprintf(reason, len, "kernel has no bpf_rstat_flush() hook in its BTF");
		goto out_missing;
	}
	if (btf_vlen(proto) != 3) {
		snprintf(reason, len, "bpf_rstat_flush() has %u parameters, the program expects 3 (cgrp, parent, cpu)",
			 btf_vlen(proto));
		goto out_missing;
	}
	for (i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
		if (btf__find_by_name_kind(btf, funcs[i], BTF_KIND_FUNC) < 0) {
			snprintf(reason, len, "kernel has no %s in its BTF%s", funcs[i],
				 i < 2 ? " (rstat kfunc)" : " (cgroup BPF iterator)");
			goto out_missing;
		}
	}
	proto = func_proto_of_tp(btf, "mm_vmscan_memcg_reclaim_begin");
	if (!proto) {
		snprintf(reason, len, "kernel has no mm_vmscan_memcg_reclaim_begin tracepoint (btf_trace_ typedef) in its BTF");
		goto out_missing;
	}
	if (btf_vlen(proto) < 3) {
		snprintf(reason, len, "mm_vmscan_memcg_reclaim_begin has %u arguments, expected (order, gfp_flags)",
			 btf_vlen(proto) - 1);
		goto out_missing;
	}
	proto = func_proto_of_tp(btf, "mm_vmscan_memcg_reclaim_end");
	if (!proto) {
		snprintf(reason, len, "kernel has no mm_vmscan_memcg_reclaim_end tracepoint (btf_trace_ typedef) in its BTF");
		goto out_missing;
	}
	if (btf_vlen(proto) < 2 || !param_is_int_of_size(btf, proto, 1, 8)) {
		snprintf(reason, len, "mm_vmscan_memcg_reclaim_end's first argument is not the unsigned long nr_reclaimed the program reads");
		goto out_missing;
	}
	btf__free(btf);
	return true;

out_missing:
	btf__free(btf);
	return false;
}

/* ------------------------------------------------------------------ */
/* The BPF object (normal or broken build)                             */
/* ------------------------------------------------------------------ */

enum { P_BEGIN, P_END, P_FLUSH, NUM_TRACE_PROGS };

static const char *const trace_prog_desc[NUM_TRACE_PROGS] = {
	"tp_btf/mm_vmscan_memcg_reclaim_begin",
	"tp_btf/mm_vmscan_memcg_reclaim_end",
	"fentry/bpf_rstat_flush",
};

static struct hs {
	bool broken;
	void *skel;
	struct bpf_program *prog[NUM_TRACE_PROGS];
	struct bpf_program *iter;
	struct bpf_map *pcpu, *totals;
	struct hs_global *g;		/* .bss, mmapped */
	__u32 rodata_broken;
	struct bpf_link *link[NUM_TRACE_PROGS];
} hs;

#define HS_OPEN_LOAD(SKEL)						\
static int open_load_##SKEL(void)					\
{									\
	struct SKEL *s;							\
	int err;							\
									\
	s = SKEL##__open();						\
	if (!s)								\
		return errno ? -errno : -EINVAL;			\
	hs.skel = s;							\
	err = SKEL##__load(s);						\
	if (err)							\
		return err;						\
	hs.prog[P_BEGIN] = s->progs.hs_reclaim_begin;			\
	hs.prog[P_END] = s->progs.hs_reclaim_end;			\
	hs.prog[P_FLUSH] = s->progs.hs_flush;				\
	hs.iter = s->progs.hs_dump;					\
	hs.pcpu = s->maps.pcpu_stats;					\
	hs.totals = s->maps.totals;					\
	hs.g = &s->bss->g;	/* valid (mmapped) after load */	\
	hs.rodata_broken = s->rodata->hs_broken;			\
	return 0;							\
}

HS_OPEN_LOAD(hierarchical_stats_bpf)
HS_OPEN_LOAD(hierarchical_stats_broken_bpf)

static void hs_destroy(void)
{
	int i;

	for (i = 0; i < NUM_TRACE_PROGS; i++) {
		bpf_link__destroy(hs.link[i]);
		hs.link[i] = NULL;
	}
	if (!hs.skel)
		return;
	if (hs.broken)
		hierarchical_stats_broken_bpf__destroy(hs.skel);
	else
		hierarchical_stats_bpf__destroy(hs.skel);
	hs.skel = NULL;
	hs.g = NULL;
}

static void g_snapshot(struct hs_global *out)
{
	const volatile __u64 *src = (const volatile __u64 *)hs.g;
	__u64 *dst = (__u64 *)out;
	size_t i;

	for (i = 0; i < sizeof(*out) / sizeof(__u64); i++)
		dst[i] = src[i];
}

/* recursion_misses of a program, or -1 */
static long long prog_misses(struct bpf_program *p)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len))
		return -1;
	return (long long)info.recursion_misses;
}

/* ------------------------------------------------------------------ */
/* cgroup tree                                                         */
/* ------------------------------------------------------------------ */

enum { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, N_B2, NUM_NODES };

struct node {
	const char *rel;	/* below the test root; "" is the test root */
	const char *name;	/* for messages and metrics */
	int parent;		/* -1 for the test root */
	int leaf;		/* leaf index, -1 for parents */
	char path[PATH_MAX];
	unsigned long long ino;	/* == cgroup id */
	bool created;
	int fd;
	struct bpf_link *link;	/* SELF_ONLY iterator link */
};

static struct node nodes[NUM_NODES] = {
#define NODE(r, p, l) { .rel = r, .name = (r)[0] ? r : "root", .parent = p, .leaf = l, .fd = -1 }
	[N_ROOT] = NODE("",     -1,     -1),
	[N_A]    = NODE("a",    N_ROOT, -1),
	[N_A1]   = NODE("a/a1", N_A,     0),
	[N_A2]   = NODE("a/a2", N_A,     1),
	[N_B]    = NODE("b",    N_ROOT, -1),
	[N_B1]   = NODE("b/b1", N_B,     2),
	[N_B2]   = NODE("b/b2", N_B,     3),
#undef NODE
};

static const int leaf_node[NUM_LEAVES] = { N_A1, N_A2, N_B1, N_B2 };
static const int parent_node[3] = { N_A, N_B, N_ROOT };
/* children before parents: the first read exercises partial flushes */
static const int post_order[NUM_NODES] = { N_A1, N_A2, N_A, N_B1, N_B2, N_B, N_ROOT };

static char cg_mnt[PATH_MAX];
static char own_cg_mnt[PATH_MAX];	/* set if we mounted cgroup2 ourselves */
static bool root_memory_enabled_by_us;
static int cg_root_fd = -1;
static struct bpf_link *cg_root_link;	/* SELF_ONLY on the cgroup2 root */
static unsigned long long cg_root_id;

static char scratch_dir[PATH_MAX];
static long scratch_bsize = 4096;	/* block size of the scratch fs */
/*
 * Before 6.4, memcg reclaim added the slab pages that shrinkers and page
 * releases freed meanwhile (reclaim_state->reclaimed_slab) to sc->nr_reclaimed,
 * so the end tracepoint's nr_reclaimed can exceed the LRU pages counted in
 * pgsteal_*; since 6.4 ("mm: vmscan: ignore non-LRU-based reclaim in memcg
 * reclaim") only root reclaim does.  Measured on 6.1: +8 of 6830 pages.
 */
static bool reclaim_counts_slab;
static char leaf_file[NUM_LEAVES][PATH_MAX + 64];
static volatile pid_t worker_pid[NUM_LEAVES];

/* Async-signal-safe parts of the teardown. */
static void kill_workers(void)
{
	int i;

	for (i = 0; i < NUM_LEAVES; i++) {
		pid_t pid = worker_pid[i];

		if (pid > 0) {
			kill(pid, SIGKILL);
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
			worker_pid[i] = 0;
		}
	}
}

static void unlink_files(void)
{
	int i;

	for (i = 0; i < NUM_LEAVES; i++)
		if (leaf_file[i][0])
			unlink(leaf_file[i]);
}

/* rmdir leaves first; returns the number of cgroups left behind */
static int rmdir_tree(int *first_errno, int *first_failed)
{
	int k, i, tries, failures = 0;

	for (k = 0; k < NUM_NODES; k++) {
		i = post_order[k];
		if (!nodes[i].created)
			continue;
		for (tries = 0; tries < 100; tries++) {
			if (!rmdir(nodes[i].path) || errno == ENOENT) {
				nodes[i].created = false;
				break;
			}
			if (errno != EBUSY)
				break;
			usleep(20000);	/* a just-reaped task keeps it busy briefly */
		}
		if (nodes[i].created) {
			if (!failures && first_errno)
				*first_errno = errno;
			if (!failures && first_failed)
				*first_failed = i;
			failures++;
		}
	}
	return failures;
}

static void release_cg_root(void)
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
	kill_workers();
	unlink_files();
	rmdir_tree(NULL, NULL);
	release_cg_root();
	_exit(KSFT_FAIL);
}

static struct bpf_link *attach_self_only(int cg_fd, char *reason, size_t len)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;
	struct bpf_link *link;

	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cg_fd;
	linfo.cgroup.order = BPF_CGROUP_ITER_SELF_ONLY;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	libbpf_log_reset();
	link = bpf_program__attach_iter(hs.iter, &opts);
	if (!link)
		snprintf(reason, len, "bpf_program__attach_iter(SELF_ONLY): %s",
			 strerror(errno));
	return link;
}

/* ------------------------------------------------------------------ */
/* Reading a cgroup through its iterator link                          */
/* ------------------------------------------------------------------ */

struct rec {
	bool valid;
	unsigned long long id, count, time_ns, pages;
	unsigned long long own_count, own_time_ns, own_pages, pending_pages;
};

static int read_link(struct bpf_link *link, unsigned long long want_id,
		     struct rec *r, char *err, size_t len)
{
	char buf[1024];
	size_t got = 0;
	ssize_t n;
	int fd, used = -1;

	memset(r, 0, sizeof(*r));
	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0) {
		snprintf(err, len, "bpf_iter_create: %s", strerror(errno));
		return -1;
	}
	for (;;) {
		if (got >= sizeof(buf) - 1) {
			close(fd);
			snprintf(err, len, "iterator output longer than %zu bytes", sizeof(buf) - 1);
			return -1;
		}
		n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, len, "read(iterator): %s", strerror(errno));
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		got += n;
	}
	close(fd);
	buf[got] = '\0';
	if (sscanf(buf, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu\n%n",
		   &r->id, &r->count, &r->time_ns, &r->pages, &r->own_count,
		   &r->own_time_ns, &r->own_pages, &r->pending_pages, &used) != 8 ||
	    used != (int)got) {
		snprintf(err, len, "unexpected iterator output (%zu bytes): '%.300s'", got, buf);
		return -1;
	}
	if (r->id != want_id) {
		snprintf(err, len, "iterator reported cgroup id %llu, expected %llu", r->id, want_id);
		return -1;
	}
	r->valid = true;
	return 0;
}

static void diag_rec(const char *who, const struct rec *r)
{
	if (!r->valid) {
		diag("  %-6s <not read>", who);
		return;
	}
	diag("  %-6s id=%llu count=%llu time_ns=%llu pages=%llu own=(%llu, %llu, %llu) pending_pages=%llu",
	     who, r->id, r->count, r->time_ns, r->pages, r->own_count,
	     r->own_time_ns, r->own_pages, r->pending_pages);
}

/* ------------------------------------------------------------------ */
/* Workers                                                             */
/* ------------------------------------------------------------------ */

struct wreport {
	int err;			/* errno of a failed setup step, 0: none */
	char err_step[256];
	char cgroup_line[256];		/* "0::/..." after the move */
	int writes_ok, writes_eagain, writes_eintr, writes_other;
	int retries;			/* failed writes that were retried */
	int last_errno;
	long long req_ok_bytes;		/* requested by successful writes */
	long long file_bytes, anon_bytes;
	unsigned long long reclaim_ns;	/* wall time inside memory.reclaim writes */
	int chunk_cpu[NCHUNKS];
	int chunk_ok[NCHUNKS];
	char log[1600];			/* one line per retry / failure */
};

_Static_assert(sizeof(struct wreport) <= PIPE_BUF, "worker report must be one atomic pipe write");

static void wlog(struct wreport *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(struct wreport *r, const char *fmt, ...)
{
	size_t used = strlen(r->log);
	va_list ap;

	if (used >= sizeof(r->log) - 2)
		return;
	va_start(ap, fmt);
	vsnprintf(r->log + used, sizeof(r->log) - used - 1, fmt, ap);
	va_end(ap);
	used = strlen(r->log);
	r->log[used] = '\n';
	r->log[used + 1] = '\0';
}

static int fill_file(int fd, char *buf, long long bytes)
{
	long long off;
	ssize_t n;

	for (off = 0; off < bytes; off += MIB) {
		memset(buf, (int)(off / MIB) + 1, MIB);
		n = pwrite(fd, buf, MIB, off);
		if (n != MIB)
			return n < 0 ? -errno : -EIO;
	}
	/* clean pages: memcg reclaim does not write back dirty file pages */
	if (fsync(fd))
		return -errno;
	return 0;
}

/* read the file back: evicted pages return to the page cache, charged to us */
static void reread_file(int fd, char *buf, long long bytes)
{
	long long off;

	for (off = 0; off < bytes; off += MIB)
		if (pread(fd, buf, MIB, off) <= 0)
			break;
}

static void touch_anon(char *p, long long bytes, int salt)
{
	long long off;

	for (off = 0; off < bytes; off += page_size)
		p[off] = (char)(off / page_size + salt) | 1;
}

static void worker_main(int li, int wfd, const char *leaf_path,
			const char *expect_suffix, const char *file_path,
			const int *cpus, int ncpus) __attribute__((noreturn));
static void worker_main(int li, int wfd, const char *leaf_path,
			const char *expect_suffix, const char *file_path,
			const int *cpus, int ncpus)
{
	static struct wreport r;
	char path[PATH_MAX + 64], pidbuf[32], line[256], req[32];
	long long chunk = opt.reclaim_mb * MIB / NCHUNKS;
	long long file_bytes = opt.file_mb * MIB;
	long long anon_bytes = opt.anon_mb * MIB;
	char *buf = NULL, *anon = MAP_FAILED;
	int fd = -1, rfd = -1, j, t, k;
	unsigned long long t0;
	FILE *f;

	memset(&r, 0, sizeof(r));
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGALRM, SIG_DFL);
	alarm(WORKER_TIMEOUT_S);	/* never hang the run */

#define STEP_FAIL(...)							\
	do {								\
		r.err = errno ? errno : EIO;				\
		snprintf(r.err_step, sizeof(r.err_step), __VA_ARGS__);	\
		goto report;						\
	} while (0)

	/* 1. move ourselves into the leaf: the reclaim must run in it */
	snprintf(path, sizeof(path), "%s/cgroup.procs", leaf_path);
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
	k = write_file(path, pidbuf);
	errno = -k;
	if (k)
		STEP_FAIL("write %d to %.100s/cgroup.procs", (int)getpid(), leaf_path);
	f = fopen("/proc/self/cgroup", "re");
	if (!f)
		STEP_FAIL("open /proc/self/cgroup");
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "0::", 3)) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(r.cgroup_line, sizeof(r.cgroup_line), "%s", line);
		}
	}
	fclose(f);
	k = (int)strlen(r.cgroup_line) - (int)strlen(expect_suffix);
	if (k < 3 || strcmp(r.cgroup_line + k, expect_suffix)) {
		errno = EINVAL;
		STEP_FAIL("after the move, /proc/self/cgroup's 0:: line does not end in '%.100s'",
			  expect_suffix);
	}

	/* 2. reclaimable memory, charged to the leaf */
	buf = malloc(MIB);
	if (!buf)
		STEP_FAIL("malloc");
	fd = open(file_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		STEP_FAIL("open(%.110s)", file_path);
	k = fill_file(fd, buf, file_bytes);
	if (k) {
		errno = -k;
		STEP_FAIL("writing %lld MiB to %.90s", opt.file_mb, file_path);
	}
	r.file_bytes = file_bytes;
	if (anon_bytes) {
		anon = mmap(NULL, anon_bytes, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (anon == MAP_FAILED)
			STEP_FAIL("mmap %lld MiB", opt.anon_mb);
		touch_anon(anon, anon_bytes, li);
		r.anon_bytes = anon_bytes;
	}

	/* 3. proactive reclaim from inside the leaf */
	snprintf(path, sizeof(path), "%s/memory.reclaim", leaf_path);
	rfd = open(path, O_WRONLY | O_CLOEXEC);
	if (rfd < 0)
		STEP_FAIL("open(%.110s)", path);
	snprintf(req, sizeof(req), "%lld", chunk);
	for (j = 0; j < NCHUNKS; j++) {
		cpu_set_t set;

		r.chunk_cpu[j] = -1;
		if (ncpus > 0) {
			int cpu = cpus[(li + j) % ncpus];

			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set))
				wlog(&r, "write %d: sched_setaffinity(cpu %d): %s; running unpinned",
				     j, cpu, strerror(errno));
			else
				r.chunk_cpu[j] = cpu;
		}
		for (t = 0;; t++) {
			ssize_t n;
			int e;

			t0 = now_ns();
			n = write(rfd, req, strlen(req));
			e = errno;
			r.reclaim_ns += now_ns() - t0;
			if (n == (ssize_t)strlen(req)) {
				r.writes_ok++;
				r.req_ok_bytes += chunk;
				r.chunk_ok[j] = 1;
				break;
			}
			if (n >= 0)
				e = EIO;
			r.last_errno = e;
			if (e == EAGAIN) {
				r.writes_eagain++;
			} else if (e == EINTR) {
				r.writes_eintr++;
			} else {
				r.writes_other++;
				wlog(&r, "write %d: memory.reclaim <- %s: %s (not retried)",
				     j, req, strerror(e));
				break;
			}
			{
				char p2[PATH_MAX + 64];
				long long cur = -1, file = -1, anon_now = -1, inact = -1;
				char cbuf[64];

				snprintf(p2, sizeof(p2), "%s/memory.current", leaf_path);
				if (!read_small(p2, cbuf, sizeof(cbuf)))
					cur = strtoll(cbuf, NULL, 10);
				snprintf(p2, sizeof(p2), "%s/memory.stat", leaf_path);
				read_key(p2, "file", &file);
				read_key(p2, "anon", &anon_now);
				read_key(p2, "inactive_file", &inact);
				if (t >= opt.max_retries) {
					wlog(&r, "write %d: memory.reclaim <- %s: %s; giving up after %d retries (memory.current=%lld file=%lld anon=%lld inactive_file=%lld)",
					     j, req, strerror(e), t, cur, file, anon_now, inact);
					break;
				}
				wlog(&r, "write %d try %d: memory.reclaim <- %s: %s (memory.current=%lld file=%lld anon=%lld inactive_file=%lld); re-creating the memory and retrying",
				     j, t + 1, req, strerror(e), cur, file, anon_now, inact);
			}
			r.retries++;
			reread_file(fd, buf, file_bytes);
			if (anon != MAP_FAILED)
				touch_anon(anon, anon_bytes, li + t + 1);
		}
	}

report:
	if (write(wfd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(2);
	if (rfd >= 0)
		close(rfd);
	if (anon != MAP_FAILED)
		munmap(anon, anon_bytes);
	if (fd >= 0)
		close(fd);
	unlink(file_path);
	free(buf);
	_exit(0);
#undef STEP_FAIL
}

struct wresult {
	bool have_report;
	struct wreport r;
	int status;		/* waitpid status */
	bool reaped;
};

/* Start one worker per leaf (concurrently) and collect their reports. */
static void run_workers(int run, const int *cpus, int ncpus, struct wresult *res)
{
	int pipes[NUM_LEAVES][2], i, j, open_cnt = 0;
	char suffix[NUM_LEAVES][PATH_MAX];
	size_t got[NUM_LEAVES] = { 0 };
	unsigned long long deadline;

	memset(res, 0, sizeof(*res) * NUM_LEAVES);
	for (i = 0; i < NUM_LEAVES; i++) {
		snprintf(suffix[i], sizeof(suffix[i]), "/hierarchical_stats.%d.%d/%s",
			 (int)getpid(), run, nodes[leaf_node[i]].rel);
		pipes[i][0] = pipes[i][1] = -1;
		if (pipe2(pipes[i], O_CLOEXEC))
			continue;
	}
	fflush(stdout);
	for (i = 0; i < NUM_LEAVES; i++) {
		pid_t pid;

		if (pipes[i][0] < 0)
			continue;
		pid = fork();
		if (pid == 0) {
			/*
			 * No exec, so O_CLOEXEC does not help: drop every read
			 * end and the other workers' write ends, or a worker
			 * that dies would not show as EOF to the parent.
			 */
			for (j = 0; j < NUM_LEAVES; j++) {
				if (pipes[j][0] >= 0)
					close(pipes[j][0]);
				if (j != i && pipes[j][1] >= 0)
					close(pipes[j][1]);
			}
			worker_main(i, pipes[i][1], nodes[leaf_node[i]].path,
				    suffix[i], leaf_file[i], cpus, ncpus);
		}
		if (pid > 0)
			worker_pid[i] = pid;
		close(pipes[i][1]);
		pipes[i][1] = -1;
		if (pid < 0) {
			close(pipes[i][0]);
			pipes[i][0] = -1;
		} else {
			open_cnt++;
		}
	}

	deadline = now_ns() + (WORKER_TIMEOUT_S + 15) * 1000000000ULL;
	while (open_cnt > 0) {
		struct pollfd pfd[NUM_LEAVES];
		int idx[NUM_LEAVES], n = 0, left_ms;
		unsigned long long now = now_ns();

		if (now >= deadline)
			break;
		for (i = 0; i < NUM_LEAVES; i++) {
			if (pipes[i][0] < 0)
				continue;
			pfd[n].fd = pipes[i][0];
			pfd[n].events = POLLIN;
			idx[n++] = i;
		}
		left_ms = (int)((deadline - now) / 1000000ULL) + 1;
		if (poll(pfd, n, left_ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (j = 0; j < n; j++) {
			ssize_t m;

			i = idx[j];
			if (!(pfd[j].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			m = read(pipes[i][0], (char *)&res[i].r + got[i],
				 sizeof(res[i].r) - got[i]);
			if (m > 0) {
				got[i] += m;
				if (got[i] < sizeof(res[i].r))
					continue;
				res[i].have_report = true;
			} else if (m < 0 && errno == EINTR) {
				continue;
			}
			close(pipes[i][0]);
			pipes[i][0] = -1;
			open_cnt--;
		}
	}
	/* whatever did not report by now is killed by kill_workers() */
	for (i = 0; i < NUM_LEAVES; i++) {
		if (pipes[i][0] >= 0)
			close(pipes[i][0]);
		if (worker_pid[i] > 0) {
			pid_t pid = worker_pid[i];

			if (!res[i].have_report)
				kill(pid, SIGKILL);
			while (waitpid(pid, &res[i].status, 0) < 0 && errno == EINTR)
				;
			res[i].reaped = true;
			worker_pid[i] = 0;
		}
	}
}

/* ------------------------------------------------------------------ */
/* memory.stat / vmstat                                                */
/* ------------------------------------------------------------------ */

struct steal {
	bool ok;
	bool has_proactive;
	long long direct, proactive, kswapd, khugepaged;
};

static void read_steal(const char *path, struct steal *s)
{
	memset(s, 0, sizeof(*s));
	s->ok = read_key(path, "pgsteal_direct", &s->direct) == 1 &&
		read_key(path, "pgsteal_kswapd", &s->kswapd) == 1;
	if (read_key(path, "pgsteal_khugepaged", &s->khugepaged) != 1)
		s->khugepaged = 0;
	s->has_proactive = read_key(path, "pgsteal_proactive", &s->proactive) == 1;
	if (!s->has_proactive)
		s->proactive = 0;
}

static void read_node_steal(int n, struct steal *s)
{
	char path[PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/memory.stat", nodes[n].path);
	read_steal(path, s);
}

/* ------------------------------------------------------------------ */
/* Metrics                                                             */
/* ------------------------------------------------------------------ */

static struct {
	int runs_done, runs_passed;
	int retries_total, eagain_total, eintr_total;
	int retries_leaf[NUM_LEAVES];
	int *retries_run;		/* per run */
	bool *run_ok;
	long long bpf_pages_total, pgsteal_direct_total, slack_total;
	long long max_pgsteal_minus_bpf;
	unsigned long long max_run_ms;
} mx;

static void write_metrics(const char *path)
{
	char tmp[PATH_MAX + 8], summary[512];
	int i;
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		diag("cannot write %s: %s", tmp, strerror(errno));
		return;
	}
	snprintf(summary, sizeof(summary),
		 "%d/%d runs passed%s, %d leaves each; memory.reclaim retries: %d (EAGAIN %d, EINTR %d)",
		 mx.runs_passed, opt.runs, opt.broken ? " (broken BPF variant)" : "",
		 NUM_LEAVES, mx.retries_total, mx.eagain_total, mx.eintr_total);
	fprintf(f, "{\n  \"runs\": %d,\n  \"runs_done\": %d,\n  \"runs_passed\": %d,\n",
		opt.runs, mx.runs_done, mx.runs_passed);
	fprintf(f, "  \"broken_variant\": %s,\n  \"leaves\": %d,\n", opt.broken ? "true" : "false",
		NUM_LEAVES);
	fprintf(f, "  \"params\": {\"file_mb\": %lld, \"anon_mb\": %lld, \"reclaim_mb\": %lld, \"writes_per_leaf\": %d, \"max_retries\": %d},\n",
		opt.file_mb, opt.anon_mb, opt.reclaim_mb, NCHUNKS, opt.max_retries);
	fprintf(f, "  \"retries\": {\n    \"total\": %d,\n    \"eagain\": %d,\n    \"eintr\": %d,\n    \"per_leaf\": {",
		mx.retries_total, mx.eagain_total, mx.eintr_total);
	for (i = 0; i < NUM_LEAVES; i++)
		fprintf(f, "%s\"%s\": %d", i ? ", " : "", nodes[leaf_node[i]].name,
			mx.retries_leaf[i]);
	fprintf(f, "},\n    \"per_run\": [");
	for (i = 0; i < mx.runs_done; i++)
		fprintf(f, "%s%d", i ? ", " : "", mx.retries_run[i]);
	fprintf(f, "]\n  },\n  \"run_passed\": [");
	for (i = 0; i < mx.runs_done; i++)
		fprintf(f, "%s%s", i ? ", " : "", mx.run_ok[i] ? "true" : "false");
	fprintf(f, "],\n  \"pages\": {\"bpf_leaves\": %lld, \"pgsteal_direct_leaves\": %lld, \"allowed_slack\": %lld, \"max_pgsteal_minus_bpf\": %lld},\n",
		mx.bpf_pages_total, mx.pgsteal_direct_total, mx.slack_total,
		mx.max_pgsteal_minus_bpf);
	fprintf(f, "  \"max_run_ms\": %llu,\n", mx.max_run_ms);
	fprintf(f, "  \"summary\": \"%s\"\n}\n", summary);
	fclose(f);
	if (rename(tmp, path))
		diag("rename %s: %s", tmp, strerror(errno));
}

/* ------------------------------------------------------------------ */
/* One run                                                             */
/* ------------------------------------------------------------------ */

enum top_id { T_LOAD, T_ENV, NUM_TOP };
static const char *const top_names[NUM_TOP] = { "bpf_load_attach", "environment" };

enum sub_id {
	S_SETUP,
	S_RECLAIM,
	S_LEAF_EVENTS,				/* 4 of them */
	S_PARENT = S_LEAF_EVENTS + NUM_LEAVES,	/* a, b, test root */
	S_HROOT = S_PARENT + 3,
	S_PGSTEAL,				/* 4 of them */
	S_REREAD = S_PGSTEAL + NUM_LEAVES,
	S_BOOKKEEPING,
	S_CLEANUP,
	NUM_SUB
};

static char sub_name_buf[NUM_SUB][48];
static const char *sub_names[NUM_SUB];

static void init_sub_names(void)
{
	static const char *const leafs[NUM_LEAVES] = { "a1", "a2", "b1", "b2" };
	int i;

	snprintf(sub_name_buf[S_SETUP], 48, "tree_setup");
	snprintf(sub_name_buf[S_RECLAIM], 48, "reclaim_induced");
	for (i = 0; i < NUM_LEAVES; i++) {
		snprintf(sub_name_buf[S_LEAF_EVENTS + i], 48, "leaf_%s_events", leafs[i]);
		snprintf(sub_name_buf[S_PGSTEAL + i], 48, "leaf_%s_pages_vs_pgsteal", leafs[i]);
	}
	snprintf(sub_name_buf[S_PARENT + 0], 48, "parent_a_equals_sum");
	snprintf(sub_name_buf[S_PARENT + 1], 48, "parent_b_equals_sum");
	snprintf(sub_name_buf[S_PARENT + 2], 48, "test_root_equals_sum");
	snprintf(sub_name_buf[S_HROOT], 48, "hierarchy_root_covers_tree");
	snprintf(sub_name_buf[S_REREAD], 48, "reread_stable");
	snprintf(sub_name_buf[S_BOOKKEEPING], 48, "bpf_bookkeeping");
	snprintf(sub_name_buf[S_CLEANUP], 48, "tree_cleanup");
	for (i = 0; i < NUM_SUB; i++)
		sub_names[i] = sub_name_buf[i];
}

/* 0 ok; <0 with @reason; *@skip: environment lacks something (=> SKIP) */
static int create_tree(int run, char *reason, size_t len, bool *skip)
{
	char path[PATH_MAX + 64];
	struct stat st;
	int i, err;

	*skip = false;
	for (i = 0; i < NUM_NODES; i++) {
		nodes[i].fd = -1;
		nodes[i].link = NULL;
		nodes[i].created = false;
		if (snprintf(nodes[i].path, sizeof(nodes[i].path), "%s/hierarchical_stats.%d.%d%s%s",
			     cg_mnt, (int)getpid(), run, nodes[i].rel[0] ? "/" : "",
			     nodes[i].rel) >= (int)sizeof(nodes[i].path)) {
			snprintf(reason, len, "cgroup path too long");
			return -ENAMETOOLONG;
		}
	}
	/* pre-order: parents exist (with +memory) before their children */
	for (i = 0; i < NUM_NODES; i++) {
		if (mkdir(nodes[i].path, 0755)) {
			err = -errno;
			snprintf(reason, len, "mkdir(%s): %s", nodes[i].path, strerror(errno));
			return err;
		}
		nodes[i].created = true;
		if (stat(nodes[i].path, &st)) {
			err = -errno;
			snprintf(reason, len, "stat(%s): %s", nodes[i].path, strerror(errno));
			return err;
		}
		nodes[i].ino = st.st_ino;
		nodes[i].fd = open(nodes[i].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (nodes[i].fd < 0) {
			err = -errno;
			snprintf(reason, len, "open(%s): %s", nodes[i].path, strerror(errno));
			return err;
		}
		if (nodes[i].leaf < 0) {
			snprintf(path, sizeof(path), "%s/cgroup.subtree_control", nodes[i].path);
			if ((err = write_file(path, "+memory"))) {
				snprintf(reason, len, "enabling +memory in %s: %s", path,
					 strerror(-err));
				return err;
			}
		}
	}
	for (i = 0; i < NUM_LEAVES; i++) {
		snprintf(path, sizeof(path), "%s/memory.reclaim", nodes[leaf_node[i]].path);
		if (access(path, W_OK)) {
			err = -errno;
			snprintf(reason, len, "%s: %s (kernel without memory.reclaim?)", path,
				 strerror(errno));
			*skip = err == -ENOENT;
			return err;
		}
	}
	for (i = 0; i < NUM_NODES; i++) {
		nodes[i].link = attach_self_only(nodes[i].fd, reason, len);
		if (!nodes[i].link)
			return -EINVAL;
	}
	return 0;
}

static void close_tree(void)
{
	int i;

	for (i = 0; i < NUM_NODES; i++) {
		bpf_link__destroy(nodes[i].link);
		nodes[i].link = NULL;
		if (nodes[i].fd >= 0)
			close(nodes[i].fd);
		nodes[i].fd = -1;
	}
}

static bool read_all(const int *order, struct rec *out, char *err, size_t len)
{
	int k, i;

	for (k = 0; k < NUM_NODES; k++) {
		i = order[k];
		if (read_link(nodes[i].link, nodes[i].ino, &out[i], err, len)) {
			char tmp[512];

			snprintf(tmp, sizeof(tmp), "%s: %s", nodes[i].name, err);
			snprintf(err, len, "%s", tmp);
			return false;
		}
	}
	return true;
}

static bool rec_equal(const struct rec *x, const struct rec *y)
{
	return x->count == y->count && x->time_ns == y->time_ns &&
	       x->pages == y->pages && x->own_count == y->own_count &&
	       x->own_time_ns == y->own_time_ns && x->own_pages == y->own_pages;
}

static void diag_worker(int i, const struct wresult *w)
{
	const struct wreport *r = &w->r;
	char status[64] = "";

	if (w->reaped) {
		if (WIFSIGNALED(w->status))
			snprintf(status, sizeof(status), "killed by signal %d%s",
				 WTERMSIG(w->status),
				 WTERMSIG(w->status) == SIGALRM ? " (worker timeout)" : "");
		else
			snprintf(status, sizeof(status), "exit %d", WEXITSTATUS(w->status));
	}
	if (!w->have_report) {
		diag("%s: worker sent no report (%s)", nodes[leaf_node[i]].name,
		     status[0] ? status : "not started");
		return;
	}
	if (r->err)
		diag("%s: worker failed: %s: %s", nodes[leaf_node[i]].name, r->err_step,
		     strerror(r->err));
	diag("%s: worker in '%s'; %lld MiB file + %lld MiB anon; memory.reclaim writes: ok %d, EAGAIN %d, EINTR %d, other %d; retries %d; cpus %d,%d; %.1f ms inside the writes",
	     nodes[leaf_node[i]].name, r->cgroup_line, r->file_bytes / MIB,
	     r->anon_bytes / MIB, r->writes_ok, r->writes_eagain, r->writes_eintr,
	     r->writes_other, r->retries, r->chunk_cpu[0], r->chunk_cpu[NCHUNKS - 1],
	     r->reclaim_ns / 1e6);
	diag_block("  ", r->log);
}

static bool run_once(int run, const int *cpus, int ncpus)
{
	struct level L = { .names = sub_names, .count = NUM_SUB };
	struct rec first[NUM_NODES], second[NUM_NODES], hroot_before, hroot_after;
	struct steal st_before[NUM_LEAVES], st_after[NUM_LEAVES], par_after[3];
	struct hs_global g0, g1;
	struct wresult wres[NUM_LEAVES];
	long long misses0[NUM_TRACE_PROGS], misses1[NUM_TRACE_PROGS];
	long long vm_direct0 = -1, vm_direct1 = -1, global_direct = 0, other_memcg = 0;
	char reason[2 * PATH_MAX], err[1024];
	bool ok, skip, have_first = false, have_second = false, have_hroot = false;
	unsigned long long t_start = now_ns();
	int i, j, run_retries = 0;

	indent = 4;
	out_line("KTAP version 1");
	out_line("# Subtest: run_%d", run);
	out_line("1..%d", NUM_SUB);

	for (i = 0; i < NUM_LEAVES; i++)
		snprintf(leaf_file[i], sizeof(leaf_file[i]), "%s/hierarchical_stats.%d.%d.%s",
			 scratch_dir, (int)getpid(), run, nodes[leaf_node[i]].rel + 2);

	/* ---- tree_setup ---- */
	if (create_tree(run, reason, sizeof(reason), &skip)) {
		diag("%s", reason);
		if (libbpf_log_len)
			diag_block("", libbpf_log);
		if (skip)
			report_skip(&L, S_SETUP, "%s", reason);
		else
			report(&L, S_SETUP, false);
		skip_rest(&L, S_CLEANUP, "tree setup failed");
		goto cleanup;
	}
	ok = read_all(post_order, first, err, sizeof(err));
	if (!ok) {
		diag("reading the fresh tree: %s", err);
	} else {
		for (i = 0; i < NUM_NODES; i++) {
			if (first[i].count || first[i].time_ns || first[i].pages ||
			    first[i].own_count || first[i].own_pages) {
				diag("%s (id %llu): expected all zero in a fresh cgroup, got:",
				     nodes[i].name, nodes[i].ino);
				diag_rec(nodes[i].name, &first[i]);
				ok = false;
			}
		}
	}
	if (read_link(cg_root_link, cg_root_id, &hroot_before, err, sizeof(err))) {
		diag("cgroup2 root: %s", err);
		ok = false;
	}
	for (i = 0; i < NUM_LEAVES; i++) {
		read_node_steal(leaf_node[i], &st_before[i]);
		if (!st_before[i].ok) {
			diag("%s/memory.stat: no pgsteal_direct/pgsteal_kswapd", nodes[leaf_node[i]].path);
			ok = false;
		}
	}
	if (read_key("/proc/vmstat", "pgsteal_direct", &vm_direct0) != 1) {
		diag("/proc/vmstat has no pgsteal_direct");
		ok = false;
	}
	if (ok)
		diag("tree %s: ids root=%llu a=%llu a1=%llu a2=%llu b=%llu b1=%llu b2=%llu",
		     nodes[N_ROOT].path, nodes[N_ROOT].ino, nodes[N_A].ino, nodes[N_A1].ino,
		     nodes[N_A2].ino, nodes[N_B].ino, nodes[N_B1].ino, nodes[N_B2].ino);
	report(&L, S_SETUP, ok);
	if (!ok) {
		skip_rest(&L, S_CLEANUP, "tree setup failed");
		goto cleanup;
	}

	/* ---- induce reclaim in every leaf, from inside the leaf ---- */
	g_snapshot(&g0);
	for (j = 0; j < NUM_TRACE_PROGS; j++)
		misses0[j] = prog_misses(hs.prog[j]);
	run_workers(run, cpus, ncpus, wres);
	ok = true;
	for (i = 0; i < NUM_LEAVES; i++) {
		const struct wreport *r = &wres[i].r;

		diag_worker(i, &wres[i]);
		if (!wres[i].have_report || r->err || r->writes_ok != NCHUNKS)
			ok = false;
		if (wres[i].have_report) {
			run_retries += r->retries;
			mx.retries_leaf[i] += r->retries;
			mx.eagain_total += r->writes_eagain;
			mx.eintr_total += r->writes_eintr;
		}
	}
	mx.retries_total += run_retries;
	diag("memory.reclaim retries in this run: %d (at most %d per write)", run_retries,
	     opt.max_retries);
	if (!ok)
		diag("expected every worker to report and all %d memory.reclaim writes of %lld MiB to succeed",
		     NCHUNKS, opt.reclaim_mb / NCHUNKS);
	report(&L, S_RECLAIM, ok);

	/*
	 * Two reads of every cgroup with no reclaim in between: first bottom-up
	 * (each leaf's flush pushes its delta into a parent that is flushed
	 * later), then top-down.
	 */
	have_first = read_all(post_order, first, err, sizeof(err));
	if (!have_first)
		diag("first read: %s", err);
	{
		static const int pre_order[NUM_NODES] = { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, N_B2 };

		have_second = read_all(pre_order, second, err, sizeof(err));
		if (!have_second)
			diag("second read: %s", err);
	}
	/* memory.stat after the iterator flushed the leaves (and their memcg stats) */
	for (i = 0; i < NUM_LEAVES; i++)
		read_node_steal(leaf_node[i], &st_after[i]);
	for (i = 0; i < 3; i++)
		read_node_steal(parent_node[i], &par_after[i]);
	if (read_key("/proc/vmstat", "pgsteal_direct", &vm_direct1) != 1)
		vm_direct1 = -1;
	have_hroot = !read_link(cg_root_link, cg_root_id, &hroot_after, err, sizeof(err));
	if (!have_hroot)
		diag("cgroup2 root: %s", err);
	g_snapshot(&g1);
	for (j = 0; j < NUM_TRACE_PROGS; j++)
		misses1[j] = prog_misses(hs.prog[j]);

	if (have_first) {
		diag("flushed totals (count, time_ns, pages; own):");
		for (i = 0; i < NUM_NODES; i++)
			diag_rec(nodes[i].name, &first[i]);
	}

	/* ---- leaf_X_events ---- */
	for (i = 0; i < NUM_LEAVES; i++) {
		const struct rec *r = &first[leaf_node[i]];
		const struct wreport *w = &wres[i].r;
		unsigned long long min_count = 0, min_pages = 0;
		const char *nm = nodes[leaf_node[i]].name;

		if (!have_first) {
			report(&L, S_LEAF_EVENTS + i, false);
			continue;
		}
		ok = r->count > 0 && r->pages > 0 && r->time_ns > 0;
		if (!ok)
			diag("%s: expected count > 0, pages > 0, time_ns > 0; got count=%llu pages=%llu time_ns=%llu",
			     nm, r->count, r->pages, r->time_ns);
		if (r->count != r->own_count || r->pages != r->own_pages ||
		    r->time_ns != r->own_time_ns) {
			diag("%s: a leaf's total must be its own; got total (%llu, %llu, %llu) own (%llu, %llu, %llu)",
			     nm, r->count, r->time_ns, r->pages, r->own_count,
			     r->own_time_ns, r->own_pages);
			ok = false;
		}
		if (wres[i].have_report) {
			min_count = (unsigned long long)(w->writes_ok + w->writes_eagain);
			min_pages = (unsigned long long)(w->req_ok_bytes / page_size);
			if (r->count < min_count) {
				diag("%s: expected count >= %llu (memory.reclaim writes that reclaimed or gave up), got %llu",
				     nm, min_count, r->count);
				ok = false;
			}
			if (r->pages < min_pages) {
				diag("%s: expected pages >= %llu (requested by successful memory.reclaim writes), got %llu",
				     nm, min_pages, r->pages);
				ok = false;
			}
			if (r->time_ns > w->reclaim_ns) {
				diag("%s: expected time_ns <= %llu (wall time the worker spent inside memory.reclaim), got %llu",
				     nm, w->reclaim_ns, r->time_ns);
				ok = false;
			}
		}
		if (ok && wres[i].have_report)
			diag("%s: count=%llu (>= %llu) pages=%llu (>= %llu) time_ns=%llu (<= %llu)",
			     nm, r->count, min_count, r->pages, min_pages, r->time_ns,
			     w->reclaim_ns);
		report(&L, S_LEAF_EVENTS + i, ok);
	}

	/* ---- parent_X_equals_sum ---- */
	for (j = 0; j < 3; j++) {
		int p = parent_node[j], c;
		unsigned long long sc = 0, st = 0, sp = 0;
		char kids[64] = "";
		const struct rec *r = &first[p];

		if (!have_first) {
			report(&L, S_PARENT + j, false);
			continue;
		}
		for (c = 0; c < NUM_NODES; c++) {
			if (nodes[c].parent != p)
				continue;
			sc += first[c].count;
			st += first[c].time_ns;
			sp += first[c].pages;
			snprintf(kids + strlen(kids), sizeof(kids) - strlen(kids), "%s%s",
				 kids[0] ? " + " : "", nodes[c].name);
		}
		ok = r->count == sc + r->own_count && r->time_ns == st + r->own_time_ns &&
		     r->pages == sp + r->own_pages;
		if (!ok) {
			diag("%s: expected total = %s + own, exactly:", nodes[p].name, kids);
			diag("  count:   expected %llu + %llu = %llu, got %llu", sc, r->own_count,
			     sc + r->own_count, r->count);
			diag("  time_ns: expected %llu + %llu = %llu, got %llu", st, r->own_time_ns,
			     st + r->own_time_ns, r->time_ns);
			diag("  pages:   expected %llu + %llu = %llu, got %llu", sp, r->own_pages,
			     sp + r->own_pages, r->pages);
		}
		if (r->own_count || r->own_pages || r->own_time_ns) {
			diag("%s: expected own = 0 (no task ran in it), got (%llu, %llu, %llu)",
			     nodes[p].name, r->own_count, r->own_time_ns, r->own_pages);
			ok = false;
		}
		if (ok)
			diag("%s = %s: count %llu, time_ns %llu, pages %llu (memory.stat pgsteal_direct %lld)",
			     nodes[p].name, kids, r->count, r->time_ns, r->pages,
			     par_after[j].ok ? par_after[j].direct + par_after[j].proactive : -1);
		report(&L, S_PARENT + j, ok);
	}

	/* ---- hierarchy_root_covers_tree ---- */
	if (!have_first || !have_hroot) {
		report(&L, S_HROOT, false);
	} else {
		const struct rec *t = &first[N_ROOT];
		unsigned long long dc = hroot_after.count - hroot_before.count;
		unsigned long long dt = hroot_after.time_ns - hroot_before.time_ns;
		unsigned long long dp = hroot_after.pages - hroot_before.pages;

		ok = hroot_after.count >= hroot_before.count &&
		     hroot_after.time_ns >= hroot_before.time_ns &&
		     hroot_after.pages >= hroot_before.pages &&
		     dc >= t->count && dt >= t->time_ns && dp >= t->pages;
		diag("cgroup2 root (id %llu) grew by count %llu, time_ns %llu, pages %llu during the run; %s test root: count %llu, time_ns %llu, pages %llu",
		     cg_root_id, dc, dt, dp, ok ? "at least the" : "expected at least the",
		     t->count, t->time_ns, t->pages);
		if (ok && dp >= t->pages)
			other_memcg = (long long)(dp - t->pages);
		report(&L, S_HROOT, ok);
	}

	/* ---- leaf_X_pages_vs_pgsteal ---- */
	if (vm_direct0 >= 0 && vm_direct1 >= vm_direct0)
		global_direct = vm_direct1 - vm_direct0;
	for (i = 0; i < NUM_LEAVES; i++) {
		const struct rec *r = &first[leaf_node[i]];
		const char *nm = nodes[leaf_node[i]].name;
		long long d, kswapd, khuge, slack, slab_slack, bpf;

		if (!have_first || !st_before[i].ok || !st_after[i].ok || vm_direct1 < 0) {
			diag("%s: statistics missing (BPF read %s, memory.stat %s, /proc/vmstat %s)",
			     nm, have_first ? "ok" : "failed", st_after[i].ok ? "ok" : "failed",
			     vm_direct1 >= 0 ? "ok" : "failed");
			report(&L, S_PGSTEAL + i, false);
			continue;
		}
		d = (st_after[i].direct + st_after[i].proactive) -
		    (st_before[i].direct + st_before[i].proactive);
		kswapd = st_after[i].kswapd - st_before[i].kswapd;
		khuge = st_after[i].khugepaged - st_before[i].khugepaged;
		bpf = (long long)r->pages;
		slack = global_direct + other_memcg;
		/*
		 * Kernels that count freed slab in memcg reclaim (see
		 * reclaim_counts_slab): the slab freed with the leaf's file pages
		 * is their buffer heads, at most PAGE_SIZE / block size of them
		 * per page, 104 bytes each (39 per slab page; 32 taken), plus the
		 * leaf's few dentries and inodes its shrinkers may free (16 pages).
		 */
		slab_slack = reclaim_counts_slab ?
			(d * (page_size / scratch_bsize) + 31) / 32 + 16 : 0;
		ok = bpf - slab_slack <= d && d - bpf <= slack;
		diag("%s: BPF pages %lld, memory.stat pgsteal_direct%s +%lld; %s %lld - %lld <= %lld <= %lld + %lld (freed slab counted by this kernel's memcg reclaim <= %lld; global direct reclaim %lld + memcg reclaim outside the tree %lld); pgsteal_kswapd +%lld, pgsteal_khugepaged +%lld (not attributable to a task, not compared)",
		     nm, bpf, st_after[i].has_proactive ? "+pgsteal_proactive" : "", d,
		     ok ? "within" : "expected", bpf, slab_slack, d, bpf, slack, slab_slack,
		     global_direct, other_memcg, kswapd, khuge);
		mx.bpf_pages_total += bpf;
		mx.pgsteal_direct_total += d;
		mx.slack_total += slack;
		if (d - bpf > mx.max_pgsteal_minus_bpf)
			mx.max_pgsteal_minus_bpf = d - bpf;
		report(&L, S_PGSTEAL + i, ok);
	}

	/* ---- reread_stable ---- */
	if (!have_first || !have_second) {
		report(&L, S_REREAD, false);
	} else {
		ok = true;
		for (i = 0; i < NUM_NODES; i++) {
			if (!rec_equal(&first[i], &second[i])) {
				diag("%s: the second read differs from the first:", nodes[i].name);
				diag_rec("first", &first[i]);
				diag_rec("second", &second[i]);
				ok = false;
			}
		}
		report(&L, S_REREAD, ok);
	}

	/* ---- bpf_bookkeeping ---- */
	ok = g1.map_errors == g0.map_errors && g1.unmatched_end == g0.unmatched_end &&
	     g1.id_mismatch == g0.id_mismatch;
	for (j = 0; j < NUM_TRACE_PROGS; j++) {
		if (misses0[j] < 0 || misses1[j] < 0) {
			diag("%s: cannot read recursion_misses", trace_prog_desc[j]);
		} else if (misses1[j] != misses0[j]) {
			diag("%s: %lld runs missed (recursion) during the run", trace_prog_desc[j],
			     misses1[j] - misses0[j]);
			ok = false;
		}
	}
	diag("during the run: begin %llu, end %llu, end without begin %llu, map update failures %llu, cgroup id mismatches %llu, rstat flush calls %llu (%llu with a delta), iterator reads %llu",
	     (unsigned long long)(g1.begin_events - g0.begin_events),
	     (unsigned long long)(g1.end_events - g0.end_events),
	     (unsigned long long)(g1.unmatched_end - g0.unmatched_end),
	     (unsigned long long)(g1.map_errors - g0.map_errors),
	     (unsigned long long)(g1.id_mismatch - g0.id_mismatch),
	     (unsigned long long)(g1.flush_calls - g0.flush_calls),
	     (unsigned long long)(g1.flush_folded - g0.flush_folded),
	     (unsigned long long)(g1.iter_calls - g0.iter_calls));
	if (!ok)
		diag("expected no end event without its begin, no failed map update, no missed program run and no cgroup id mismatch");
	report(&L, S_BOOKKEEPING, ok);

cleanup:
	/* ---- tree_cleanup ---- */
	kill_workers();
	close_tree();
	{
		int first_errno = 0, first_failed = -1, failures;
		bool any = false, files_left = false;
		struct stat stt;

		for (i = 0; i < NUM_NODES; i++)
			any |= nodes[i].created;
		unlink_files();
		for (i = 0; i < NUM_LEAVES; i++)
			if (!stat(leaf_file[i], &stt))
				files_left = true;
		failures = rmdir_tree(&first_errno, &first_failed);
		/* drop the map entries of the removed cgroups (best effort) */
		for (i = 0; i < NUM_NODES; i++) {
			__u64 key = nodes[i].ino;

			if (!key)
				continue;
			bpf_map__delete_elem(hs.totals, &key, sizeof(key), 0);
			bpf_map__delete_elem(hs.pcpu, &key, sizeof(key), 0);
			nodes[i].ino = 0;
		}
		if (!any) {
			report_skip(&L, S_CLEANUP, "no cgroups were created");
		} else if (failures || files_left) {
			if (failures)
				diag("%d cgroup(s) could not be removed; first: rmdir(%s): %s",
				     failures, nodes[first_failed].path, strerror(first_errno));
			if (files_left)
				diag("scratch files left behind in %s", scratch_dir);
			report(&L, S_CLEANUP, false);
		} else {
			report(&L, S_CLEANUP, true);
		}
	}
	fill_gap(&L, NUM_SUB);

	mx.retries_run[mx.runs_done] = run_retries;
	mx.run_ok[mx.runs_done] = !L.failed;
	mx.runs_done++;
	if (!L.failed)
		mx.runs_passed++;
	if ((now_ns() - t_start) / 1000000ULL > mx.max_run_ms)
		mx.max_run_ms = (now_ns() - t_start) / 1000000ULL;

	indent = 0;
	if (!L.failed && !L.passed)
		out_line("ok %d run_%d # SKIP nothing ran", NUM_TOP + run, run);
	else
		out_line("%s %d run_%d", L.failed ? "not ok" : "ok", NUM_TOP + run, run);
	return !L.failed;
}

/* ------------------------------------------------------------------ */
/* Environment                                                         */
/* ------------------------------------------------------------------ */

static int setup_env(char *reason, size_t len, bool *skip, int *cpus, int *ncpus)
{
	char path[PATH_MAX + 64], buf[512];
	const char *sd;
	struct statfs sfs;
	struct stat st;
	cpu_set_t set;
	int err, i, fd;

	*skip = false;
	if (!ht_cgroup2_mount(cg_mnt, sizeof(cg_mnt))) {
		snprintf(own_cg_mnt, sizeof(own_cg_mnt), "/tmp/hierarchical_stats.cg.XXXXXX");
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
	if (statfs(cg_mnt, &sfs) || (unsigned long)sfs.f_type != CGROUP2_SUPER_MAGIC) {
		snprintf(reason, len, "%s is not a cgroup2 file system", cg_mnt);
		return -EINVAL;
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
	/* limits above the test root would make reclaim target an ancestor */
	for (i = 0; i < 2; i++) {
		const char *f = i ? "memory.high" : "memory.max";

		snprintf(path, sizeof(path), "%s/%s", cg_mnt, f);
		if (!read_small(path, buf, sizeof(buf)) && strcmp(buf, "max"))
			diag("WARNING: %s is %s: charges in the leaves may reclaim on behalf of that ancestor, which the exact checks do not allow for",
			     path, buf);
	}

	if (stat(cg_mnt, &st)) {
		err = -errno;
		snprintf(reason, len, "stat(%s): %s", cg_mnt, strerror(errno));
		return err;
	}
	cg_root_id = st.st_ino;
	cg_root_fd = open(cg_mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_root_fd < 0) {
		err = -errno;
		snprintf(reason, len, "open(%s): %s", cg_mnt, strerror(errno));
		return err;
	}
	cg_root_link = attach_self_only(cg_root_fd, reason, len);
	if (!cg_root_link)
		return -EINVAL;

	/* scratch: a disk-backed file system for real page cache */
	sd = getenv("HARNESS_SCRATCH");
	if (!sd || !*sd)
		sd = "/var/tmp";
	snprintf(scratch_dir, sizeof(scratch_dir), "%s", sd);
	snprintf(path, sizeof(path), "%s/hierarchical_stats.%d.probe", scratch_dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		snprintf(reason, len, "scratch directory %s not writable: %s", scratch_dir,
			 strerror(errno));
		return err;
	}
	close(fd);
	unlink(path);
	if (!statfs(scratch_dir, &sfs) && sfs.f_bsize > 0)
		scratch_bsize = sfs.f_bsize;
	if (!statfs(scratch_dir, &sfs))
		diag("scratch %s: %s", scratch_dir,
		     (unsigned long)sfs.f_type == EXT2_SUPER_MAGIC_ ? "ext2/3/4 (page cache)" :
		     (unsigned long)sfs.f_type == TMPFS_MAGIC_ ? "tmpfs (shmem: reclaimable only to swap)" :
		     "other file system");

	*ncpus = 0;
	if (!sched_getaffinity(0, sizeof(set), &set)) {
		for (i = 0; i < CPU_SETSIZE && *ncpus < 64; i++)
			if (CPU_ISSET(i, &set))
				cpus[(*ncpus)++] = i;
	}
	if (!read_small("/proc/swaps", buf, sizeof(buf)))
		diag("swap: %s", strchr(buf, '\n') ? strchr(buf, '\n') + 1 : "none");
	diag("cgroup2 at %s (root id %llu); %d CPUs usable; per leaf: %lld MiB file + %lld MiB anon, %d x %lld MiB memory.reclaim, <= %d retries per write",
	     cg_mnt, cg_root_id, *ncpus, opt.file_mb, opt.anon_mb, NCHUNKS,
	     opt.reclaim_mb / NCHUNKS, opt.max_retries);
	return 0;
}

/* ------------------------------------------------------------------ */

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [--runs N] [--broken] [--file-mb M] [--anon-mb M] [--reclaim-mb M] [--max-retries R]\n"
		"  --runs N         repeat create/induce/check/remove N times (fresh tree each run)\n"
		"  --broken         use the BROKEN_NO_PROPAGATE build: parent checks must fail\n"
		"  --file-mb M      page cache per leaf (default 32)\n"
		"  --anon-mb M      anonymous memory per leaf (default 16)\n"
		"  --reclaim-mb M   memory.reclaim per leaf, in %d writes (default 16)\n"
		"  --max-retries R  retries of a memory.reclaim write that failed (default 5)\n",
		prog, NCHUNKS);
}

static bool parse_args(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "runs", required_argument, NULL, 'n' },
		{ "broken", no_argument, NULL, 'b' },
		{ "file-mb", required_argument, NULL, 'f' },
		{ "anon-mb", required_argument, NULL, 'a' },
		{ "reclaim-mb", required_argument, NULL, 'r' },
		{ "max-retries", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	long v;
	int c;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		if (c == 'b') {
			opt.broken = true;
			continue;
		}
		if (c == 'h' || c == '?' || !optarg)
			return false;
		errno = 0;
		v = strtol(optarg, &end, 10);
		if (errno || *end || v < 0 || v > 100000)
			return false;
		switch (c) {
		case 'n': opt.runs = (int)v; break;
		case 'f': opt.file_mb = v; break;
		case 'a': opt.anon_mb = v; break;
		case 'r': opt.reclaim_mb = v; break;
		case 'R': opt.max_retries = (int)v; break;
		default: return false;
		}
	}
	if (optind != argc || opt.runs < 1 || opt.reclaim_mb < NCHUNKS ||
	    opt.reclaim_mb % NCHUNKS || opt.file_mb + opt.anon_mb < opt.reclaim_mb)
		return false;
	return true;
}

int main(int argc, char **argv)
{
	struct level T = { .names = top_names, .count = NUM_TOP };
	char reason[2 * PATH_MAX];
	int cpus[64], ncpus = 0, run, i, err;
	const char *metrics;
	struct sigaction sa;
	struct utsname u;
	bool loaded = false, env_ok = false, skip;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(argv[0]);
			return KSFT_PASS;
		}
	}
	if (!parse_args(argc, argv)) {
		usage(argv[0]);
		return KSFT_FAIL;
	}
	page_size = sysconf(_SC_PAGESIZE);
	init_sub_names();
	mx.retries_run = calloc(opt.runs, sizeof(int));
	mx.run_ok = calloc(opt.runs, sizeof(bool));
	if (!mx.retries_run || !mx.run_ok)
		return KSFT_FAIL;

	out_line("KTAP version 1");
	out_line("1..%d", NUM_TOP + opt.runs);
	uname(&u);
	{
		int major = 0, minor = 0;

		if (sscanf(u.release, "%d.%d", &major, &minor) == 2)
			reclaim_counts_slab = major < 6 || (major == 6 && minor < 4);
	}
	diag("kernel %s; BPF build: %s; runs: %d", u.release,
	     opt.broken ? "BROKEN_NO_PROPAGATE (parent checks are expected to FAIL)" : "normal",
	     opt.runs);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	libbpf_set_print(libbpf_capture);
	if (geteuid() != 0)
		diag("not running as root (euid %d); expect permission failures", (int)geteuid());

	/* 1. BPF: probe, load, attach the three tracing programs */
	hs.broken = opt.broken;
	if (!kernel_has_features(reason, sizeof(reason))) {
		report_skip(&T, T_LOAD, "%s", reason);
	} else {
		libbpf_log_reset();
		err = opt.broken ? open_load_hierarchical_stats_broken_bpf()
				 : open_load_hierarchical_stats_bpf();
		if (err) {
			diag("loading the %s BPF object failed: %d (%s)",
			     opt.broken ? "broken" : "normal", err, strerror(-err));
			diag_block("", libbpf_log);
			report(&T, T_LOAD, false);
		} else if (hs.rodata_broken != (opt.broken ? 1U : 0U)) {
			diag("the loaded object says hs_broken=%u, expected %u: wrong skeleton embedded",
			     hs.rodata_broken, opt.broken ? 1U : 0U);
			report(&T, T_LOAD, false);
		} else {
			bool ok = true, unsupported = false;

			for (i = 0; i < NUM_TRACE_PROGS && ok; i++) {
				libbpf_log_reset();
				hs.link[i] = bpf_program__attach(hs.prog[i]);
				if (!hs.link[i]) {
					err = -errno;
					snprintf(reason, sizeof(reason), "attaching %s: %s",
						 trace_prog_desc[i], strerror(-err));
					unsupported = err == -ENOTSUPP || err == -EOPNOTSUPP;
					ok = false;
				}
			}
			if (ok) {
				loaded = true;
				report(&T, T_LOAD, true);
			} else if (unsupported) {
				diag_block("", libbpf_log);
				report_skip(&T, T_LOAD, "%s (no BPF trampoline support?)", reason);
			} else {
				diag("%s", reason);
				diag_block("", libbpf_log);
				report(&T, T_LOAD, false);
			}
		}
	}

	/* 2. environment */
	if (!loaded) {
		report_skip(&T, T_ENV, "BPF programs not loaded");
	} else if ((err = setup_env(reason, sizeof(reason), &skip, cpus, &ncpus))) {
		if (skip) {
			report_skip(&T, T_ENV, "%s", reason);
		} else {
			diag("%s", reason);
			if (libbpf_log_len)
				diag_block("", libbpf_log);
			report(&T, T_ENV, false);
		}
	} else {
		env_ok = true;
		report(&T, T_ENV, true);
	}

	/* 3. the runs */
	for (run = 1; run <= opt.runs; run++) {
		if (!env_ok) {
			out_line("ok %d run_%d # SKIP %s", NUM_TOP + run, run,
				 loaded ? "environment not usable" : "BPF programs not loaded");
			n_skip++;
			continue;
		}
		run_once(run, cpus, ncpus);
	}

	/* teardown */
	kill_workers();
	unlink_files();
	bpf_link__destroy(cg_root_link);
	if (cg_root_fd >= 0)
		close(cg_root_fd);
	hs_destroy();
	release_cg_root();

	if (env_ok) {
		diag("%d/%d runs passed; memory.reclaim retries: %d in total", mx.runs_passed,
		     opt.runs, mx.retries_total);
		metrics = getenv("HARNESS_METRICS");
		if (metrics && *metrics)
			write_metrics(metrics);
	}
	out_line("# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0",
		 n_pass, n_fail, n_skip);
	free(mx.retries_run);
	free(mx.run_ok);
	if (n_fail)
		return KSFT_FAIL;
	if (!n_pass && n_skip)
		return KSFT_SKIP;
	return KSFT_PASS;
}
