// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs_bench: what does it cost a monitoring agent to collect the
 * memory statistics of 1, 100, 1000 cgroups through memory.stat, and what
 * through a sleepable cgroup iterator calling the memcg kfuncs
 * (patches/memcg-kfuncs)?  Measured side by side in one run, same fields,
 * same cgroups:
 *
 *   memstat_read   memory.stat, each file opened once, pread(fd, buf, 0)
 *                  per cgroup per round; no parsing (the floor of the
 *                  text interface)
 *   memstat_parse  the same plus parsing the 8 fields an agent uses (anon,
 *                  file, kernel, shmem, file_mapped, workingset_refault_anon,
 *                  pgfault, pgmajfault); --parser fast (default): split
 *                  lines with memchr, compare keys, strtoll -- what a
 *                  careful agent does; --parser sscanf: sscanf("%s %lld")
 *                  per line, the naive way
 *   iter_self      one SELF_ONLY iter.s/cgroup link per cgroup, created
 *                  once (like opening memory.stat once); per cgroup per
 *                  round bpf_iter_create() + one read() of an 80-byte
 *                  binary record + close().  A new fd per walk is how the
 *                  iterator API works, so its cost is counted.
 *   iter_tree      one DESCENDANTS_PRE link over the cgroups' parent; per
 *                  round one bpf_iter_create() + read() walks all of them;
 *                  the program skips the parent itself (no flush, no
 *                  fetch), so it flushes and fetches exactly the same
 *                  cgroups as the other methods; the records go to a global
 *                  array (mmapped .bss) that userspace copies out after the
 *                  walk (the copy is timed), because a cgroup iterator
 *                  cannot continue a walk in a second read() and 1000
 *                  records do not fit its 32 KiB seq buffer.
 *
 * All four do per cgroup the same kernel-side flush: memory.stat calls
 * mem_cgroup_flush_stats() on the cgroup's memcg, the program calls
 * bpf_memcg_flush_stats(), which is that function.  The cgroups are quiet
 * while measured, so that flush is the rate-limited no-op it is on a quiet
 * production system too.
 *
 * --reads N is the number of reads per cgroup count: with C cgroups a
 * round reads each cgroup once, and there are max(1, N / C) rounds, so
 * every configuration performs about N reads per method (a "read" is one
 * cgroup's statistics).
 *
 * The cgroups carry known memory: cgroup i gets a tmpfs file of
 * 1 + i % 8 pages (shmem), charged by a short-lived process cloned into it
 * (CLONE_INTO_CGROUP) that also faults in 4 + i % 5 anonymous pages; the
 * first cgroup also keeps a live process with 1 MiB of anon memory and the
 * file mapped.  Before measuring, one sample of every method is compared
 * for every cgroup and field (tolerance below), and memory.stat's and the
 * iterator's shmem must equal the charged size exactly -- an iterator that
 * returns nothing, zeros or another cgroup's numbers fails the test.
 * During the timed loops every iterator read must deliver its record(s)
 * with the right cgroup id and a successful flush, every memory.stat parse
 * all 8 fields.
 *
 * Tolerance for the agreement: exact is expected (nothing changes in the
 * cgroups).  Allowed is what a flush landing between the two samples can
 * fold in: 2 * MEMCG_CHARGE_BATCH (64) * online CPUs updates, i.e. that
 * many pages (bytes for sizes) or events; see selftests/memcg_kfuncs.
 *
 * KTAP: 1 load_bench_iter, then per cgroup count C: setup_cgC,
 * methods_agree_cgC, measure_cgC (loops complete with valid data, ratios
 * computed); last cleanup.  '# ' lines carry the table.  With
 * HARNESS_METRICS set, a JSON object of the measurements is written there.
 *
 * Exit 0: all passed, 1: a check failed, 4: skipped (no kfuncs).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
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
#include "memcg_kfuncs_bench.h"
#include "memcg_kfuncs_bench.skel.h"


#define MEMCG_CHARGE_BATCH 64
#define MAX_CONFIGS 8
#define MEMSTAT_BUF 16384
#define HOLDER_ANON (1024 * 1024)

static const char *const field_key[NR_BFIELDS] = {
	[B_ANON] = "anon",
	[B_FILE] = "file",
	[B_KERNEL] = "kernel",
	[B_SHMEM] = "shmem",
	[B_FILE_MAPPED] = "file_mapped",
	[B_WS_REFAULT_ANON] = "workingset_refault_anon",
	[B_PGFAULT] = "pgfault",
	[B_PGMAJFAULT] = "pgmajfault",
};
static size_t field_klen[NR_BFIELDS];
static const bool field_is_count[NR_BFIELDS] = {
	[B_WS_REFAULT_ANON] = true, [B_PGFAULT] = true, [B_PGMAJFAULT] = true,
};

enum method { M_READ, M_PARSE, M_ITER_SELF, M_ITER_TREE, M_SYSCALL, NR_METHODS };
static const char *const method_name[NR_METHODS] = {
	"memstat_read", "memstat_parse", "iter_self", "iter_tree", "syscall_run",
};
static const char *const method_desc[NR_METHODS] = {
	"memory.stat pread, no parsing",
	"memory.stat pread + parse 8 fields",
	"iter.s/cgroup, SELF_ONLY link per cgroup",
	"iter.s/cgroup, one DESCENDANTS_PRE link",
	"syscall program, one BPF_PROG_RUN per read",
};
/* why the syscall method cannot run here ("" when it can) */
static char syscall_skip[160];

/* ------------------------------------------------------------------ */
/* KTAP                                                                */
/* ------------------------------------------------------------------ */

static int n_tests, next_test, n_pass, n_fail, n_skip;

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

static void report(const char *name, bool ok)
{
	next_test++;
	out_line("%s %d %s", ok ? "ok" : "not ok", next_test, name);
	if (ok)
		n_pass++;
	else
		n_fail++;
}

static void report_skip(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void report_skip(const char *name, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	next_test++;
	out_line("ok %d %s # SKIP %s", next_test, name, reason);
	n_skip++;
}

static char libbpf_log[16384];
static size_t libbpf_log_len;

static int libbpf_capture(enum libbpf_print_level level, const char *fmt, va_list args)
{
	int n;

	if (level == LIBBPF_DEBUG)
		return 0;
	if (libbpf_log_len >= sizeof(libbpf_log) - 1)
		return 0;
	n = vsnprintf(libbpf_log + libbpf_log_len, sizeof(libbpf_log) - libbpf_log_len,
		      fmt, args);
	if (n > 0) {
		libbpf_log_len += n;
		if (libbpf_log_len > sizeof(libbpf_log) - 1)
			libbpf_log_len = sizeof(libbpf_log) - 1;
	}
	return 0;
}

static bool kernel_has_kfuncs(char *reason, size_t len)
{
	static const char *const need[] = {
		"bpf_iter_cgroup", "bpf_get_mem_cgroup", "bpf_put_mem_cgroup",
		"bpf_mem_cgroup_flush_stats", "bpf_mem_cgroup_page_state",
		"bpf_mem_cgroup_vm_events",
	};
	struct btf *btf;
	size_t i;

	errno = 0;
	btf = btf__load_vmlinux_btf();
	if (!btf) {
		snprintf(reason, len, "kernel BTF not readable (%s)", strerror(errno ? errno : ENOENT));
		return false;
	}
	for (i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		if (btf__find_by_name_kind(btf, need[i], BTF_KIND_FUNC) < 0) {
			snprintf(reason, len, "kernel has no %s (not in vmlinux BTF)%s", need[i],
				 i ? ": memcg-kfuncs series not applied" : "");
			btf__free(btf);
			return false;
		}
	}
	/* the syscall method finds its cgroup by id: bpf_cgroup_from_id() is 6.2+ */
	if (btf__find_by_name_kind(btf, "bpf_cgroup_from_id", BTF_KIND_FUNC) < 0)
		snprintf(syscall_skip, sizeof(syscall_skip),
			 "the kernel has no bpf_cgroup_from_id() (6.2+) to find a cgroup by id");
	btf__free(btf);
	return true;
}

/* ------------------------------------------------------------------ */
/* State (file-scope so the signal handler can clean up)               */
/* ------------------------------------------------------------------ */

typedef char path_t[256];

static char cg_mnt[PATH_MAX];
static bool root_memory_enabled_by_us;
static path_t top_path;			/* <cgroup2>/memcg_kfuncs_bench.<pid> */
static bool top_created;
static char tmpfs_dir[PATH_MAX];
static bool tmpfs_mounted;

/* the current configuration */
static path_t parent_path;		/* top/cg<C> */
static bool parent_created;
static int ncg;				/* cgroups in this configuration */
static path_t *cg_path;			/* [ncg] */
static bool *cg_created;
static path_t *file_path;		/* [ncg] tmpfs file charged to cgroup i */
static bool *file_created;
static volatile pid_t holder_pid;

static long page_size;
static long long tol_units;

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

static bool word_in_file(const char *path, const char *word)
{
	char buf[512];
	size_t l = strlen(word);
	ssize_t n;
	char *p;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	for (p = buf; (p = strstr(p, word)); p += l)
		if ((p == buf || p[-1] == ' ') && (p[l] == ' ' || p[l] == '\n' || !p[l]))
			return true;
	return false;
}

static int rmdir_retry(const char *path)
{
	int tries;

	for (tries = 0; tries < 100; tries++) {
		if (!rmdir(path) || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			return -errno;
		usleep(20000);
	}
	return -EBUSY;
}

/* Async-signal-safe teardown of the current configuration. */
static int teardown_config(void)
{
	pid_t pid = holder_pid;
	int i, failures = 0;

	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		holder_pid = 0;
	}
	for (i = 0; i < ncg; i++) {
		if (file_created && file_created[i] && !unlink(file_path[i]))
			file_created[i] = false;
	}
	for (i = ncg - 1; i >= 0; i--) {
		if (cg_created && cg_created[i]) {
			if (rmdir_retry(cg_path[i]))
				failures++;
			else
				cg_created[i] = false;
		}
	}
	if (parent_created) {
		if (rmdir_retry(parent_path))
			failures++;
		else
			parent_created = false;
	}
	return failures;
}

static int teardown_all(void)
{
	int failures = teardown_config();

	if (top_created) {
		if (rmdir_retry(top_path))
			failures++;
		else
			top_created = false;
	}
	if (tmpfs_mounted) {
		umount2(tmpfs_dir, MNT_DETACH);
		tmpfs_mounted = false;
	}
	if (tmpfs_dir[0]) {
		rmdir(tmpfs_dir);
		tmpfs_dir[0] = '\0';
	}
	return failures;
}

static void on_signal(int sig)
{
	(void)sig;
	teardown_all();
	_exit(KSFT_FAIL);
}

/* ------------------------------------------------------------------ */
/* Charging the cgroups                                                */
/* ------------------------------------------------------------------ */

struct mb_clone_args {
	__u64 flags, pidfd, child_tid, parent_tid, exit_signal, stack,
	      stack_size, tls, set_tid, set_tid_size, cgroup;
};
#define MB_CLONE_INTO_CGROUP 0x200000000ULL

static char page_buf[8 * 4096 * 2];	/* written, never modified by children */
static bool clone3_works = true;

static int file_pages(int i) { return 1 + i % 8; }
static int anon_pages(int i) { return 4 + i % 5; }

/* Runs in the child, inside cgroup i: charge, then exit (or hold). */
static void charge_child(int i, bool hold, int ready_fd)
{
	long long bytes = (long long)file_pages(i) * page_size;
	char *p, c = 1;
	long j;
	int fd;

	if (bytes > (long long)sizeof(page_buf))
		_exit(9);
	fd = open(file_path[i], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, page_buf, bytes) != bytes)
		_exit(10);
	p = mmap(NULL, anon_pages(i) * page_size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		_exit(11);
	for (j = 0; j < anon_pages(i); j++)
		p[j * page_size] = 1;
	munmap(p, anon_pages(i) * page_size);
	if (!hold)
		_exit(0);

	/* the holder: anon memory and the file mapped, kept */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	p = mmap(NULL, HOLDER_ANON, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		_exit(12);
	for (j = 0; j < HOLDER_ANON; j += page_size)
		p[j] = 1;
	p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		_exit(13);
	for (j = 0; j < bytes; j += page_size)
		c += ((volatile char *)p)[j];
	if (write(ready_fd, &c, 1) != 1)
		_exit(14);
	for (;;)
		pause();
}

static pid_t spawn_in(int i, bool hold, int ready_fd, char *reason, size_t len)
{
	char pidstr[32];
	pid_t pid = -1;
	int cgfd, k;

	cgfd = open(cg_path[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		snprintf(reason, len, "open(%s): %s", cg_path[i], strerror(errno));
		return -1;
	}
	if (clone3_works) {
		struct mb_clone_args args = {
			.flags = MB_CLONE_INTO_CGROUP,
			.exit_signal = SIGCHLD,
			.cgroup = (__u64)cgfd,
		};

		pid = syscall(SYS_clone3, &args, sizeof(args));
		if (pid == 0)
			charge_child(i, hold, ready_fd);	/* no return */
		if (pid < 0) {
			diag("clone3(CLONE_INTO_CGROUP): %s; falling back to fork + cgroup.procs",
			     strerror(errno));
			clone3_works = false;
		}
	}
	close(cgfd);
	if (pid > 0)
		return pid;

	pid = fork();
	if (pid == 0) {
		char procs[sizeof(path_t) + 16];

		snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg_path[i]);
		k = snprintf(pidstr, sizeof(pidstr), "%d", (int)getpid());
		if (write_file(procs, pidstr))
			_exit(20);
		charge_child(i, hold, ready_fd);
	}
	if (pid < 0)
		snprintf(reason, len, "fork: %s", strerror(errno));
	(void)k;
	return pid;
}

/* ------------------------------------------------------------------ */
/* memory.stat parsing                                                 */
/* ------------------------------------------------------------------ */

static bool parser_sscanf;

/* What a careful agent does: split lines, match keys, strtoll. */
static int parse_fast(const char *buf, size_t len, __s64 *vals)
{
	const char *p = buf, *end = buf + len, *sp, *nl;
	int f, found = 0;
	size_t kl;

	while (p < end) {
		sp = memchr(p, ' ', end - p);
		if (!sp)
			break;
		nl = memchr(sp, '\n', end - sp);
		if (!nl)
			nl = end;
		kl = sp - p;
		for (f = 0; f < NR_BFIELDS; f++) {
			if (field_klen[f] == kl && !memcmp(p, field_key[f], kl)) {
				vals[f] = strtoll(sp + 1, NULL, 10);
				found++;
				break;
			}
		}
		p = nl + 1;
	}
	return found;
}

/* The naive way: sscanf per line.  @buf must be NUL-terminated. */
static int parse_sscanf(const char *buf, size_t len, __s64 *vals)
{
	const char *p = buf;
	long long v;
	char key[64];
	int f, found = 0;

	(void)len;
	while (*p) {
		if (sscanf(p, "%63s %lld", key, &v) == 2) {
			for (f = 0; f < NR_BFIELDS; f++) {
				if (!strcmp(key, field_key[f])) {
					vals[f] = v;
					found++;
					break;
				}
			}
		}
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	return found;
}

static int parse_memstat(char *buf, size_t len, __s64 *vals)
{
	buf[len] = '\0';
	return parser_sscanf ? parse_sscanf(buf, len, vals) : parse_fast(buf, len, vals);
}

/* ------------------------------------------------------------------ */
/* One configuration                                                   */
/* ------------------------------------------------------------------ */

struct usage {
	struct timespec ts;
	struct rusage ru;
};

static void usage_now(struct usage *u)
{
	clock_gettime(CLOCK_MONOTONIC, &u->ts);
	getrusage(RUSAGE_SELF, &u->ru);
}

static double tv_s(const struct timeval *tv)
{
	return tv->tv_sec + tv->tv_usec / 1e6;
}

struct meas {
	bool done;
	bool skipped;		/* not available on this kernel (syscall_skip) */
	bool valid;		/* every read delivered what it should */
	double elapsed, user, sys;
	long long reads;
	char err[256];
};

struct config_result {
	int ncg;
	int rounds;
	bool setup_ok, agree_ok, measure_ok;
	struct meas m[NR_METHODS];
};

static struct memcg_kfuncs_bench_bpf *skel;
static struct config_result results[MAX_CONFIGS];
static int nconfigs;
static int reads_n = 2000;

struct config {
	int *msfd;			/* memory.stat fds */
	unsigned long long *ino;	/* cgroup ids */
	struct bpf_link **link;		/* SELF_ONLY links */
	struct bpf_link *tree_link;
	unsigned long long parent_ino;
	__s64 (*vals)[NR_BFIELDS];	/* scratch: one round of values */
	struct mb_rec *recs;		/* scratch: one round of records */
	char *buf;			/* memory.stat buffer */
};

static int cg_index(const struct config *c, unsigned long long id)
{
	int i;

	/* ids are increasing in creation order: binary search */
	int lo = 0, hi = ncg - 1;

	while (lo <= hi) {
		i = (lo + hi) / 2;
		if (c->ino[i] == id)
			return i;
		if (c->ino[i] < id)
			lo = i + 1;
		else
			hi = i - 1;
	}
	for (i = 0; i < ncg; i++)	/* not sorted after all */
		if (c->ino[i] == id)
			return i;
	return -1;
}

static void free_config(struct config *c)
{
	int i;

	if (c->link)
		for (i = 0; i < ncg; i++)
			bpf_link__destroy(c->link[i]);
	bpf_link__destroy(c->tree_link);
	if (c->msfd)
		for (i = 0; i < ncg; i++)
			if (c->msfd[i] >= 0)
				close(c->msfd[i]);
	free(c->msfd);
	free(c->ino);
	free(c->link);
	free(c->vals);
	free(c->recs);
	free(c->buf);
	memset(c, 0, sizeof(*c));
}

static struct bpf_link *attach(int cgfd, enum bpf_cgroup_iter_order order)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;

	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cgfd;
	linfo.cgroup.order = order;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	return bpf_program__attach_iter(skel->progs.memcg_bench, &opts);
}

/* ---- the four methods: one round = every cgroup once ---- */

static int round_memstat(struct config *c, bool parse, char *err, size_t elen)
{
	int i, found;
	ssize_t n;

	for (i = 0; i < ncg; i++) {
		n = pread(c->msfd[i], c->buf, MEMSTAT_BUF - 1, 0);
		if (n <= 0 || n >= MEMSTAT_BUF - 1) {
			snprintf(err, elen, "pread(%s/memory.stat) = %zd (%s)", cg_path[i], n,
				 n < 0 ? strerror(errno) : "empty or too large");
			return -EIO;
		}
		if (!parse)
			continue;
		found = parse_memstat(c->buf, n, c->vals[i]);
		if (found != NR_BFIELDS) {
			snprintf(err, elen, "%s/memory.stat: parsed %d of %d fields", cg_path[i],
				 found, NR_BFIELDS);
			return -EPROTO;
		}
	}
	return 0;
}

static int check_rec(const struct mb_rec *r, int i, char *err, size_t elen)
{
	if (i < 0) {
		snprintf(err, elen, "iterator reported cgroup id %llu, not one of ours",
			 (unsigned long long)r->id);
		return -EPROTO;
	}
	if (r->flush_ret != 0) {
		snprintf(err, elen, "%s: no memcg (flush_ret %lld)", cg_path[i],
			 (long long)r->flush_ret);
		return -EPROTO;
	}
	return 0;
}

static int round_iter_self(struct config *c, char *err, size_t elen)
{
	struct mb_rec *r;
	int i, fd;
	ssize_t n;

	skel->bss->mode = MB_MODE_SEQ;
	for (i = 0; i < ncg; i++) {
		r = &c->recs[i];
		fd = bpf_iter_create(bpf_link__fd(c->link[i]));
		if (fd < 0) {
			snprintf(err, elen, "bpf_iter_create: %s", strerror(errno));
			return -errno;
		}
		n = read(fd, r, sizeof(*r));
		close(fd);
		if (n != sizeof(*r)) {
			snprintf(err, elen, "iterator on %s: read %zd bytes (%s), expected a %zu-byte record",
				 cg_path[i], n, n < 0 ? strerror(errno) : "short", sizeof(*r));
			return -EPROTO;
		}
		if (r->id != c->ino[i]) {
			snprintf(err, elen, "iterator on %s reported id %llu, expected %llu",
				 cg_path[i], (unsigned long long)r->id, c->ino[i]);
			return -EPROTO;
		}
		if (check_rec(r, i, err, elen))
			return -EPROTO;
	}
	return 0;
}

static int round_iter_tree(struct config *c, char *err, size_t elen)
{
	char dummy[64];
	int fd, i, k;
	ssize_t n;

	skel->bss->mode = MB_MODE_TREE;
	skel->bss->skip_id = c->parent_ino;
	skel->bss->nrec = 0;
	skel->bss->overflow = 0;
	fd = bpf_iter_create(bpf_link__fd(c->tree_link));
	if (fd < 0) {
		snprintf(err, elen, "bpf_iter_create: %s", strerror(errno));
		return -errno;
	}
	do {
		n = read(fd, dummy, sizeof(dummy));
	} while (n > 0 || (n < 0 && errno == EINTR));
	close(fd);
	if (n < 0) {
		snprintf(err, elen, "read(tree iterator): %s", strerror(errno));
		return -EIO;
	}
	if (skel->bss->nrec != (unsigned int)ncg || skel->bss->overflow) {
		snprintf(err, elen, "tree walk reported %u cgroups (+%u overflow), expected %d",
			 skel->bss->nrec, skel->bss->overflow, ncg);
		return -EPROTO;
	}
	memcpy(c->recs, skel->bss->recs, ncg * sizeof(struct mb_rec));
	for (k = 0; k < ncg; k++) {
		i = c->ino[k] == c->recs[k].id ? k : cg_index(c, c->recs[k].id);
		if (check_rec(&c->recs[k], i, err, elen))
			return -EPROTO;
	}
	return 0;
}

static int round_syscall(struct config *c, char *err, size_t elen)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int i, fd = bpf_program__fd(skel->progs.memcg_bench_syscall);

	for (i = 0; i < ncg; i++) {
		skel->bss->sys_id = c->ino[i];
		if (bpf_prog_test_run_opts(fd, &opts)) {
			snprintf(err, elen, "BPF_PROG_RUN: %s", strerror(errno));
			return -errno;
		}
		c->recs[i] = skel->bss->sysrec;
		if (c->recs[i].id != c->ino[i]) {
			snprintf(err, elen, "syscall program on %s reported id %llu, expected %llu",
				 cg_path[i], (unsigned long long)c->recs[i].id, c->ino[i]);
			return -EPROTO;
		}
		if (check_rec(&c->recs[i], i, err, elen))
			return -EPROTO;
	}
	return 0;
}

static int run_round(struct config *c, int m, char *err, size_t elen)
{
	switch (m) {
	case M_SYSCALL:
		return round_syscall(c, err, elen);
	case M_READ:
		return round_memstat(c, false, err, elen);
	case M_PARSE:
		return round_memstat(c, true, err, elen);
	case M_ITER_SELF:
		return round_iter_self(c, err, elen);
	default:
		return round_iter_tree(c, err, elen);
	}
}

/* ---- setup ---- */

static int setup_config(struct config *c, int n, char *reason, size_t len)
{
	char path[sizeof(path_t) + 64], one;
	int i, err, ready[2] = { -1, -1 }, status;
	struct stat st;
	pid_t pid;

	memset(c, 0, sizeof(*c));
	ncg = n;
	cg_path = calloc(n, sizeof(*cg_path));
	cg_created = calloc(n, sizeof(*cg_created));
	file_path = calloc(n, sizeof(*file_path));
	file_created = calloc(n, sizeof(*file_created));
	c->msfd = malloc(n * sizeof(*c->msfd));
	c->ino = calloc(n, sizeof(*c->ino));
	c->link = calloc(n, sizeof(*c->link));
	c->vals = calloc(n, sizeof(*c->vals));
	c->recs = calloc(n, sizeof(*c->recs));
	c->buf = malloc(MEMSTAT_BUF);
	if (!cg_path || !cg_created || !file_path || !file_created || !c->msfd || !c->ino ||
	    !c->link || !c->vals || !c->recs || !c->buf) {
		snprintf(reason, len, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		c->msfd[i] = -1;

	snprintf(parent_path, sizeof(parent_path), "%.200s/cg%d", top_path, n);
	if (mkdir(parent_path, 0755) && errno != EEXIST) {
		err = -errno;
		snprintf(reason, len, "mkdir(%s): %s", parent_path, strerror(errno));
		return err;
	}
	parent_created = true;
	if (stat(parent_path, &st)) {
		err = -errno;
		snprintf(reason, len, "stat(%s): %s", parent_path, strerror(errno));
		return err;
	}
	c->parent_ino = st.st_ino;
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", parent_path);
	if ((err = write_file(path, "+memory"))) {
		snprintf(reason, len, "enabling +memory in %s: %s", path, strerror(-err));
		return err;
	}
	for (i = 0; i < n; i++) {
		snprintf(cg_path[i], sizeof(path_t), "%.230s/c%04d", parent_path, i);
		snprintf(file_path[i], sizeof(path_t), "%s/cg%d-%04d", tmpfs_dir, n, i);
		if (mkdir(cg_path[i], 0755) && errno != EEXIST) {
			err = -errno;
			snprintf(reason, len, "mkdir(%s): %s", cg_path[i], strerror(errno));
			return err;
		}
		cg_created[i] = true;
		if (stat(cg_path[i], &st)) {
			err = -errno;
			snprintf(reason, len, "stat(%s): %s", cg_path[i], strerror(errno));
			return err;
		}
		c->ino[i] = st.st_ino;
	}

	/* charge: every cgroup but the first by a short-lived process */
	for (i = 1; i < n; i++) {
		file_created[i] = true;
		pid = spawn_in(i, false, -1, reason, len);
		if (pid < 0)
			return -EIO;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			snprintf(reason, len, "charging %s failed (status 0x%x)", cg_path[i], status);
			return -EIO;
		}
	}
	/* the first one by the holder, which stays */
	if (pipe2(ready, O_CLOEXEC)) {
		err = -errno;
		snprintf(reason, len, "pipe: %s", strerror(errno));
		return err;
	}
	file_created[0] = true;
	fflush(stdout);
	pid = spawn_in(0, true, ready[1], reason, len);
	close(ready[1]);
	if (pid < 0) {
		close(ready[0]);
		return -EIO;
	}
	holder_pid = pid;
	{
		struct pollfd pfd = { .fd = ready[0], .events = POLLIN };

		if (poll(&pfd, 1, 30000) != 1 || read(ready[0], &one, 1) != 1) {
			close(ready[0]);
			snprintf(reason, len, "holder process in %s did not get ready", cg_path[0]);
			return -EIO;
		}
	}
	close(ready[0]);

	/* what the agents keep open: memory.stat fds, iterator links */
	for (i = 0; i < n; i++) {
		int cgfd;

		snprintf(path, sizeof(path), "%s/memory.stat", cg_path[i]);
		c->msfd[i] = open(path, O_RDONLY | O_CLOEXEC);
		if (c->msfd[i] < 0) {
			err = -errno;
			snprintf(reason, len, "open(%s): %s", path, strerror(errno));
			return err;
		}
		cgfd = open(cg_path[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0) {
			err = -errno;
			snprintf(reason, len, "open(%s): %s", cg_path[i], strerror(errno));
			return err;
		}
		c->link[i] = attach(cgfd, BPF_CGROUP_ITER_SELF_ONLY);
		err = c->link[i] ? 0 : (errno ? -errno : -EINVAL);
		close(cgfd);
		if (err) {
			snprintf(reason, len, "SELF_ONLY link on %s: %s", cg_path[i], strerror(-err));
			return err;
		}
	}
	{
		int pfd = open(parent_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (pfd < 0) {
			err = -errno;
			snprintf(reason, len, "open(%s): %s", parent_path, strerror(errno));
			return err;
		}
		c->tree_link = attach(pfd, BPF_CGROUP_ITER_DESCENDANTS_PRE);
		err = c->tree_link ? 0 : (errno ? -errno : -EINVAL);
		close(pfd);
		if (err) {
			snprintf(reason, len, "DESCENDANTS_PRE link on %s: %s", parent_path,
				 strerror(-err));
			return err;
		}
	}
	return 0;
}

/*
 * memory.stat of every cgroup shows the charged shmem exactly, i.e. the
 * counters are flushed.  Reading the parent's memory.stat flushes the whole
 * subtree once enough updates are pending there; otherwise the periodic
 * flusher (every 2 s) does: retry for up to ~7 s.
 */
static bool wait_charged(struct config *c)
{
	int attempt, i, bad = 0, first_bad = -1;
	__s64 v[NR_BFIELDS];
	char path[sizeof(path_t) + 16];
	ssize_t n;
	int fd;

	for (attempt = 0; attempt < 4; attempt++) {
		snprintf(path, sizeof(path), "%s/memory.stat", parent_path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			n = pread(fd, c->buf, MEMSTAT_BUF - 1, 0);
			(void)n;
			close(fd);
		}
		bad = 0;
		for (i = 0; i < ncg; i++) {
			n = pread(c->msfd[i], c->buf, MEMSTAT_BUF - 1, 0);
			memset(v, 0xff, sizeof(v));
			if (n <= 0 || parse_fast(c->buf, n, v) != NR_BFIELDS ||
			    v[B_SHMEM] != (__s64)file_pages(i) * page_size ||
			    v[B_PGFAULT] < anon_pages(i) ||
			    (i == 0 && v[B_ANON] < HOLDER_ANON)) {
				if (!bad++)
					first_bad = i;
			}
		}
		if (!bad)
			return true;
		usleep(2500000);
	}
	diag("%d cgroup(s) do not show the charged memory in memory.stat; first %s (expected shmem %lld, pgfault >= %d%s)",
	     bad, cg_path[first_bad], (long long)file_pages(first_bad) * page_size,
	     anon_pages(first_bad), first_bad == 0 ? ", anon >= 1 MiB" : "");
	return false;
}

static long long tol_of(int f)
{
	return field_is_count[f] ? tol_units : tol_units * page_size;
}

/* One sample of each method for every cgroup; all must agree. */
static bool check_agree(struct config *c)
{
	__s64 (*ms)[NR_BFIELDS] = calloc(ncg, sizeof(*ms));
	struct mb_rec *self = calloc(ncg, sizeof(*self));
	struct mb_rec *tree = calloc(ncg, sizeof(*tree));
	struct mb_rec *sys = calloc(ncg, sizeof(*sys));
	int i, k, f, mism = 0, exact = 0, compared = 0, shown = 0;
	bool ok = true, with_sys = !syscall_skip[0];
	char err[512];

	if (!ms || !self || !tree || !sys) {
		free(ms);
		free(self);
		free(tree);
		free(sys);
		return false;
	}
	if (round_iter_self(c, err, sizeof(err))) {
		diag("iter_self sample: %s", err);
		ok = false;
	}
	memcpy(self, c->recs, ncg * sizeof(*self));
	if (round_memstat(c, true, err, sizeof(err))) {
		diag("memstat_parse sample: %s", err);
		ok = false;
	}
	memcpy(ms, c->vals, ncg * sizeof(*ms));
	if (with_sys && round_syscall(c, err, sizeof(err))) {
		diag("syscall_run sample: %s", err);
		ok = false;
	}
	if (with_sys)
		memcpy(sys, c->recs, ncg * sizeof(*sys));
	else
		memcpy(sys, self, ncg * sizeof(*sys));	/* compared as iter_self */
	if (ok && round_iter_tree(c, err, sizeof(err))) {
		diag("iter_tree sample: %s", err);
		ok = false;
	}
	/* tree records in walk order -> by cgroup */
	for (k = 0; ok && k < ncg; k++) {
		i = cg_index(c, c->recs[k].id);
		if (i < 0) {
			ok = false;
			break;
		}
		tree[i] = c->recs[k];
	}
	if (!ok)
		goto out;

	for (i = 0; i < ncg; i++) {
		__s64 want_shmem = (__s64)file_pages(i) * page_size;

		if (self[i].id != c->ino[i] || tree[i].id != c->ino[i] || sys[i].id != c->ino[i]) {
			diag("%s: iterator ids %llu (self) / %llu (tree), expected %llu",
			     cg_path[i], (unsigned long long)self[i].id,
			     (unsigned long long)tree[i].id, c->ino[i]);
			ok = false;
			continue;
		}
		/* the guard against an iterator returning nothing useful */
		if (self[i].val[B_SHMEM] != want_shmem || tree[i].val[B_SHMEM] != want_shmem ||
		    sys[i].val[B_SHMEM] != want_shmem ||
		    ms[i][B_SHMEM] != want_shmem) {
			if (shown++ < 5)
				diag("%s: shmem iter_self %lld, iter_tree %lld, memory.stat %lld; charged %lld",
				     cg_path[i], (long long)self[i].val[B_SHMEM],
				     (long long)tree[i].val[B_SHMEM], (long long)ms[i][B_SHMEM],
				     (long long)want_shmem);
			ok = false;
		}
		for (f = 0; f < NR_BFIELDS; f++) {
			long long ds = self[i].val[f] - ms[i][f], dt = tree[i].val[f] - ms[i][f];
			long long dy = sys[i].val[f] - ms[i][f];

			compared += 3;
			exact += (ds == 0) + (dt == 0) + (dy == 0);
			if (llabs(ds) > tol_of(f) || llabs(dt) > tol_of(f) || llabs(dy) > tol_of(f) ||
			    self[i].val[f] < 0 || tree[i].val[f] < 0 || sys[i].val[f] < 0) {
				mism++;
				if (shown++ < 10)
					diag("%s %s: memory.stat %lld, iter_self %lld, iter_tree %lld, syscall_run %lld (tolerance %lld)",
					     cg_path[i], field_key[f], (long long)ms[i][f],
					     (long long)self[i].val[f], (long long)tree[i].val[f],
					     (long long)sys[i].val[f], tol_of(f));
			}
		}
	}
	if (mism)
		ok = false;
	diag("agreement: %d cgroups x %d fields x 3 kfunc methods (syscall_run %s) vs memory.stat: %d of %d values identical, %d outside tolerance",
	     ncg, NR_BFIELDS, with_sys ? "run" : "not available: iter_self twice", exact,
	     compared, mism);
	diag("  %-12s %12s %12s %12s %12s %12s %8s %10s %10s", "sample", field_key[0],
	     field_key[1], field_key[2], field_key[3], field_key[4], "ws_ref_a",
	     field_key[6], field_key[7]);
	for (k = 0; k < 3 && k < ncg; k++) {
		i = k == 2 ? ncg - 1 : k;
		if (k == 2 && ncg <= 2)
			break;
		diag("  %-12s %12lld %12lld %12lld %12lld %12lld %8lld %10lld %10lld",
		     strrchr(cg_path[i], '/') + 1, (long long)ms[i][0], (long long)ms[i][1],
		     (long long)ms[i][2], (long long)ms[i][3], (long long)ms[i][4],
		     (long long)ms[i][5], (long long)ms[i][6], (long long)ms[i][7]);
	}
out:
	free(ms);
	free(self);
	free(tree);
	free(sys);
	return ok;
}

static void measure(struct config *c, struct config_result *res)
{
	struct usage u0, u1;
	char err[256];
	int m, r;

	res->rounds = reads_n / ncg > 0 ? reads_n / ncg : 1;
	for (m = 0; m < NR_METHODS; m++) {
		struct meas *me = &res->m[m];

		if (m == M_SYSCALL && syscall_skip[0]) {
			me->skipped = true;
			continue;
		}
		/* warm-up round (first-read allocations), not timed */
		if (run_round(c, m, err, sizeof(err))) {
			snprintf(me->err, sizeof(me->err), "warm-up: %.200s", err);
			continue;
		}
		usage_now(&u0);
		for (r = 0; r < res->rounds; r++) {
			if (run_round(c, m, err, sizeof(err))) {
				snprintf(me->err, sizeof(me->err), "round %d: %.200s", r, err);
				break;
			}
		}
		usage_now(&u1);
		me->done = true;
		me->valid = r == res->rounds;
		me->reads = (long long)r * ncg;
		me->elapsed = (u1.ts.tv_sec - u0.ts.tv_sec) +
			      (u1.ts.tv_nsec - u0.ts.tv_nsec) / 1e9;
		me->user = tv_s(&u1.ru.ru_utime) - tv_s(&u0.ru.ru_utime);
		me->sys = tv_s(&u1.ru.ru_stime) - tv_s(&u0.ru.ru_stime);
	}
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

static bool report_measure(const struct config_result *res)
{
	const struct meas *m = res->m;
	bool ok = true;
	int i;

	diag("cgroups=%d rounds=%d reads/method=%d parser=%s (a read = one cgroup's 8 fields)",
	     res->ncg, res->rounds, res->rounds * res->ncg, parser_sscanf ? "sscanf" : "fast");
	diag("  %-44s %10s %9s %9s %9s", "method", "elapsed_s", "user_s", "sys_s", "us/read");
	for (i = 0; i < NR_METHODS; i++) {
		if (m[i].skipped) {
			diag("  %-44s skipped: %s", method_desc[i], syscall_skip);
			continue;
		}
		if (!m[i].done || !m[i].valid) {
			diag("  %-44s FAILED: %s", method_desc[i], m[i].err);
			ok = false;
			continue;
		}
		diag("  %-44s %10.3f %9.3f %9.3f %9.2f", method_desc[i], m[i].elapsed, m[i].user,
		     m[i].sys, m[i].reads ? m[i].elapsed * 1e6 / m[i].reads : 0.0);
	}
	if (!ok)
		return false;
	diag("  elapsed ratios: parse/iter_self %.2fx, parse/iter_tree %.2fx, read-only/iter_self %.2fx, read-only/iter_tree %.2fx",
	     ratio(m[M_PARSE].elapsed, m[M_ITER_SELF].elapsed),
	     ratio(m[M_PARSE].elapsed, m[M_ITER_TREE].elapsed),
	     ratio(m[M_READ].elapsed, m[M_ITER_SELF].elapsed),
	     ratio(m[M_READ].elapsed, m[M_ITER_TREE].elapsed));
	if (!m[M_SYSCALL].skipped)
		diag("  elapsed ratios: read-only/syscall_run %.2fx, parse/syscall_run %.2fx (one cgroup per sample: pread of an open memory.stat vs one BPF_PROG_RUN)",
		     ratio(m[M_READ].elapsed, m[M_SYSCALL].elapsed),
		     ratio(m[M_PARSE].elapsed, m[M_SYSCALL].elapsed));
	diag("  cpu (user+sys) ratios: parse/iter_self %.2fx, parse/iter_tree %.2fx",
	     ratio(m[M_PARSE].user + m[M_PARSE].sys, m[M_ITER_SELF].user + m[M_ITER_SELF].sys),
	     ratio(m[M_PARSE].user + m[M_PARSE].sys, m[M_ITER_TREE].user + m[M_ITER_TREE].sys));
	for (i = 0; i < NR_METHODS; i++) {
		if (m[i].skipped)
			continue;
		if (!(m[i].elapsed > 0) || !isfinite(ratio(m[M_PARSE].elapsed, m[i].elapsed))) {
			diag("%s: elapsed %.6f s: no ratio", method_name[i], m[i].elapsed);
			ok = false;
		}
	}
	return ok;
}

/* ------------------------------------------------------------------ */
/* JSON                                                                */
/* ------------------------------------------------------------------ */

static void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fprintf(f, "null");
}

static void write_metrics(const char *path, const char *kernel, long cpus)
{
	static const int pairs[][2] = {
		{ M_PARSE, M_ITER_SELF }, { M_PARSE, M_ITER_TREE },
		{ M_READ, M_ITER_SELF }, { M_READ, M_ITER_TREE },
		{ M_READ, M_SYSCALL }, { M_PARSE, M_SYSCALL },
	};
	const int npairs = sizeof(pairs) / sizeof(pairs[0]);
	char summary[1024] = "", tmp[PATH_MAX + 8];
	size_t off = 0;
	int k, m, p, first;
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		diag("cannot write %s: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f, "{\n  \"reads\": %d,\n  \"parser\": \"%s\",\n  \"kernel\": \"%s\",\n  \"cpus\": %ld,\n",
		reads_n, parser_sscanf ? "sscanf" : "fast", kernel, cpus);
	fprintf(f, "  \"cgroups\": [");
	for (k = 0; k < nconfigs; k++)
		fprintf(f, "%s%d", k ? ", " : "", results[k].ncg);
	fprintf(f, "],\n  \"method_descriptions\": {");
	for (m = 0; m < NR_METHODS; m++)
		fprintf(f, "%s\n    \"%s\": \"%s\"", m ? "," : "", method_name[m], method_desc[m]);
	fprintf(f, "\n  },\n  \"methods\": {");
	first = 1;
	for (k = 0; k < nconfigs; k++) {
		for (m = 0; m < NR_METHODS; m++) {
			const struct meas *me = &results[k].m[m];

			if (!me->done)
				continue;
			fprintf(f, "%s\n    \"%s@%d\": {\"elapsed_s\": ", first ? "" : ",",
				method_name[m], results[k].ncg);
			json_num(f, me->elapsed);
			fprintf(f, ", \"user_s\": ");
			json_num(f, me->user);
			fprintf(f, ", \"sys_s\": ");
			json_num(f, me->sys);
			fprintf(f, ", \"reads\": %lld, \"rounds\": %d, \"us_per_read\": ", me->reads,
				results[k].rounds);
			json_num(f, me->reads ? me->elapsed * 1e6 / me->reads : NAN);
			fprintf(f, ", \"valid\": %s}", me->valid ? "true" : "false");
			first = 0;
		}
	}
	fprintf(f, "\n  },\n  \"ratios\": {\n    \"elapsed\": {");
	first = 1;
	for (k = 0; k < nconfigs; k++) {
		const struct meas *me = results[k].m;

		for (p = 0; p < npairs; p++) {
			fprintf(f, "%s\n      \"%s/%s@%d\": ", first ? "" : ",",
				method_name[pairs[p][0]], method_name[pairs[p][1]], results[k].ncg);
			json_num(f, ratio(me[pairs[p][0]].elapsed, me[pairs[p][1]].elapsed));
			first = 0;
		}
	}
	fprintf(f, "\n    },\n    \"cpu\": {");
	first = 1;
	for (k = 0; k < nconfigs; k++) {
		const struct meas *me = results[k].m;

		for (p = 0; p < npairs; p++) {
			fprintf(f, "%s\n      \"%s/%s@%d\": ", first ? "" : ",",
				method_name[pairs[p][0]], method_name[pairs[p][1]], results[k].ncg);
			json_num(f, ratio(me[pairs[p][0]].user + me[pairs[p][0]].sys,
					  me[pairs[p][1]].user + me[pairs[p][1]].sys));
			first = 0;
		}
	}
	fprintf(f, "\n    }\n  },\n");

	/* one line, led by the elapsed ratio */
	off += snprintf(summary + off, sizeof(summary) - off,
			"elapsed memory.stat+parse / iter.s/cgroup (link per cgroup):");
	for (k = 0; k < nconfigs && off < sizeof(summary); k++)
		off += snprintf(summary + off, sizeof(summary) - off, " %.1fx@%d",
				ratio(results[k].m[M_PARSE].elapsed, results[k].m[M_ITER_SELF].elapsed),
				results[k].ncg);
	if (off < sizeof(summary))
		off += snprintf(summary + off, sizeof(summary) - off, "; one-walk tree:");
	for (k = 0; k < nconfigs && off < sizeof(summary); k++)
		off += snprintf(summary + off, sizeof(summary) - off, " %.1fx@%d",
				ratio(results[k].m[M_PARSE].elapsed, results[k].m[M_ITER_TREE].elapsed),
				results[k].ncg);
	if (off < sizeof(summary))
		off += snprintf(summary + off, sizeof(summary) - off,
				"; read-only memory.stat / iter (link per cgroup):");
	for (k = 0; k < nconfigs && off < sizeof(summary); k++)
		off += snprintf(summary + off, sizeof(summary) - off, " %.1fx@%d",
				ratio(results[k].m[M_READ].elapsed, results[k].m[M_ITER_SELF].elapsed),
				results[k].ncg);
	if (off < sizeof(summary) && !syscall_skip[0])
		off += snprintf(summary + off, sizeof(summary) - off,
				"; read-only memory.stat / syscall program (BPF_PROG_RUN per read):");
	for (k = 0; !syscall_skip[0] && k < nconfigs && off < sizeof(summary); k++)
		off += snprintf(summary + off, sizeof(summary) - off, " %.1fx@%d",
				ratio(results[k].m[M_READ].elapsed, results[k].m[M_SYSCALL].elapsed),
				results[k].ncg);
	if (off < sizeof(summary))
		snprintf(summary + off, sizeof(summary) - off, " (%d reads per cgroup count, %s parser)",
			 reads_n, parser_sscanf ? "sscanf" : "fast");
	fprintf(f, "  \"summary\": \"%s\"\n}\n", summary);
	if (fclose(f) || rename(tmp, path))
		diag("writing %s: %s", path, strerror(errno));
	diag("summary: %s", summary);
}

/* ------------------------------------------------------------------ */

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [--reads N] [--cgroups 1,100,1000] [--parser fast|sscanf]\n",
		argv0);
}

static int setup_top(char *reason, size_t len)
{
	char path[sizeof(path_t) + 64];
	int err;

	if (!ht_cgroup2_mount(cg_mnt, sizeof(cg_mnt))) {
		snprintf(reason, len, "no writable cgroup2 mount");
		return -ENOENT;
	}
	snprintf(path, sizeof(path), "%.200s/cgroup.controllers", cg_mnt);
	if (!word_in_file(path, "memory")) {
		snprintf(reason, len, "memory controller not available in %.200s", cg_mnt);
		return -ENOENT;
	}
	snprintf(path, sizeof(path), "%.200s/cgroup.subtree_control", cg_mnt);
	if (!word_in_file(path, "memory")) {
		if ((err = write_file(path, "+memory"))) {
			snprintf(reason, len, "enabling +memory in %s: %s", path, strerror(-err));
			return err;
		}
		root_memory_enabled_by_us = true;
	}
	snprintf(top_path, sizeof(top_path), "%.200s/memcg_kfuncs_bench.%d", cg_mnt, (int)getpid());
	if (mkdir(top_path, 0755) && errno != EEXIST) {
		err = -errno;
		snprintf(reason, len, "mkdir(%s): %s", top_path, strerror(errno));
		return err;
	}
	top_created = true;
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", top_path);
	if ((err = write_file(path, "+memory"))) {
		snprintf(reason, len, "enabling +memory in %s: %s", path, strerror(-err));
		return err;
	}
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "/tmp/memcg_kfuncs_bench.XXXXXX");
	if (!mkdtemp(tmpfs_dir)) {
		err = -errno;
		snprintf(reason, len, "mkdtemp: %s", strerror(errno));
		tmpfs_dir[0] = '\0';
		return err;
	}
	if (mount("tmpfs", tmpfs_dir, "tmpfs", 0, "size=512m,mode=0700")) {
		err = -errno;
		snprintf(reason, len, "mount(tmpfs, %.200s): %s", tmpfs_dir, strerror(errno));
		return err;
	}
	tmpfs_mounted = true;
	return 0;
}

static void raise_nofile(int need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need)
		rl.rlim_max = need;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		diag("setrlimit(NOFILE, %d): %s", need, strerror(errno));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "reads", required_argument, NULL, 'r' },
		{ "cgroups", required_argument, NULL, 'c' },
		{ "parser", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int cglist[MAX_CONFIGS] = { 1, 100 }, ncglist = 2, maxcg = 0;
	char reason[1024], name[64];
	const char *metrics;
	struct sigaction sa;
	struct utsname u;
	bool top_ok = false;
	long cpus;
	int opt, i, k, err;

	while ((opt = getopt_long(argc, argv, "r:c:p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			reads_n = atoi(optarg);
			if (reads_n < 1) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'c': {
			char *s = strdup(optarg), *tok, *save = NULL;

			ncglist = 0;
			for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (ncglist == MAX_CONFIGS || atoi(tok) < 1 ||
				    atoi(tok) > MB_MAX_TREE) {
					fprintf(stderr, "--cgroups: at most %d counts of 1..%d\n",
						MAX_CONFIGS, MB_MAX_TREE);
					return 2;
				}
				cglist[ncglist++] = atoi(tok);
			}
			free(s);
			if (!ncglist) {
				usage(argv[0]);
				return 2;
			}
			break;
		}
		case 'p':
			if (!strcmp(optarg, "sscanf")) {
				parser_sscanf = true;
			} else if (strcmp(optarg, "fast")) {
				usage(argv[0]);
				return 2;
			}
			break;
		default:
			usage(argv[0]);
			return opt == 'h' ? 0 : 2;
		}
	}
	for (i = 0; i < NR_BFIELDS; i++)
		field_klen[i] = strlen(field_key[i]);
	for (i = 0; i < ncglist; i++)
		maxcg = cglist[i] > maxcg ? cglist[i] : maxcg;

	n_tests = 2 + 3 * ncglist;
	out_line("TAP version 13");
	out_line("1..%d", n_tests);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	libbpf_set_print(libbpf_capture);
	page_size = sysconf(_SC_PAGESIZE);
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	tol_units = 2LL * MEMCG_CHARGE_BATCH * cpus;
	memset(page_buf, 0x5a, sizeof(page_buf));
	if (uname(&u))
		snprintf(u.release, sizeof(u.release), "?");

	if (!kernel_has_kfuncs(reason, sizeof(reason))) {
		report_skip("load_bench_iter", "%s", reason);
		for (i = 0; i < ncglist; i++) {
			snprintf(name, sizeof(name), "setup_cg%d", cglist[i]);
			report_skip(name, "%s", reason);
			snprintf(name, sizeof(name), "methods_agree_cg%d", cglist[i]);
			report_skip(name, "%s", reason);
			snprintf(name, sizeof(name), "measure_cg%d", cglist[i]);
			report_skip(name, "%s", reason);
		}
		report_skip("cleanup", "%s", reason);
		out_line("# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:%d error:0", n_skip);
		return KSFT_SKIP;
	}
	diag("kernel %s, %ld online CPUs; --reads %d, --cgroups %d..%d (%d counts), parser %s; agreement tolerance %lld pages / %lld events",
	     u.release, cpus, reads_n, cglist[0], cglist[ncglist - 1], ncglist,
	     parser_sscanf ? "sscanf" : "fast", tol_units, tol_units);
	raise_nofile(2 * maxcg + 256);

	skel = memcg_kfuncs_bench_bpf__open();
	if (skel && syscall_skip[0])
		bpf_program__set_autoload(skel->progs.memcg_bench_syscall, false);
	err = skel ? memcg_kfuncs_bench_bpf__load(skel) : -errno;
	if (err) {
		diag("loading the iter.s/cgroup program failed: %d (%s)", err, strerror(-err));
		if (libbpf_log_len)
			diag("%s", libbpf_log);
		report("load_bench_iter", false);
		memcg_kfuncs_bench_bpf__destroy(skel);
		skel = NULL;
	} else {
		report("load_bench_iter", true);
		err = setup_top(reason, sizeof(reason));
		if (err)
			diag("%s", reason);
		else
			top_ok = true;
	}

	for (k = 0; k < ncglist; k++) {
		struct config_result *res = &results[nconfigs];
		struct config c;

		memset(&c, 0, sizeof(c));
		snprintf(name, sizeof(name), "setup_cg%d", cglist[k]);
		if (!skel || !top_ok) {
			report_skip(name, "%s", skel ? "cgroup/tmpfs setup failed" : "iterator not loaded");
			snprintf(name, sizeof(name), "methods_agree_cg%d", cglist[k]);
			report_skip(name, "not set up");
			snprintf(name, sizeof(name), "measure_cg%d", cglist[k]);
			report_skip(name, "not set up");
			continue;
		}
		res->ncg = cglist[k];
		nconfigs++;
		err = setup_config(&c, cglist[k], reason, sizeof(reason));
		if (err) {
			diag("%s", reason);
			if (libbpf_log_len)
				diag("%s", libbpf_log);
		} else {
			res->setup_ok = wait_charged(&c);
		}
		if (!err && res->setup_ok)
			diag("%d cgroups under %s, charged (shmem 1..8 pages each; c0000 also holds 1 MiB anon and maps its file); open: %d memory.stat fds, %d SELF_ONLY links, 1 DESCENDANTS_PRE link",
			     ncg, parent_path, ncg, ncg);
		report(name, !err && res->setup_ok);

		snprintf(name, sizeof(name), "methods_agree_cg%d", cglist[k]);
		if (err || !res->setup_ok) {
			report_skip(name, "setup failed");
		} else {
			res->agree_ok = check_agree(&c);
			report(name, res->agree_ok);
		}

		snprintf(name, sizeof(name), "measure_cg%d", cglist[k]);
		if (err || !res->setup_ok) {
			report_skip(name, "setup failed");
		} else {
			measure(&c, res);
			res->measure_ok = report_measure(res);
			/* methods that disagree must not produce a win */
			if (!res->agree_ok)
				diag("methods disagreed: measurement reported but not passed");
			report(name, res->measure_ok && res->agree_ok);
		}

		free_config(&c);
		if (teardown_config())
			diag("cg%d: some cgroups could not be removed", cglist[k]);
		free(cg_path);
		free(cg_created);
		free(file_path);
		free(file_created);
		cg_path = NULL;
		cg_created = NULL;
		file_path = NULL;
		file_created = NULL;
		ncg = 0;
	}

	memcg_kfuncs_bench_bpf__destroy(skel);
	skel = NULL;
	if (!top_created && !tmpfs_mounted && !tmpfs_dir[0]) {
		report_skip("cleanup", "nothing was created");
	} else {
		int failures = teardown_all();

		if (root_memory_enabled_by_us) {
			char path[sizeof(cg_mnt) + 32];

			snprintf(path, sizeof(path), "%s/cgroup.subtree_control", cg_mnt);
			write_file(path, "-memory");	/* best effort */
		}
		if (failures)
			diag("%d cgroup(s) not removed", failures);
		report("cleanup", !failures);
	}

	metrics = getenv("HARNESS_METRICS");
	if (metrics && *metrics && nconfigs)
		write_metrics(metrics, u.release, cpus);

	out_line("# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0", n_pass, n_fail,
		 n_skip);
	if (n_fail)
		return KSFT_FAIL;
	if (!n_pass && n_skip)
		return KSFT_SKIP;
	return KSFT_PASS;
}
