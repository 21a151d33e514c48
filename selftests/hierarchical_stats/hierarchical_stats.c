// SPDX-License-Identifier: GPL-2.0
/*
 * hierarchical_stats: memcg reclaim recorded per cgroup by BPF, summed up the
 * tree by rstat, read through a flushing cgroup iterator, while a worker in
 * each leaf of <cgroup2>/hierarchical_stats.<pid>/{a/{a1,a2},b/{b1,b2}} puts
 * page cache and anon memory in its leaf and writes its memory.reclaim; the
 * long story is test.toml's description.  --broken: the BPF flush does not
 * push to the parent, so parent_{a,b}_equals_sum must FAIL.  --storage: the
 * per-cgroup state in cgroup local storage instead of maps keyed by cgroup
 * id (hierarchical_stats_storage.bpf.c), every check the same.
 */
#include "selftest.h"

#include "reclaim_stats.h"
#include "hierarchical_stats.skel.h"
#include "hierarchical_stats_css.skel.h"
#include "hierarchical_stats_storage.skel.h"
#include "hierarchical_stats_storage_css.skel.h"

#define NUM_LEAVES 4
#define NCHUNKS 2		/* memory.reclaim writes per worker */
#define FILE_MB 32		/* page cache per leaf */
#define ANON_MB 16		/* anonymous memory per leaf */
#define RECLAIM_MB 16		/* memory.reclaim per leaf, in NCHUNKS writes */
#define MAX_RETRIES 5		/* of a memory.reclaim write failing EAGAIN/EINTR */
#define WORKER_TIMEOUT_S 120	/* alarm() in each worker */

/* the test's tree (parents with +memory), then the cgroup2 root (N_CG2) */
enum { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, N_B2, NUM_NODES, N_CG2 = NUM_NODES };

static struct cg_node nodes[NUM_NODES + 1] = {
	[N_ROOT] = { "root", -1, "+memory" }, [N_A] = { "a", N_ROOT, "+memory" },
	[N_A1] = { "a/a1", N_A }, [N_A2] = { "a/a2", N_A }, [N_B] = { "b", N_ROOT, "+memory" },
	[N_B1] = { "b/b1", N_B }, [N_B2] = { "b/b2", N_B }, [N_CG2] = { "cgroup2 root", -1 },
};
static struct bpf_link *links[NUM_NODES + 1];	/* SELF_ONLY iterators */

static const int leaf_node[NUM_LEAVES] = { N_A1, N_A2, N_B1, N_B2 };
static const int parent_node[3] = { N_A, N_B, N_ROOT };
/* children before parents: the first read exercises partial flushes */
static const int post_order[NUM_NODES] = { N_A1, N_A2, N_A, N_B1, N_B2, N_B, N_ROOT };

/* an iterator line: id; count, time_ns, pages; the same of own tasks; pending pages;
 * LRU pages (what memcg counts as pgsteal) and own LRU pages */
enum { R_ID, R_TOTAL, R_OWN = R_TOTAL + 3, R_PENDING = R_OWN + 3, R_LRU, R_OWN_LRU, R_N };
static const char *const stat_name[3] = { "count", "time_ns", "pages" };
/* the counters compared (total, own): count, time_ns, pages, lru_pages */
static const int total_at[4] = { R_TOTAL, R_TOTAL + 1, R_TOTAL + 2, R_LRU };
static const int own_at[4] = { R_OWN, R_OWN + 1, R_OWN + 2, R_OWN_LRU };
static const char *const counter_name[4] = { "count", "time_ns", "pages", "lru_pages" };
typedef unsigned long long rec_t[R_N];

/* a worker's report, in memory shared with the parent */
struct wreport {
	int done, err, ok, eagain, eintr, retries;	/* err: of the set-up */
	long long req_ok_bytes;		/* requested by successful writes */
	unsigned long long reclaim_ns;	/* wall time inside memory.reclaim writes */
	char log[1600];			/* one line per failed write */
};

static struct hierarchical_stats_bpf *skel;
static bool broken, storage, reclaim_counts_slab;
static const char *mnt;
static char leaf_file[NUM_LEAVES][CG_PATH_MAX + 64];
static long page_size;
static struct wreport *wrep;

/* measured around the reclaim (first[N_CG2]: the cgroup2 root), judged after it */
static struct {
	rec_t first[NUM_NODES + 1], second[NUM_NODES], hroot0;
	long long st0[NUM_LEAVES], st1[NUM_LEAVES];	/* pgsteal_direct + _proactive */
	struct rc_global g0, g1;
	long long miss0[8], miss1[8], vm0, vm1, other_memcg;
	const char *prog[8];	/* the programs of hierarchical_stats.bpf.c */
	int nprog;
	bool have_first, have_second, have_hroot;
	int retries, eagain, eintr;
	long long bpf_pages, lru_pages, pgsteal_pages, slack, max_over, slab[4];
} m;

static bool read_rec(int i, unsigned long long *r)
{
	char buf[1024];
	ssize_t got = bu_read_iter(links[i], buf, sizeof(buf) - 1);
	int used = -1;

	buf[got > 0 ? got : 0] = '\0';
	if (got > 0 &&
	    sscanf(buf, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu lru_pages=%llu own_lru_pages=%llu\n%n",
		   &r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7], &r[8], &r[9], &used) == R_N &&
	    used == got && r[R_ID] == nodes[i].id)
		return true;
	ksft_print_msg("%s: unexpected iterator output for id %llu (%s): '%.300s'\n",
		       nodes[i].rel, nodes[i].id, got < 0 ? strerror(-got) : "", buf);
	return false;
}

/* every node of the tree, in @order (NULL: parents first) */
static bool read_all(const int *order, rec_t *out)
{
	int k;

	for (k = 0; k < NUM_NODES; k++)
		if (!read_rec(order ? order[k] : k, out[order ? order[k] : k]))
			return false;
	return true;
}

/* node @i's @got == @want but for the id and pending; every difference printed */
static bool rec_same(int i, const unsigned long long *got, const unsigned long long *want,
		     const char *what)
{
	bool ok = true;
	int k;

	for (k = 0; k < 8; k++) {
		int at = k < 4 ? total_at[k] : own_at[k - 4];

		expect(&ok, got[at] == want[at], "%s: %s%s %llu, expected %llu (%s)", nodes[i].rel,
		       k < 4 ? "" : "own ", counter_name[k % 4], got[at], want[at], what);
	}
	return ok;
}

/* a leaf's pgsteal_direct + pgsteal_proactive (6.12+), -1 if missing */
static long long read_steal(int i)
{
	long long d = cg_read_key(nodes[leaf_node[i]].path, "memory.stat", "pgsteal_direct");
	long long p = cg_read_key(nodes[leaf_node[i]].path, "memory.stat", "pgsteal_proactive");

	return d < 0 ? -1 : d + (p > 0 ? p : 0);
}

/* .bss counters (both kinds of map error in g->map_errors), every program's recursion misses */
static void bpf_snapshot(struct rc_global *g, long long *miss)
{
	struct bpf_prog_info info;
	struct bpf_program *p;
	__u32 len;
	int j = 0;

	memcpy(g, (const void *)&skel->bss->rc, sizeof(*g));
	g->map_errors += skel->bss->rs_map_errors;
	bpf_object__for_each_program(p, skel->obj) {
		if (j == 8)
			break;
		memset(&info, 0, len = sizeof(info));
		m.prog[j] = bpf_program__name(p);
		miss[j++] = bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len) ?
			    -1 : (long long)info.recursion_misses;
	}
	m.nprog = j;
}

/* write (clean: memcg reclaim does not write back dirty pages) or read back the file */
static int file_pass(int fd, char *buf, bool write)
{
	long long off;

	for (off = 0; off < FILE_MB * MiB; off += MiB) {
		if (write)
			memset(buf, (int)(off / MiB) + 1, MiB);
		if ((write ? pwrite(fd, buf, MiB, off) : pread(fd, buf, MiB, off)) != MiB)
			return -1;
	}
	return write ? fsync(fd) : 0;
}

/* runs in its leaf (cg_spawn): memory charged to the leaf, then reclaim from inside */
static int worker(void *arg)
{
	struct wreport *r = arg;
	int li = r - wrep, fd, rfd = -1, j, t, e;
	char req[32], *buf = malloc(MiB), *anon = NULL;
	long long chunk = RECLAIM_MB * MiB / NCHUNKS, off;
	unsigned long long t0;
	size_t u;

	alarm(WORKER_TIMEOUT_S);	/* never hang the run */
	fd = open(leaf_file[li], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	r->done = !buf || fd < 0 || file_pass(fd, buf, true) ||
		  !(anon = cg_alloc_anon(ANON_MB * MiB)) ||
		  (rfd = cg_open(nodes[leaf_node[li]].path, "memory.reclaim", O_WRONLY)) < 0;
	r->err = r->done ? (errno ? errno : EIO) : 0;
	snprintf(req, sizeof(req), "%lld", chunk);
	for (j = 0; !r->err && j < NCHUNKS; j++) {
		pin_cpu(li + j);	/* each on another CPU (best effort) */
		for (t = 0;; t++) {	/* retried after re-creating the memory */
			t0 = now_ns();
			errno = 0;
			e = write(rfd, req, strlen(req)) == (ssize_t)strlen(req) ? 0 : errno ? errno : EIO;
			r->reclaim_ns += now_ns() - t0;
			r->eagain += e == EAGAIN;
			r->eintr += e == EINTR;
			if (!e) {
				r->ok++;
				r->req_ok_bytes += chunk;
				break;
			}
			u = strlen(r->log);	/* snprintf() keeps u < sizeof(r->log) */
			snprintf(r->log + u, sizeof(r->log) - u, "write %d try %d: %s (memory.current %lld)\n",
				 j, t + 1, strerror(e), cg_read_long(nodes[leaf_node[li]].path, "memory.current"));
			if ((e != EAGAIN && e != EINTR) || t == MAX_RETRIES)
				break;
			r->retries++;
			file_pass(fd, buf, false);
			for (off = 0; off < ANON_MB * MiB; off += page_size)
				anon[off]++;
		}
	}
	unlink(leaf_file[li]);
	r->done = 1;
	return r->err;
}

static int check_bpf_load_attach(void)
{
	bool css = bu_has_func("css_rstat_flush");
	const char *funcs[] = { "bpf_rstat_flush", css ? "css_rstat_updated" : "cgroup_rstat_updated",
				css ? "css_rstat_flush" : "cgroup_rstat_flush", "bpf_iter_cgroup", NULL };
	int err = BU_LOAD_RSTAT_STORE(skel, hierarchical_stats, NULL, storage);

	if (!err) {
		skel->bss->rs_broken = broken;
		return KSFT_PASS;
	}
	if (bu_missing_funcs(funcs))
		return check_skip("%s", bu_missing_funcs(funcs));
	return check_fail("loading/attaching the BPF programs: %s", strerror(-err));
}

/* node @i's SELF_ONLY iterator link (which holds the cgroup); false on error */
static bool attach_node(int i)
{
	links[i] = bu_attach_cgroup_iter(skel->progs.rc_dump, nodes[i].path,
					 BPF_CGROUP_ITER_SELF_ONLY);
	if (!links[i])
		check_fail("%s: iterator link: %s", nodes[i].path, strerror(errno));
	return links[i];
}

static int check_environment(void)
{
	const char *sd = getenv("HARNESS_SCRATCH");
	int i = cg_find_root(&mnt, "memory");

	if (i != KSFT_PASS)
		return i;
	snprintf(nodes[N_CG2].path, sizeof(nodes[N_CG2].path), "%s", mnt);
	nodes[N_CG2].id = cg_id(mnt);
	if (!attach_node(N_CG2))
		return KSFT_FAIL;
	/* a disk-backed scratch fs for real page cache */
	sd = sd && *sd ? sd : "/var/tmp";
	for (i = 0; i < NUM_LEAVES; i++)
		snprintf(leaf_file[i], sizeof(leaf_file[i]), "%s/hierarchical_stats.%d.%s",
			 sd, (int)getpid(), nodes[leaf_node[i]].rel + 2);
	return KSFT_PASS;
}

/* the cgroups and their links, all zero; the baselines */
static int check_tree_setup(void)
{
	int i, err = cg_tree_create(mnt, "hierarchical_stats", nodes, NUM_NODES);
	char p[CG_PATH_MAX + 32];
	bool ok;

	if (err)
		return err;
	for (i = 0; i < NUM_NODES; i++) {
		snprintf(p, sizeof(p), "%s/memory.reclaim", nodes[i].path);
		err = nodes[i].enable || !access(p, W_OK) ? 0 : errno;	/* a leaf's */
		if (err == ENOENT)
			return check_skip("no %s (kernel without memory.reclaim)", p);
		if (err)
			return check_fail("%s: %s", p, strerror(err));
		if (!attach_node(i))
			return KSFT_FAIL;
	}
	ok = read_all(post_order, m.first);
	for (i = 0; ok && i < NUM_NODES; i++)	/* m.second is still zero */
		ok = rec_same(i, m.first[i], m.second[i], "all zero in a fresh cgroup");
	ok &= read_rec(N_CG2, m.hroot0);
	for (i = 0; i < NUM_LEAVES; i++)
		expect(&ok, (m.st0[i] = read_steal(i)) >= 0, "%s/memory.stat: no pgsteal_direct",
		       nodes[leaf_node[i]].path);
	m.vm0 = cg_read_key("/proc", "vmstat", "pgsteal_direct");
	expect(&ok, m.vm0 >= 0, "/proc/vmstat has no pgsteal_direct");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the workers, then two reads with no reclaim in between: bottom-up, then top-down */
static int check_reclaim_induced(void)
{
	pid_t pid[NUM_LEAVES];
	struct wreport *r;
	bool ok = true;
	int i, st;

	bpf_snapshot(&m.g0, m.miss0);
	for (i = 0; i < NUM_LEAVES; i++)
		pid[i] = cg_spawn(nodes[leaf_node[i]].path, worker, &wrep[i]);
	for (i = 0, r = wrep; i < NUM_LEAVES; i++, r++) {
		st = pid[i] < 0 ? pid[i] : cg_wait(pid[i]);
		m.retries += r->retries;
		m.eagain += r->eagain;
		m.eintr += r->eintr;
		if (r->done && !r->err && r->ok == NCHUNKS)
			continue;
		ok = false;
		ksft_print_msg("%s: worker %s (exit %d; -1: killed, e.g. by its %d s alarm), set-up (scratch file, anon memory, memory.reclaim open) error '%s'; memory.reclaim writes ok %d of %d, EAGAIN %d, EINTR %d, retries %d\n",
			       nodes[leaf_node[i]].rel, r->done ? "reported" : "sent no report", st,
			       WORKER_TIMEOUT_S, r->err ? strerror(r->err) : "none", r->ok, NCHUNKS,
			       r->eagain, r->eintr, r->retries);
		print_block("  ", r->log);
	}
	m.have_first = read_all(post_order, m.first);
	m.have_second = read_all(NULL, m.second);
	for (i = 0; i < NUM_LEAVES; i++)	/* after the iterator flushed the leaves */
		m.st1[i] = read_steal(i);
	m.vm1 = cg_read_key("/proc", "vmstat", "pgsteal_direct");
	m.have_hroot = read_rec(N_CG2, m.first[N_CG2]);
	bpf_snapshot(&m.g1, m.miss1);
	return ok ? KSFT_PASS : check_fail("expected every worker to report and all %d memory.reclaim writes of %d MiB to succeed (at most %d retries each)",
					   NCHUNKS, RECLAIM_MB / NCHUNKS, MAX_RETRIES);
}

/* the checks of the leaves and of the parents run once each, in table order */
static int check_leaf_events(void)
{
	static int i;
	const struct wreport *w = &wrep[i];
	const unsigned long long *r = m.first[leaf_node[i]];
	const char *nm = nodes[leaf_node[i++]].rel;
	unsigned long long min_count = w->ok + w->eagain, min_pages = w->req_ok_bytes / page_size;
	bool ok = m.have_first && w->done;
	int k;

	for (k = 0; m.have_first && w->done && k < 3; k++)
		expect(&ok, r[R_TOTAL + k] && r[R_TOTAL + k] == r[R_OWN + k],
		       "%s: %s %llu, own %llu: expected > 0 and a leaf's total == its own", nm,
		       stat_name[k], r[R_TOTAL + k], r[R_OWN + k]);
	if (!ok)
		return KSFT_FAIL;
	/* a write reclaims at least once, succeeds once nr_reclaimed reaches the request */
	if (r[1] < min_count || r[3] < min_pages || r[2] > w->reclaim_ns)
		return check_fail("%s: expected count >= %llu (memory.reclaim writes that reclaimed or gave up), pages >= %llu (requested by successful writes), time_ns <= %llu (wall time inside the writes); got %llu, %llu, %llu",
				  nm, min_count, min_pages, w->reclaim_ns, r[1], r[3], r[2]);
	return KSFT_PASS;
}

static int check_parent(void)
{
	static int j;
	int p = parent_node[j++], c, k;
	const unsigned long long *r = m.first[p];
	unsigned long long sum;
	bool ok = m.have_first;

	for (k = 0; m.have_first && k < 4; k++) {	/* every mismatch reported */
		for (sum = 0, c = 0; c < NUM_NODES; c++)
			sum += nodes[c].parent == p ? m.first[c][total_at[k]] : 0;
		expect(&ok, r[total_at[k]] == sum + r[own_at[k]],
		       "%s: %s: expected the children's %llu + own %llu exactly, got %llu",
		       nodes[p].rel, counter_name[k], sum, r[own_at[k]], r[total_at[k]]);
		expect(&ok, !r[own_at[k]], "%s: own %s %llu: expected 0 (no task ran in it)",
		       nodes[p].rel, counter_name[k], r[own_at[k]]);
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_hierarchy_root_covers_tree(void)
{
	const unsigned long long *t = m.first[N_ROOT], *a = m.first[N_CG2], *b = m.hroot0;
	bool ok = m.have_first && m.have_hroot;
	int k;

	for (k = R_TOTAL; ok && k < R_OWN; k++)
		expect(&ok, a[k] >= b[k] && a[k] - b[k] >= t[k],
		       "cgroup2 root (id %llu): %s %llu -> %llu: expected growth >= the test root's %llu",
		       nodes[N_CG2].id, stat_name[k - R_TOTAL], b[k], a[k], t[k]);
	expect(&ok, a[R_LRU] >= b[R_LRU] && a[R_LRU] - b[R_LRU] >= t[R_LRU],
	       "cgroup2 root: lru_pages %llu -> %llu: expected growth >= the test root's %llu",
	       b[R_LRU], a[R_LRU], t[R_LRU]);
	if (ok)
		m.other_memcg = a[R_LRU] - b[R_LRU] - t[R_LRU];
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * pgsteal_direct(+_proactive) of a leaf, memcg's count of the pages reclaimed from the
 * leaf's LRU lists, against BPF's count of the same pages: mm_vmscan_lru_shrink_inactive's
 * nr_reclaimed in the leaf's own reclaim (its worker's).  Exact, but for what others
 * reclaimed from the leaf (global direct reclaim, /proc/vmstat pgsteal_direct; memcg
 * reclaim outside the tree, the cgroup2 root's LRU pages beyond the test root's) and what
 * the worker's reclaim took from others' lists (global direct reclaim again).  The end
 * event's nr_reclaimed (BPF pages) is the LRU pages plus, before 6.4, the slab pages the
 * reclaim freed: measured here (pages - lru_pages >= 0), 0 from 6.4, where memcg reclaim
 * no longer counts slab.  (Up to this round the check estimated that slab as the
 * reclaimed file pages' buffer heads + 16 pages and failed good 6.1 kernels a few pages
 * short of it: docs/selftests.md.)
 */
static int check_pgsteal(void)
{
	static int i;
	int li = i++;
	const char *nm = nodes[leaf_node[li]].rel;
	long long d = m.st1[li] - m.st0[li], bpf = m.first[leaf_node[li]][3];
	long long lru = m.first[leaf_node[li]][R_LRU];
	long long global = m.vm1 >= m.vm0 ? m.vm1 - m.vm0 : 0, slack = global + m.other_memcg;
	bool ok = true;

	if (!m.have_first || m.st1[li] < 0 || m.vm1 < 0)
		return check_fail("%s: BPF, memory.stat or /proc/vmstat unread", nm);
	m.bpf_pages += bpf;
	m.lru_pages += lru;
	m.pgsteal_pages += d;
	m.slack += slack;
	m.slab[li] = bpf - lru;
	m.max_over = d - lru > m.max_over ? d - lru : m.max_over;
	expect(&ok, lru - global <= d && d <= lru + slack,
	       "%s: pgsteal_direct +%lld, BPF's LRU pages %lld: expected equal, but for global direct reclaim %lld and memcg reclaim outside the tree %lld",
	       nm, d, lru, global, m.other_memcg);
	expect(&ok, reclaim_counts_slab ? bpf >= lru : bpf == lru,
	       "%s: BPF's reclaimed pages %lld, LRU pages %lld: expected %s", nm, bpf, lru,
	       reclaim_counts_slab ? "pages >= LRU pages (the rest is freed slab, before 6.4)" :
	       "equal (memcg reclaim counts no slab from 6.4)");
	if (reclaim_counts_slab)	/* with the estimate this check used before (4 KiB blocks) */
		ksft_print_msg("%s: freed slab counted as reclaimed: %lld pages (BPF pages %lld - LRU pages %lld); the old estimate %lld\n",
			       nm, bpf - lru, bpf, lru, (d + 31) / 32 + 16);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_reread_stable(void)
{
	bool ok = m.have_first && m.have_second;
	int i;

	for (i = 0; ok && i < NUM_NODES; i++)
		ok = rec_same(i, m.second[i], m.first[i], "the first read");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_bpf_bookkeeping(void)
{
	const struct rc_global *a = &m.g0, *b = &m.g1;
	bool ok = true;
	int j;

	for (j = 0; j < m.nprog; j++)	/* -1: recursion_misses unreadable */
		expect(&ok, m.miss1[j] == m.miss0[j], "%s: recursion misses %lld -> %lld",
		       m.prog[j], m.miss0[j], m.miss1[j]);
	expect(&ok, b->map_errors == a->map_errors && b->unmatched_end == a->unmatched_end &&
	       b->id_mismatch == a->id_mismatch,
	       "expected none during the run: end without begin %llu, map update failures %llu, cgroup id mismatches %llu",
	       b->unmatched_end - a->unmatched_end, b->map_errors - a->map_errors,
	       b->id_mismatch - a->id_mismatch);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static void unlink_files(void)
{
	int i;

	for (i = 0; i < NUM_LEAVES; i++)
		unlink(leaf_file[i]);	/* "" before check_environment(): ENOENT */
}

static int check_tree_cleanup(void)
{
	bool left = false;
	int i, failures;

	for (i = 0; i <= N_CG2; i++)
		bpf_link__destroy(links[i]);
	for (i = 0; i < NUM_LEAVES; i++)
		left |= unlink(leaf_file[i]) && errno != ENOENT;
	failures = cg_cleanup();	/* kills what is left in the tree */
	if (!nodes[N_ROOT].id)
		return check_skip("no cgroups were created");
	if (left || failures)
		return check_fail("%s%d cgroup(s) could not be removed",
				  left ? "scratch files left behind; " : "", failures);
	return KSFT_PASS;
}

int main(int argc, char **argv)
{
	static const struct check checks[] = {
		CHECK(bpf_load_attach),
		CHECK(environment, bpf_load_attach),
		CHECK(tree_setup, environment),
		CHECK(reclaim_induced, tree_setup),
		CHECK_BY(leaf_a1_events, check_leaf_events, tree_setup),
		CHECK_BY(leaf_a2_events, check_leaf_events, tree_setup),
		CHECK_BY(leaf_b1_events, check_leaf_events, tree_setup),
		CHECK_BY(leaf_b2_events, check_leaf_events, tree_setup),
		CHECK_BY(parent_a_equals_sum, check_parent, tree_setup),
		CHECK_BY(parent_b_equals_sum, check_parent, tree_setup),
		CHECK_BY(test_root_equals_sum, check_parent, tree_setup),
		CHECK(hierarchy_root_covers_tree, tree_setup),
		CHECK_BY(leaf_a1_pages_vs_pgsteal, check_pgsteal, tree_setup),
		CHECK_BY(leaf_a2_pages_vs_pgsteal, check_pgsteal, tree_setup),
		CHECK_BY(leaf_b1_pages_vs_pgsteal, check_pgsteal, tree_setup),
		CHECK_BY(leaf_b2_pages_vs_pgsteal, check_pgsteal, tree_setup),
		CHECK(reread_stable, tree_setup),
		CHECK(bpf_bookkeeping, tree_setup),
		CHECK(tree_cleanup),
	};
	int rc, i;

	broken = argc > 1 && !strcmp(argv[1], "--broken");
	storage = argc > 1 && !strcmp(argv[1], "--storage");
	page_size = sysconf(_SC_PAGESIZE);
	wrep = mmap(NULL, sizeof(*wrep) * NUM_LEAVES, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (wrep == MAP_FAILED)
		return KSFT_FAIL;
	/* before 6.4 memcg reclaim counted freed slab in nr_reclaimed (see check_pgsteal) */
	reclaim_counts_slab = kernel_version() < 604;
	cg_on_signal(unlink_files);
	rc = checks_run(checks, ARRAY_SIZE(checks), NULL);
	if (check_passed("environment")) {
		metrics_open();
		metrics_obj("retries");
		metrics_int("total", m.retries);
		metrics_int("eagain", m.eagain);
		metrics_int("eintr", m.eintr);
		metrics_obj("per_leaf");
		for (i = 0; i < NUM_LEAVES; i++)
			metrics_int(nodes[leaf_node[i]].rel, wrep[i].retries);
		metrics_end();
		metrics_end();
		metrics_obj("pages");
		metrics_int("bpf_leaves", m.bpf_pages);
		metrics_int("lru_leaves", m.lru_pages);
		metrics_int("pgsteal_direct_leaves", m.pgsteal_pages);
		metrics_int("allowed_slack", m.slack);
		metrics_int("max_pgsteal_minus_lru", m.max_over);
		metrics_arr("freed_slab_per_leaf");
		for (i = 0; i < NUM_LEAVES; i++)
			metrics_int(NULL, m.slab[i]);
		metrics_end();
		metrics_end();
		metrics_close();
	}
	hierarchical_stats_bpf__destroy(skel);
	return rc;
}
