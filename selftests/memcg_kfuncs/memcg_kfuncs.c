// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs: the memcg kfuncs called from a sleepable cgroup iterator, one
 * SELF_ONLY link per cgroup.  P = <cgroup2>/memcg_kfuncs.<pid> (+memory) holds
 * C (the worker's memory), N (no +memory) with leaf L (no memcg), E (read via
 * P's descendants walk) and H (memory.high).  The kfuncs and memory.stat share
 * a rate-limited flush that may leave TOL = 2 * 64 (MEMCG_CHARGE_BATCH) * CPUs
 * updates unfolded: TOL pages (twice for byte/KiB items), TOL counts, events
 * exact; agreement gets 3 attempts, freshness 1 (3 before 6.8: 6.1's flush).
 */
#include "selftest.h"
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <linux/magic.h>

#include "memcg_kfuncs.h"
#include "memcg_kfuncs.skel.h"
#include "memcg_kfuncs_neg.skel.h"

#define ANON_BYTES	(64 * MiB)	/* anonymous, touched page by page */
#define SHMEM_BYTES	(16 * MiB)	/* a memfd, touched, unmapped */
#define MAPPED_BYTES	(8 * MiB)	/* a memfd, touched, kept mapped */
#define MORE_ANON_BYTES	(32 * MiB)	/* the freshness step */
#define SLACK_BYTES	(4 * MiB)	/* the worker's own pages in C: < 1 MiB */
#define HIGH_BYTES	(4 * MiB)	/* H's memory.high */
#define WRITE_BYTES	(32 * MiB)	/* page cache written in H */

static const struct {
	const char *key, *call;	/* key in its file; the kfunc and item */
	bool optional;		/* not in every kernel's file */
} fdesc[NR_FIELDS] = {
#define MK_FDESC(key, kind, item, opt) { #key, #kind "(" #item ")", opt },
	MK_FIELDS(MK_FDESC)
};
#define MK_PKIND(kind, item) K_##kind,
static const enum mk_kind pkind[NR_PROBES] = { MK_PROBES(MK_PKIND) };
#define MK_PCALL(kind, item) #kind "(" #item ")",
static const char *const pcall[NR_PROBES] = { MK_PROBES(MK_PCALL) };

enum { CG_P, CG_C, CG_N, CG_L, CG_E, CG_H, NUM_CG };

/* memory for P's children (C, N, E, H), not for N's (L) */
static struct cg_node cgs[NUM_CG] = {
	[CG_P] = { "P", -1, "+memory" }, [CG_C] = { "child", CG_P }, [CG_N] = { "nomem", CG_P },
	[CG_L] = { "nomem/leaf", CG_N }, [CG_E] = { "flushed", CG_P }, [CG_H] = { "high", CG_P },
};
static struct bpf_link *links[NUM_CG];	/* SELF_ONLY */

static struct memcg_kfuncs_bpf *skel;
static const void *neg_elf;		/* memcg_kfuncs_neg.bpf.o: refused programs */
static size_t neg_sz;
static struct bpf_link *walk_link;	/* P's DESCENDANTS_PRE walk, for E */
static long page_size;
static long long tol_units, tp;	/* TOL; in pages' bytes */
static int kver;		/* 611 for 6.11 */
static volatile pid_t worker_pid;
static char scratch_file[PATH_MAX];	/* H's page cache */
static int sv[2] = { -1, -1 };	/* the worker's socket: commands, acks */

/* the file a field is compared with */
static const char *file_of(int f)
{
	return f < F_low ? "memory.stat" : f < F_swap_high ? "memory.events" :
	       f < F_usage ? "memory.swap.events" : "memory.current";
}

/* MK_FIELDS' units: pages, bytes or KiB, counts, events; usage in pages */
static long long tol_of(int f)
{
	/*
	 * usage() and memory.current read the same page counter, which no flush
	 * stands between: exact (agree() retries only a charge landing between
	 * the two reads), so a usage off by a page cannot pass.
	 */
	if (f == F_usage)
		return 0;
	if (f < F_kernel_stack)
		return tp;
	return f < F_workingset_refault_anon ? 2 * tp : f < F_low ? tol_units : 0;
}

/*
 * One walk of @cgi's link, MK_MODE_PROBE or READ (E: MK_MODE_TARGET on P's
 * walk, no link pins it): exactly one record about @cgi, every read >= 0.
 */
static int read_rec(int cgi, struct mk_rec *r, bool probe)
{
	static struct mk_rec buf[2];
	int f, mode = probe ? MK_MODE_PROBE : cgi == CG_E ? MK_MODE_TARGET : MK_MODE_READ;
	ssize_t n;

	skel->bss->mode = mode;
	skel->bss->records = 0;
	skel->bss->target_cgid = cgs[cgi].id;
	n = bu_read_iter(cgi == CG_E ? walk_link : links[cgi], buf, sizeof(buf));
	if (n != (ssize_t)sizeof(*r) || skel->bss->records != 1 || buf[0].magic != MK_MAGIC + mode ||
	    buf[0].cgid != cgs[cgi].id)
		return check_fail("iterator on %c: %zd bytes (expected %zu), %u records (1), magic 0x%llx (0x%llx), cgroup id %llu (%llu)",
				  "PCNLEH"[cgi], n, sizeof(*r), skel->bss->records,
				  (unsigned long long)buf[0].magic, MK_MAGIC + mode,
				  (unsigned long long)buf[0].cgid, cgs[cgi].id);
	*r = buf[0];
	for (f = 0; f < NR_FIELDS && !probe; f++)
		if (r->val[f] < 0)
			return check_fail("%c: %s (item %lld) gave %lld, expected >= 0 (-2: no memcg)",
					  "PCNLEH"[cgi], fdesc[f].call,
					  (long long)r->item[f], (long long)r->val[f]);
	return 0;
}

static int check_load_sleepable_iter(void)
{
	skel = memcg_kfuncs_bpf__open_and_load();
	if (!skel)
		bu_print_log();
	return skel ? KSFT_PASS : check_fail("loading the iter.s/cgroup program: %s", strerror(errno));
}

static int check_cgroup_setup(void)
{
	struct bpf_program *prog = skel->progs.memcg_read;
	const char *mnt;
	int i = cg_find_root(&mnt, "memory") ?: cg_tree_create(mnt, "memcg_kfuncs", cgs, NUM_CG);

	if (i != KSFT_PASS)
		return i;
	walk_link = bu_attach_cgroup_iter(prog, cgs[CG_P].path, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	for (i = 0; i < NUM_CG; i++) {
		if ((cg_read_key(cgs[i].path, "memory.stat", "anon") >= 0) != (i != CG_L))
			return check_fail("%s: memory.stat %s", cgs[i].path,
					  i == CG_L ? "exists without +memory" : "missing");
		/* E has no link of its own (see check_flush_keeps_no_reference()) */
		if (i != CG_E)
			links[i] = bu_attach_cgroup_iter(prog, cgs[i].path, BPF_CGROUP_ITER_SELF_ONLY);
		if (!walk_link || (i != CG_E && !links[i])) {
			bu_print_log();
			return check_fail("attaching iterators to %s: %s", cgs[i].path, strerror(errno));
		}
	}
	return KSFT_PASS;
}

/* bad_items_einval, untracked_items_einval, no_memcg_enoent (valid calls on L):
 * one probe walk of P and L, judged over three calls */
static int check_probes(void)
{
	static int verdict[3], calls;
	struct mk_rec p, l;
	int i, grp;

	if (calls++)
		return verdict[calls - 1];
	if (read_rec(CG_P, &p, true) || read_rec(CG_L, &l, true))
		return verdict[1] = verdict[2] = KSFT_FAIL;
	for (i = 0; i < NR_PROBES; i++) {
		long long v = p.val[i];
		/* on P the flush 0, the valid calls >= 0, the others -EINVAL; before
		 * 6.11 memcg keeps every node stat item (the 6.1 backport) */
		bool valid = i < P_FIRST_RANGE ||
			     (i >= P_FIRST_UNTRACKED && pkind[i] == K_state && kver < 611);

		grp = i >= P_FIRST_UNTRACKED ? 1 : i >= P_FIRST_RANGE ? 0 : 2;
		if (!(pkind[i] == K_flush ? v == 0 : valid ? v >= 0 : v == -EINVAL) ||
		    l.val[i] != -ENOENT)
			verdict[grp] = check_fail("%s = %lld: on P %lld (%s), on L %lld (-ENOENT)",
						  pcall[i], (long long)p.item[i], v,
						  valid ? ">= 0" : "-EINVAL", (long long)l.val[i]);
	}
	return verdict[0];
}

static int check_nonsleepable_flush_rejected(void)
{
	return bu_refused(neg_elf, neg_sz, "memcg_flush_in_plain_iter", "sleep") ? KSFT_PASS : KSFT_FAIL;
}

static int check_untrusted_cgroup_rejected(void)
{
	static const char *const cases[][2] = {
		{ "get_untrusted", "must be a rcu pointer" }, { "leak", "Unreleased reference" },
		{ "read_untrusted" }, { "vm_events_untrusted" }, { "memory_events_untrusted" },
		{ "usage_untrusted" }, { "flush_untrusted" }, { "put_unreferenced" },
		{ "get_unchecked", "Possibly NULL pointer" },
		{ "get_root_unchecked", "Possibly NULL pointer" },
	};
	bool ok = true;
	size_t c;

	if (kver < 602)
		return check_skip("kernel < 6.2: the kfuncs carry no KF_RCU or KF_TRUSTED_ARGS there (see the 6.1 cover letter)");
	for (c = 0; c < ARRAY_SIZE(cases); c++)
		ok &= bu_refused(neg_elf, neg_sz, cases[c][0],
				 cases[c][1] ?: "must be referenced or trusted");
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
	err = alloc(ANON_BYTES, -1, true);
	fd[0] = memfd_create("shmem", MFD_CLOEXEC);
	fd[1] = memfd_create("mapped", MFD_CLOEXEC);
	err = err ?: fd[0] < 0 || fd[1] < 0 ? errno : alloc(SHMEM_BYTES, fd[0], false);
	err = err ?: alloc(MAPPED_BYTES, fd[1], true);
	while (write(sv[1], &err, sizeof(err)) == sizeof(err) && !err && read(sv[1], &c, 1) == 1)
		err = alloc(MORE_ANON_BYTES, -1, true);
	return 0;
}

/* @cmd (if any) to the worker, its answer: 0 or a positive errno (EPIPE: it died) */
static int worker_ack(const char *cmd)
{
	int err;

	if (cmd && write(sv[0], cmd, 1) != 1)
		return EPIPE;
	return read(sv[0], &err, sizeof(err)) == sizeof(err) ? err : EPIPE;
}

/* the worker and H's file go; async-signal-safe (also run on SIGTERM) */
static void stop_worker(void)
{
	cg_reap(&worker_pid);
	if (scratch_file[0])
		unlink(scratch_file);
}

static int check_charge_memory_in_child(void)
{
	int err;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return check_fail("socketpair: %s", strerror(errno));
	worker_pid = cg_spawn(cgs[CG_C].path, worker, NULL);
	close(sv[1]);	/* the worker's death: EOF */
	err = worker_pid < 0 ? -worker_pid : worker_ack(NULL);
	return err ? check_fail("worker in %s: %s", cgs[CG_C].path, strerror(err)) : KSFT_PASS;
}

/* *@ok &= lo <= @v <= hi, said when not and @print */
static void in_range(bool *ok, bool print, const char *what, long long v, long long lo,
		     long long hi)
{
	if (v >= lo && v <= hi)
		return;
	*ok = false;
	if (print)
		ksft_print_msg("%s %lld, expected [%lld, %lld]\n", what, v, lo, hi);
}

static int check_child_values_match_created(void)
{
	long long all = SHMEM_BYTES + MAPPED_BYTES;
	struct mk_rec r;
	bool ok = true;

	if (read_rec(CG_C, &r, false))
		return KSFT_FAIL;
	in_range(&ok, 1, "anon", r.val[F_anon], ANON_BYTES - tp, ANON_BYTES + SLACK_BYTES + tp);
	in_range(&ok, 1, "shmem (both memfds)", r.val[F_shmem], all - tp, all + tp);
	in_range(&ok, 1, "file", r.val[F_file], all - tp, all + SLACK_BYTES + tp);
	in_range(&ok, 1, "file_mapped", r.val[F_file_mapped], MAPPED_BYTES - tp,
		 MAPPED_BYTES + SLACK_BYTES + tp);
	in_range(&ok, 1, "pgfault (>= pages touched)", r.val[F_pgfault],
		 (ANON_BYTES + MAPPED_BYTES) / page_size - tol_units, LLONG_MAX);
	/* shmem pages are swap-backed: on the anon LRUs with the anon pages */
	in_range(&ok, 1, "inactive_anon + active_anon",
		 r.val[F_inactive_anon] + r.val[F_active_anon], ANON_BYTES + all - 2 * tp,
		 LLONG_MAX);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* @r against @file of @cgi; the number of fields off (said if @print) */
static int compare(const struct mk_rec *r, int cgi, const char *file, bool print)
{
	static char buf[16384];
	bool have = cg_read(cgs[cgi].path, file, buf, sizeof(buf)) > 0;
	int f, bad = 0;

	for (f = 0; f < NR_FIELDS; f++) {
		const char *key = fdesc[f].key + (f >= F_swap_high && f < F_usage ? 5 : 0);
		long long v, d, tol = tol_of(f);

		if (strcmp(file_of(f), file))
			continue;
		v = !have ? -1 : f == F_usage ? strtoll(buf, NULL, 10) : key_value(buf, key);
		if (v < 0 && fdesc[f].optional)
			continue;	/* not in this kernel's file */
		d = r->val[f] - v;
		if (v >= 0 && d <= tol && d >= -tol)
			continue;
		bad++;
		if (print)
			ksft_print_msg("%c %s %s: kfunc %lld, file %lld, diff %lld, tolerance %lld\n",
				       "PCNLEH"[cgi], file, key, (long long)r->val[f], v,
				       d, tol);
	}
	return bad;
}

/* a fresh kfunc read of @cgi agrees with its @file; up to 3 attempts */
static bool agree(int cgi, const char *file, struct mk_rec *out)
{
	struct mk_rec tmp, *r = out ?: &tmp;
	int attempt, bad = 1;

	for (attempt = 1; bad && attempt <= 3; attempt++) {
		if (attempt > 1)
			usleep(200000);
		if (read_rec(cgi, r, false))
			return false;
		bad = compare(r, cgi, file, attempt == 3);
	}
	return !bad;
}

/* child_matches_memory_stat, then parent_matches_memory_stat */
static int check_matches_memory_stat(void)
{
	static int calls;

	return agree(calls++ ? CG_P : CG_C, "memory.stat", NULL) ? KSFT_PASS : KSFT_FAIL;
}

/* every field of P >= C - tolerance; anon/file/shmem/file_mapped/pgfault ~= C */
static int check_parent_includes_child(void)
{
	struct mk_rec p, c;
	bool ok = true;
	int f;

	if (read_rec(CG_C, &c, false) || read_rec(CG_P, &p, false))
		return KSFT_FAIL;
	for (f = 0; f < NR_FIELDS; f++) {
		long long d = p.val[f] - c.val[f], tol = tol_of(f);
		bool close_req = f <= F_file_mapped || f == F_pgfault;	/* only C has tasks */

		expect(&ok, d >= -tol && (!close_req || d <= tol),
		       "%s: P %lld, C %lld, P - C %lld, tolerance %lld%s", fdesc[f].call,
		       (long long)p.val[f], (long long)c.val[f], d, tol,
		       close_req ? " (P ~= C)" : " (P >= C: a local-only fetch?)");
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_flush_makes_new_memory_visible(void)
{
	int k, err, attempt, last = kver < 608 ? 3 : 1;
	long long want = MORE_ANON_BYTES;
	struct mk_rec r0[2], r1[2];
	bool ok = false;

	if (read_rec(CG_C, &r0[0], false) || read_rec(CG_P, &r0[1], false))
		return KSFT_FAIL;
	err = worker_ack("+");
	if (err)
		return check_fail("worker: +%lld MiB anon: %s", want / MiB, strerror(err));
	/* < 6.8 (6.1): the flush is a trylock that may give up while another runs */
	for (attempt = 1; !ok && attempt <= last; attempt++) {
		if (attempt > 1)
			usleep(200000);
		if (read_rec(CG_C, &r1[0], false) || read_rec(CG_P, &r1[1], false))
			return KSFT_FAIL;
		/* C's and P's anon grew by the step, their faults by its pages */
		for (k = 0, ok = true; k < 2; k++) {
			in_range(&ok, attempt == last, k ? "P anon growth" : "C anon growth",
				 r1[k].val[F_anon] - r0[k].val[F_anon], want - tp,
				 want + SLACK_BYTES + tp);
			in_range(&ok, attempt == last, k ? "P pgfault growth" : "C pgfault growth",
				 r1[k].val[F_pgfault] - r0[k].val[F_pgfault],
				 want / page_size - tol_units, LLONG_MAX);
		}
	}
	ok &= !compare(&r1[0], CG_C, "memory.stat", true);
	ok &= !compare(&r1[1], CG_P, "memory.stat", true);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_usage_matches_memory_current(void)
{
	struct mk_rec c = {}, p = {};
	bool ok = agree(CG_C, "memory.current", &c);

	ok &= agree(CG_P, "memory.current", &p);
	expect(&ok, c.val[F_usage] > 0 && p.val[F_usage] >= c.val[F_usage] - tp,
	       "usage(): C %lld B (> 0), P %lld B (>= C - %lld)", (long long)c.val[F_usage],
	       (long long)p.val[F_usage], tp);
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

static int check_memory_events_match_memory_events(void)
{
	const char *dir = getenv("HARNESS_SCRATCH") ?: "/tmp";
	char *path = scratch_file, high[32];
	struct mk_rec h = {}, p = {};
	struct statfs sfs;
	bool ok = true;
	int k, st;

	if (statfs(dir, &sfs) || sfs.f_type == TMPFS_MAGIC)
		return check_skip("%s is no disk file system: no reclaimable page cache", dir);
	snprintf(path, PATH_MAX, "%s/memcg_kfuncs.%d", dir, (int)getpid());
	snprintf(high, sizeof(high), "%lld", HIGH_BYTES);
	st = cg_write(cgs[CG_H].path, "memory.high", high);
	st = st ?: cg_run(cgs[CG_H].path, write_over_high, path);
	unlink(path);
	path[0] = '\0';
	if (st)
		return check_fail("writing to %s from H (memory.high %s): %d", dir, high, st);
	for (k = 0; k < 4; k++)
		ok &= agree(k < 2 ? CG_H : CG_P, k % 2 ? "memory.swap.events" : "memory.events", k < 2 ? &h : &p);
	expect(&ok, h.val[F_high] > 0 && p.val[F_high] >= h.val[F_high],
	       "%lld MiB written over memory.high %s: MEMCG_HIGH H %lld (> 0), P %lld (>= H)",
	       WRITE_BYTES / MiB, high, (long long)h.val[F_high], (long long)p.val[F_high]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* E, got + flushed + put 8 times and removed, must stop dying within 10 s; read
 * through P's walk: a link would pin it until an RCU tasks-trace grace period */
static int check_flush_keeps_no_reference(void)
{
	long long before, now = -1;
	struct mk_rec r;
	int k, tries, err;

	before = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
	for (k = 0; k < 8; k++)
		if (read_rec(CG_E, &r, false))
			return KSFT_FAIL;
	err = cg_destroy(cgs[CG_E].path);
	if (before < 0 || err)
		return check_fail("nr_dying_descendants of P %lld, removing E: %s", before,
				  strerror(-err));
	for (tries = 0; tries < 100; tries++, usleep(100000)) {
		now = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
		if (now >= 0 && now <= before)
			return KSFT_PASS;
	}
	return check_fail("E still dying after 10 s (P's nr_dying_descendants %lld, %lld before): a reference to its memcg (or cgroup) never dropped",
			  now, before);
}

static int check_cgroup_cleanup(void)
{
	int i;

	stop_worker();
	bpf_link__destroy(walk_link);
	for (i = 0; i < NUM_CG; i++)
		bpf_link__destroy(links[i]);
	memcg_kfuncs_bpf__destroy(skel);
	if (!cgs[CG_P].path[0])
		return check_skip("no cgroups were created");
	return cg_cleanup() ? KSFT_FAIL : KSFT_PASS;
}

int main(void)
{
	static const char *const need[] = { "bpf_iter_cgroup", "bpf_get_mem_cgroup",
		"bpf_get_root_mem_cgroup", "bpf_put_mem_cgroup", "bpf_mem_cgroup_flush_stats",
		"bpf_mem_cgroup_page_state", "bpf_mem_cgroup_vm_events",
		"bpf_mem_cgroup_memory_events", "bpf_mem_cgroup_usage", NULL };
	static const struct check checks[] = {
		CHECK(load_sleepable_iter),
		CHECK(cgroup_setup, load_sleepable_iter),
		/* first: a missing check would hit a WARN_ONCE that fires once per boot */
		CHECK_BY(bad_items_einval, check_probes, cgroup_setup),
		CHECK_BY(untracked_items_einval, check_probes, cgroup_setup),
		CHECK_BY(no_memcg_enoent, check_probes, cgroup_setup),
		CHECK(nonsleepable_flush_rejected),
		CHECK(untrusted_cgroup_rejected),
		CHECK(charge_memory_in_child, cgroup_setup),
		CHECK(child_values_match_created, charge_memory_in_child),
		CHECK_BY(child_matches_memory_stat, check_matches_memory_stat, charge_memory_in_child),
		CHECK_BY(parent_matches_memory_stat, check_matches_memory_stat, charge_memory_in_child),
		CHECK(parent_includes_child, charge_memory_in_child),
		CHECK(flush_makes_new_memory_visible, charge_memory_in_child),
		CHECK(usage_matches_memory_current, charge_memory_in_child),
		CHECK(memory_events_match_memory_events, cgroup_setup),
		CHECK(flush_keeps_no_reference, cgroup_setup),
		CHECK(cgroup_cleanup),
	};
	neg_elf = memcg_kfuncs_neg_bpf__elf_bytes(&neg_sz);
	cg_on_signal(stop_worker);
	page_size = sysconf(_SC_PAGESIZE);
	tol_units = 2LL * 64 /* MEMCG_CHARGE_BATCH */ * sysconf(_SC_NPROCESSORS_ONLN);
	tp = tol_units * page_size;
	kver = kernel_version();
	return checks_run(checks, ARRAY_SIZE(checks), bu_missing_funcs(need));
}
