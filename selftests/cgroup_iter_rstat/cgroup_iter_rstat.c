// SPDX-License-Identifier: GPL-2.0
/*
 * cgroup_iter_rstat: a sleepable cgroup iterator calling the rstat flush
 * kfunc (cgroup_rstat_flush, css_rstat_flush from 6.16) on every cgroup of
 * the tree <cgroup2>/cgroup_iter_rstat.<pid>/{a/{a1,a2},b/{b1}}.  The
 * ANCESTORS_UP, DESCENDANTS_PRE and SELF_ONLY walks must report what was
 * created (ids == st_ino, levels, pre-order, one flush per cgroup, CPU time
 * burnt in a1 flushed up to a and the root), and the same call from a
 * non-sleepable iterator must be refused by the verifier.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bpf_util.h"
#include "cg_util.h"
#include "check.h"
#include "cgroup_iter_rstat.skel.h"
#include "cgroup_iter_rstat_css.skel.h"

#define SPIN_NS (20ULL * 1000 * 1000)	/* CPU time burnt in a1 */
#define MAX_RECS 64

enum { N_ROOT, N_A, N_B, N_A1, N_A2, N_B1, NUM_NODES };

static struct node {
	const char *rel;	/* below the test root ("" = the root) */
	int parent, depth;
	char path[CG_PATH_MAX];
	unsigned long long ino;
} nodes[NUM_NODES] = {
	[N_ROOT] = { "", -1, 0 },	[N_A] = { "a", N_ROOT, 1 },
	[N_B] = { "b", N_ROOT, 1 },	[N_A1] = { "a/a1", N_A, 2 },
	[N_A2] = { "a/a2", N_A, 2 },	[N_B1] = { "b/b1", N_B, 2 },
};

struct rec {
	unsigned long long seq, id, cpu_ns;
	int level;
};

/* one walk of the iterator, parsed */
struct walk {
	char raw[16384];
	int n, bad, after_end;
	struct rec recs[MAX_RECS];
	bool have_end;
	unsigned int end_visited, end_flushed, bss_visited, bss_flushed;
	char first_bad[128];
};

static struct cgroup_iter_rstat_bpf *skel;
static bool css_api;
static const char *mnt;
static int anc_level = -1;
static struct walk pre;
static bool pre_ran;
static int pos[NUM_NODES], rec_node[MAX_RECS];
static unsigned long long *spin_ns;	/* shared with the burner child */
static int spin_status;

static const char *node_name(int n)
{
	return n < 0 ? "?" : n == N_ROOT ? "<root>" : nodes[n].rel;
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

static void parse(struct walk *w)
{
	char copy[sizeof(w->raw)], *line, *save;
	struct rec r;
	int used;

	memcpy(copy, w->raw, sizeof(copy));
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		used = -1;
		if (sscanf(line, "cgroup seq=%llu id=%llu level=%d cpu_ns=%llu%n",
			   &r.seq, &r.id, &r.level, &r.cpu_ns, &used) == 4 && !line[used]) {
			w->after_end += w->have_end;
			if (w->n < MAX_RECS)
				w->recs[w->n] = r;
			w->n++;
			continue;
		}
		used = -1;
		if (!w->have_end && sscanf(line, "end visited=%u flushed=%u%n", &w->end_visited,
					   &w->end_flushed, &used) == 2 && !line[used]) {
			w->have_end = true;
			continue;
		}
		if (!w->bad++)
			snprintf(w->first_bad, sizeof(w->first_bad), "%s", line);
	}
}

/* one walk of @order from the cgroup @n; false (diagnosed) if it did not run */
static bool run_walk(int n, enum bpf_cgroup_iter_order order, struct walk *w)
{
	int fd = open(nodes[n].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct bpf_link *link;
	ssize_t len;

	memset(w, 0, sizeof(*w));
	skel->bss->visited = 0;
	skel->bss->flushed = 0;
	bu_log_reset();
	link = fd < 0 ? NULL : bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump, fd, order);
	if (!link) {
		ksft_print_msg("attaching the iterator (order %d) to %s: %s\n", order,
			       nodes[n].path, strerror(errno));
		bu_print_log();
		if (fd >= 0)
			close(fd);
		return false;
	}
	len = bu_read_iter(link, w->raw, sizeof(w->raw) - 1);
	bpf_link__destroy(link);
	close(fd);
	if (len < 0 || len == sizeof(w->raw) - 1) {
		ksft_print_msg("reading the iterator: %s\n",
			       len < 0 ? strerror(-len) : "output too long");
		return false;
	}
	w->raw[len] = '\0';
	w->bss_visited = skel->bss->visited;
	w->bss_flushed = skel->bss->flushed;
	parse(w);
	return true;
}

/* every line parsed, the epilogue last; @lines: the cgroup lines expected (-1: any) */
static void expect_wellformed(bool *ok, const struct walk *w, int lines)
{
	expect(ok, lines < 0 ? w->n && w->n <= MAX_RECS : w->n == lines,
	       "expected %s%d cgroup lines, got %d\n", lines < 0 ? "1.." : "",
	       lines < 0 ? MAX_RECS : lines, w->n);
	expect(ok, !w->bad, "%d malformed line(s); first: '%s'\n", w->bad, w->first_bad);
	expect(ok, w->have_end,
	       "epilogue line ('end visited=...') missing: the NULL-cgroup call did not happen\n");
	expect(ok, !w->after_end, "%d cgroup line(s) after the epilogue\n", w->after_end);
}

static void print_walk(const char *what, const struct walk *w)
{
	ksft_print_msg("%s iterator output (%zu bytes):\n", what, strlen(w->raw));
	print_block("  | ", w->raw);
}

/* does the kernel's BTF prove a feature missing?  (then SKIP, with the reason) */
static bool missing_feature(void)
{
	const char *flush = css_api ? "css_rstat_flush" : "cgroup_rstat_flush";
	const char *why = bu_missing_funcs((const char *const[]){ "bpf_iter_cgroup", flush, NULL });

	if (why)
		check_skip_why("%s", why);
	return why;
}

static int check_load(void)
{
	int err;

	skel = calloc(1, sizeof(*skel));
	err = skel ? cgroup_iter_rstat_bpf__create_skeleton(skel) : -ENOMEM;
	err = err ?: BU_OPEN_RSTAT(skel, cgroup_iter_rstat_css_bpf);
	if (!err) {
		bpf_program__set_autoload(skel->progs.rstat_flush_in_plain_iter, false);
		err = cgroup_iter_rstat_bpf__load(skel);
	}
	if (!err)
		return KSFT_PASS;
	bu_print_log();
	cgroup_iter_rstat_bpf__destroy(skel);
	skel = NULL;
	if (missing_feature())
		return KSFT_SKIP;
	ksft_print_msg("loading the sleepable iter.s/cgroup program: %s\n", strerror(-err));
	return KSFT_FAIL;
}

static int check_setup(void)
{
	char why[256], base[64];
	bool skip;
	int i, err;

	mnt = cg_root(why, sizeof(why), &skip);
	if (!mnt) {
		if (skip) {
			check_skip_why("%s", why);
			return KSFT_SKIP;
		}
		ksft_print_msg("%s\n", why);
		return KSFT_FAIL;
	}
	snprintf(base, sizeof(base), "cgroup_iter_rstat.%d", getpid());
	for (i = 0; i < NUM_NODES; i++) {
		snprintf(nodes[i].path, sizeof(nodes[i].path), "%s/%s%s%s", mnt, base,
			 i ? "/" : "", nodes[i].rel);
		err = cg_create(nodes[i].path);
		nodes[i].ino = cg_id(nodes[i].path);
		if (err || !nodes[i].ino) {
			ksft_print_msg("mkdir %s: %s\n", nodes[i].path, strerror(-err));
			return KSFT_FAIL;
		}
	}
	ksft_print_msg("cgroup2 at %s (id %llu); tree root %s\n", mnt, cg_id(mnt),
		       nodes[N_ROOT].path);
	for (i = 0; i < NUM_NODES; i++)
		ksft_print_msg("  %-6s depth %d st_ino %llu\n", node_name(i), nodes[i].depth,
			       nodes[i].ino);
	return KSFT_PASS;
}

/* the walk up from the test root: its length gives the root's level */
static int check_ancestors(void)
{
	static struct walk w;
	bool ok = true;
	int i;

	if (!run_walk(N_ROOT, BPF_CGROUP_ITER_ANCESTORS_UP, &w))
		return KSFT_FAIL;
	expect_wellformed(&ok, &w, -1);
	if (ok && expect(&ok, w.n >= 2, "expected at least 2 cgroups (test root and its parent), got %d\n",
		   w.n) &&
	    expect(&ok, w.recs[0].id == nodes[N_ROOT].ino && w.recs[1].id == cg_id(mnt),
		   "expected ids %llu (test root), %llu (%s), got %llu, %llu\n", nodes[N_ROOT].ino,
		   cg_id(mnt), mnt, w.recs[0].id, w.recs[1].id))
		anc_level = w.n - 1;	/* does not depend on the level field */
	for (i = 0; w.n >= 2 && i < w.n && i < MAX_RECS; i++)
		expect(&ok, w.recs[i].level == w.n - 1 - i,
		       "ancestor #%d (id %llu): expected level %d, got %d\n", i, w.recs[i].id,
		       w.n - 1 - i, w.recs[i].level);
	if (!ok)
		print_walk("ANCESTORS_UP", &w);
	if (anc_level >= 0)
		ksft_print_msg("test root %s: id %llu, level %d (walk from it to the hierarchy root visited %d cgroups)\n",
			       nodes[N_ROOT].path, nodes[N_ROOT].ino, anc_level, w.n);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in a1: burn SPIN_NS of process CPU time (10 s at most), the time burnt into *arg */
static int burn_cpu(void *arg)
{
	unsigned long long *ns = arg, w0 = now_ns();
	clock_t t0 = clock();	/* counted from here: already in a1 */

	do {
		*ns = (clock() - t0) * (1000000000ULL / CLOCKS_PER_SEC);
	} while (*ns < SPIN_NS && now_ns() - w0 < 10000000000ULL);
	return 0;
}

static int nrecs(void)
{
	return pre.n < MAX_RECS ? pre.n : MAX_RECS;
}

/* burn CPU in a1, then one DESCENDANTS_PRE walk that the next checks judge */
static int check_pre_read(void)
{
	bool ok = true;
	int i;

	spin_ns = mmap(NULL, sizeof(*spin_ns), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	spin_status = spin_ns == MAP_FAILED ? -ENOMEM : cg_run(nodes[N_A1].path, burn_cpu, spin_ns);
	pre_ran = run_walk(N_ROOT, BPF_CGROUP_ITER_DESCENDANTS_PRE, &pre);
	if (!pre_ran)
		return KSFT_FAIL;
	expect_wellformed(&ok, &pre, -1);
	for (i = 0; i < nrecs(); i++)
		expect(&ok, pre.recs[i].seq == (unsigned long long)i,
		       "line %d: expected seq=%d, got seq=%llu\n", i, i, pre.recs[i].seq);
	print_walk("DESCENDANTS_PRE", &pre);
	for (i = 0; i < NUM_NODES; i++)
		pos[i] = -1;
	for (i = 0; i < nrecs(); i++) {
		rec_node[i] = node_by_id(pre.recs[i].id);
		if (rec_node[i] >= 0 && pos[rec_node[i]] < 0)
			pos[rec_node[i]] = i;
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int pre_skip(void)
{
	check_skip_why("pre-order iteration failed");
	return KSFT_SKIP;
}

/* the set of ids is the set of created directories' inodes */
static int check_pre_ids(void)
{
	bool ok = true;
	int i, nd;

	if (!pre_ran)
		return pre_skip();
	for (i = 0; i < nrecs(); i++) {
		nd = rec_node[i];
		expect(&ok, nd >= 0 && pos[nd] == i, "line %d: id %llu %s %s\n", i, pre.recs[i].id,
		       node_name(nd), nd < 0 ? "is not one of the created cgroups" :
		       "was reported before");
	}
	for (i = 0; i < NUM_NODES; i++)
		expect(&ok, pos[i] >= 0, "cgroup %s (st_ino %llu) missing from iterator output\n",
		       nodes[i].path, nodes[i].ino);
	if (!ok) {
		ksft_print_msg("expected %d ids, got %d lines\n", NUM_NODES, pre.n);
		for (i = 0; i < NUM_NODES; i++)
			ksft_print_msg("  expected: %-6s st_ino %llu\n", node_name(i), nodes[i].ino);
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* level == the root's level (from ANCESTORS_UP) + depth */
static int check_pre_levels(void)
{
	bool ok = true;
	int i, base;

	if (!pre_ran)
		return pre_skip();
	if (pos[N_ROOT] < 0) {
		ksft_print_msg("test root not reported; cannot check levels\n");
		return KSFT_FAIL;
	}
	base = pre.recs[pos[N_ROOT]].level;
	if (anc_level < 0)
		ksft_print_msg("root level unknown (ANCESTORS_UP walk failed); checking relative to the reported root level %d\n",
			       base);
	else if (!expect(&ok, base == anc_level,
			 "test root: expected level %d (from ANCESTORS_UP walk), got %d\n",
			 anc_level, base))
		base = anc_level;
	for (i = N_ROOT + 1; i < NUM_NODES; i++)
		expect(&ok, pos[i] < 0 || pre.recs[pos[i]].level == base + nodes[i].depth,
		       "%s: expected level %d (root %d + depth %d), got %d\n", node_name(i),
		       base + nodes[i].depth, base, nodes[i].depth,
		       pos[i] < 0 ? -1 : pre.recs[pos[i]].level);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* root first, parent before child, every subtree right after its root */
static int check_pre_order(void)
{
	int i, j, k, par, size;
	bool ok = true;

	if (!pre_ran)
		return pre_skip();
	for (i = 0; i < NUM_NODES; i++)
		expect(&ok, pos[i] >= 0, "%s missing; cannot fully check order\n", node_name(i));
	if (ok)
		expect(&ok, !pos[N_ROOT], "test root: expected at position 0, got %d\n", pos[N_ROOT]);
	for (i = 0; ok && i < NUM_NODES; i++) {
		par = nodes[i].parent;
		expect(&ok, par < 0 || pos[par] < pos[i],
		       "%s at position %d, but its parent %s at %d (expected parent first)\n",
		       node_name(i), pos[i], node_name(par), par < 0 ? -1 : pos[par]);
		for (k = 0, size = 0; k < NUM_NODES; k++)
			size += is_ancestor_or_self(i, k);
		for (j = pos[i]; j < pos[i] + size && j < nrecs(); j++)
			expect(&ok, rec_node[j] >= 0 && is_ancestor_or_self(i, rec_node[j]),
			       "position %d: expected a member of %s's subtree (positions %d..%d), got %s\n",
			       j, node_name(i), pos[i], pos[i] + size - 1, node_name(rec_node[j]));
	}
	for (i = 0; !ok && i < nrecs(); i++)
		ksft_print_msg("  position %d: %s\n", i, node_name(rec_node[i]));
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the program got past the kfunc call for every cgroup */
static int check_flush_count(void)
{
	unsigned int n = pre.n;
	bool ok = true;

	if (!pre_ran)
		return pre_skip();
	expect(&ok, pre.bss_flushed == n && pre.bss_visited == n,
	       "BPF counters: expected flushed=%u visited=%u, got flushed=%u visited=%u\n",
	       n, n, pre.bss_flushed, pre.bss_visited);
	expect(&ok, pre.have_end && pre.end_flushed == n && pre.end_visited == n,
	       "epilogue: expected flushed=%u visited=%u, got%s flushed=%u visited=%u\n",
	       n, n, pre.have_end ? "" : " no epilogue,", pre.end_flushed, pre.end_visited);
	expect(&ok, n == NUM_NODES, "expected %d cgroups flushed, got %u\n", NUM_NODES, n);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the CPU time burnt in a1 (before the walk) is in a1, a and the root */
static int check_flush_cputime(void)
{
	unsigned long long c[NUM_NODES], burnt;
	bool ok = true;
	int i;

	if (!pre_ran)
		return pre_skip();
	if (spin_status) {
		ksft_print_msg("CPU burner in %s failed (status %d)\n", nodes[N_A1].path,
			       spin_status);
		return KSFT_FAIL;
	}
	burnt = *spin_ns;
	for (i = 0; i < NUM_NODES; i++) {
		if (pos[i] < 0) {
			ksft_print_msg("%s missing from output\n", node_name(i));
			return KSFT_FAIL;
		}
		c[i] = pre.recs[pos[i]].cpu_ns;
	}
	ksft_print_msg("flushed cpu_ns: root=%llu a=%llu a1=%llu a2=%llu b=%llu b1=%llu (burnt in a1: %llu)\n",
		       c[N_ROOT], c[N_A], c[N_A1], c[N_A2], c[N_B], c[N_B1], burnt);
	expect(&ok, c[N_A1] >= burnt, "a/a1: expected >= %llu ns (burnt there)\n", burnt);
	expect(&ok, c[N_A] >= c[N_A1] + c[N_A2], "a: expected >= a1 + a2 = %llu ns\n",
	       c[N_A1] + c[N_A2]);
	expect(&ok, c[N_B] >= c[N_B1], "b: expected >= b1 = %llu ns\n", c[N_B1]);
	expect(&ok, c[N_ROOT] >= c[N_A] + c[N_B], "root: expected >= a + b = %llu ns\n",
	       c[N_A] + c[N_B]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_self_only(void)
{
	const struct node *leaf = &nodes[N_A2];
	static struct walk w;
	bool ok = true;

	if (!run_walk(N_A2, BPF_CGROUP_ITER_SELF_ONLY, &w))
		return KSFT_FAIL;
	expect_wellformed(&ok, &w, 1);
	if (w.n >= 1) {
		expect(&ok, w.recs[0].id == leaf->ino, "expected id %llu (%s), got %llu (%s)\n",
		       leaf->ino, leaf->path, w.recs[0].id, node_name(node_by_id(w.recs[0].id)));
		expect(&ok, anc_level < 0 || w.recs[0].level == anc_level + leaf->depth,
		       "expected level %d, got %d\n", anc_level + leaf->depth, w.recs[0].level);
	}
	expect(&ok, w.bss_flushed == 1 && w.bss_visited == 1,
	       "BPF counters: expected flushed=1 visited=1, got flushed=%u visited=%u\n",
	       w.bss_flushed, w.bss_visited);
	if (!ok)
		print_walk("SELF_ONLY", &w);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the same kfunc call from a non-sleepable iter/cgroup program */
static int check_negative(void)
{
	const void *elf;
	size_t sz;

	if (missing_feature())
		return KSFT_SKIP;
	elf = css_api ? cgroup_iter_rstat_css_bpf__elf_bytes(&sz) :
			cgroup_iter_rstat_bpf__elf_bytes(&sz);
	return bu_refused(elf, sz, "rstat_flush_in_plain_iter", "sleep") ? KSFT_PASS : KSFT_FAIL;
}

static int check_cleanup(void)
{
	cgroup_iter_rstat_bpf__destroy(skel);
	skel = NULL;
	if (!nodes[N_ROOT].ino) {
		check_skip_why("no cgroups were created");
		return KSFT_SKIP;
	}
	if (cg_destroy_all())
		return KSFT_FAIL;
	if (!access(nodes[N_ROOT].path, F_OK)) {
		ksft_print_msg("%s still exists after rmdir\n", nodes[N_ROOT].path);
		return KSFT_FAIL;
	}
	return KSFT_PASS;
}

int main(void)
{
	static const struct check checks[] = {
		{ "load_sleepable_iter", check_load, NULL },
		{ "cgroup_tree_setup", check_setup, "load_sleepable_iter" },
		{ "ancestors_up_root_level", check_ancestors, "cgroup_tree_setup" },
		{ "pre_order_read", check_pre_read, "cgroup_tree_setup" },
		{ "pre_order_id_set", check_pre_ids, "cgroup_tree_setup" },
		{ "pre_order_levels", check_pre_levels, "cgroup_tree_setup" },
		{ "pre_order_parent_before_child", check_pre_order, "cgroup_tree_setup" },
		{ "rstat_flush_called_per_cgroup", check_flush_count, "cgroup_tree_setup" },
		{ "rstat_flush_propagates_cputime", check_flush_cputime, "cgroup_tree_setup" },
		{ "self_only_leaf", check_self_only, "cgroup_tree_setup" },
		{ "nonsleepable_flush_rejected", check_negative, NULL },
		{ "cgroup_tree_cleanup", check_cleanup, NULL },
	};

	bu_capture_log();
	css_api = bu_has_func("css_rstat_flush");
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
