// SPDX-License-Identifier: GPL-2.0
/*
 * hierarchical_stats: memcg reclaim recorded per cgroup by BPF
 * (tp_btf/mm_vmscan_memcg_reclaim_{begin,end}), aggregated up the hierarchy
 * by rstat (fentry/bpf_rstat_flush) and read through a sleepable cgroup
 * iterator that flushes (one SELF_ONLY link per cgroup), while a worker in
 * each leaf of <cgroup2>/hierarchical_stats.<pid>/{a/{a1,a2},b/{b1,b2}}
 * puts 32 MiB of page cache (scratch fs) and 16 MiB of anon memory in its
 * leaf and writes 2 x 8 MiB to the leaf's memory.reclaim from inside it
 * (each write on another CPU; at most 5 retries on EAGAIN/EINTR).
 *
 * Checks: each leaf's events within what its worker provably caused; each
 * parent equals the exact sum of its children (own == 0); the cgroup2 root
 * grew by at least the tree; leaf pages match memory.stat pgsteal_direct
 * within the slack of others' reclaim; a second read is identical; no BPF
 * bookkeeping error.  One run per process (the harness repeats it).
 *
 * --broken sets the BPF rodata hs_broken: the flush program does not push
 * to the parent, so parent_{a,b}_equals_sum must FAIL.  The rstat kfuncs
 * are cgroup_rstat_* before 6.16 and css_rstat_* since: one BPF object per
 * API (hierarchical_stats_css.bpf.c), picked from the kernel's BTF.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cg_util.h"
#include "bpf_util.h"
#include "hierarchical_stats.h"
#include "hierarchical_stats.skel.h"
#include "hierarchical_stats_css.skel.h"

#define NUM_LEAVES 4
#define NCHUNKS 2		/* memory.reclaim writes per worker */
#define FILE_MB 32		/* page cache per leaf */
#define ANON_MB 16		/* anonymous memory per leaf */
#define RECLAIM_MB 16		/* memory.reclaim per leaf, in NCHUNKS writes */
#define MAX_RETRIES 5		/* of a memory.reclaim write failing EAGAIN/EINTR */
#define WORKER_TIMEOUT_S 120	/* alarm() in each worker */
#ifndef ENOTSUPP
#define ENOTSUPP 524
#endif

enum { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, N_B2, NUM_NODES };

static struct node {
	const char *rel, *name;
	int parent;
	char path[CG_PATH_MAX];
	unsigned long long id;	/* == kn->id */
	int fd;
	struct bpf_link *link;	/* SELF_ONLY iterator */
} nodes[NUM_NODES] = {
#define NODE(r, p) { .rel = r, .name = (r)[0] ? r : "root", .parent = p, .fd = -1 }
	NODE("", -1), NODE("a", N_ROOT), NODE("a/a1", N_A), NODE("a/a2", N_A),
	NODE("b", N_ROOT), NODE("b/b1", N_B), NODE("b/b2", N_B),
#undef NODE
};

static const int leaf_node[NUM_LEAVES] = { N_A1, N_A2, N_B1, N_B2 };
static const int parent_node[3] = { N_A, N_B, N_ROOT };
/* children before parents: the first read exercises partial flushes */
static const int post_order[NUM_NODES] = { N_A1, N_A2, N_A, N_B1, N_B2, N_B, N_ROOT };
static const int pre_order[NUM_NODES] = { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, N_B2 };

struct rec {
	unsigned long long id, count, time_ns, pages, own_count, own_time_ns, own_pages;
	unsigned long long pending;	/* not compared between reads */
};

struct steal {
	bool ok, proactive;
	long long direct, kswapd, khuge;	/* direct includes pgsteal_proactive */
};

/* a worker's report, in memory shared with the parent */
struct wreport {
	int done, err, status;
	pid_t pid;
	char step[160], cgroup_line[256];
	int ok, eagain, eintr, other, retries, cpu[NCHUNKS];
	long long req_ok_bytes;		/* requested by successful writes */
	unsigned long long reclaim_ns;	/* wall time inside memory.reclaim writes */
	char log[1600];			/* one line per retry / failure */
};

static struct hierarchical_stats_bpf *skel;
static bool broken, css_api, reclaim_counts_slab, root_memory_by_us;
static const char *mnt;
static int root_fd = -1, cpus[64], ncpus, n_created;
static struct bpf_link *root_link;
static unsigned long long root_id;
static char scratch[CG_PATH_MAX], leaf_file[NUM_LEAVES][CG_PATH_MAX + 64];
static long page_size, scratch_bsize = 4096;
static struct wreport *wrep;

/* measured around the reclaim, judged by the checks after it */
static struct {
	struct rec first[NUM_NODES], second[NUM_NODES], hroot0, hroot1;
	struct steal st0[NUM_LEAVES], st1[NUM_LEAVES], par[3];
	struct hs_global g0, g1;
	long long miss0[3], miss1[3], vm0, vm1, other_memcg;
	bool have_first, have_second, have_hroot;
	unsigned long long t0, run_ns;
	int retries, eagain, eintr;
	long long bpf_pages, pgsteal_pages, slack, max_over;
} m;

/* ---- reading ---- */

static bool read_rec(struct bpf_link *link, const char *who, unsigned long long id,
		     struct rec *r)
{
	char buf[1024];
	ssize_t got = bu_read_iter(link, buf, sizeof(buf) - 1);
	int used = -1;

	if (got < 0) {
		ksft_print_msg("%s: reading its iterator: %s\n", who, strerror(-got));
		return false;
	}
	buf[got] = '\0';
	if (sscanf(buf, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu\n%n",
		   &r->id, &r->count, &r->time_ns, &r->pages, &r->own_count,
		   &r->own_time_ns, &r->own_pages, &r->pending, &used) != 8 ||
	    used != got || r->id != id) {
		ksft_print_msg("%s: unexpected iterator output for id %llu (%zd bytes): '%.300s'\n",
			       who, id, got, buf);
		return false;
	}
	return true;
}

static bool read_all(const int *order, struct rec *out)
{
	int k, i;

	for (k = 0; k < NUM_NODES; k++) {
		i = order[k];
		if (!read_rec(nodes[i].link, nodes[i].name, nodes[i].id, &out[i]))
			return false;
	}
	return true;
}

/* count, time_ns, pages and own_*: what two reads must agree on */
static bool rec_same(const struct rec *x, const struct rec *y)
{
	return !memcmp(&x->count, &y->count,
		       offsetof(struct rec, pending) - offsetof(struct rec, count));
}

static void print_rec(const char *who, const struct rec *r)
{
	ksft_print_msg("  %-6s id=%llu count=%llu time_ns=%llu pages=%llu own=(%llu, %llu, %llu) pending_pages=%llu\n",
		       who, r->id, r->count, r->time_ns, r->pages, r->own_count,
		       r->own_time_ns, r->own_pages, r->pending);
}

static void read_steal(const char *cg, struct steal *s)
{
	long long p = cg_read_key(cg, "memory.stat", "pgsteal_proactive");

	s->direct = cg_read_key(cg, "memory.stat", "pgsteal_direct");
	s->kswapd = cg_read_key(cg, "memory.stat", "pgsteal_kswapd");
	s->khuge = cg_read_key(cg, "memory.stat", "pgsteal_khugepaged");
	s->ok = s->direct >= 0 && s->kswapd >= 0;
	s->proactive = p >= 0;
	s->direct += p > 0 ? p : 0;
	s->khuge = s->khuge > 0 ? s->khuge : 0;
}

/* .bss counters and the tracing programs' recursion misses */
static void bpf_snapshot(struct hs_global *g, long long *miss)
{
	struct bpf_program *p[3] = { skel->progs.hs_reclaim_begin, skel->progs.hs_reclaim_end,
				     skel->progs.hs_flush };
	struct bpf_prog_info info;
	__u32 len;
	int j;

	memcpy(g, (const void *)&skel->bss->g, sizeof(*g));
	for (j = 0; j < 3; j++) {
		memset(&info, 0, len = sizeof(info));
		miss[j] = bpf_obj_get_info_by_fd(bpf_program__fd(p[j]), &info, &len) ?
			  -1 : (long long)info.recursion_misses;
	}
}

/* ---- the workers ---- */

static void __attribute__((format(printf, 2, 3))) wlog(struct wreport *r, const char *fmt, ...)
{
	size_t used = strlen(r->log);
	va_list ap;

	if (used >= sizeof(r->log) - 2)	/* full (room for the newline) */
		return;
	va_start(ap, fmt);
	vsnprintf(r->log + used, sizeof(r->log) - used - 1, fmt, ap);
	va_end(ap);
	strcat(r->log, "\n");
}

static int wfail(struct wreport *r, const char *step)
{
	r->err = errno ? errno : EIO;
	snprintf(r->step, sizeof(r->step), "%s", step);
	r->done = 1;
	return 1;
}

/* write (clean: memcg reclaim does not write back dirty pages) or read back the file */
static int file_pass(int fd, char *buf, bool write)
{
	long long off;

	for (off = 0; off < FILE_MB * MiB; off += MiB) {
		if (write)
			memset(buf, (int)(off / MiB) + 1, MiB);
		if ((write ? pwrite(fd, buf, MiB, off) : pread(fd, buf, MiB, off)) != MiB) {
			errno = errno ? errno : EIO;
			return -1;
		}
	}
	return write ? fsync(fd) : 0;
}

/* one memory.reclaim write of chunk @j, retried after re-creating the memory */
static void reclaim_chunk(struct wreport *r, int j, int rfd, int fd, char *buf, char *anon)
{
	const char *leaf = nodes[leaf_node[r - wrep]].path;
	long long chunk = RECLAIM_MB * MiB / NCHUNKS, off;
	char req[32];
	int t, e;

	snprintf(req, sizeof(req), "%lld", chunk);
	for (t = 0;; t++) {
		unsigned long long t0 = now_ns();
		ssize_t n = write(rfd, req, strlen(req));

		e = n < 0 ? errno : EIO;
		r->reclaim_ns += now_ns() - t0;
		if (n == (ssize_t)strlen(req)) {
			r->ok++;
			r->req_ok_bytes += chunk;
			return;
		}
		r->eagain += e == EAGAIN;
		r->eintr += e == EINTR;
		if (e != EAGAIN && e != EINTR) {
			r->other++;
			wlog(r, "write %d: memory.reclaim <- %s: %s (not retried)", j, req, strerror(e));
			return;
		}
		wlog(r, "write %d try %d: memory.reclaim <- %s: %s (memory.current=%lld file=%lld anon=%lld inactive_file=%lld)%s",
		     j, t + 1, req, strerror(e), cg_read_long(leaf, "memory.current"),
		     cg_read_key(leaf, "memory.stat", "file"), cg_read_key(leaf, "memory.stat", "anon"),
		     cg_read_key(leaf, "memory.stat", "inactive_file"),
		     t >= MAX_RETRIES ? "; giving up" : "; re-creating the memory and retrying");
		if (t >= MAX_RETRIES)
			return;
		r->retries++;
		file_pass(fd, buf, false);
		for (off = 0; off < ANON_MB * MiB; off += page_size)
			anon[off]++;
	}
}

/* runs in its leaf (cg_spawn): memory charged to the leaf, then reclaim from inside */
static int worker(void *arg)
{
	struct wreport *r = arg;
	int li = r - wrep, fd, rfd, j;
	const char *leaf = nodes[leaf_node[li]].path, *want = leaf + strlen(mnt);
	char line[256], *buf, *anon;
	cpu_set_t set;
	FILE *f;

	alarm(WORKER_TIMEOUT_S);	/* never hang the run */
	f = fopen("/proc/self/cgroup", "re");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3))
			snprintf(r->cgroup_line, sizeof(r->cgroup_line), "%.*s",
				 (int)strcspn(line, "\n"), line);
	if (f)
		fclose(f);
	j = (int)strlen(r->cgroup_line) - (int)strlen(want);
	if (j < 3 || strcmp(r->cgroup_line + j, want)) {
		errno = EINVAL;
		return wfail(r, "after the move, /proc/self/cgroup's 0:: line does not end in the leaf");
	}
	buf = malloc(MiB);
	fd = open(leaf_file[li], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (!buf || fd < 0 || file_pass(fd, buf, true))
		return wfail(r, "writing the page cache file on the scratch fs");
	anon = cg_alloc_anon(ANON_MB * MiB);
	if (!anon)
		return wfail(r, "mapping the anonymous memory");
	snprintf(line, sizeof(line), "%s/memory.reclaim", leaf);
	rfd = open(line, O_WRONLY | O_CLOEXEC);
	if (rfd < 0)
		return wfail(r, "opening memory.reclaim");
	for (j = 0; j < NCHUNKS; j++) {
		r->cpu[j] = cpus[(li + j) % ncpus];
		CPU_ZERO(&set);
		CPU_SET(r->cpu[j], &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			wlog(r, "write %d: sched_setaffinity(cpu %d): %s; running unpinned",
			     j, r->cpu[j], strerror(errno));
			r->cpu[j] = -1;
		}
		reclaim_chunk(r, j, rfd, fd, buf, anon);
	}
	r->done = 1;
	unlink(leaf_file[li]);
	return 0;
}

static void run_workers(void)
{
	int i;

	memset(wrep, 0, sizeof(*wrep) * NUM_LEAVES);
	for (i = 0; i < NUM_LEAVES; i++)
		wrep[i].pid = cg_spawn(nodes[leaf_node[i]].path, worker, &wrep[i]);
	for (i = 0; i < NUM_LEAVES; i++) {
		wrep[i].status = -1;
		while (wrep[i].pid > 0 && waitpid(wrep[i].pid, &wrep[i].status, 0) < 0 &&
		       errno == EINTR)
			;
	}
}

static bool report_worker(int i)
{
	const struct wreport *r = &wrep[i];
	const char *nm = nodes[leaf_node[i]].name;
	int st = r->status;

	if (!r->done) {
		ksft_print_msg("%s: worker sent no report (%s %d%s)\n", nm,
			       r->pid <= 0 ? "fork failed:" : WIFSIGNALED(st) ? "killed by signal" : "exit",
			       r->pid <= 0 ? r->pid : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
			       WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? ", worker timeout" : "");
		return false;
	}
	if (r->err)
		ksft_print_msg("%s: worker failed: %s: %s\n", nm, r->step, strerror(r->err));
	ksft_print_msg("%s: worker in '%s'; memory.reclaim writes: ok %d, EAGAIN %d, EINTR %d, other %d; retries %d; cpus %d,%d; %.1f ms inside the writes\n",
		       nm, r->cgroup_line, r->ok, r->eagain, r->eintr, r->other, r->retries,
		       r->cpu[0], r->cpu[NCHUNKS - 1], r->reclaim_ns / 1e6);
	print_block("  ", r->log);
	m.retries += r->retries;
	m.eagain += r->eagain;
	m.eintr += r->eintr;
	return !r->err && r->ok == NCHUNKS;
}

/* ---- checks ---- */

static const char *const needed_funcs[2][5] = {
	{ "bpf_rstat_flush", "cgroup_rstat_updated", "cgroup_rstat_flush", "bpf_iter_cgroup" },
	{ "bpf_rstat_flush", "css_rstat_updated", "css_rstat_flush", "bpf_iter_cgroup" },
};

static int check_load(void)
{
	const char *why;
	int err = -ENOMEM;

	if (broken)
		ksft_print_msg("BPF flush does NOT propagate (--broken: parent checks must FAIL)\n");
	skel = calloc(1, sizeof(*skel));
	if (skel)
		err = hierarchical_stats_bpf__create_skeleton(skel);
	err = err ?: BU_OPEN_RSTAT(skel, hierarchical_stats_css_bpf);
	if (!err) {
		skel->rodata->hs_broken = broken;
		bpf_program__set_autoattach(skel->progs.hs_dump, false);
		err = hierarchical_stats_bpf__load(skel);
	}
	if (!err)
		err = hierarchical_stats_bpf__attach(skel);
	if (!err)
		return KSFT_PASS;
	bu_print_log();
	why = bu_missing_funcs(needed_funcs[css_api]);
	if (why) {
		check_skip_why("%s", why);
		return KSFT_SKIP;
	}
	if (err == -ENOTSUPP || err == -EOPNOTSUPP) {
		check_skip_why("attaching: %s (no BPF trampoline support?)", strerror(-err));
		return KSFT_SKIP;
	}
	ksft_print_msg("loading/attaching the BPF programs: %s\n", strerror(-err));
	return KSFT_FAIL;
}

/* scratch: a disk-backed file system for real page cache */
static bool env_scratch(void)
{
	const char *sd = getenv("HARNESS_SCRATCH");
	struct statfs sfs;
	char buf[512];
	int i;

	snprintf(scratch, sizeof(scratch), "%s", sd && *sd ? sd : "/var/tmp");
	if (access(scratch, W_OK)) {
		ksft_print_msg("scratch directory %s not writable: %s\n", scratch, strerror(errno));
		return false;
	}
	for (i = 0; i < NUM_LEAVES; i++)
		snprintf(leaf_file[i], sizeof(leaf_file[i]), "%s/hierarchical_stats.%d.%s",
			 scratch, (int)getpid(), nodes[leaf_node[i]].rel + 2);
	if (!statfs(scratch, &sfs)) {
		scratch_bsize = sfs.f_bsize > 0 ? sfs.f_bsize : scratch_bsize;
		ksft_print_msg("scratch %s: %s\n", scratch,
			       sfs.f_type == 0xEF53 ? "ext2/3/4 (page cache)" :
			       sfs.f_type == 0x01021994 ? "tmpfs (shmem: reclaimable only to swap)" :
			       "other file system");
	}
	if (cg_read("/proc", "swaps", buf, sizeof(buf)) > 0)
		print_block("swap: ", strchr(buf, '\n') ? strchr(buf, '\n') + 1 : "none");
	return true;
}

static int check_env(void)
{
	static const char *const limits[] = { "memory.max", "memory.high" };
	char why[256], buf[64];
	cpu_set_t set;
	bool skip;
	int i, err;

	mnt = cg_root(why, sizeof(why), &skip);
	if (mnt && !cg_has_word(mnt, "cgroup.controllers", "memory")) {
		check_skip_why("memory controller not available on %s", mnt);
		return KSFT_SKIP;
	} else if (!mnt) {
		check_skip_why("%s", why);
		if (!skip)
			ksft_print_msg("%s\n", why);
		return skip ? KSFT_SKIP : KSFT_FAIL;
	}
	if (!cg_has_word(mnt, "cgroup.subtree_control", "memory")) {
		err = cg_enable(mnt, "+memory");
		if (err) {
			ksft_print_msg("enabling +memory in %s: %s\n", mnt, strerror(-err));
			return KSFT_FAIL;
		}
		root_memory_by_us = true;
	}
	/* limits above the test root would make reclaim target an ancestor */
	for (i = 0; i < 2; i++)
		if (cg_read(mnt, limits[i], buf, sizeof(buf)) > 0 && strncmp(buf, "max", 3))
			ksft_print_msg("WARNING: %s/%s is %.*s: the exact checks do not allow for reclaim on behalf of an ancestor\n",
				       mnt, limits[i], (int)strcspn(buf, "\n"), buf);
	if (!sched_getaffinity(0, sizeof(set), &set))
		for (i = 0; i < CPU_SETSIZE && ncpus < 64; i++)
			if (CPU_ISSET(i, &set))
				cpus[ncpus++] = i;
	root_id = cg_id(mnt);
	root_fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root_fd >= 0)
		root_link = bu_attach_cgroup_iter(skel->progs.hs_dump, root_fd,
						  BPF_CGROUP_ITER_SELF_ONLY);
	if (!root_link || !ncpus) {
		ksft_print_msg("%s: %s\n", ncpus ? "iterator link on the cgroup2 root" :
			       "sched_getaffinity", strerror(errno));
		bu_print_log();
		return KSFT_FAIL;
	}
	if (!env_scratch())
		return KSFT_FAIL;
	ksft_print_msg("cgroup2 at %s (root id %llu); %d CPUs usable; per leaf: %d MiB file + %d MiB anon, %d x %d MiB memory.reclaim, <= %d retries per write\n",
		       mnt, root_id, ncpus, FILE_MB, ANON_MB, NCHUNKS, RECLAIM_MB / NCHUNKS,
		       MAX_RETRIES);
	return KSFT_PASS;
}

/* cgroups (pre-order: parents with +memory before children) and their links */
static int create_tree(void)
{
	char p[CG_PATH_MAX + 32];
	struct node *n;
	bool leaf;
	int i, err;

	for (i = 0; i < NUM_NODES; i++) {
		n = &nodes[i];
		leaf = i != N_ROOT && i != N_A && i != N_B;
		snprintf(n->path, sizeof(n->path), "%s/hierarchical_stats.%d%s%s", mnt,
			 (int)getpid(), n->rel[0] ? "/" : "", n->rel);
		snprintf(p, sizeof(p), "%s/%s", n->path, leaf ? "memory.reclaim" : "");
		err = cg_create(n->path);
		if (err) {
			ksft_print_msg("mkdir %s: %s\n", n->path, strerror(-err));
			return KSFT_FAIL;
		}
		n_created++;
		n->id = cg_id(n->path);
		n->fd = open(n->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		err = leaf ? (access(p, W_OK) ? -errno : 0) : cg_enable(n->path, "+memory");
		if (err == -ENOENT && leaf) {
			check_skip_why("no %s (kernel without memory.reclaim)", p);
			return KSFT_SKIP;
		}
		n->link = n->fd < 0 || err ? NULL :
			  bu_attach_cgroup_iter(skel->progs.hs_dump, n->fd, BPF_CGROUP_ITER_SELF_ONLY);
		if (!n->link) {
			ksft_print_msg("%s: %s\n", err ? (leaf ? p : "enabling +memory") :
				       "iterator link", strerror(err ? -err : errno));
			bu_print_log();
			return KSFT_FAIL;
		}
	}
	return KSFT_PASS;
}

static int check_setup(void)
{
	int i, ret = create_tree();
	bool ok;

	if (ret != KSFT_PASS)
		return ret;
	ok = read_all(post_order, m.first);
	for (i = 0; ok && i < NUM_NODES; i++) {
		if (!rec_same(&m.first[i], &(struct rec){})) {
			ksft_print_msg("%s: expected all zero in a fresh cgroup, got:\n", nodes[i].name);
			print_rec(nodes[i].name, &m.first[i]);
			ok = false;
		}
	}
	ok &= read_rec(root_link, "cgroup2 root", root_id, &m.hroot0);
	for (i = 0; i < NUM_LEAVES; i++) {
		read_steal(nodes[leaf_node[i]].path, &m.st0[i]);
		if (!m.st0[i].ok) {
			ksft_print_msg("%s/memory.stat: no pgsteal_direct/pgsteal_kswapd\n",
				       nodes[leaf_node[i]].path);
			ok = false;
		}
	}
	m.vm0 = cg_read_key("/proc", "vmstat", "pgsteal_direct");
	if (m.vm0 < 0) {
		ksft_print_msg("/proc/vmstat has no pgsteal_direct\n");
		ok = false;
	}
	if (ok)
		ksft_print_msg("tree %s: ids root=%llu a=%llu a1=%llu a2=%llu b=%llu b1=%llu b2=%llu\n",
			       nodes[N_ROOT].path, nodes[N_ROOT].id, nodes[N_A].id, nodes[N_A1].id,
			       nodes[N_A2].id, nodes[N_B].id, nodes[N_B1].id, nodes[N_B2].id);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* two reads with no reclaim in between: bottom-up first, then top-down */
static void collect(void)
{
	int i;

	m.have_first = read_all(post_order, m.first);
	m.have_second = read_all(pre_order, m.second);
	/* memory.stat after the iterator flushed the leaves */
	for (i = 0; i < NUM_LEAVES; i++)
		read_steal(nodes[leaf_node[i]].path, &m.st1[i]);
	for (i = 0; i < 3; i++)
		read_steal(nodes[parent_node[i]].path, &m.par[i]);
	m.vm1 = cg_read_key("/proc", "vmstat", "pgsteal_direct");
	m.have_hroot = read_rec(root_link, "cgroup2 root", root_id, &m.hroot1);
	bpf_snapshot(&m.g1, m.miss1);
	m.run_ns = now_ns() - m.t0;
	if (!m.have_first)
		return;
	ksft_print_msg("flushed totals (count, time_ns, pages; own):\n");
	for (i = 0; i < NUM_NODES; i++)
		print_rec(nodes[i].name, &m.first[i]);
}

static int check_reclaim(void)
{
	bool ok = true;
	int i;

	m.t0 = now_ns();
	bpf_snapshot(&m.g0, m.miss0);
	run_workers();
	for (i = 0; i < NUM_LEAVES; i++)
		ok &= report_worker(i);
	ksft_print_msg("memory.reclaim retries in this run: %d (at most %d per write)\n",
		       m.retries, MAX_RETRIES);
	if (!ok)
		ksft_print_msg("expected every worker to report and all %d memory.reclaim writes of %d MiB to succeed\n",
			       NCHUNKS, RECLAIM_MB / NCHUNKS);
	collect();
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_leaf_events(int i)
{
	const struct rec *r = &m.first[leaf_node[i]];
	const struct wreport *w = &wrep[i];
	const char *nm = nodes[leaf_node[i]].name;
	unsigned long long min_count = w->ok + w->eagain, min_pages = w->req_ok_bytes / page_size;
	bool ok = m.have_first && r->count && r->pages && r->time_ns &&
		  r->count == r->own_count && r->pages == r->own_pages &&
		  r->time_ns == r->own_time_ns;

	if (m.have_first && !ok) {
		ksft_print_msg("%s: expected count, pages, time_ns > 0 and a leaf's total == its own:\n", nm);
		print_rec(nm, r);
	}
	if (!ok || !w->done)
		return KSFT_FAIL;
	/*
	 * each write calls try_to_free_mem_cgroup_pages() at least once, and succeeds only
	 * once the end events' nr_reclaimed reach the request; the events happen inside
	 * the writes (CLOCK_MONOTONIC == bpf_ktime_get_ns())
	 */
	if (r->count < min_count || r->pages < min_pages || r->time_ns > w->reclaim_ns) {
		ksft_print_msg("%s: expected count >= %llu (memory.reclaim writes that reclaimed or gave up), pages >= %llu (requested by successful writes), time_ns <= %llu (wall time inside the writes); got %llu, %llu, %llu\n",
			       nm, min_count, min_pages, w->reclaim_ns, r->count, r->pages,
			       r->time_ns);
		return KSFT_FAIL;
	}
	ksft_print_msg("%s: count=%llu (>= %llu) pages=%llu (>= %llu) time_ns=%llu (<= %llu)\n",
		       nm, r->count, min_count, r->pages, min_pages, r->time_ns, w->reclaim_ns);
	return KSFT_PASS;
}

static int check_parent(int j)
{
	int p = parent_node[j], c;
	unsigned long long sc = 0, st = 0, sp = 0;
	const struct rec *r = &m.first[p];
	char kids[64] = "";
	bool ok;

	if (!m.have_first)
		return KSFT_FAIL;
	for (c = 0; c < NUM_NODES; c++) {
		if (nodes[c].parent != p)
			continue;
		sc += m.first[c].count;
		st += m.first[c].time_ns;
		sp += m.first[c].pages;
		snprintf(kids + strlen(kids), sizeof(kids) - strlen(kids), "%s%s",
			 kids[0] ? " + " : "", nodes[c].name);
	}
	ok = r->count == sc + r->own_count && r->time_ns == st + r->own_time_ns &&
	     r->pages == sp + r->own_pages;
	if (!ok)	/* count, time_ns, pages: children + own, expected and got */
		ksft_print_msg("%s: expected total = %s + own, exactly: count %llu + %llu, got %llu; time_ns %llu + %llu, got %llu; pages %llu + %llu, got %llu\n",
			       nodes[p].name, kids, sc, r->own_count, r->count, st, r->own_time_ns,
			       r->time_ns, sp, r->own_pages, r->pages);
	else
		ksft_print_msg("%s = %s: count %llu, time_ns %llu, pages %llu (memory.stat pgsteal_direct %lld)\n",
			       nodes[p].name, kids, r->count, r->time_ns, r->pages,
			       m.par[j].ok ? m.par[j].direct : -1);
	if (r->own_count || r->own_pages || r->own_time_ns)
		ksft_print_msg("%s: expected own = 0 (no task ran in it), got (%llu, %llu, %llu)\n",
			       nodes[p].name, r->own_count, r->own_time_ns, r->own_pages);
	return ok && !r->own_count && !r->own_pages && !r->own_time_ns ? KSFT_PASS : KSFT_FAIL;
}

static int check_hroot(void)
{
	const struct rec *t = &m.first[N_ROOT], *a = &m.hroot1, *b = &m.hroot0;
	bool ok;

	if (!m.have_first || !m.have_hroot)
		return KSFT_FAIL;
	ok = a->count >= b->count && a->time_ns >= b->time_ns && a->pages >= b->pages &&
	     a->count - b->count >= t->count && a->time_ns - b->time_ns >= t->time_ns &&
	     a->pages - b->pages >= t->pages;
	ksft_print_msg("cgroup2 root (id %llu) grew by count %llu, time_ns %llu, pages %llu during the run; %s test root: count %llu, time_ns %llu, pages %llu\n",
		       root_id, a->count - b->count, a->time_ns - b->time_ns, a->pages - b->pages,
		       ok ? "at least the" : "expected at least the", t->count, t->time_ns,
		       t->pages);
	if (ok)
		m.other_memcg = a->pages - b->pages - t->pages;
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * A page freed by memcg reclaim is counted as pgsteal_direct (or _proactive) of
 * its memcg for any reclaimer that is not kswapd/khugepaged, and is in the
 * nr_reclaimed the end tracepoint reports; a leaf is reclaimed only from its own
 * lruvecs.  So pgsteal_direct(leaf) = BPF pages(leaf) + pages others took from
 * the leaf: global direct reclaim (/proc/vmstat pgsteal_direct) and memcg reclaim
 * from tasks outside the tree (the cgroup2 root's growth beyond the test root's).
 * Before 6.4 memcg reclaim also counted freed slab in nr_reclaimed: the buffer
 * heads of the reclaimed file pages (104 bytes, 32 per slab page) + 16 pages.
 * memory.stat is read after the iterator's flush of the leaf.
 */
static int check_pgsteal(int i)
{
	const struct steal *s0 = &m.st0[i], *s1 = &m.st1[i];
	const char *nm = nodes[leaf_node[i]].name;
	long long d, bpf, slack, slab = 0, global;

	if (!m.have_first || !s0->ok || !s1->ok || m.vm1 < 0) {
		ksft_print_msg("%s: statistics missing (BPF read %s, memory.stat %s, /proc/vmstat %s)\n",
			       nm, m.have_first ? "ok" : "failed", s1->ok ? "ok" : "failed",
			       m.vm1 >= 0 ? "ok" : "failed");
		return KSFT_FAIL;
	}
	d = s1->direct - s0->direct;
	bpf = m.first[leaf_node[i]].pages;
	global = m.vm1 >= m.vm0 ? m.vm1 - m.vm0 : 0;
	slack = global + m.other_memcg;
	if (reclaim_counts_slab)
		slab = (d * (page_size / scratch_bsize) + 31) / 32 + 16;
	ksft_print_msg("%s: BPF pages %lld, memory.stat pgsteal_direct%s +%lld; %s %lld - %lld <= %lld <= %lld + %lld (freed slab counted by this kernel's memcg reclaim <= %lld; global direct reclaim %lld + memcg reclaim outside the tree %lld); pgsteal_kswapd +%lld, pgsteal_khugepaged +%lld (not attributable to a task, not compared)\n",
		       nm, bpf, s1->proactive ? "+pgsteal_proactive" : "", d,
		       bpf - slab <= d && d - bpf <= slack ? "within" : "expected", bpf, slab, d,
		       bpf, slack, slab, global, m.other_memcg, s1->kswapd - s0->kswapd,
		       s1->khuge - s0->khuge);
	m.bpf_pages += bpf;
	m.pgsteal_pages += d;
	m.slack += slack;
	m.max_over = d - bpf > m.max_over ? d - bpf : m.max_over;
	return bpf - slab <= d && d - bpf <= slack ? KSFT_PASS : KSFT_FAIL;
}

static int check_reread(void)
{
	bool ok = m.have_first && m.have_second;
	int i;

	for (i = 0; ok && i < NUM_NODES; i++) {
		if (!rec_same(&m.first[i], &m.second[i])) {
			ksft_print_msg("%s: the second read differs from the first:\n", nodes[i].name);
			print_rec("first", &m.first[i]);
			print_rec("second", &m.second[i]);
			ok = false;
		}
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_bookkeeping(void)
{
	static const char *const desc[3] = { "hs_reclaim_begin", "hs_reclaim_end", "hs_flush" };
	const struct hs_global *a = &m.g0, *b = &m.g1;
	bool ok = b->map_errors == a->map_errors && b->unmatched_end == a->unmatched_end &&
		  b->id_mismatch == a->id_mismatch;
	int j;

	for (j = 0; j < 3; j++) {
		if (m.miss0[j] < 0 || m.miss1[j] < 0) {
			ksft_print_msg("%s: cannot read recursion_misses\n", desc[j]);
		} else if (m.miss1[j] != m.miss0[j]) {
			ksft_print_msg("%s: %lld runs missed (recursion) during the run\n", desc[j],
				       m.miss1[j] - m.miss0[j]);
			ok = false;
		}
	}
	ksft_print_msg("during the run: begin %llu, end %llu, end without begin %llu, map update failures %llu, cgroup id mismatches %llu, rstat flush calls %llu (%llu with a delta), iterator reads %llu\n",
		       b->begin_events - a->begin_events, b->end_events - a->end_events,
		       b->unmatched_end - a->unmatched_end, b->map_errors - a->map_errors,
		       b->id_mismatch - a->id_mismatch, b->flush_calls - a->flush_calls,
		       b->flush_folded - a->flush_folded, b->iter_calls - a->iter_calls);
	if (!ok)
		ksft_print_msg("expected no end event without its begin, no failed map update, no missed program run and no cgroup id mismatch\n");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static void unlink_files(void)
{
	int i;

	for (i = 0; i < NUM_LEAVES; i++)
		if (leaf_file[i][0])
			unlink(leaf_file[i]);
}

static int check_cleanup(void)
{
	bool left = false;
	int i, failures;

	for (i = 0; i < NUM_NODES; i++) {
		bpf_link__destroy(nodes[i].link);
		if (nodes[i].fd >= 0)
			close(nodes[i].fd);
		if (skel && nodes[i].id) {	/* drop the removed cgroups' entries */
			bpf_map__delete_elem(skel->maps.totals, &nodes[i].id, 8, 0);
			bpf_map__delete_elem(skel->maps.pcpu_stats, &nodes[i].id, 8, 0);
		}
	}
	unlink_files();
	for (i = 0; i < NUM_LEAVES; i++)
		left |= leaf_file[i][0] && !access(leaf_file[i], F_OK);
	failures = cg_destroy_all();	/* kills what is left in the tree */
	if (!n_created) {
		check_skip_why("no cgroups were created");
		return KSFT_SKIP;
	}
	if (left || failures)
		ksft_print_msg("%s%d cgroup(s) could not be removed\n",
			       left ? "scratch files left behind; " : "", failures);
	return failures || left ? KSFT_FAIL : KSFT_PASS;
}

#define PER_LEAF(fn)							\
	static int fn##_0(void) { return fn(0); }			\
	static int fn##_1(void) { return fn(1); }			\
	static int fn##_2(void) { return fn(2); }			\
	static int fn##_3(void) { return fn(3); }
PER_LEAF(check_leaf_events)
PER_LEAF(check_pgsteal)
static int check_parent_a(void) { return check_parent(0); }
static int check_parent_b(void) { return check_parent(1); }
static int check_parent_root(void) { return check_parent(2); }

static void write_metrics(bool passed)
{
	int i;

	metrics_open();
	metrics_bool("passed", passed);
	metrics_bool("broken_variant", broken);
	metrics_str("rstat_api", css_api ? "css_rstat" : "cgroup_rstat");
	metrics_obj("retries");
	metrics_int("total", m.retries);
	metrics_int("eagain", m.eagain);
	metrics_int("eintr", m.eintr);
	metrics_obj("per_leaf");
	for (i = 0; i < NUM_LEAVES; i++)
		metrics_int(nodes[leaf_node[i]].name, wrep[i].retries);
	metrics_end();
	metrics_end();
	metrics_obj("pages");
	metrics_int("bpf_leaves", m.bpf_pages);
	metrics_int("pgsteal_direct_leaves", m.pgsteal_pages);
	metrics_int("allowed_slack", m.slack);
	metrics_int("max_pgsteal_minus_bpf", m.max_over);
	metrics_end();
	metrics_int("run_ms", m.run_ns / 1000000);
	metrics_close();
}

int main(int argc, char **argv)
{
	static const struct check checks[] = {
		{ "bpf_load_attach", check_load, NULL },
		{ "environment", check_env, "bpf_load_attach" },
		{ "tree_setup", check_setup, "environment" },
		{ "reclaim_induced", check_reclaim, "tree_setup" },
		{ "leaf_a1_events", check_leaf_events_0, "tree_setup" },
		{ "leaf_a2_events", check_leaf_events_1, "tree_setup" },
		{ "leaf_b1_events", check_leaf_events_2, "tree_setup" },
		{ "leaf_b2_events", check_leaf_events_3, "tree_setup" },
		{ "parent_a_equals_sum", check_parent_a, "tree_setup" },
		{ "parent_b_equals_sum", check_parent_b, "tree_setup" },
		{ "test_root_equals_sum", check_parent_root, "tree_setup" },
		{ "hierarchy_root_covers_tree", check_hroot, "tree_setup" },
		{ "leaf_a1_pages_vs_pgsteal", check_pgsteal_0, "tree_setup" },
		{ "leaf_a2_pages_vs_pgsteal", check_pgsteal_1, "tree_setup" },
		{ "leaf_b1_pages_vs_pgsteal", check_pgsteal_2, "tree_setup" },
		{ "leaf_b2_pages_vs_pgsteal", check_pgsteal_3, "tree_setup" },
		{ "reread_stable", check_reread, "tree_setup" },
		{ "bpf_bookkeeping", check_bookkeeping, "tree_setup" },
		{ "tree_cleanup", check_cleanup, NULL },
	};
	struct utsname u;
	int major = 0, minor = 0, rc;

	if (argc > 2 || (argc == 2 && strcmp(argv[1], "--broken"))) {
		fprintf(stderr, "usage: %s [--broken]\n", argv[0]);
		return KSFT_FAIL;
	}
	broken = argc == 2;
	page_size = sysconf(_SC_PAGESIZE);
	wrep = mmap(NULL, sizeof(*wrep) * NUM_LEAVES, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (wrep == MAP_FAILED)
		return KSFT_FAIL;
	uname(&u);
	/* before 6.4 memcg reclaim counted freed slab in nr_reclaimed (see check_pgsteal) */
	if (sscanf(u.release, "%d.%d", &major, &minor) == 2)
		reclaim_counts_slab = major < 6 || (major == 6 && minor < 4);
	css_api = bu_has_func("css_rstat_flush");
	bu_capture_log();
	cg_on_signal(unlink_files);
	rc = checks_run(checks, ARRAY_SIZE(checks), NULL);
	if (check_passed("environment"))
		write_metrics(rc == KSFT_PASS);
	bpf_link__destroy(root_link);
	if (root_fd >= 0)
		close(root_fd);
	if (root_memory_by_us)	/* best effort: leave the root as we found it */
		cg_enable(mnt, "-memory");
	hierarchical_stats_bpf__destroy(skel);
	return rc;
}
