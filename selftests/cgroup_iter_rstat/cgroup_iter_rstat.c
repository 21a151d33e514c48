// SPDX-License-Identifier: GPL-2.0
/*
 * cgroup_iter_rstat: end-to-end check of a sleepable cgroup iterator that
 * calls the cgroup_rstat_flush() kfunc.
 *
 *  - load a sleepable "iter.s/cgroup" program that flushes rstat on each
 *    cgroup it visits and prints "cgroup seq= id= level= cpu_ns=" lines;
 *  - build a cgroup tree  <cgroup2>/cgroup_iter_rstat.<pid>/{a/{a1,a2},b/{b1}};
 *  - walk it with ANCESTORS_UP, DESCENDANTS_PRE and SELF_ONLY and compare
 *    what the kernel reports with what was created (ids == st_ino, levels,
 *    pre-order, one flush per cgroup, flushed CPU time propagates upwards);
 *  - check that the same kfunc call from a NON-sleepable "iter/cgroup"
 *    program is refused by the verifier;
 *  - remove the tree (also on failure / SIGTERM).
 *
 * Output is KTAP on stdout.  Exit 0: all run checks passed, 1: a check
 * failed, 4: everything was skipped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "harness_test.h"
#include "cgroup_iter_rstat.skel.h"
#include "cgroup_iter_rstat_sleep_neg.skel.h"

/*
 * Skeleton names are "<file stem>_bpf" (bpftool's default for X.bpf.o, and
 * what the Makefile passes).  Also build if they were generated as just
 * "<file stem>".
 */
#if !defined(__CGROUP_ITER_RSTAT_BPF_SKEL_H__) && defined(__CGROUP_ITER_RSTAT_SKEL_H__)
#define cgroup_iter_rstat_bpf		cgroup_iter_rstat
#define cgroup_iter_rstat_bpf__open	cgroup_iter_rstat__open
#define cgroup_iter_rstat_bpf__load	cgroup_iter_rstat__load
#define cgroup_iter_rstat_bpf__destroy	cgroup_iter_rstat__destroy
#endif
#if !defined(__CGROUP_ITER_RSTAT_SLEEP_NEG_BPF_SKEL_H__) && \
	defined(__CGROUP_ITER_RSTAT_SLEEP_NEG_SKEL_H__)
#define cgroup_iter_rstat_sleep_neg_bpf		  cgroup_iter_rstat_sleep_neg
#define cgroup_iter_rstat_sleep_neg_bpf__open_opts cgroup_iter_rstat_sleep_neg__open_opts
#define cgroup_iter_rstat_sleep_neg_bpf__load	  cgroup_iter_rstat_sleep_neg__load
#define cgroup_iter_rstat_sleep_neg_bpf__destroy  cgroup_iter_rstat_sleep_neg__destroy
#endif


#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define KFUNC_NAME "cgroup_rstat_flush"
#define ITER_BTF_NAME "bpf_iter_cgroup"
#define SPIN_NS (20ULL * 1000 * 1000)	/* CPU time the helper burns in a1 */

/* ------------------------------------------------------------------ */
/* KTAP output                                                         */
/* ------------------------------------------------------------------ */

enum test_id {
	T_LOAD,
	T_SETUP,
	T_ANCESTORS,
	T_PRE_READ,
	T_PRE_IDS,
	T_PRE_LEVELS,
	T_PRE_ORDER,
	T_FLUSH_COUNT,
	T_FLUSH_CPUTIME,
	T_SELF_ONLY,
	T_NEG,
	T_CLEANUP,
	NUM_TESTS
};

static const char *const test_names[NUM_TESTS] = {
	[T_LOAD]	  = "load_sleepable_iter",
	[T_SETUP]	  = "cgroup_tree_setup",
	[T_ANCESTORS]	  = "ancestors_up_root_level",
	[T_PRE_READ]	  = "pre_order_read",
	[T_PRE_IDS]	  = "pre_order_id_set",
	[T_PRE_LEVELS]	  = "pre_order_levels",
	[T_PRE_ORDER]	  = "pre_order_parent_before_child",
	[T_FLUSH_COUNT]	  = "rstat_flush_called_per_cgroup",
	[T_FLUSH_CPUTIME] = "rstat_flush_propagates_cputime",
	[T_SELF_ONLY]	  = "self_only_leaf",
	[T_NEG]		  = "nonsleepable_flush_rejected",
	[T_CLEANUP]	  = "cgroup_tree_cleanup",
};

static int next_test;	/* index of the next result line to print */
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

/* "# " diagnostic; multi-line text gets a "# " on every line. */
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

/* Print a block of text (log, raw output) as diagnostics with a prefix. */
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

static void report(enum test_id t, bool ok)
{
	/* Fill any gap (should never happen) so the plan stays consistent. */
	while (next_test < (int)t) {
		out_line("not ok %d %s # internal error: not run",
			 next_test + 1, test_names[next_test]);
		n_fail++;
		next_test++;
	}
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
	while (next_test < (int)t) {
		out_line("not ok %d %s # internal error: not run",
			 next_test + 1, test_names[next_test]);
		n_fail++;
		next_test++;
	}
	out_line("ok %d %s # SKIP %s", t + 1, test_names[t], reason);
	n_skip++;
	next_test = t + 1;
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

	if (level == LIBBPF_DEBUG && !getenv("CGROUP_ITER_RSTAT_DEBUG"))
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
/* Kernel BTF: used only to explain a libbpf -ESRCH (symbol not found)  */
/* ------------------------------------------------------------------ */

static struct btf *vmlinux_btf;
static int vmlinux_btf_err;

/* 1: FUNC present in vmlinux BTF, 0: absent, <0: BTF not readable */
static int kernel_has_func(const char *name)
{
	if (!vmlinux_btf && !vmlinux_btf_err) {
		vmlinux_btf = btf__load_vmlinux_btf();
		if (!vmlinux_btf)
			vmlinux_btf_err = errno ? -errno : -ENOENT;
	}
	if (!vmlinux_btf)
		return vmlinux_btf_err;
	return btf__find_by_name_kind(vmlinux_btf, name, BTF_KIND_FUNC) >= 0;
}

/*
 * A load failed with @err.  libbpf resolves the kfunc and the iterator
 * target against the kernel's BTF before anything reaches the verifier,
 * and reports a missing symbol as -EINVAL (libbpf 1.1, "extern (func ksym)
 * ... not found") or -ESRCH (attach target).  So look at the kernel BTF:
 * if it proves that the kernel lacks the iterator or the kfunc, return true
 * with @reason filled (=> SKIP).  Everything else is a real failure.
 */
static bool load_failure_is_missing_feature(int err, char *reason, size_t len)
{
	int has_iter, has_kfunc;

	has_iter = kernel_has_func(ITER_BTF_NAME);
	has_kfunc = kernel_has_func(KFUNC_NAME);
	if (has_iter < 0) {
		/* no kernel BTF at all: libbpf cannot resolve any kfunc */
		if (err != -ESRCH && err != -EINVAL && err != -ENOENT)
			return false;
		snprintf(reason, len,
			 "kernel BTF (/sys/kernel/btf/vmlinux) unreadable (%s); load failed with %s",
			 strerror(-has_iter), strerror(-err));
		return true;
	}
	if (!has_iter) {
		snprintf(reason, len,
			 "kernel has no cgroup BPF iterator (%s not in vmlinux BTF)",
			 ITER_BTF_NAME);
		return true;
	}
	if (!has_kfunc) {
		snprintf(reason, len,
			 "kernel has no %s kfunc (not in vmlinux BTF)",
			 KFUNC_NAME);
		return true;
	}
	return false;
}

/* ------------------------------------------------------------------ */
/* cgroup tree                                                         */
/* ------------------------------------------------------------------ */

struct node {
	const char *rel;	/* path below the test root ("" = root) */
	int parent;		/* index into nodes[], -1 for the root */
	int depth;		/* 0 for the root */
	char path[PATH_MAX];
	unsigned long long ino;
	bool created;
};

enum { N_ROOT, N_A, N_B, N_A1, N_A2, N_B1, NUM_NODES };

static struct node nodes[NUM_NODES] = {
	[N_ROOT] = { "",     -1,     0 },
	[N_A]    = { "a",    N_ROOT, 1 },
	[N_B]    = { "b",    N_ROOT, 1 },
	[N_A1]   = { "a/a1", N_A,    2 },
	[N_A2]   = { "a/a2", N_A,    2 },
	[N_B1]   = { "b/b1", N_B,    2 },
};

static char cg_mnt[PATH_MAX];		/* cgroup2 mount point in use */
static unsigned long long cg_mnt_ino;
static char own_mnt[PATH_MAX];		/* set if we mounted cgroup2 ourselves */
static bool own_mnt_dir_created;	/* ... on a directory we created */
static volatile pid_t spinner_pid;

static bool is_mountpoint(const char *path)
{
	char parent[PATH_MAX];
	struct stat a, b;

	if (stat(path, &a) || !S_ISDIR(a.st_mode))
		return false;
	snprintf(parent, sizeof(parent), "%s/..", path);
	if (stat(parent, &b))
		return false;
	return a.st_dev != b.st_dev || a.st_ino == b.st_ino;
}

/* Find a writable cgroup2 mount in /proc/self/mounts. */

/*
 * Returns 0 with cg_mnt set, or -errno with @reason set.  *@skip tells
 * whether the failure means "kernel/environment lacks cgroup2".
 */
static int setup_cgroup2_mount(char *reason, size_t len, bool *skip)
{
	const char *target = "/sys/fs/cgroup";
	struct stat st;
	int err;

	*skip = false;
	if (ht_cgroup2_mount(cg_mnt, sizeof(cg_mnt)))
		goto found;

	/*
	 * Nothing mounted.  Use /sys/fs/cgroup unless something else (e.g. a
	 * cgroup v1 tmpfs) already sits there; then use a fresh /tmp dir.
	 */
	if (stat(target, &st) || !S_ISDIR(st.st_mode) || is_mountpoint(target)) {
		snprintf(own_mnt, sizeof(own_mnt),
			 "/tmp/cgroup_iter_rstat.mnt.XXXXXX");
		if (!mkdtemp(own_mnt)) {
			err = -errno;
			snprintf(reason, len, "no cgroup2 mount and mkdtemp(%s) failed: %s",
				 own_mnt, strerror(errno));
			own_mnt[0] = '\0';
			return err;
		}
		own_mnt_dir_created = true;
	} else {
		snprintf(own_mnt, sizeof(own_mnt), "%s", target);
	}

	if (mount("cgroup2", own_mnt, "cgroup2", 0, NULL)) {
		err = -errno;
		snprintf(reason, len, "no cgroup2 mount and mount(cgroup2, %s) failed: %s",
			 own_mnt, strerror(errno));
		*skip = (errno == ENODEV || errno == EPERM || errno == EACCES ||
			 errno == EROFS);
		if (own_mnt_dir_created)
			rmdir(own_mnt);
		own_mnt_dir_created = false;
		own_mnt[0] = '\0';
		return err;
	}
	diag("no cgroup2 mount found, mounted cgroup2 at %s", own_mnt);
	snprintf(cg_mnt, sizeof(cg_mnt), "%s", own_mnt);

found:
	if (stat(cg_mnt, &st)) {
		err = -errno;
		snprintf(reason, len, "stat(%s): %s", cg_mnt, strerror(errno));
		return err;
	}
	cg_mnt_ino = st.st_ino;
	return 0;
}

/* Remove what we created, leaves first.  Async-signal-safe. */
static int remove_tree(int *first_errno, int *first_failed)
{
	int i, tries, failures = 0;

	for (i = NUM_NODES - 1; i >= 0; i--) {
		if (!nodes[i].created)
			continue;
		for (tries = 0; tries < 100; tries++) {
			if (!rmdir(nodes[i].path) || errno == ENOENT) {
				nodes[i].created = false;
				break;
			}
			if (errno != EBUSY)
				break;
			/* a just-reaped task can keep a cgroup busy briefly */
			usleep(20000);
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

static void release_mount(void)
{
	if (!own_mnt[0])
		return;
	umount2(own_mnt, MNT_DETACH);
	if (own_mnt_dir_created)
		rmdir(own_mnt);
	own_mnt[0] = '\0';
}

static void on_signal(int sig)
{
	pid_t pid = spinner_pid;

	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	(void)sig;
	remove_tree(NULL, NULL);
	release_mount();
	_exit(KSFT_FAIL);
}

static void remove_stale_tree(void)
{
	int i;

	for (i = NUM_NODES - 1; i >= 0; i--)
		rmdir(nodes[i].path);
}

static int create_tree(char *reason, size_t len)
{
	char base[PATH_MAX];
	struct statfs sfs;
	struct stat st;
	int i, retried = 0;

	if (snprintf(base, sizeof(base), "%s/cgroup_iter_rstat.%d", cg_mnt,
		     (int)getpid()) >= (int)sizeof(base))
		goto too_long;
	for (i = 0; i < NUM_NODES; i++) {
		if (snprintf(nodes[i].path, sizeof(nodes[i].path), "%s%s%s",
			     base, nodes[i].rel[0] ? "/" : "",
			     nodes[i].rel) >= (int)sizeof(nodes[i].path))
			goto too_long;
	}

retry:
	for (i = 0; i < NUM_NODES; i++) {
		if (mkdir(nodes[i].path, 0755)) {
			if (errno == EEXIST && i == 0 && !retried) {
				/* left over from an earlier run with our pid */
				remove_stale_tree();
				retried = 1;
				goto retry;
			}
			snprintf(reason, len, "mkdir(%s): %s", nodes[i].path,
				 strerror(errno));
			return -errno;
		}
		nodes[i].created = true;
		if (stat(nodes[i].path, &st)) {
			snprintf(reason, len, "stat(%s): %s", nodes[i].path,
				 strerror(errno));
			return -errno;
		}
		nodes[i].ino = st.st_ino;
	}
	if (statfs(nodes[N_ROOT].path, &sfs)) {
		snprintf(reason, len, "statfs(%s): %s", nodes[N_ROOT].path,
			 strerror(errno));
		return -errno;
	}
	if ((unsigned long)sfs.f_type != CGROUP2_SUPER_MAGIC) {
		snprintf(reason, len, "%s is not on cgroup2 (f_type 0x%lx)",
			 nodes[N_ROOT].path, (unsigned long)sfs.f_type);
		return -EINVAL;
	}
	return 0;

too_long:
	snprintf(reason, len, "cgroup path below %.200s too long", cg_mnt);
	return -ENAMETOOLONG;
}

static int node_by_id(unsigned long long id)
{
	int i;

	for (i = 0; i < NUM_NODES; i++)
		if (nodes[i].ino == id)
			return i;
	return -1;
}

static bool is_ancestor_or_self(int anc, int n)
{
	for (; n >= 0; n = nodes[n].parent)
		if (n == anc)
			return true;
	return false;
}

static int subtree_size(int n)
{
	int i, size = 0;

	for (i = 0; i < NUM_NODES; i++)
		if (is_ancestor_or_self(n, i))
			size++;
	return size;
}

/* ------------------------------------------------------------------ */
/* CPU time burner placed in a cgroup                                  */
/* ------------------------------------------------------------------ */

struct spin_result {
	int err;			/* 0 or errno of the failed step */
	unsigned long long ns;		/* CPU time burnt inside the cgroup */
};

static unsigned long long ts_ns(const struct timespec *ts)
{
	return (unsigned long long)ts->tv_sec * 1000000000ULL + ts->tv_nsec;
}

static int spin_in_cgroup(const char *cg_path, unsigned long long *ns,
			  char *reason, size_t len)
{
	struct spin_result res = { 0, 0 };
	int p[2], status;
	ssize_t n;
	pid_t pid;

	if (pipe(p)) {
		snprintf(reason, len, "pipe: %s", strerror(errno));
		return -errno;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		snprintf(reason, len, "fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (pid == 0) {
		struct timespec t0, t, w0, w;
		char procs[PATH_MAX + 16], pidbuf[32];
		volatile unsigned long sink = 0;
		int fd, k;

		close(p[0]);
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg_path);
		fd = open(procs, O_WRONLY | O_CLOEXEC);
		k = snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		if (fd < 0 || write(fd, pidbuf, k) != k) {
			res.err = errno ? errno : EIO;
			goto report;
		}
		close(fd);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		clock_gettime(CLOCK_MONOTONIC, &w0);
		do {
			for (k = 0; k < 100000; k++)
				sink += k;
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
			clock_gettime(CLOCK_MONOTONIC, &w);
		} while (ts_ns(&t) - ts_ns(&t0) < SPIN_NS &&
			 ts_ns(&w) - ts_ns(&w0) < 10000000000ULL);
		res.ns = ts_ns(&t) - ts_ns(&t0);
report:
		if (write(p[1], &res, sizeof(res)) != sizeof(res))
			_exit(2);
		_exit(0);
	}
	spinner_pid = pid;
	close(p[1]);
	do {
		n = read(p[0], &res, sizeof(res));
	} while (n < 0 && errno == EINTR);
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	spinner_pid = 0;
	if (n != sizeof(res)) {
		snprintf(reason, len, "CPU burner child died without reporting");
		return -EIO;
	}
	if (res.err) {
		snprintf(reason, len, "moving CPU burner into %s failed: %s",
			 cg_path, strerror(res.err));
		return -res.err;
	}
	*ns = res.ns;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Running the iterator                                                */
/* ------------------------------------------------------------------ */

#define MAX_RECS 64

struct rec {
	unsigned long long seq, id, cpu_ns;
	int level;
};

struct iter_out {
	int err;			/* <0: attach/create/read failed */
	char err_msg[256];
	char raw[16384];
	size_t raw_len;
	int nrec;
	struct rec recs[MAX_RECS];
	bool have_end;
	unsigned int end_visited, end_flushed;
	int bad_lines;			/* lines that did not parse */
	char first_bad[128];
	int lines_after_end;
	unsigned int bss_visited, bss_flushed;
};

static void parse_output(struct iter_out *o)
{
	char *line, *save = NULL;
	struct rec r;
	int used;

	for (line = strtok_r(o->raw, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		used = -1;
		if (sscanf(line, "cgroup seq=%llu id=%llu level=%d cpu_ns=%llu%n",
			   &r.seq, &r.id, &r.level, &r.cpu_ns, &used) == 4 &&
		    used == (int)strlen(line)) {
			if (o->have_end)
				o->lines_after_end++;
			if (o->nrec < MAX_RECS)
				o->recs[o->nrec] = r;
			o->nrec++;
			continue;
		}
		used = -1;
		if (sscanf(line, "end visited=%u flushed=%u%n",
			   &o->end_visited, &o->end_flushed, &used) == 2 &&
		    used == (int)strlen(line) && !o->have_end) {
			o->have_end = true;
			continue;
		}
		if (!o->bad_lines)
			snprintf(o->first_bad, sizeof(o->first_bad), "%s", line);
		o->bad_lines++;
	}
}

static void run_iter(struct cgroup_iter_rstat_bpf *skel, int cg_fd,
		     enum bpf_cgroup_iter_order order, struct iter_out *o)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;
	struct bpf_link *link;
	int iter_fd;
	ssize_t n;

	memset(o, 0, sizeof(*o));
	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cg_fd;
	linfo.cgroup.order = order;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);

	skel->bss->visited = 0;
	skel->bss->flushed = 0;

	libbpf_log_reset();
	link = bpf_program__attach_iter(skel->progs.cgroup_rstat_dump, &opts);
	if (!link) {
		o->err = errno ? -errno : -EINVAL;
		snprintf(o->err_msg, sizeof(o->err_msg),
			 "bpf_program__attach_iter(order=%d): %s", order,
			 strerror(-o->err));
		return;
	}
	iter_fd = bpf_iter_create(bpf_link__fd(link));
	if (iter_fd < 0) {
		o->err = errno ? -errno : -EINVAL;
		snprintf(o->err_msg, sizeof(o->err_msg), "bpf_iter_create: %s",
			 strerror(-o->err));
		bpf_link__destroy(link);
		return;
	}
	for (;;) {
		if (o->raw_len >= sizeof(o->raw) - 1) {
			o->err = -E2BIG;
			snprintf(o->err_msg, sizeof(o->err_msg),
				 "iterator output exceeds %zu bytes",
				 sizeof(o->raw) - 1);
			break;
		}
		n = read(iter_fd, o->raw + o->raw_len,
			 sizeof(o->raw) - 1 - o->raw_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			o->err = -errno;
			snprintf(o->err_msg, sizeof(o->err_msg),
				 "read(iter_fd): %s", strerror(errno));
			break;
		}
		if (n == 0)
			break;
		o->raw_len += n;
	}
	o->raw[o->raw_len] = '\0';
	close(iter_fd);
	bpf_link__destroy(link);

	o->bss_visited = skel->bss->visited;
	o->bss_flushed = skel->bss->flushed;

	if (!o->err) {
		char copy[sizeof(o->raw)];

		/* parse a copy: keep raw intact for diagnostics */
		memcpy(copy, o->raw, o->raw_len + 1);
		parse_output(o);
		memcpy(o->raw, copy, o->raw_len + 1);
	}
}

static void diag_iter_output(const char *what, const struct iter_out *o)
{
	diag("%s iterator output (%zu bytes):", what, o->raw_len);
	diag_block("  | ", o->raw);
}

static const char *node_name(int n)
{
	return n < 0 ? "?" : (n == N_ROOT ? "<root>" : nodes[n].rel);
}

/* ------------------------------------------------------------------ */
/* Checks                                                              */
/* ------------------------------------------------------------------ */

/* ANCESTORS_UP from the test root: the kernel walks css->parent, so the
 * number of cgroups visited gives the root's level independently of the
 * cgroup->level field.  Returns that level or -1.
 */
static int check_ancestors(struct cgroup_iter_rstat_bpf *skel, int root_fd)
{
	struct iter_out *o = calloc(1, sizeof(*o));
	bool ok = true;
	int i, n, level = -1;

	if (!o) {
		diag("out of memory");
		report(T_ANCESTORS, false);
		return -1;
	}
	run_iter(skel, root_fd, BPF_CGROUP_ITER_ANCESTORS_UP, o);
	if (o->err) {
		diag("%s", o->err_msg);
		if (libbpf_log_len)
			diag_block("", libbpf_log);
		report(T_ANCESTORS, false);
		free(o);
		return -1;
	}
	n = o->nrec;
	if (n > MAX_RECS || o->bad_lines || !o->have_end) {
		diag("malformed output: %d records, %d bad lines (first: '%s'), epilogue %s",
		     n, o->bad_lines, o->first_bad, o->have_end ? "present" : "missing");
		ok = false;
	} else if (n < 2) {
		diag("expected at least 2 cgroups (test root and its parent), got %d", n);
		ok = false;
	} else {
		bool ids_ok = true;

		if (o->recs[0].id != nodes[N_ROOT].ino) {
			diag("first ancestor: expected id %llu (test root %s), got %llu",
			     nodes[N_ROOT].ino, nodes[N_ROOT].path, o->recs[0].id);
			ids_ok = false;
		}
		if (o->recs[1].id != cg_mnt_ino) {
			diag("second ancestor: expected id %llu (mount point %s), got %llu",
			     cg_mnt_ino, cg_mnt, o->recs[1].id);
			ids_ok = false;
		}
		/* the walk length does not depend on the level field */
		if (ids_ok)
			level = n - 1;
		else
			ok = false;
		for (i = 0; i < n; i++) {
			if (o->recs[i].level != n - 1 - i) {
				diag("ancestor #%d (id %llu): expected level %d, got %d",
				     i, o->recs[i].id, n - 1 - i, o->recs[i].level);
				ok = false;
			}
		}
	}
	if (!ok)
		diag_iter_output("ANCESTORS_UP", o);
	if (level >= 0)
		diag("test root %s: id %llu, level %d (walk from it to the hierarchy root visited %d cgroups)",
		     nodes[N_ROOT].path, nodes[N_ROOT].ino, level, n);
	report(T_ANCESTORS, ok);
	free(o);
	return level;
}

static void check_pre_order(struct cgroup_iter_rstat_bpf *skel, int root_fd,
			    int anc_level, int spin_err, const char *spin_msg,
			    unsigned long long spin_ns)
{
	struct iter_out *o = calloc(1, sizeof(*o));
	int pos[NUM_NODES], rec_node[MAX_RECS];
	unsigned long long cpu[NUM_NODES];
	bool ok;
	int i, j, n, base;

	if (!o) {
		diag("out of memory");
		report(T_PRE_READ, false);
		for (i = T_PRE_IDS; i <= T_FLUSH_CPUTIME; i++)
			report_skip(i, "pre-order iteration failed");
		return;
	}
	run_iter(skel, root_fd, BPF_CGROUP_ITER_DESCENDANTS_PRE, o);

	/* T_PRE_READ: iteration ran and every line is well formed */
	if (o->err) {
		diag("%s", o->err_msg);
		if (libbpf_log_len)
			diag_block("", libbpf_log);
		report(T_PRE_READ, false);
		for (i = T_PRE_IDS; i <= T_FLUSH_CPUTIME; i++)
			report_skip(i, "pre-order iteration failed");
		free(o);
		return;
	}
	ok = true;
	if (o->nrec > MAX_RECS) {
		diag("expected %d cgroup lines, got %d (more than %d)",
		     NUM_NODES, o->nrec, MAX_RECS);
		ok = false;
	}
	if (o->nrec == 0) {
		diag("expected %d cgroup lines, got none", NUM_NODES);
		ok = false;
	}
	if (o->bad_lines) {
		diag("%d malformed line(s); first: '%s'", o->bad_lines, o->first_bad);
		ok = false;
	}
	if (!o->have_end) {
		diag("epilogue line ('end visited=...') missing: the NULL-cgroup call did not happen");
		ok = false;
	}
	if (o->lines_after_end) {
		diag("%d cgroup line(s) after the epilogue", o->lines_after_end);
		ok = false;
	}
	n = o->nrec > MAX_RECS ? MAX_RECS : o->nrec;
	for (i = 0; i < n; i++) {
		if (o->recs[i].seq != (unsigned long long)i) {
			diag("line %d: expected seq=%d, got seq=%llu", i, i,
			     o->recs[i].seq);
			ok = false;
		}
	}
	/* always show what the kernel produced: it is short and the
	 * remaining checks all derive from it */
	diag_iter_output("DESCENDANTS_PRE", o);
	report(T_PRE_READ, ok);

	/* map records to nodes */
	for (i = 0; i < NUM_NODES; i++)
		pos[i] = -1;
	for (i = 0; i < n; i++)
		rec_node[i] = node_by_id(o->recs[i].id);

	/* T_PRE_IDS: set of ids == set of created directories' inodes */
	ok = true;
	for (i = 0; i < n; i++) {
		int nd = rec_node[i];

		if (nd < 0) {
			diag("line %d: id %llu is not one of the created cgroups",
			     i, o->recs[i].id);
			ok = false;
		} else if (pos[nd] >= 0) {
			diag("line %d: id %llu (%s) already reported on line %d",
			     i, o->recs[i].id, node_name(nd), pos[nd]);
			ok = false;
		} else {
			pos[nd] = i;
		}
	}
	for (i = 0; i < NUM_NODES; i++) {
		if (pos[i] < 0) {
			diag("cgroup %s (st_ino %llu) missing from iterator output",
			     nodes[i].path, nodes[i].ino);
			ok = false;
		}
	}
	if (!ok) {
		diag("expected %d ids, got %d lines", NUM_NODES, o->nrec);
		for (i = 0; i < NUM_NODES; i++)
			diag("  expected: %-6s st_ino %llu", node_name(i), nodes[i].ino);
	}
	report(T_PRE_IDS, ok);

	/* T_PRE_LEVELS: level == root level + depth */
	ok = true;
	if (pos[N_ROOT] < 0) {
		diag("test root not reported; cannot check levels");
		ok = false;
		base = -1;
	} else if (anc_level >= 0) {
		base = anc_level;
		if (o->recs[pos[N_ROOT]].level != base) {
			diag("test root: expected level %d (from ANCESTORS_UP walk), got %d",
			     base, o->recs[pos[N_ROOT]].level);
			ok = false;
		}
	} else {
		base = o->recs[pos[N_ROOT]].level;
		diag("root level unknown (ANCESTORS_UP walk failed); checking relative to the reported root level %d",
		     base);
	}
	if (base >= 0) {
		for (i = 0; i < NUM_NODES; i++) {
			if (pos[i] < 0 || i == N_ROOT)
				continue;
			if (o->recs[pos[i]].level != base + nodes[i].depth) {
				diag("%s: expected level %d (root %d + depth %d), got %d",
				     node_name(i), base + nodes[i].depth, base,
				     nodes[i].depth, o->recs[pos[i]].level);
				ok = false;
			}
		}
	}
	report(T_PRE_LEVELS, ok);

	/* T_PRE_ORDER: root first, parent before child, subtrees contiguous */
	ok = true;
	for (i = 0; i < NUM_NODES; i++) {
		if (pos[i] < 0) {
			diag("%s missing; cannot fully check order", node_name(i));
			ok = false;
		}
	}
	if (ok) {
		if (pos[N_ROOT] != 0) {
			diag("test root: expected at position 0, got %d", pos[N_ROOT]);
			ok = false;
		}
		for (i = 0; i < NUM_NODES; i++) {
			int par = nodes[i].parent;

			if (par >= 0 && pos[par] >= pos[i]) {
				diag("%s at position %d, but its parent %s at position %d (expected parent first)",
				     node_name(i), pos[i], node_name(par), pos[par]);
				ok = false;
			}
		}
		/* pre-order: a node's subtree occupies the positions right after it */
		for (i = 0; i < NUM_NODES; i++) {
			int sz = subtree_size(i);

			for (j = pos[i]; j < pos[i] + sz && j < n; j++) {
				if (rec_node[j] < 0 || !is_ancestor_or_self(i, rec_node[j])) {
					diag("position %d: expected a member of %s's subtree (positions %d..%d), got %s",
					     j, node_name(i), pos[i], pos[i] + sz - 1,
					     node_name(rec_node[j]));
					ok = false;
				}
			}
		}
	}
	if (!ok) {
		for (i = 0; i < n; i++)
			diag("  position %d: %s", i, node_name(rec_node[i]));
	}
	report(T_PRE_ORDER, ok);

	/* T_FLUSH_COUNT: the program got past the kfunc call for every cgroup */
	ok = true;
	if (o->bss_flushed != (unsigned int)o->nrec ||
	    o->bss_visited != (unsigned int)o->nrec) {
		diag("BPF counters: expected flushed=%d visited=%d, got flushed=%u visited=%u",
		     o->nrec, o->nrec, o->bss_flushed, o->bss_visited);
		ok = false;
	}
	if (!o->have_end) {
		diag("epilogue missing");
		ok = false;
	} else if (o->end_flushed != (unsigned int)o->nrec ||
		   o->end_visited != (unsigned int)o->nrec) {
		diag("epilogue: expected flushed=%d visited=%d, got flushed=%u visited=%u",
		     o->nrec, o->nrec, o->end_flushed, o->end_visited);
		ok = false;
	}
	if (o->nrec != NUM_NODES) {
		diag("expected %d cgroups flushed, got %d", NUM_NODES, o->nrec);
		ok = false;
	}
	report(T_FLUSH_COUNT, ok);

	/*
	 * T_FLUSH_CPUTIME: a child burnt spin_ns of CPU inside a1 and exited
	 * before the walk.  After cgroup_rstat_flush() the flushed base stat
	 * of a1 must include it, and it must have propagated to a and the root.
	 */
	ok = true;
	if (spin_err) {
		diag("%s", spin_msg);
		ok = false;
	} else {
		for (i = 0; i < NUM_NODES; i++) {
			if (pos[i] < 0) {
				diag("%s missing from output", node_name(i));
				ok = false;
				continue;
			}
			cpu[i] = o->recs[pos[i]].cpu_ns;
		}
		if (ok) {
			if (cpu[N_A1] < spin_ns) {
				diag("a/a1: expected flushed sum_exec_runtime >= %llu ns (burnt there), got %llu",
				     spin_ns, cpu[N_A1]);
				ok = false;
			}
			if (cpu[N_A] < cpu[N_A1] + cpu[N_A2]) {
				diag("a: expected >= a1 + a2 = %llu ns, got %llu",
				     cpu[N_A1] + cpu[N_A2], cpu[N_A]);
				ok = false;
			}
			if (cpu[N_B] < cpu[N_B1]) {
				diag("b: expected >= b1 = %llu ns, got %llu",
				     cpu[N_B1], cpu[N_B]);
				ok = false;
			}
			if (cpu[N_ROOT] < cpu[N_A] + cpu[N_B]) {
				diag("root: expected >= a + b = %llu ns, got %llu",
				     cpu[N_A] + cpu[N_B], cpu[N_ROOT]);
				ok = false;
			}
			diag("flushed cpu_ns: root=%llu a=%llu a1=%llu a2=%llu b=%llu b1=%llu (burnt in a1: %llu)",
			     cpu[N_ROOT], cpu[N_A], cpu[N_A1], cpu[N_A2],
			     cpu[N_B], cpu[N_B1], spin_ns);
		}
	}
	report(T_FLUSH_CPUTIME, ok);

	free(o);
}

static void check_self_only(struct cgroup_iter_rstat_bpf *skel, int base_level)
{
	struct iter_out *o;
	const struct node *leaf = &nodes[N_A2];
	bool ok = true;
	int fd;

	fd = open(leaf->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		diag("open(%s): %s", leaf->path, strerror(errno));
		report(T_SELF_ONLY, false);
		return;
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		close(fd);
		diag("out of memory");
		report(T_SELF_ONLY, false);
		return;
	}
	run_iter(skel, fd, BPF_CGROUP_ITER_SELF_ONLY, o);
	close(fd);
	if (o->err) {
		diag("%s", o->err_msg);
		if (libbpf_log_len)
			diag_block("", libbpf_log);
		report(T_SELF_ONLY, false);
		free(o);
		return;
	}
	if (o->nrec != 1 || o->bad_lines || !o->have_end) {
		diag("expected exactly 1 cgroup line + epilogue, got %d lines, %d bad, epilogue %s",
		     o->nrec, o->bad_lines, o->have_end ? "present" : "missing");
		ok = false;
	}
	if (o->nrec >= 1) {
		if (o->recs[0].id != leaf->ino) {
			diag("expected id %llu (%s), got %llu (%s)", leaf->ino,
			     leaf->path, o->recs[0].id,
			     node_name(node_by_id(o->recs[0].id)));
			ok = false;
		}
		if (base_level >= 0 && o->recs[0].level != base_level + leaf->depth) {
			diag("expected level %d, got %d", base_level + leaf->depth,
			     o->recs[0].level);
			ok = false;
		}
	}
	if (o->bss_flushed != 1 || o->bss_visited != 1) {
		diag("BPF counters: expected flushed=1 visited=1, got flushed=%u visited=%u",
		     o->bss_flushed, o->bss_visited);
		ok = false;
	}
	if (!ok)
		diag_iter_output("SELF_ONLY", o);
	report(T_SELF_ONLY, ok);
	free(o);
}

/*
 * Verifier log lines that are the verifier's own words: skip the echoed
 * BPF source (";"-prefixed, may contain anything, e.g. comments) and the
 * instruction / register-state dumps (digit-prefixed).
 */
static bool is_verifier_message(const char *line)
{
	return line[0] && line[0] != ';' && !(line[0] >= '0' && line[0] <= '9');
}

/* Count (and optionally print) verifier messages in @log containing @needle. */
static int verifier_lines_matching(const char *log, const char *needle,
				   const char *print_prefix)
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
			if (print_prefix)
				diag("%s%s", print_prefix, line);
		}
		p = nl ? nl + 1 : NULL;
	}
	return matches;
}

static void check_negative(void)
{
	static char vlog[65536];
	struct cgroup_iter_rstat_sleep_neg_bpf *skel;
	LIBBPF_OPTS(bpf_object_open_opts, oopts,
		.kernel_log_buf = vlog,
		.kernel_log_size = sizeof(vlog),
		.kernel_log_level = 0,	/* libbpf retries with level 1 on failure */
	);
	char reason[512];
	int err;

	vlog[0] = '\0';
	libbpf_log_reset();
	skel = cgroup_iter_rstat_sleep_neg_bpf__open_opts(&oopts);
	if (!skel) {
		diag("opening the embedded negative object failed: %s", strerror(errno));
		diag_block("", libbpf_log);
		report(T_NEG, false);
		return;
	}
	err = cgroup_iter_rstat_sleep_neg_bpf__load(skel);
	cgroup_iter_rstat_sleep_neg_bpf__destroy(skel);

	if (!err) {
		diag("non-sleepable iter/cgroup program calling %s loaded successfully; expected the verifier to reject it",
		     KFUNC_NAME);
		report(T_NEG, false);
		return;
	}
	if (!vlog[0] && load_failure_is_missing_feature(err, reason, sizeof(reason))) {
		diag_block("", libbpf_log);
		report_skip(T_NEG, "%s", reason);
		return;
	}
	if (!vlog[0]) {
		diag("load failed (%d: %s) but no verifier log was produced; expected a verifier rejection",
		     err, strerror(-err));
		diag_block("", libbpf_log);
		report(T_NEG, false);
		return;
	}
	if (!verifier_lines_matching(vlog, "sleep", NULL)) {
		diag("load failed (%d: %s) but no verifier message mentions 'sleep'; full log:",
		     err, strerror(-err));
		diag_block("verifier: ", vlog);
		report(T_NEG, false);
		return;
	}
	diag("load refused as expected (%d: %s); verifier said:", err, strerror(-err));
	verifier_lines_matching(vlog, "sleep", "verifier: ");
	report(T_NEG, true);
}

/* ------------------------------------------------------------------ */

int main(void)
{
	struct cgroup_iter_rstat_bpf *skel = NULL;
	char reason[2 * PATH_MAX], spin_msg[2 * PATH_MAX] = "";
	unsigned long long spin_ns = 0;
	int err, i, root_fd = -1, anc_level = -1, spin_err = 0;
	bool skip, tree_ready = false, setup_attempted = false;
	struct sigaction sa;

	out_line("TAP version 13");
	out_line("1..%d", NUM_TESTS);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);

	libbpf_set_print(libbpf_capture);

	if (geteuid() != 0)
		diag("not running as root (euid %d); expect permission failures",
		     (int)geteuid());

	/* 1. the sleepable iterator with the kfunc call must load */
	libbpf_log_reset();
	skel = cgroup_iter_rstat_bpf__open();
	if (!skel) {
		err = errno ? -errno : -EINVAL;
		diag("opening the embedded iterator object failed: %s", strerror(-err));
		diag_block("", libbpf_log);
		report(T_LOAD, false);
	} else if ((err = cgroup_iter_rstat_bpf__load(skel))) {
		if (load_failure_is_missing_feature(err, reason, sizeof(reason))) {
			diag_block("", libbpf_log);
			report_skip(T_LOAD, "%s", reason);
		} else {
			diag("loading sleepable iter.s/cgroup program failed: %d (%s)",
			     err, strerror(-err));
			diag_block("", libbpf_log);
			report(T_LOAD, false);
		}
		cgroup_iter_rstat_bpf__destroy(skel);
		skel = NULL;
	} else {
		report(T_LOAD, true);
	}

	/* 2. cgroup tree (only worth building if there is something to run) */
	if (!skel) {
		report_skip(T_SETUP, "sleepable cgroup iterator not loaded");
	} else {
		setup_attempted = true;
		err = setup_cgroup2_mount(reason, sizeof(reason), &skip);
		if (err) {
			if (skip) {
				report_skip(T_SETUP, "%s", reason);
			} else {
				diag("%s", reason);
				report(T_SETUP, false);
			}
		} else if ((err = create_tree(reason, sizeof(reason)))) {
			diag("%s", reason);
			report(T_SETUP, false);
		} else {
			root_fd = open(nodes[N_ROOT].path,
				       O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (root_fd < 0) {
				diag("open(%s): %s", nodes[N_ROOT].path,
				     strerror(errno));
				report(T_SETUP, false);
			} else {
				diag("cgroup2 at %s (id %llu); tree root %s",
				     cg_mnt, cg_mnt_ino, nodes[N_ROOT].path);
				for (i = 0; i < NUM_NODES; i++)
					diag("  %-6s depth %d st_ino %llu",
					     node_name(i), nodes[i].depth, nodes[i].ino);
				tree_ready = true;
				report(T_SETUP, true);
			}
		}
	}

	if (tree_ready) {
		anc_level = check_ancestors(skel, root_fd);

		spin_err = spin_in_cgroup(nodes[N_A1].path, &spin_ns, spin_msg,
					  sizeof(spin_msg));
		check_pre_order(skel, root_fd, anc_level, spin_err, spin_msg,
				spin_ns);
		check_self_only(skel, anc_level);
	} else {
		const char *why = skel ? "cgroup tree not available"
				       : "sleepable cgroup iterator not loaded";

		for (i = T_ANCESTORS; i <= T_SELF_ONLY; i++)
			report_skip(i, "%s", why);
	}

	/* 11. negative: non-sleepable program calling the kfunc */
	check_negative();

	/* 12. cleanup */
	if (root_fd >= 0)
		close(root_fd);
	cgroup_iter_rstat_bpf__destroy(skel);
	skel = NULL;
	if (!setup_attempted) {
		report_skip(T_CLEANUP, "no cgroups were created");
	} else {
		int first_errno = 0, first_failed = -1, failures;
		bool any_created = false;

		for (i = 0; i < NUM_NODES; i++)
			any_created |= nodes[i].created;
		failures = remove_tree(&first_errno, &first_failed);
		release_mount();
		if (!any_created && !tree_ready) {
			report_skip(T_CLEANUP, "no cgroups were created");
		} else if (failures) {
			diag("%d cgroup(s) could not be removed; first: rmdir(%s): %s",
			     failures, nodes[first_failed].path,
			     strerror(first_errno));
			report(T_CLEANUP, false);
		} else {
			struct stat st;

			if (!stat(nodes[N_ROOT].path, &st)) {
				diag("%s still exists after rmdir", nodes[N_ROOT].path);
				report(T_CLEANUP, false);
			} else {
				report(T_CLEANUP, true);
			}
		}
	}

	while (next_test < NUM_TESTS) {
		out_line("not ok %d %s # internal error: not run",
			 next_test + 1, test_names[next_test]);
		n_fail++;
		next_test++;
	}
	btf__free(vmlinux_btf);

	out_line("# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0",
		 n_pass, n_fail, n_skip);
	if (n_fail)
		return KSFT_FAIL;
	if (!n_pass && n_skip)
		return KSFT_SKIP;
	return KSFT_PASS;
}
