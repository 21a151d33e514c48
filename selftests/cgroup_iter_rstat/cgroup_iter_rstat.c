// SPDX-License-Identifier: GPL-2.0
/*
 * cgroup_iter_rstat: an iter.s/cgroup program flushing rstat on every cgroup of
 * <cgroup2>/cgroup_iter_rstat.<pid>/{a/{a1,a2},b/{b1}} reports what was created
 * (ids, levels, pre- and post-order, one flush each, a1's CPU time up to the
 * root); from a non-sleepable iterator the same call must be refused.  See
 * test.toml.
 */
#include "selftest.h"
#include <sched.h>
#include <time.h>

#include "inventory.h"

#include "cgroup_iter_rstat.skel.h"
#include "cgroup_iter_rstat_css.skel.h"
#include "cgroup_iter_ctx_neg.skel.h"
#include "cgroup_iter_rstat_neg.skel.h"
#include "cgroup_iter_rstat_neg_css.skel.h"

#define SPIN_NS (20ULL * 1000 * 1000)	/* CPU time burnt in a1 */
#define MAX_RECS 64

enum { N_ROOT, N_A, N_B, N_A1, N_A2, N_B1, NUM_NODES, N_DEAD = NUM_NODES };

/* the test root enables memory for its children: N_DEAD's page cache keeps its memcg */
static struct cg_node nodes[NUM_NODES + 1] = {
	[N_ROOT] = { "<root>", -1, "+memory" }, [N_A] = { "a", N_ROOT }, [N_B] = { "b", N_ROOT },
	[N_A1] = { "a/a1", N_A }, [N_A2] = { "a/a2", N_A }, [N_B1] = { "b/b1", N_B },
	[N_DEAD] = { "dead", N_ROOT },
};
#define DEAD_FILE_BYTES (4 * MiB)	/* page cache that keeps the dead cgroup's memcg */
/* the inventory's lists (selftests/inventory/cgroup_iter.toml, see test.toml) */
#define INVENTORY "cgroup_iter.inventory.toml"

/* one walk of the iterator, parsed */
struct walk {
	char raw[16384];
	int n, bad, after_end;
	struct rec {
		unsigned long long seq, id, cpu_ns;
		int level;
	} recs[MAX_RECS + 1];
	bool have_end;
	unsigned int end_visited, end_flushed;
	char first_bad[128];
};

static struct cgroup_iter_rstat_bpf *skel;
static bool css_api, pre_ran;
static const char *mnt;
static int anc_level = -1, spin_status;
static struct walk pre;
static int pos[NUM_NODES], rec_node[MAX_RECS];
#define NRECS (pre.n < MAX_RECS ? pre.n : MAX_RECS)	/* the lines of pre kept */

static const char *node_name(int n)
{
	return n < 0 ? "?" : nodes[n].rel;
}

/* the test root's is 0 */
static int depth(int n)
{
	int d = 0;

	while ((n = nodes[n].parent) >= 0)
		d++;
	return d;
}

/* where in @w each node is first (@at, -1: absent) and which node each line is (@node) */
static void locate(const struct walk *w, int *at, int *node)
{
	int i;

	memset(at, -1, NUM_NODES * sizeof(*at));
	for (i = 0; i < w->n && i < MAX_RECS; i++) {
		node[i] = cg_tree_find(nodes, NUM_NODES, w->recs[i].id);
		if (node[i] >= 0 && at[node[i]] < 0)
			at[node[i]] = i;
	}
}

/*
 * Every node in @w; the root first (@post: last), each parent before (@post: after)
 * its children, every subtree in one run starting (@post: ending) at its root.
 */
static bool order_ok(const struct walk *w, const int *at, const int *node, bool post)
{
	int n = w->n < MAX_RECS ? w->n : MAX_RECS, i, j, par, size, first;
	bool ok = true;

	for (i = 0; i < NUM_NODES; i++)
		expect(&ok, at[i] >= 0, "%s missing; cannot fully check order\n", node_name(i));
	if (ok)
		expect(&ok, at[N_ROOT] == (post ? n - 1 : 0), "test root: expected at position %d, got %d\n",
		       post ? n - 1 : 0, at[N_ROOT]);
	for (i = 0; ok && i < NUM_NODES; i++) {
		par = nodes[i].parent;
		expect(&ok, par < 0 || (post ? at[par] > at[i] : at[par] < at[i]),
		       "%s at position %d, %s its parent %s at %d\n", node_name(i), at[i],
		       post ? "after" : "before", node_name(par), par < 0 ? -1 : at[par]);
		for (size = 0, j = 0; j < NUM_NODES; j++)
			size += cg_tree_under(nodes, j, i);
		first = post ? at[i] - size + 1 : at[i];
		for (j = first > 0 ? first : 0; j < first + size && j < n; j++)
			expect(&ok, node[j] >= 0 && cg_tree_under(nodes, node[j], i),
			       "position %d: %s, expected a member of %s's subtree (%s %d)\n",
			       j, node_name(node[j]), node_name(i), post ? "up to" : "from", at[i]);
	}
	for (i = 0; !ok && i < n; i++)
		ksft_print_msg("  position %d: %s\n", i, node_name(node[i]));
	return ok;
}

/* one walk of @link (destroyed after it), parsed; false (diagnosed) if it did not run */
static bool read_walk(struct bpf_link *link, const char *what, struct walk *w)
{
	int used;
	char copy[sizeof(w->raw)], *line, *save;
	struct rec *r;
	ssize_t len;

	memset(w, 0, sizeof(*w));
	skel->bss->visited = skel->bss->flushed = 0;
	len = link ? bu_read_iter(link, w->raw, sizeof(w->raw) - 1) : -errno;
	if (!link)
		bu_print_log();
	bpf_link__destroy(link);
	if (len < 0 || len == sizeof(w->raw) - 1) {
		ksft_print_msg("%s the iterator (%s): %s\n", link ? "reading" : "attaching", what,
			       len < 0 ? strerror(-len) : "output too long");
		return false;
	}
	memcpy(copy, w->raw, sizeof(copy));
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		r = &w->recs[w->n < MAX_RECS ? w->n : MAX_RECS];	/* [MAX_RECS]: scratch */
		used = -1;
		if (sscanf(line, "cgroup seq=%llu id=%llu level=%d cpu_ns=%llu%n",
			   &r->seq, &r->id, &r->level, &r->cpu_ns, &used) == 4 && !line[used]) {
			w->after_end += w->have_end;
			w->n++;
		} else if (!w->have_end && sscanf(line, "end visited=%u flushed=%u%n", &w->end_visited,
						  &w->end_flushed, &used) == 2 && !line[used]) {
			w->have_end = true;
		} else if (!w->bad++) {
			snprintf(w->first_bad, sizeof(w->first_bad), "%s", line);
		}
	}
	return true;
}

/* one walk of @order from the cgroup @n, parsed; false (diagnosed) if it did not run */
static bool run_walk(int n, enum bpf_cgroup_iter_order order, struct walk *w)
{
	char what[CG_PATH_MAX + 32];

	bu_log_reset();
	snprintf(what, sizeof(what), "order %d on %s", order, nodes[n].path);
	return read_walk(bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump, nodes[n].path, order),
			 what, w);
}

/* every line parsed, the epilogue last; @lines: the cgroup lines expected (-1: any) */
static void expect_wellformed(bool *ok, const struct walk *w, int lines)
{
	expect(ok, (lines < 0 ? w->n && w->n <= MAX_RECS : w->n == lines) && !w->bad &&
	       w->have_end && !w->after_end,
	       "expected %s%d cgroup lines, then the epilogue of the NULL-cgroup call; got %d, %s epilogue, %d after it, %d malformed (first '%s')\n",
	       lines < 0 ? "1.." : "", lines < 0 ? MAX_RECS : lines, w->n,
	       w->have_end ? "an" : "no", w->after_end, w->bad, w->first_bad);
}

/* the walk's output; KSFT_FAIL */
static int print_walk(const char *what, const struct walk *w)
{
	ksft_print_msg("%s iterator output (%zu bytes):\n", what, strlen(w->raw));
	print_block("  | ", w->raw);
	return KSFT_FAIL;
}

/* KSFT_SKIP (with the reason) when the kernel's BTF lacks what is needed, else 0 */
static int missing_feature(void)
{
	const char *why = bu_missing_funcs((const char *const[]){ "bpf_iter_cgroup",
		css_api ? "css_rstat_flush" : "cgroup_rstat_flush", NULL });

	return why ? check_skip("%s", why) : 0;
}

static int check_load_sleepable_iter(void)
{
	/* rstat_flush_in_plain_iter: loaded alone by check_nonsleepable_flush_rejected() */
	int err = BU_LOAD_RSTAT(skel, cgroup_iter_rstat, "rstat_flush_in_plain_iter");

	if (!err)	/* else skel is destroyed by check_cgroup_tree_cleanup() */
		return KSFT_PASS;
	return missing_feature() ?:
	       check_fail("loading the sleepable iter.s/cgroup program: %s", strerror(-err));
}

static int check_cgroup_tree_setup(void)
{
	return cg_find_root(&mnt, "memory") ?:
	       cg_tree_create(mnt, "cgroup_iter_rstat", nodes, NUM_NODES);
}

/* the walk up from the test root: its length gives the root's level */
static int check_ancestors_up_root_level(void)
{
	static struct walk w;
	bool ok = true;
	int i;

	if (!run_walk(N_ROOT, BPF_CGROUP_ITER_ANCESTORS_UP, &w))
		return KSFT_FAIL;
	expect_wellformed(&ok, &w, -1);
	if (ok && expect(&ok, w.n >= 2, "expected >= 2 cgroups (test root, parent), got %d\n", w.n) &&
	    expect(&ok, w.recs[0].id == nodes[N_ROOT].id && w.recs[1].id == cg_id(mnt),
		   "expected ids %llu (test root), %llu (%s), got %llu, %llu\n", nodes[N_ROOT].id,
		   cg_id(mnt), mnt, w.recs[0].id, w.recs[1].id))
		anc_level = w.n - 1;	/* does not depend on the level field */
	for (i = 0; w.n >= 2 && i < w.n && i < MAX_RECS; i++)
		expect(&ok, w.recs[i].level == w.n - 1 - i, "ancestor #%d (id %llu): level %d, expected %d\n",
		       i, w.recs[i].id, w.recs[i].level, w.n - 1 - i);
	return ok ? KSFT_PASS : print_walk("ANCESTORS_UP", &w);
}

/* in a1: burn SPIN_NS of process CPU time; 1 if that takes over 10 s */
static int burn_cpu(void *arg __attribute__((unused)))
{
	unsigned long long w0 = now_ns();
	clock_t t0 = clock();	/* counted from here: already in a1 */

	while ((clock() - t0) * (1000000000ULL / CLOCKS_PER_SEC) < SPIN_NS)
		if (now_ns() - w0 > 10000000000ULL)
			return 1;
	return 0;
}

/* burn CPU in a1, then one DESCENDANTS_PRE walk that the next checks judge */
static int check_pre_order_read(void)
{
	bool ok = true;
	int i;

	spin_status = cg_run(nodes[N_A1].path, burn_cpu, NULL);
	pre_ran = run_walk(N_ROOT, BPF_CGROUP_ITER_DESCENDANTS_PRE, &pre);
	if (!pre_ran)
		return KSFT_FAIL;
	expect_wellformed(&ok, &pre, -1);
	locate(&pre, pos, rec_node);
	for (i = 0; i < NRECS; i++)
		expect(&ok, pre.recs[i].seq == (unsigned long long)i,
		       "line %d: expected seq=%d, got seq=%llu\n", i, i, pre.recs[i].seq);
	print_walk("DESCENDANTS_PRE", &pre);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the set of ids is the set of created directories' inodes */
static int check_pre_order_id_set(void)
{
	bool ok = true;
	int i;

	if (!pre_ran)
		return check_skip("pre-order iteration failed");
	for (i = 0; i < NRECS; i++)
		expect(&ok, rec_node[i] >= 0 && pos[rec_node[i]] == i, "line %d: id %llu %s %s\n", i,
		       pre.recs[i].id, node_name(rec_node[i]), rec_node[i] < 0 ?
		       "is not one of the created cgroups" : "was reported before");
	for (i = 0; i < NUM_NODES; i++)
		expect(&ok, pos[i] >= 0, "cgroup %s (st_ino %llu) missing from iterator output\n",
		       nodes[i].path, nodes[i].id);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* level == the root's level (from ANCESTORS_UP) + depth */
static int check_pre_order_levels(void)
{
	bool ok = true;
	int i, base;

	if (!pre_ran)
		return check_skip("pre-order iteration failed");
	if (pos[N_ROOT] < 0)
		return check_fail("test root not reported; cannot check levels");
	base = pre.recs[pos[N_ROOT]].level;
	if (anc_level >= 0 &&	/* else (ANCESTORS_UP failed) relative to the root's */
	    !expect(&ok, base == anc_level, "test root: level %d, expected %d (from ANCESTORS_UP)\n",
		    base, anc_level))
		base = anc_level;
	for (i = N_ROOT + 1; i < NUM_NODES; i++)
		expect(&ok, pos[i] < 0 || pre.recs[pos[i]].level == base + depth(i),
		       "%s: expected level %d (root %d + depth %d), got %d\n", node_name(i),
		       base + depth(i), base, depth(i),
		       pos[i] < 0 ? -1 : pre.recs[pos[i]].level);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_pre_order_parent_before_child(void)
{
	if (!pre_ran)
		return check_skip("pre-order iteration failed");
	return order_ok(&pre, pos, rec_node, false) ? KSFT_PASS : KSFT_FAIL;
}

/* DESCENDANTS_POST: every node once, flushed once, children before their parent */
static int check_post_order(void)
{
	static struct walk w;
	int at[NUM_NODES], node[MAX_RECS];
	bool ok = true;

	if (!run_walk(N_ROOT, BPF_CGROUP_ITER_DESCENDANTS_POST, &w))
		return KSFT_FAIL;
	expect_wellformed(&ok, &w, NUM_NODES);
	expect(&ok, w.end_flushed == NUM_NODES && w.end_visited == NUM_NODES,
	       "epilogue: flushed=%u visited=%u, expected %d each\n", w.end_flushed,
	       w.end_visited, NUM_NODES);
	locate(&w, at, node);
	ok = order_ok(&w, at, node, true) && ok;
	return ok ? KSFT_PASS : print_walk("DESCENDANTS_POST", &w);
}

/* the program got past the kfunc call for every cgroup (the walk is the last one run) */
static int check_rstat_flush_called_per_cgroup(void)
{
	unsigned int n = pre.n, f = skel->bss->flushed, v = skel->bss->visited;
	bool ok = true;

	if (!pre_ran)
		return check_skip("pre-order iteration failed");
	expect(&ok, f == n && v == n && pre.have_end && pre.end_flushed == n && pre.end_visited == n,
	       "expected flushed=visited=%u (cgroup lines); BPF counters %u/%u, epilogue %s%u/%u\n",
	       n, f, v, pre.have_end ? "" : "(none) ", pre.end_flushed, pre.end_visited);
	expect(&ok, n == NUM_NODES, "expected %d cgroups flushed, got %u\n", NUM_NODES, n);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The CPU time burnt in a1 (before the walk) is in a1, and exactly so in a and the
 * root: no task ever ran in another cgroup of the tree, so a2, b and b1 read 0 and
 * every parent the exact sum of its children (a parent credited twice, a sibling or
 * a grandparent credited, or a flush that misses a CPU cannot add up).
 */
static int check_rstat_flush_propagates_cputime(void)
{
	unsigned long long c[NUM_NODES];
	bool ok = true;
	int i;

	if (!pre_ran)
		return check_skip("pre-order iteration failed");
	if (spin_status)
		return check_fail("CPU burner in a/a1 failed (status %d)", spin_status);
	for (i = 0; i < NUM_NODES; i++) {
		if (pos[i] < 0)
			return check_fail("%s missing from output", node_name(i));
		c[i] = pre.recs[pos[i]].cpu_ns;
	}
	expect(&ok, c[N_A1] >= SPIN_NS, "a1: %llu ns, expected >= %llu (burnt there)", c[N_A1],
	       SPIN_NS);
	expect(&ok, !c[N_A2] && !c[N_B1] && !c[N_B], "a2 %llu, b %llu, b1 %llu: expected 0 (nothing ran there)",
	       c[N_A2], c[N_B], c[N_B1]);
	expect(&ok, c[N_A] == c[N_A1] + c[N_A2], "a: %llu, expected a1 + a2 = %llu exactly",
	       c[N_A], c[N_A1] + c[N_A2]);
	expect(&ok, c[N_ROOT] == c[N_A] + c[N_B], "root: %llu, expected a + b = %llu exactly",
	       c[N_ROOT], c[N_A] + c[N_B]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the ids of @w's cgroup lines are those of @want (-1 ends it) in that order */
static bool walk_is(const struct walk *w, const int *want, const char *what)
{
	bool ok = true;
	int n, i;

	for (n = 0; want[n] >= 0; n++)
		;
	expect_wellformed(&ok, w, n);
	for (i = 0; ok && i < n; i++)
		expect(&ok, w->recs[i].id == nodes[want[i]].id, "%s, line %d: id %llu (%s), expected %s",
		       what, i, w->recs[i].id, node_name(cg_tree_find(nodes, NUM_NODES + 1,
								       w->recs[i].id)),
		       node_name(want[i]));
	if (!ok)
		print_walk(what, w);
	return ok;
}

/* the largest enumerator of enum bpf_cgroup_iter_order in the kernel's BTF, -1 if none */
static long long last_order(void)
{
	const char *names[16];
	long long vals[16], last = -1;
	int i, n = bu_enum_names("bpf_cgroup_iter_order", names, vals, 16);

	for (i = 0; i < n && i < 16; i++)
		last = vals[i] > last ? vals[i] : last;
	return last;
}

/* every order value but the kernel's own (its BTF's enum bpf_cgroup_iter_order, past
 * ORDER_UNSPEC) is refused with EINVAL at attach time: 0 (BPF_CGROUP_ITER_ORDER_UNSPEC),
 * one past the last, negative */
static int check_attach_orders(void)
{
	long long last = last_order();
	const unsigned int bad[] = { 0, last + 1, 100, 0x80000000u, 0xffffffffu };
	int fd = open(nodes[N_ROOT].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct bpf_link *link;
	bool ok = true;
	size_t i;

	if (fd < 0 || last < BPF_CGROUP_ITER_ANCESTORS_UP)
		return check_fail("open %s: %s; the last order in the kernel's BTF %lld", nodes[N_ROOT].path,
				  strerror(errno), last);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		errno = 0;
		link = bu_attach_cgroup_iter_raw(skel->progs.cgroup_rstat_dump, fd, 0, bad[i]);
		expect(&ok, !link && errno == EINVAL, "order %u: attach %s (%s), expected EINVAL",
		       bad[i], link ? "succeeded" : "failed", strerror(errno));
		bpf_link__destroy(link);
	}
	close(fd);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The iterator's orders (enum bpf_cgroup_iter_order in the kernel's BTF) and the
 * fields its link reports (bpf_link_info.iter.cgroup's members in the kernel's
 * BTF) are the inventory's lists for this kernel (captured from each kernel's
 * UAPI header): a kernel with a new order or field fails here naming it.
 */
static int check_btf_items_listed(void)
{
	const char *names[16], *found[16];
	static char members[16][64];
	long long vals[16];
	struct inv_list l, cg = {};
	char *keep[16];
	int n, i, bad = 0;

	n = bu_enum_names("bpf_cgroup_iter_order", names, vals, 16);
	if (n < 0 || n > 16 || inv_load(INVENTORY, "cgroup_iter.orders", &l))
		return check_fail("enum bpf_cgroup_iter_order in the kernel's BTF: %d enumerators", n);
	bad += inv_compare(&l, names, n, "enum bpf_cgroup_iter_order");
	inv_free(&l);
	n = bu_member_names("bpf_link_info", "iter.cgroup", members, 16);
	if (n < 0 || n > 16 || inv_load(INVENTORY, "cgroup_iter.link_info", &l))
		return check_fail("struct bpf_link_info's iter.cgroup in the kernel's BTF: %d members", n);
	for (i = 0; i < n; i++)
		found[i] = members[i];
	cg.this_kernel = l.this_kernel;
	cg.items = keep;
	for (i = 0; i < l.n; i++)	/* the list's iter.cgroup members */
		if (!strncmp(l.items[i], "iter.cgroup.", 12) && cg.n < 16)
			keep[cg.n++] = l.items[i];
	bad += inv_compare(&cg, found, n, "struct bpf_link_info iter.cgroup");
	inv_free(&l);
	return bad ? KSFT_FAIL : KSFT_PASS;
}

/*
 * The cgroup named by fd or by id (the same walk), by neither (the cgroup2 root), by
 * both (EINVAL), by a file that is no cgroup, a closed fd or an id no cgroup has
 * (refused).
 */
static int check_attach_cgroup_spec(void)
{
	static const int b_walk[] = { N_B, N_B1, -1 };
	int fd = open(nodes[N_B].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int file = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	struct bpf_program *prog = skel->progs.cgroup_rstat_dump;
	unsigned long long root_id = cg_id(mnt);
	const struct {
		const char *what;
		int fd;
		unsigned long long id;
	} refused[] = {
		{ "fd and id both", fd, nodes[N_B].id }, { "a file that is no cgroup", file, 0 },
		{ "a closed fd", 1000, 0 }, { "an id no cgroup has", 0, (1ULL << 40) + 7 },
	};
	struct bpf_link *link;
	static struct walk w;
	bool ok = fd >= 0 && file >= 0 && root_id;
	size_t i;

	if (!ok)
		return check_fail("open %s or /proc/self/stat, or the id of %s: %s",
				  nodes[N_B].path, mnt, strerror(errno));
	link = bu_attach_cgroup_iter_raw(prog, 0, nodes[N_B].id, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	ok &= read_walk(link, "b by id", &w) && walk_is(&w, b_walk, "b by id");
	link = bu_attach_cgroup_iter_raw(prog, fd, 0, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	ok &= read_walk(link, "b by fd", &w) && walk_is(&w, b_walk, "b by fd");
	link = bu_attach_cgroup_iter_raw(prog, 0, 0, BPF_CGROUP_ITER_SELF_ONLY);
	if (read_walk(link, "no cgroup named", &w)) {
		expect_wellformed(&ok, &w, 1);
		expect(&ok, w.recs[0].id == root_id, "no cgroup named: id %llu, expected %llu (%s)",
		       w.recs[0].id, root_id, mnt);
	} else {
		ok = false;
	}
	for (i = 0; i < ARRAY_SIZE(refused); i++) {
		link = bu_attach_cgroup_iter_raw(prog, refused[i].fd, refused[i].id,
						 BPF_CGROUP_ITER_SELF_ONLY);
		expect(&ok, !link, "%s (fd %d, id %llu): attach succeeded, expected an error",
		       refused[i].what, refused[i].fd, refused[i].id);
		bpf_link__destroy(link);
	}
	close(fd);
	close(file);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * A cgroup v1 directory's fd (a named v1 hierarchy of our own, no controller): a
 * kernel that can look a fd up in v1 and v2 (cgroup_v1v2_get_from_fd() in its BTF:
 * Debian's 6.1, 6.12 and 7.2 all have it) walks that cgroup, SELF_ONLY, one line with
 * its id; a kernel without it refuses the fd.  A kernel that has the lookup and
 * refuses the fd breaks every tool that walks v1 hierarchies by fd.
 */
static int check_attach_v1_cgroup_fd(void)
{
	bool takes = bu_has_func("cgroup_v1v2_get_from_fd"), ok;
	struct bpf_link *link;
	static struct walk w;
	struct cg_v1 v1;
	int st = cg_v1_make(&v1, "cgroup_iter_v1");

	ok = st == KSFT_PASS;
	if (ok) {
		link = bu_attach_cgroup_iter_raw(skel->progs.cgroup_rstat_dump, v1.fd, 0,
						 BPF_CGROUP_ITER_SELF_ONLY);
		ksft_print_msg("a v1 cgroup's fd: %s (the kernel %s cgroup_v1v2_get_from_fd)\n",
			       link ? "attached" : strerror(errno), takes ? "has" : "lacks");
		if (!takes) {
			expect(&ok, !link, "a v1 cgroup's fd attached, expected a refusal (v2 only)");
			bpf_link__destroy(link);
		} else if (read_walk(link, "a v1 cgroup by fd", &w)) {
			expect_wellformed(&ok, &w, 1);
			expect(&ok, w.n < 1 || w.recs[0].id == cg_id(v1.dir),
			       "a v1 cgroup by fd: id %llu, expected %llu (%s)", w.recs[0].id,
			       cg_id(v1.dir), v1.dir);
		} else {
			ok = false;
		}
	}
	cg_v1_remove(&v1);
	return st != KSFT_PASS ? st : ok ? KSFT_PASS : KSFT_FAIL;
}

/* the program returning 1 after a ends the walk there: root, a, then the epilogue */
static int check_early_termination(void)
{
	static const int until_a[] = { N_ROOT, N_A, -1 };
	static struct walk w;
	bool ok;

	skel->bss->stop_after_id = nodes[N_A].id;
	ok = run_walk(N_ROOT, BPF_CGROUP_ITER_DESCENDANTS_PRE, &w);
	skel->bss->stop_after_id = 0;
	return ok && walk_is(&w, until_a, "stopped after a") ? KSFT_PASS : KSFT_FAIL;
}

/*
 * A pre-order walk read 8 bytes at a time: the iterator stops after the first
 * cgroup (the reader's buffer is full) and drops cgroup_mutex; the rest of that
 * line follows from the seq_file's buffer, then the next start() cannot resume a
 * walk whose tree may have changed: EOPNOTSUPP, never a silent end of the output
 * (which would look like a complete walk of one cgroup).
 */
static int check_partial_read_not_resumed(void)
{
	struct bpf_link *link = bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump,
						      nodes[N_ROOT].path,
						      BPF_CGROUP_ITER_DESCENDANTS_PRE);
	int fd = link ? bpf_iter_create(bpf_link__fd(link)) : -1, reads, err = 0;
	char got[512] = "", piece[8], *nl;
	size_t len = 0;
	ssize_t n;

	if (fd < 0) {
		bpf_link__destroy(link);
		return check_fail("the iterator on the test root: %s", strerror(errno));
	}
	/* a bound: a kernel that restarts the walk on every read never ends it */
	for (reads = 0; reads < 4096; reads++) {
		n = read(fd, piece, sizeof(piece));
		if (n <= 0) {
			err = n < 0 ? errno : 0;
			break;
		}
		if (len + n < sizeof(got)) {
			memcpy(got + len, piece, n);
			len += n;
			got[len] = '\0';
		}
	}
	close(fd);
	bpf_link__destroy(link);
	nl = strchr(got, '\n');
	if (err == EOPNOTSUPP && nl && !nl[1] && !strncmp(got, "cgroup seq=0 ", 13))
		return KSFT_PASS;
	ksft_print_msg("read 8 bytes at a time (%d reads):\n", reads);
	print_block("  | ", got);
	return check_fail("expected the first cgroup's line, then EOPNOTSUPP; the reads ended with %s",
			  reads == 4096 ? "no end" : err ? strerror(err) : "end of file");
}

/* the orders a link may have, with the name its fdinfo gives each */
static const struct {
	const char *enumerator, *name;
} orders[] = {
	{ "BPF_CGROUP_ITER_SELF_ONLY", "self_only" },
	{ "BPF_CGROUP_ITER_DESCENDANTS_PRE", "descendants_pre" },
	{ "BPF_CGROUP_ITER_DESCENDANTS_POST", "descendants_post" },
	{ "BPF_CGROUP_ITER_ANCESTORS_UP", "ancestors_up" },
	{ "BPF_CGROUP_ITER_CHILDREN", "children" },	/* 7.x */
};

/*
 * What a link on a says about itself, for each order the kernel has (its BTF),
 * against what the test attached: bpf_link_info (type ITER, its program's id, the
 * target "cgroup", the order given, a's id) and its fdinfo (link_type iter, link_id
 * and prog_id the same, prog_tag the program's tag, target_name cgroup, cgroup_path
 * a's path in the hierarchy, "order: NAME"), every fdinfo key (from link_type on)
 * in the inventory's list for this kernel.
 */
static int check_link_reports_itself(void)
{
	struct bpf_prog_info pinfo = {};
	__u32 plen = sizeof(pinfo), len;
	char tag[2 * BPF_TAG_SIZE + 1], path[64], text[2048], key[64], val[256], want[256];
	const char *found[32];
	static char fkeys[32][64];
	struct inv_list l;
	bool ok = true;
	size_t o;
	int i, n;

	if (bpf_obj_get_info_by_fd(bpf_program__fd(skel->progs.cgroup_rstat_dump), &pinfo, &plen))
		return check_fail("the program's info: %s", strerror(errno));
	for (i = 0; i < BPF_TAG_SIZE; i++)
		snprintf(tag + 2 * i, 3, "%02x", pinfo.tag[i]);
	if (inv_load(INVENTORY, "cgroup_iter.fdinfo", &l))
		return KSFT_FAIL;
	for (o = 0; o < ARRAY_SIZE(orders); o++) {
		long long order = bu_enum_value("bpf_cgroup_iter_order", orders[o].enumerator);
		struct bpf_link_info info = {};
		char tname[32] = "", *line, *save;
		struct bpf_link *link;
		int fd;

		if (order < 0)
			continue;	/* not in this kernel */
		link = bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump, nodes[N_A].path, order);
		if (!link)
			return check_fail("attaching order %s on a: %s", orders[o].name, strerror(errno));
		info.iter.target_name = (unsigned long)tname;
		info.iter.target_name_len = sizeof(tname);
		len = sizeof(info);
		if (bpf_obj_get_info_by_fd(bpf_link__fd(link), &info, &len)) {
			bpf_link__destroy(link);
			return check_fail("the link's info: %s", strerror(errno));
		}
		expect(&ok, info.type == BPF_LINK_TYPE_ITER && info.prog_id == pinfo.id &&
		       !strcmp(tname, "cgroup") && info.iter.cgroup.order == order &&
		       info.iter.cgroup.cgroup_id == nodes[N_A].id,
		       "%s: bpf_link_info type %u, prog_id %u, target '%s', order %u, cgroup_id %llu; expected %u, %u, 'cgroup', %lld, %llu (a)",
		       orders[o].name, info.type, info.prog_id, tname, info.iter.cgroup.order,
		       (unsigned long long)info.iter.cgroup.cgroup_id, BPF_LINK_TYPE_ITER, pinfo.id,
		       order, nodes[N_A].id);
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", bpf_link__fd(link));
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = read_close(fd, text, sizeof(text) - 1);
		bpf_link__destroy(link);
		if (n <= 0)
			return check_fail("%s: %s", path, strerror(-n));
		text[n] = '\0';
		n = 0;
		for (line = strstr(text, "link_type:"), line = line ? strtok_r(line, "\n", &save) : NULL;
		     line; line = strtok_r(NULL, "\n", &save)) {
			if (sscanf(line, "%63[^:]:%*[ \t]%255[^\n]", key, val) != 2)
				continue;
			if (!strcmp(key, "order"))
				snprintf(key + 5, sizeof(key) - 5, ":%.50s", val);
			if (n < 32)
				snprintf(fkeys[n++], sizeof(fkeys[0]), "%s", key);
			want[0] = '\0';
			if (!strcmp(key, "link_type") || !strcmp(key, "target_name"))
				snprintf(want, sizeof(want), "%s", key[0] == 'l' ? "iter" : "cgroup");
			else if (!strcmp(key, "link_id"))
				snprintf(want, sizeof(want), "%u", info.id);
			else if (!strcmp(key, "prog_id"))
				snprintf(want, sizeof(want), "%u", pinfo.id);
			else if (!strcmp(key, "prog_tag"))
				snprintf(want, sizeof(want), "%s", tag);
			else if (!strcmp(key, "cgroup_path"))
				snprintf(want, sizeof(want), "%s", nodes[N_A].path + strlen(mnt));
			else if (!strncmp(key, "order:", 6))
				snprintf(want, sizeof(want), "%s", orders[o].name);
			expect(&ok, !want[0] || !strcmp(val, want), "%s: fdinfo %s '%s', expected '%s'",
			       orders[o].name, key, val, want);
		}
		for (i = 0; i < n; i++)
			found[i] = fkeys[i];
		expect(&ok, n >= 7, "%s: %d fdinfo lines from link_type on, expected 7", orders[o].name, n);
		for (i = 0; i < n; i++)
			expect(&ok, inv_has(&l, found[i]), "%s: fdinfo key %s is not in the inventory",
			       orders[o].name, found[i]);
	}
	inv_free(&l);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * in a, in a cgroup namespace of its own: the fdinfo's cgroup_path of the link fd @arg
 * (inherited), then the start cgroup's id a link made there with no cgroup named
 * reports (bpf_link_info), to ns_pipe as "PATH\nID" (the path alone, exit 14 with
 * the errno in its place, when that link cannot be made or read)
 */
static int ns_pipe[2] = { -1, -1 };

static int read_path_in_ns(void *arg)
{
	union bpf_iter_link_info li = { .cgroup.order = BPF_CGROUP_ITER_SELF_ONLY };
	LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &li, .link_info_len = sizeof(li));
	char path[64], text[2048], *p, *end;
	struct bpf_link_info info = {};
	__u32 len = sizeof(info);
	struct bpf_link *link;
	ssize_t n;

	if (unshare(CLONE_NEWCGROUP))
		return 10;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", *(int *)arg);
	n = read_close(open(path, O_RDONLY | O_CLOEXEC), text, sizeof(text) - 1);
	if (n <= 0)
		return 11;
	text[n] = '\0';
	p = strstr(text, "cgroup_path:");
	if (!p)
		return 12;
	p += strlen("cgroup_path:");
	p += strspn(p, " \t");
	end = strchr(p, '\n');
	n = end ? end - p : (ssize_t)strlen(p);
	if (write(ns_pipe[1], p, n) != n)
		return 13;
	link = bpf_program__attach_iter(skel->progs.cgroup_rstat_dump, &opts);
	if (!link || bpf_obj_get_info_by_fd(bpf_link__fd(link), &info, &len)) {
		dprintf(ns_pipe[1], "\n%d", errno);
		return 14;
	}
	return dprintf(ns_pipe[1], "\n%llu", (unsigned long long)info.iter.cgroup.cgroup_id) > 0 ?
	       0 : 13;
}

/*
 * The path a link's fdinfo gives is in the reader's cgroup namespace: read by a process
 * in a that made a cgroup namespace of its own, a link on a1 says "/a1" (the path from
 * the namespace's root), not a1's path in the hierarchy (which would also tell a
 * container the host's layout). And a link made there naming no cgroup starts at the
 * namespace's root, a (the walk of "/" as the process sees it), not the hierarchy's.
 */
static int check_link_path_in_cgroup_ns(void)
{
	struct bpf_link *link = bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump,
						      nodes[N_A1].path, BPF_CGROUP_ITER_SELF_ONLY);
	const char *want = nodes[N_A1].path + strlen(nodes[N_A].path);
	char got[CG_PATH_MAX] = "", *nl;
	int fd = link ? bpf_link__fd(link) : -1, st;
	unsigned long long start = 0;
	ssize_t n;

	if (!link)
		return check_fail("attaching on a1: %s", strerror(errno));
	if (pipe2(ns_pipe, O_CLOEXEC)) {
		bpf_link__destroy(link);
		return check_fail("pipe: %s", strerror(errno));
	}
	st = cg_run(nodes[N_A].path, read_path_in_ns, &fd);
	close(ns_pipe[1]);
	n = read_close(ns_pipe[0], got, sizeof(got) - 1);
	got[n > 0 ? n : 0] = '\0';
	nl = strchr(got, '\n');
	if (nl) {
		*nl = '\0';
		start = strtoull(nl + 1, NULL, 10);
	}
	bpf_link__destroy(link);
	ksft_print_msg("a link on a1, its fdinfo read in a cgroup namespace rooted at a: cgroup_path '%s'; a link naming no cgroup made there starts at id %llu (a: %llu) (exit %d)\n",
		       got, start, nodes[N_A].id, st);
	if (st == 10)
		return check_skip("no cgroup namespace here (unshare: the reader's exit 10)");
	if (st == 14)
		return check_fail("a link naming no cgroup, made in the namespace rooted at a: %s (the path read there was '%s')",
				  strerror((int)start), got);
	if (st || strcmp(got, want))
		return check_fail("cgroup_path '%s' (reader's exit %d), expected '%s': the path in the reader's cgroup namespace",
				  got, st, want);
	if (start != nodes[N_A].id)
		return check_fail("a link naming no cgroup, made in the namespace rooted at a: starts at id %llu, expected a's %llu (the namespace's root)",
				  start, nodes[N_A].id);
	return KSFT_PASS;
}

/*
 * A link pins its cgroup: a cgroup removed while a SELF_ONLY link on it exists stays
 * dying (cgroup.stat nr_dying_descendants of the test root one above its baseline,
 * still 2 s later: nothing else holds it); once the link is destroyed it is freed
 * (the count back to the baseline within 10 s: the sleepable program's link goes
 * after an RCU tasks-trace grace period).  The link is read 3 times first: each
 * iterator opened from it holds the start cgroup until it is closed, no longer.
 */
static int check_link_pins_cgroup(void)
{
	struct cg_node x[1] = { { .rel = "pinned", .parent = -1 } };
	long long base = -1, held = -1, now = -1;
	static char buf[4096];
	struct bpf_link *link;
	int tries, err, i;
	ssize_t n;

	/* before dead_cgroup_skipped: nothing of the test root is dying yet */
	base = cg_read_key(nodes[N_ROOT].path, "cgroup.stat", "nr_dying_descendants");
	if (base)
		return check_fail("the test root's nr_dying_descendants %lld before any removal, expected 0",
				  base);
	if (cg_tree_create(nodes[N_ROOT].path, "pinned", x, 1) != KSFT_PASS)
		return KSFT_FAIL;
	link = bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump, x[0].path,
				     BPF_CGROUP_ITER_SELF_ONLY);
	/* each read opens an iterator that holds the start cgroup until it is closed */
	for (i = 0, n = 0; link && i < 3 && n >= 0; i++)
		n = bu_read_iter(link, buf, sizeof(buf));
	err = !link ? -errno : n < 0 ? (int)n : cg_destroy(x[0].path);
	if (err) {
		bpf_link__destroy(link);
		return check_fail("a link on %s, 3 reads, then rmdir: %s", x[0].path,
				  strerror(-err));
	}
	sleep(2);
	held = cg_read_key(nodes[N_ROOT].path, "cgroup.stat", "nr_dying_descendants");
	bpf_link__destroy(link);
	for (tries = 0; tries < 100; tries++, usleep(100000))
		if ((now = cg_read_key(nodes[N_ROOT].path, "cgroup.stat", "nr_dying_descendants")) == base)
			break;
	ksft_print_msg("nr_dying_descendants of the test root: %lld before, %lld with the removed cgroup's link (read 3 times), %lld after the link (%.1f s)\n",
		       base, held, now, tries / 10.0);
	if (base < 0 || held != base + 1 || now != base)
		return check_fail("expected %lld, then %lld while the link pins the removed cgroup, then %lld within 10 s of the link's end",
				  base, base + 1, base);
	return KSFT_PASS;
}

/* 7.x's BPF_CGROUP_ITER_CHILDREN: the test root's children only (a, b), a's (a1, a2) */
static int check_children_order(void)
{
	static const int root_children[] = { N_A, N_B, -1 }, a_children[] = { N_A1, N_A2, -1 };
	long long order = bu_enum_value("bpf_cgroup_iter_order", "BPF_CGROUP_ITER_CHILDREN");
	static struct walk w;
	bool ok;

	if (order < 0)
		return check_skip("no BPF_CGROUP_ITER_CHILDREN in this kernel's BTF");
	ok = run_walk(N_ROOT, order, &w) && walk_is(&w, root_children, "children of the test root");
	ok = run_walk(N_A, order, &w) && walk_is(&w, a_children, "children of a") && ok;
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in the dead cgroup: DEAD_FILE_BYTES of page cache, kept after the exit */
static int write_page_cache(void *path)
{
	return write_file(path, DEAD_FILE_BYTES, 0x5a, false);
}

/*
 * A removed cgroup whose memcg its page cache keeps: it stays in its parent's list of
 * children (dying, cgroup.stat counts it) until that memory goes, and the iterator
 * must skip it, in a walk and from a link made before the removal.
 */
static int check_dead_cgroup_skipped(void)
{
	static const int pre_order[] = { N_ROOT, N_A, N_A1, N_A2, N_B, N_B1, -1 };
	const char *dir = getenv("HARNESS_SCRATCH") ?: "/tmp";
	struct cg_node *d = &nodes[N_DEAD];
	char path[PATH_MAX];
	struct bpf_link *self;
	static struct walk w;
	long long dying;
	int st, err;
	bool ok = true;

	snprintf(path, sizeof(path), "%s/cgroup_iter_rstat.%d", dir, (int)getpid());
	if (cg_tree_create(nodes[N_ROOT].path, "dead", d, 1) != KSFT_PASS)
		return KSFT_FAIL;
	self = bu_attach_cgroup_iter(skel->progs.cgroup_rstat_dump, d->path,
				     BPF_CGROUP_ITER_SELF_ONLY);
	st = cg_run(d->path, write_page_cache, path);
	err = cg_destroy(d->path);
	dying = cg_read_key(nodes[N_ROOT].path, "cgroup.stat", "nr_dying_descendants");
	if (!self || st || err || dying < 1) {
		unlink(path);
		bpf_link__destroy(self);
		return check_fail("dead cgroup %s: link %s, page cache writer %d, rmdir %s, nr_dying_descendants %lld (expected >= 1)",
				  d->path, self ? "made" : strerror(errno), st, strerror(-err), dying);
	}
	if (read_walk(self, "SELF_ONLY on the dead cgroup", &w)) {
		expect_wellformed(&ok, &w, 0);
	} else {
		ok = false;
	}
	ok = run_walk(N_ROOT, BPF_CGROUP_ITER_DESCENDANTS_PRE, &w) &&
	     walk_is(&w, pre_order, "pre-order with a dead child") && ok;
	unlink(path);	/* its memcg, then the cgroup, can go */
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_self_only_leaf(void)
{
	const struct cg_node *leaf = &nodes[N_A2];
	static struct walk w;
	bool ok = true;

	if (!run_walk(N_A2, BPF_CGROUP_ITER_SELF_ONLY, &w))
		return KSFT_FAIL;
	expect_wellformed(&ok, &w, 1);
	expect(&ok, w.recs[0].id == leaf->id, "expected id %llu (%s), got %llu (%s)\n", leaf->id,
	       leaf->path, w.recs[0].id, node_name(cg_tree_find(nodes, NUM_NODES, w.recs[0].id)));
	expect(&ok, anc_level < 0 || w.recs[0].level == anc_level + depth(N_A2),
	       "expected level %d, got %d\n", anc_level + depth(N_A2), w.recs[0].level);
	expect(&ok, skel->bss->flushed == 1 && skel->bss->visited == 1,
	       "BPF counters: expected flushed=1 visited=1, got %u/%u\n", skel->bss->flushed,
	       skel->bss->visited);
	return ok ? KSFT_PASS : print_walk("SELF_ONLY", &w);
}

/* the same kfunc call from a non-sleepable iter/cgroup program */
static int check_nonsleepable_flush_rejected(void)
{
	size_t sz;
	const void *elf = css_api ? cgroup_iter_rstat_css_bpf__elf_bytes(&sz) :
				    cgroup_iter_rstat_bpf__elf_bytes(&sz);

	return missing_feature() ?:
	       bu_refused(elf, sz, "rstat_flush_in_plain_iter", "sleep") ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The rstat kfuncs are registered for tracing programs alone: a program of each
 * other kfunc hook (syscall, tc, XDP) or of none (a socket filter) calling them is
 * refused for its type, before its arguments are looked at.  Each is tried: a
 * kernel that registers them for one more type fails here.
 */
static int check_rstat_kfuncs_refused_outside_tracing(void)
{
	static const char *const progs[] = {
		"rstat_kfuncs_in_syscall", "rstat_kfuncs_in_tc", "rstat_kfuncs_in_xdp",
		"rstat_kfuncs_in_socket",
	};
	size_t sz, i;
	const void *elf = css_api ? cgroup_iter_rstat_neg_css_bpf__elf_bytes(&sz) :
				    cgroup_iter_rstat_neg_bpf__elf_bytes(&sz);
	int skip = missing_feature();
	bool ok = true;

	if (skip)
		return skip;
	for (i = 0; i < ARRAY_SIZE(progs); i++)
		if (!bu_refused(elf, sz, progs[i], "is not allowed")) {
			ksft_print_msg("%s: the rstat kfuncs were not refused for its type\n",
				       progs[i]);
			ok = false;
		}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * ctx->cgroup read without a NULL test: the iterator's last call of every walk
 * passes NULL, so its context argument must be registered as possibly NULL and
 * the program refused ("...or_null..." in the verifier's line).
 */
static int check_ctx_cgroup_null_refused(void)
{
	size_t sz;
	const void *elf = cgroup_iter_ctx_neg_bpf__elf_bytes(&sz);

	return missing_feature() ?:
	       bu_refused(elf, sz, "ctx_cgroup_unchecked", "or_null") ? KSFT_PASS : KSFT_FAIL;
}

static int check_cgroup_tree_cleanup(void)
{
	cgroup_iter_rstat_bpf__destroy(skel);
	if (!nodes[N_ROOT].id)
		return check_skip("no cgroups were created");
	if (cg_cleanup())
		return KSFT_FAIL;
	return access(nodes[N_ROOT].path, F_OK) ? KSFT_PASS :
	       check_fail("%s still exists after rmdir", nodes[N_ROOT].path);
}

int main(void)
{
	static const struct check checks[] = {
		CHECK(load_sleepable_iter),
		CHECK(cgroup_tree_setup, load_sleepable_iter),
		CHECK(ancestors_up_root_level, cgroup_tree_setup),
		CHECK(pre_order_read, cgroup_tree_setup),
		CHECK(pre_order_id_set, cgroup_tree_setup),
		CHECK(pre_order_levels, cgroup_tree_setup),
		CHECK(pre_order_parent_before_child, cgroup_tree_setup),
		CHECK(rstat_flush_called_per_cgroup, cgroup_tree_setup),
		CHECK(rstat_flush_propagates_cputime, cgroup_tree_setup),
		CHECK(post_order, cgroup_tree_setup),
		CHECK(self_only_leaf, cgroup_tree_setup),
		CHECK(attach_orders, cgroup_tree_setup),
		CHECK(attach_cgroup_spec, cgroup_tree_setup),
		CHECK(attach_v1_cgroup_fd, cgroup_tree_setup),
		CHECK(early_termination, cgroup_tree_setup),
		CHECK(partial_read_not_resumed, cgroup_tree_setup),
		CHECK(children_order, cgroup_tree_setup),
		CHECK(link_pins_cgroup, cgroup_tree_setup),	/* before the first removal */
		CHECK(dead_cgroup_skipped, cgroup_tree_setup),
		CHECK(link_reports_itself, cgroup_tree_setup),
		CHECK(link_path_in_cgroup_ns, cgroup_tree_setup),
		CHECK(btf_items_listed, load_sleepable_iter),
		CHECK(nonsleepable_flush_rejected),
		CHECK(rstat_kfuncs_refused_outside_tracing),
		CHECK(ctx_cgroup_null_refused),
		CHECK(cgroup_tree_cleanup),
	};

	css_api = bu_has_func("css_rstat_flush");
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
