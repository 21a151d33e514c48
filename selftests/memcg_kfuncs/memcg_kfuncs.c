// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs: the memcg kfuncs (patches/memcg-kfuncs) called from a
 * sleepable cgroup iterator, one SELF_ONLY link per cgroup (records:
 * memcg_kfuncs.h).  P = <cgroup2>/memcg_kfuncs.<pid> (+memory) holds C (the
 * worker's memory), N (no +memory) with leaf L (no memcg), E (no memory; read
 * through P's descendants walk) and H (memory.high: memory events).
 *
 * Tolerance: memory.stat and the kfuncs go through the same rate-limited
 * flush, which may leave TOL_UNITS = 2 * 64 (MEMCG_CHARGE_BATCH) * CPUs
 * updates unfolded: TOL_UNITS pages for page items, twice that for byte/KiB
 * items (an update of those is up to 2 pages of bytes), TOL_UNITS for counts;
 * usage (memory.current) TOL_UNITS pages; memory.events exact.  Agreement
 * checks take up to 3 attempts (a flush between the two reads; a wrong value
 * is off on every one); the freshness check 1, or 3 where the flush may
 * return before folding (< 6.8: the 6.1 backport).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>
#include <linux/types.h>

#include "check.h"
#include "cg_util.h"
#include "bpf_util.h"
#include "memcg_kfuncs.h"
#include "memcg_kfuncs.skel.h"
#include "memcg_kfuncs_neg.skel.h"

#define MEMCG_CHARGE_BATCH 64
#define ANON_BYTES	(64 * MiB)	/* anonymous, touched page by page */
#define SHMEM_BYTES	(16 * MiB)	/* a memfd, touched, unmapped */
#define MAPPED_BYTES	(8 * MiB)	/* a memfd, touched, kept mapped */
#define MORE_ANON_BYTES	(32 * MiB)	/* the freshness step */
/* the worker's own pages in C (copy-on-write stack, libc data): < 1 MiB */
#define SLACK_BYTES	(4 * MiB)
#define HIGH_BYTES	(4 * MiB)	/* H's memory.high */
#define WRITE_BYTES	(32 * MiB)	/* page cache written in H */

enum funit { U_PAGES, U_SUBPAGE, U_COUNT, U_EXACT };
enum src { S_STAT, S_EVENTS, S_SWAP_EVENTS, S_CURRENT };

static const char *const src_file[] = {
	"memory.stat", "memory.events", "memory.swap.events", "memory.current",
};

struct fdesc {
	const char *key;	/* in src_file[src] */
	const char *item;	/* the enum constant the BPF program passes */
	enum funit unit;
	enum src src;
	bool optional;		/* not in every kernel's file */
};

#define MK_FDESC(slot, key, item, unit, src, opt) { key, #item, unit, src, opt },
static const struct fdesc fdesc[NR_FIELDS] = { MK_FIELDS(MK_FDESC) };

#define MK_CALL(slot, call) call,
static const char *const pcall[NR_PROBES] = { MK_PROBES(MK_CALL) };

enum { CG_P, CG_C, CG_N, CG_L, CG_E, CG_H, NUM_CG };

static struct {
	const char *rel, *label;
	char path[CG_PATH_MAX];
	unsigned long long id;
	struct bpf_link *link;
} cgs[NUM_CG] = {
	[CG_P] = { "", "parent P" },
	[CG_C] = { "/child", "child C" },
	[CG_N] = { "/nomem", "nomem N" },
	[CG_L] = { "/nomem/leaf", "no-memcg leaf L" },
	[CG_E] = { "/flushed", "empty flushed E" },
	[CG_H] = { "/high", "memory.high H" },
};

static struct memcg_kfuncs_bpf *skel;
static struct bpf_link *walk_link;	/* P's DESCENDANTS_PRE walk, for E */
static const char *cg_mnt;
static bool root_memory_by_us;
static long page_size;
static long long tol_units;		/* 2 * MEMCG_CHARGE_BATCH * online CPUs */
static int kmaj, kmin;
static volatile pid_t worker_pid;
static char scratch_file[PATH_MAX];	/* H's page cache */
static int cmd_pipe[2] = { -1, -1 }, ack_pipe[2] = { -1, -1 };
static int probe_verdict[3] = { KSFT_FAIL, KSFT_FAIL, KSFT_FAIL };

/* the diagnostic of a failure; KSFT_FAIL */
static int __attribute__((format(printf, 1, 2))) fail(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ksft_print_msg("%s\n", buf);
	return KSFT_FAIL;
}

static bool kernel_before(int maj, int min)
{
	return kmaj < maj || (kmaj == maj && kmin < min);
}

static long long tol_of(int f)
{
	enum funit u = fdesc[f].unit;

	return u == U_EXACT ? 0 : u == U_COUNT ? tol_units :
	       (u == U_SUBPAGE ? 2 : 1) * tol_units * page_size;
}

/* One walk of @link in @mode: exactly one record of @len bytes, about @cgi. */
static int iter_rec(struct bpf_link *link, int cgi, int mode, void *rec, size_t len)
{
	static __u64 buf[(sizeof(struct mk_read_rec) + sizeof(struct mk_probe_rec)) / 4];
	__u64 magic = mode == MK_MODE_PROBE ? MK_MAGIC_PROBE : MK_MAGIC_READ;
	ssize_t n;

	skel->bss->mode = mode;
	skel->bss->records = 0;
	n = bu_read_iter(link, buf, sizeof(buf));
	if (n != (ssize_t)len || skel->bss->records != 1 || buf[0] != magic ||
	    buf[1] != cgs[cgi].id) {
		fail("iterator on %s: %zd bytes (expected %zu: one record), %u records, magic 0x%llx, cgroup id %llu (expected %llu)",
		     cgs[cgi].label, n, len, skel->bss->records, (unsigned long long)buf[0],
		     (unsigned long long)buf[1], cgs[cgi].id);
		return -EPROTO;
	}
	memcpy(rec, buf, len);
	return 0;
}

/* get + flush + every field of @cgi (E: through P's walk, no link pins it) */
static int read_rec(int cgi, struct mk_read_rec *r)
{
	int f, err;

	skel->bss->target_cgid = cgs[cgi].id;
	if (cgi == CG_E)
		err = iter_rec(walk_link, cgi, MK_MODE_TARGET, r, sizeof(*r));
	else
		err = iter_rec(cgs[cgi].link, cgi, MK_MODE_READ, r, sizeof(*r));
	if (err)
		return err;
	for (f = 0; f < NR_FIELDS; f++) {
		if (r->val[f] < 0) {
			fail("%s: read of %s (item %lld) gave %lld, expected >= 0 (-2: no memcg)",
			     cgs[cgi].label, fdesc[f].item, (long long)r->item[f],
			     (long long)r->val[f]);
			return -EPROTO;
		}
	}
	return 0;
}

static int check_load(void)
{
	int err;

	ksft_print_msg("%d.%d kernel, %ld online CPUs, page size %ld: tolerance %lld updates\n",
		       kmaj, kmin, sysconf(_SC_NPROCESSORS_ONLN), page_size, tol_units);
	skel = memcg_kfuncs_bpf__open();
	err = skel ? memcg_kfuncs_bpf__load(skel) : -errno;
	if (err)
		bu_print_log();
	return err ? fail("loading the iter.s/cgroup program: %s", strerror(-err)) : KSFT_PASS;
}

static int check_setup(void)
{
	char why[256], stat[CG_PATH_MAX + 16];
	struct bpf_program *prog = skel->progs.memcg_read;
	bool skip;
	int i, fd;

	cg_mnt = cg_root(why, sizeof(why), &skip);
	if (!cg_mnt || !cg_has_word(cg_mnt, "cgroup.controllers", "memory")) {
		check_skip_why("%s", cg_mnt ? "no memory controller" : why);
		return cg_mnt || skip ? KSFT_SKIP : KSFT_FAIL;
	}
	if (!cg_has_word(cg_mnt, "cgroup.subtree_control", "memory")) {
		if (cg_enable(cg_mnt, "+memory"))
			return fail("enabling +memory in %s: %s", cg_mnt, strerror(errno));
		root_memory_by_us = true;
	}
	for (i = 0; i < NUM_CG; i++) {
		snprintf(cgs[i].path, CG_PATH_MAX, "%s/memcg_kfuncs.%d%s", cg_mnt,
			 (int)getpid(), cgs[i].rel);
		/* memory for P's children (C, N, E, H), not for N's (L) */
		if (cg_create(cgs[i].path) || (i == CG_P && cg_enable(cgs[i].path, "+memory")))
			return fail("creating %s: %s", cgs[i].path, strerror(errno));
		cgs[i].id = cg_id(cgs[i].path);
	}
	for (i = 0; i < NUM_CG; i++) {
		ksft_print_msg("%-16s %s (id %llu)\n", cgs[i].label, cgs[i].path, cgs[i].id);
		snprintf(stat, sizeof(stat), "%s/memory.stat", cgs[i].path);
		if ((access(stat, F_OK) == 0) != (i != CG_L))
			return fail("%s: memory.stat %s", cgs[i].path,
				    i == CG_L ? "exists without +memory" : "missing");
		/* E has no link of its own (see check_no_reference()); P a walk too */
		fd = open(cgs[i].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (i != CG_E)
			cgs[i].link = bu_attach_cgroup_iter(prog, fd, BPF_CGROUP_ITER_SELF_ONLY);
		if (i == CG_P)
			walk_link = bu_attach_cgroup_iter(prog, fd, BPF_CGROUP_ITER_DESCENDANTS_PRE);
		close(fd);
		if ((i != CG_E && !cgs[i].link) || (i == CG_P && !walk_link)) {
			bu_print_log();
			return fail("attaching iterators to %s: %s", cgs[i].path, strerror(errno));
		}
	}
	return KSFT_PASS;
}

/* 0 for the flush, >= 0 for the valid calls, -EINVAL past them */
static bool probe_ok(int i, long long v)
{
	/* before 6.11 memcg keeps every node stat item: accepted (the 6.1 backport) */
	bool untracked_ok = i == P_NODE_UNTRACKED_A || i == P_NODE_UNTRACKED_B;

	if (i == P_FLUSH)
		return v == 0;
	if (i < P_FIRST_RANGE || (untracked_ok && kernel_before(6, 11)))
		return v >= 0;
	return v == -EINVAL;
}

/* bad_items_einval; untracked_items_einval and no_memcg_enoent give what it found */
static int check_probes(void)
{
	struct mk_probe_rec pr[2];
	bool ok[3] = { true, true, true };
	int i, grp;

	if (iter_rec(cgs[CG_P].link, CG_P, MK_MODE_PROBE, &pr[0], sizeof(pr[0])) ||
	    iter_rec(cgs[CG_L].link, CG_L, MK_MODE_PROBE, &pr[1], sizeof(pr[1])))
		return KSFT_FAIL;
	ksft_print_msg("on P: the valid calls >= 0, the others -1 (as -EINVAL); on L (no memcg): -ENOENT\n");
	ksft_print_msg("  %-50s %11s %14s %10s\n", "call", "item", "on P", "on L");
	for (i = 0; i < NR_PROBES; i++) {
		bool good = probe_ok(i, pr[0].res[i]) && pr[1].res[i] == -ENOENT;

		ksft_print_msg("  %-50s %11lld %14lld %10lld%s\n", pcall[i],
			       (long long)pr[0].item[i], (long long)pr[0].res[i],
			       (long long)pr[1].res[i], good ? "" : "   <-- WRONG");
		grp = i >= P_FIRST_UNTRACKED ? 1 : i >= P_FIRST_RANGE ? 0 : 2;
		ok[grp] &= good;
	}
	for (i = 0; i < 3; i++)
		probe_verdict[i] = ok[i] ? KSFT_PASS : KSFT_FAIL;
	return probe_verdict[0];
}

static int check_untracked(void)
{
	return probe_verdict[1];
}

static int check_no_memcg(void)
{
	return probe_verdict[2];
}

static int check_nonsleepable_flush(void)
{
	size_t sz;
	const void *elf = memcg_kfuncs_neg_bpf__elf_bytes(&sz);

	return bu_refused(elf, sz, "memcg_flush_in_plain_iter", "sleep") ? KSFT_PASS : KSFT_FAIL;
}

static int check_untrusted(void)
{
	static const char *const cases[][2] = {
		{ "get_untrusted", "must be a rcu pointer" },
		{ "read_untrusted", "must be referenced or trusted" },
		{ "vm_events_untrusted", "must be referenced or trusted" },
		{ "memory_events_untrusted", "must be referenced or trusted" },
		{ "usage_untrusted", "must be referenced or trusted" },
		{ "flush_untrusted", "must be referenced or trusted" },
		{ "leak", "Unreleased reference" },
		{ "put_unreferenced", "must be referenced or trusted" },
	};
	const void *elf;
	bool ok = true;
	size_t c, sz;

	if (kernel_before(6, 2)) {
		check_skip_why("kernel < 6.2: the kfuncs carry no KF_RCU or KF_TRUSTED_ARGS there (see the 6.1 cover letter)");
		return KSFT_SKIP;
	}
	elf = memcg_kfuncs_neg_bpf__elf_bytes(&sz);
	for (c = 0; c < ARRAY_SIZE(cases); c++)
		ok &= bu_refused(elf, sz, cases[c][0], cases[c][1]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* @bytes touched page by page: anonymous (@fd < 0) or of memfd @fd, mapped or not */
static int alloc(long long bytes, int fd, bool keep_mapped)
{
	int flags = fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED;
	long long off;
	char *p;

	if (fd >= 0 && ftruncate(fd, bytes))
		return errno;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, fd, 0);
	if (p == MAP_FAILED)
		return errno;
	madvise(p, bytes, MADV_NOHUGEPAGE);	/* one fault per page */
	for (off = 0; off < bytes; off += page_size)
		p[off] = 1;			/* a write: a real page */
	if (!keep_mapped)
		munmap(p, bytes);
	return 0;
}

/* in C: the memory, an ack (0 or errno); +MORE_ANON_BYTES per command byte */
static int worker(void *arg)
{
	int err, fd[2];
	char c;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close(cmd_pipe[1]);
	close(ack_pipe[0]);
	err = alloc(ANON_BYTES, -1, true);
	fd[0] = memfd_create("shmem", MFD_CLOEXEC);
	fd[1] = memfd_create("mapped", MFD_CLOEXEC);
	err = err ?: fd[0] < 0 || fd[1] < 0 ? errno : alloc(SHMEM_BYTES, fd[0], false);
	err = err ?: alloc(MAPPED_BYTES, fd[1], true);
	while (write(ack_pipe[1], &err, sizeof(err)) == sizeof(err) && !err &&
	       read(cmd_pipe[0], &c, 1) == 1)
		err = alloc(MORE_ANON_BYTES, -1, true);
	return 0;
}

/* the worker's answer: 0 or a positive errno (EPIPE: it died) */
static int worker_ack(void)
{
	int err;

	return read(ack_pipe[0], &err, sizeof(err)) == sizeof(err) ? err : EPIPE;
}

/* the worker and H's file go; async-signal-safe (also run on SIGTERM) */
static void stop_worker(void)
{
	if (worker_pid > 0 && !kill(worker_pid, SIGKILL))
		waitpid(worker_pid, NULL, 0);
	worker_pid = 0;
	if (scratch_file[0])
		unlink(scratch_file);
}

static int check_charge(void)
{
	int err;

	if (pipe2(cmd_pipe, O_CLOEXEC) || pipe2(ack_pipe, O_CLOEXEC))
		return fail("pipe: %s", strerror(errno));
	worker_pid = cg_spawn(cgs[CG_C].path, worker, NULL);
	close(cmd_pipe[0]);
	close(ack_pipe[1]);
	err = worker_pid < 0 ? -worker_pid : worker_ack();
	if (err)
		return fail("worker in %s: %s", cgs[CG_C].path, strerror(err));
	ksft_print_msg("worker pid %d in %s: %lld MiB anon, %lld MiB shmem, %lld MiB of it mapped\n",
		       (int)worker_pid, cgs[CG_C].path, ANON_BYTES / MiB,
		       (SHMEM_BYTES + MAPPED_BYTES) / MiB, MAPPED_BYTES / MiB);
	return KSFT_PASS;
}

static bool in_range(const char *what, long long v, long long lo, long long hi, bool print)
{
	bool ok = v >= lo && v <= hi;

	if (print)
		ksft_print_msg("  %-34s %14lld  expected [%lld, %lld]%s\n", what, v, lo, hi,
			       ok ? "" : "   <-- WRONG");
	return ok;
}

static int check_amounts(void)
{
	long long tp = tol_units * page_size, all = SHMEM_BYTES + MAPPED_BYTES;
	struct mk_read_rec r;
	bool ok = true;

	if (read_rec(CG_C, &r))
		return KSFT_FAIL;
	ksft_print_msg("created: tolerance %lld B (%lld pages), slack %lld MiB for the worker's own pages\n",
		       tp, tol_units, SLACK_BYTES / MiB);
	ok &= in_range("anon", r.val[F_ANON], ANON_BYTES - tp, ANON_BYTES + SLACK_BYTES + tp, 1);
	ok &= in_range("shmem (both memfds)", r.val[F_SHMEM], all - tp, all + tp, 1);
	ok &= in_range("file", r.val[F_FILE], all - tp, all + SLACK_BYTES + tp, 1);
	ok &= in_range("file_mapped", r.val[F_FILE_MAPPED], MAPPED_BYTES - tp,
		       MAPPED_BYTES + SLACK_BYTES + tp, 1);
	ok &= in_range("pgfault (>= pages touched)", r.val[F_PGFAULT],
		       (ANON_BYTES + MAPPED_BYTES) / page_size - tol_units, LLONG_MAX, 1);
	/* shmem pages are swap-backed: on the anon LRUs with the anon pages */
	ok &= in_range("inactive_anon + active_anon",
		       r.val[F_INACTIVE_ANON] + r.val[F_ACTIVE_ANON],
		       ANON_BYTES + all - 2 * tp, LLONG_MAX, 1);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* @s: "key value" lines; the value of @key, or -1 */
static long long key_val(const char *s, const char *key)
{
	size_t kl = strlen(key);

	for (; s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (!strncmp(s, key, kl) && s[kl] == ' ')
			return strtoll(s + kl + 1, NULL, 10);
	return -1;
}

/* @r against @src of @cgi; the number of fields off (all printed if @all) */
static int compare(const struct mk_read_rec *r, int cgi, enum src src, bool all)
{
	static char buf[16384];
	bool have = cg_read(cgs[cgi].path, src_file[src], buf, sizeof(buf)) > 0;
	int f, bad = 0;

	if (all)
		ksft_print_msg("  %-24s %14s %14s %10s %10s\n", "field", "kfunc", src_file[src],
			       "diff", "tolerance");
	for (f = 0; f < NR_FIELDS; f++) {
		long long v, d, tol = tol_of(f);
		bool wrong;

		if (fdesc[f].src != src)
			continue;
		v = !have ? -1 : src == S_CURRENT ? strtoll(buf, NULL, 10) : key_val(buf, fdesc[f].key);
		if (v < 0 && fdesc[f].optional)
			continue;	/* not in this kernel's file */
		d = r->val[f] - v;
		wrong = v < 0 || d > tol || d < -tol;
		bad += wrong;
		if (wrong || all)
			ksft_print_msg("  %-24s %14lld %14lld %10lld %10lld%s\n", fdesc[f].key,
				       (long long)r->val[f], v, d, tol, wrong ? "   <-- WRONG" : "");
	}
	return bad;
}

/* a fresh kfunc read of @cgi agrees with its @src file; up to 3 attempts */
static bool agree(int cgi, enum src src, struct mk_read_rec *out)
{
	struct mk_read_rec tmp, *r = out ?: &tmp;
	int attempt, bad = 0;

	for (attempt = 1; attempt <= 3; attempt++) {
		if (read_rec(cgi, r))
			return false;
		ksft_print_msg("%s, attempt %d: kfuncs (flush + read) vs %s:\n", cgs[cgi].label,
			       attempt, src_file[src]);
		bad = compare(r, cgi, src, attempt == 1);
		if (!bad || attempt == 3)
			break;
		ksft_print_msg("%d field(s) outside tolerance; retrying in 200 ms\n", bad);
		usleep(200000);
	}
	return !bad;
}

static int check_child_stat(void)
{
	return agree(CG_C, S_STAT, NULL) ? KSFT_PASS : KSFT_FAIL;
}

static int check_parent_stat(void)
{
	return agree(CG_P, S_STAT, NULL) ? KSFT_PASS : KSFT_FAIL;
}

static int check_hierarchy(void)
{
	struct mk_read_rec p, c;
	bool ok = true;
	int f;

	if (read_rec(CG_C, &c) || read_rec(CG_P, &p))
		return KSFT_FAIL;
	ksft_print_msg("every field of P must be >= C - tolerance; anon/file/shmem/file_mapped/pgfault P = C +- tolerance (only C has tasks)\n");
	ksft_print_msg("  %-24s %14s %14s %10s %10s\n", "field", "parent P", "child C", "P - C",
		       "tolerance");
	for (f = 0; f < NR_FIELDS; f++) {
		long long d = p.val[f] - c.val[f], tol = tol_of(f);
		bool close_req = f <= F_FILE_MAPPED || f == F_PGFAULT;
		bool bad = d < -tol || (close_req && d > tol);

		ok &= !bad;
		ksft_print_msg("  %-24s %14lld %14lld %10lld %10lld%s%s\n", fdesc[f].key,
			       (long long)p.val[f], (long long)c.val[f], d, tol,
			       close_req ? "  (P ~= C)" : "", bad ? "   <-- WRONG" : "");
	}
	if (!ok)
		ksft_print_msg("P's values do not include C's: a non-hierarchical (local-only) fetch?\n");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* C's and P's anon grew by the step, their faults by its pages */
static bool fresh(const struct mk_read_rec r0[2], const struct mk_read_rec r1[2], bool print)
{
	long long tp = tol_units * page_size, want = MORE_ANON_BYTES;
	long long faults = MORE_ANON_BYTES / page_size - tol_units;
	bool ok = true;
	int k;

	for (k = 0; k < 2; k++) {
		ok &= in_range(k ? "P anon growth" : "C anon growth",
			       r1[k].val[F_ANON] - r0[k].val[F_ANON], want - tp,
			       want + SLACK_BYTES + tp, print);
		ok &= in_range(k ? "P pgfault growth" : "C pgfault growth",
			       r1[k].val[F_PGFAULT] - r0[k].val[F_PGFAULT], faults, LLONG_MAX, print);
	}
	return ok;
}

static int check_staleness(void)
{
	int err, attempt, max_attempts = kernel_before(6, 8) ? 3 : 1;
	struct mk_read_rec r0[2], r1[2];
	bool ok;

	if (read_rec(CG_C, &r0[0]) || read_rec(CG_P, &r0[1]))
		return KSFT_FAIL;
	err = write(cmd_pipe[1], "+", 1) == 1 ? worker_ack() : EPIPE;
	if (err)
		return fail("worker: +%lld MiB anon: %s", MORE_ANON_BYTES / MiB, strerror(err));
	ksft_print_msg("+%lld MiB anon touched in C; read with a flush, %d attempt(s) allowed\n",
		       MORE_ANON_BYTES / MiB, max_attempts);
	/* < 6.8 (6.1): the flush is a trylock that may give up while another runs */
	for (attempt = 1;; attempt++) {
		if (read_rec(CG_C, &r1[0]) || read_rec(CG_P, &r1[1]))
			return KSFT_FAIL;
		if (attempt == max_attempts || fresh(r0, r1, false))
			break;
		ksft_print_msg("attempt %d: not fresh yet (C anon +%lld B); retrying\n", attempt,
			       (long long)(r1[0].val[F_ANON] - r0[0].val[F_ANON]));
		usleep(200000);
	}
	ok = fresh(r0, r1, true);
	ksft_print_msg("C and P after the step, kfuncs vs memory.stat (mismatches only):\n");
	ok &= !compare(&r1[0], CG_C, S_STAT, false);
	ok &= !compare(&r1[1], CG_P, S_STAT, false);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_usage(void)
{
	long long tp = tol_units * page_size;
	struct mk_read_rec c = {}, p = {};
	bool ok = agree(CG_C, S_CURRENT, &c);

	ok &= agree(CG_P, S_CURRENT, &p);
	ksft_print_msg("usage(): C %lld B, P %lld B; C must be > 0, P >= C - %lld\n",
		       (long long)c.val[F_USAGE], (long long)p.val[F_USAGE], tp);
	ok &= c.val[F_USAGE] > 0 && p.val[F_USAGE] >= c.val[F_USAGE] - tp;
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in H: WRITE_BYTES of page cache to @arg, synced as it goes (reclaimable) */
static int write_over_high(void *arg)
{
	static char chunk[256 * 1024];
	int fd = open(arg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	long long done;

	memset(chunk, 0x5a, sizeof(chunk));
	for (done = 0; fd >= 0 && done < WRITE_BYTES; done += sizeof(chunk))
		if (write(fd, chunk, sizeof(chunk)) != sizeof(chunk) || fdatasync(fd))
			return 1;
	return fd < 0 ? 2 : 0;
}

static int check_memory_events(void)
{
	const char *dir = getenv("HARNESS_SCRATCH") ?: "/tmp";
	char *path = scratch_file, high[32];
	struct mk_read_rec h = {}, p = {};
	struct statfs sfs;
	bool ok = true;
	int k, st;

	if (statfs(dir, &sfs) || sfs.f_type == TMPFS_MAGIC) {
		check_skip_why("%s is no disk file system: no reclaimable page cache", dir);
		return KSFT_SKIP;
	}
	snprintf(path, PATH_MAX, "%s/memcg_kfuncs.%d", dir, (int)getpid());
	snprintf(high, sizeof(high), "%lld", HIGH_BYTES);
	st = cg_write(cgs[CG_H].path, "memory.high", high);
	st = st ?: cg_run(cgs[CG_H].path, write_over_high, path);
	unlink(path);
	path[0] = '\0';
	if (st)
		return fail("writing to %s from H (memory.high %s): %d", dir, high, st);
	for (k = 0; k < 4; k++)
		ok &= agree(k < 2 ? CG_H : CG_P, k % 2 ? S_SWAP_EVENTS : S_EVENTS, k < 2 ? &h : &p);
	ksft_print_msg("%lld MiB written over memory.high %s: MEMCG_HIGH H %lld, P %lld; H must be > 0, P >= H\n",
		       WRITE_BYTES / MiB, high, (long long)h.val[F_EV_HIGH],
		       (long long)p.val[F_EV_HIGH]);
	ok &= h.val[F_EV_HIGH] > 0 && p.val[F_EV_HIGH] >= h.val[F_EV_HIGH];
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The put must drop the get's reference: E, got + flushed + put 8 times and
 * removed, must leave P's dying descendants within 10 s.  E has no link of
 * its own (a link pins its cgroup until an RCU tasks-trace grace period
 * after it is destroyed): it is read through P's descendants walk.
 */
static int check_no_reference(void)
{
	long long before, now = -1;
	struct mk_read_rec r;
	int k, tries, err;

	before = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
	for (k = 0; k < 8; k++)
		if (read_rec(CG_E, &r))
			return KSFT_FAIL;
	err = cg_destroy(cgs[CG_E].path);
	if (before < 0 || err)
		return fail("nr_dying_descendants of P %lld, removing E: %s", before, strerror(-err));
	for (tries = 0; tries < 100; tries++) {
		now = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
		if (now >= 0 && now <= before)
			break;
		usleep(100000);
	}
	ksft_print_msg("P's nr_dying_descendants: %lld before removing E (flushed 8 times), %lld after %d.%d s\n",
		       before, now, tries / 10, tries % 10);
	if (now >= 0 && now <= before)
		return KSFT_PASS;
	return fail("E is still dying: a reference to its memcg (or cgroup) was never dropped");
}

static int check_cleanup(void)
{
	int i, failed;

	stop_worker();
	bpf_link__destroy(walk_link);
	for (i = 0; i < NUM_CG; i++)
		bpf_link__destroy(cgs[i].link);
	memcg_kfuncs_bpf__destroy(skel);
	if (!cgs[CG_P].path[0]) {
		check_skip_why("no cgroups were created");
		return KSFT_SKIP;
	}
	failed = cg_destroy_all();
	if (root_memory_by_us)
		cg_enable(cg_mnt, "-memory");	/* best effort: the root as we found it */
	return failed ? KSFT_FAIL : KSFT_PASS;
}

int main(void)
{
	static const char *const need[] = {
		"bpf_iter_cgroup", "bpf_get_mem_cgroup", "bpf_get_root_mem_cgroup",
		"bpf_put_mem_cgroup", "bpf_mem_cgroup_flush_stats", "bpf_mem_cgroup_page_state",
		"bpf_mem_cgroup_vm_events", "bpf_mem_cgroup_memory_events",
		"bpf_mem_cgroup_usage", NULL,
	};
	static const struct check checks[] = {
		{ "load_sleepable_iter", check_load, NULL },
		{ "cgroup_setup", check_setup, "load_sleepable_iter" },
		/* first: a missing check would hit a WARN_ONCE that fires once per boot */
		{ "bad_items_einval", check_probes, "cgroup_setup" },
		{ "untracked_items_einval", check_untracked, "cgroup_setup" },
		{ "no_memcg_enoent", check_no_memcg, "cgroup_setup" },
		{ "nonsleepable_flush_rejected", check_nonsleepable_flush, NULL },
		{ "untrusted_cgroup_rejected", check_untrusted, NULL },
		{ "charge_memory_in_child", check_charge, "cgroup_setup" },
		{ "child_values_match_created", check_amounts, "charge_memory_in_child" },
		{ "child_matches_memory_stat", check_child_stat, "charge_memory_in_child" },
		{ "parent_matches_memory_stat", check_parent_stat, "charge_memory_in_child" },
		{ "parent_includes_child", check_hierarchy, "charge_memory_in_child" },
		{ "flush_makes_new_memory_visible", check_staleness, "charge_memory_in_child" },
		{ "usage_matches_memory_current", check_usage, "charge_memory_in_child" },
		{ "memory_events_match_memory_events", check_memory_events, "cgroup_setup" },
		{ "flush_keeps_no_reference", check_no_reference, "cgroup_setup" },
		{ "cgroup_cleanup", check_cleanup, NULL },
	};
	struct utsname u;

	bu_capture_log();
	cg_on_signal(stop_worker);
	page_size = sysconf(_SC_PAGESIZE);
	tol_units = 2LL * MEMCG_CHARGE_BATCH * sysconf(_SC_NPROCESSORS_ONLN);
	if (!uname(&u))
		sscanf(u.release, "%d.%d", &kmaj, &kmin);
	return checks_run(checks, ARRAY_SIZE(checks), bu_missing_funcs(need));
}
