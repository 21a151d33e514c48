// SPDX-License-Identifier: GPL-2.0
/*
 * rstat_propagation: the rstat BPF hook's claims with exact numbers.
 *
 * A child parked outside the tree root/{a/{a1,a2},b/{b1,b2}} is moved into
 * cgroups a distinct number of times; rstat_propagation.bpf.c counts the moves
 * per cgroup through rstat and a cgroup iterator on the root flushes and
 * prints total/own/pending.  Each cgroup must read exactly its own moves plus
 * its descendants'.  More moves must grow exactly the cgroup and its
 * ancestors: on the CPUs in turn, counted for another CPU than the one
 * updating (the CPU argument of the updated kfunc), and on a CPU that goes
 * offline before the flush (hotplug).  The tree mixes cgroups with the memory
 * controller (a, b, b1, b2) and without (a1, a2): the hook is rstat's, not a
 * controller's.  "--broken": the flush does not propagate (must FAIL).
 */
#include "selftest.h"
#include <sched.h>
#define RS_NR 1
#include "rstat_counters.h"
#include "rstat_propagation.skel.h"
#include "rstat_propagation_css.skel.h"

enum { ROOT, A, A1, A2, B, B1, B2, NR };	/* pre-order */

/*
 * root enables memory for a and b, b for b1 and b2; a for none: a1 and a2 have no
 * memory css.  A cgroup that enables a controller for its children cannot hold
 * tasks (cgroup v2), so root and b get no moves of their own.
 */
static struct cg_node nodes[NR] = {
	[ROOT] = { "root", -1, "+memory" }, [A] = { "a", ROOT }, [A1] = { "a/a1", A },
	[A2] = { "a/a2", A }, [B] = { "b", ROOT, "+memory" }, [B1] = { "b/b1", B },
	[B2] = { "b/b2", B },
};
/* the moves into each: distinct counts, so that a mix-up cannot add up right */
static const int moves[NR] = {
	[ROOT] = 0, [A] = 2, [A1] = 3, [A2] = 5, [B] = 0, [B1] = 7, [B2] = 0,
};
#define EXTRA_NODE	A2	/* without a memory css */
#define EXTRA_MOVES	6
#define CROSS_NODE	B1	/* with a memory css */
#define CROSS_MOVES	4
#define HOTPLUG_NODE	A1
#define HOTPLUG_MOVES	9
#define HOTPLUG_CPU	1
#define VERDICT(ok)	((ok) ? KSFT_PASS : KSFT_FAIL)

struct row {
	unsigned long long total, own, pending;
};

static struct rstat_propagation_bpf *skel;
static struct bpf_link *iter;
static bool broken;
/* <cgroup2>/rstat_prop_park.<pid> */
static struct cg_node park = { .rel = "park", .parent = -1 };
static int moved[NR];
static pid_t child = -1;
static struct row now[NR];
static char text[2][4096];

/* rstat_propagation.bpf.c's skeleton, on the css API build's object if need be */
static int check_load_attach(void)
{
	int err;

	if (broken)
		ksft_print_msg("BROKEN flush (--broken): nothing is pushed to the parent\n");
	err = BU_LOAD_RSTAT(skel, rstat_propagation, NULL);
	if (err)
		return check_fail("open/load/attach failed: %s", strerror(-err));
	skel->bss->rs_broken = broken;
	return KSFT_PASS;
}

static int check_tree_setup(void)
{
	struct rs_total zero = {};
	const char *cgroot;
	int i = cg_find_root(&cgroot, "memory");

	if (i != KSFT_PASS)
		return i;
	if (cg_tree_create(cgroot, "rstat_prop_park", &park, 1) ||
	    cg_tree_create(cgroot, "rstat_prop", nodes, NR))
		goto fail;
	/* the premise of the mix: memory.stat exactly where a memory css is */
	for (i = 0; i < NR; i++) {
		bool want = i != A1 && i != A2, have = cg_read_key(nodes[i].path, "memory.stat",
								     "anon") >= 0;

		if (have != want)
			return check_fail("%s: memory controller %s, expected %s", nodes[i].rel,
					  have ? "enabled" : "absent", want ? "enabled" : "absent");
	}
	for (i = 0; i < NR; i++)
		if (bpf_map__update_elem(skel->maps.rs_totals, &nodes[i].id, sizeof(nodes[i].id),
					 &zero, sizeof(zero), BPF_NOEXIST))
			goto fail;
	child = cg_spawn(park.path, NULL, NULL);	/* sleeps */
	if (child < 0)
		goto fail;
	iter = bu_attach_cgroup_iter(skel->progs.rp_dump, nodes[ROOT].path,
				     BPF_CGROUP_ITER_DESCENDANTS_PRE);
	if (iter)
		return KSFT_PASS;
fail:
	ksft_print_msg("setting up %s failed: %s\n", nodes[ROOT].path, strerror(errno));
	bu_print_log();
	return KSFT_FAIL;
}

/* move the child @n times into @i (and back to the park after each); errors */
static int move(int i, int n)
{
	static int next_cpu;
	int err = 0;

	for (; n > 0; n--) {
		/* counted on the mover's CPU: take turns, so that a flush given
		 * the wrong CPU misses some of the moves */
		pin_cpu(next_cpu++);
		if (cg_enter(nodes[i].path, child) || cg_enter(park.path, child))
			err++;
		else
			moved[i]++;
	}
	return err;
}

static int check_moves_counted(void)
{
	int i, err = 0, sum = 0;

	for (i = 0; i < NR; i++) {
		err += move(i, moves[i]);
		sum += moved[i];
	}
	if (err || skel->bss->events != (unsigned long long)sum || skel->bss->rs_map_errors)
		return check_fail("moves: %d done, %d failed; tracepoint counted %llu; map errors %llu",
				  sum, err, skel->bss->events, skel->bss->rs_map_errors);
	return KSFT_PASS;
}

/* one walk (pre-order: the order of nodes[]) into @buf and now[]; none pending */
static bool read_tree(char *buf, size_t len)
{
	unsigned long long id;
	char *p = buf;
	int i, n = 0;

	if (bu_read_iter(iter, buf, len) <= 0) {
		ksft_print_msg("reading the iterator failed\n");
		return false;
	}
	for (i = 0; i < NR; i++, p += n, n = 0) {
		if (sscanf(p, "%llu %llu %llu %llu\n%n", &id, &now[i].total, &now[i].own,
			   &now[i].pending, &n) != 4 || !n || id != nodes[i].id || now[i].pending)
			break;
	}
	if (i == NR && !*p)
		return true;
	ksft_print_msg("walk line %d: expected \"%llu <total> <own> 0\" (%s), the walk:\n",
		       i + 1, i < NR ? nodes[i].id : 0, i < NR ? nodes[i].rel : "its end");
	print_block("  ", buf);
	return false;
}

static int check_iter_read(void)
{
	bool ok = read_tree(text[0], sizeof(text[0]));

	ksft_print_msg("bpf_rstat_flush calls: %llu\n", skel->bss->rs_flushes);
	return VERDICT(ok);
}

/* @i's own and total against the moves made, total against own + children */
static bool node_ok(int i)
{
	unsigned long long want = 0, kids = 0;
	int j;

	for (j = 0; j < NR; j++) {
		if (cg_tree_under(nodes, j, i))
			want += moved[j];
		if (nodes[j].parent == i)
			kids += now[j].total;
	}
	return expect(NULL, now[i].own == (unsigned long long)moved[i] && now[i].total == want &&
		      now[i].total == now[i].own + kids,
		      "%s: total %llu (own %llu + children %llu); expected %llu (own %d)",
		      nodes[i].rel, now[i].total, now[i].own, kids, want, moved[i]);
}

static int check_leaf_counts_exact(void)
{
	bool a1 = node_ok(A1), a2 = node_ok(A2), b1 = node_ok(B1);

	return VERDICT(a1 && a2 && b1);
}

#define NODE_CHECK(fn, node)	static int fn(void) { return VERDICT(node_ok(node)); }
NODE_CHECK(check_empty_cgroup_reads_zero, B2)
NODE_CHECK(check_parent_a_equals_own_plus_children, A)
NODE_CHECK(check_parent_b_equals_own_plus_children, B)
NODE_CHECK(check_test_root_equals_total, ROOT)

static int check_reread_stable(void)
{
	if (!read_tree(text[1], sizeof(text[1])))
		return KSFT_FAIL;
	if (!strcmp(text[0], text[1]))
		return KSFT_PASS;
	print_block("first:  ", text[0]);
	print_block("second: ", text[1]);
	return KSFT_FAIL;
}

/* a fresh read after moves into @node: exactly it and its ancestors grew, by @n */
static bool grew_exactly(const struct row *before, int node, int n)
{
	bool ok = read_tree(text[1], sizeof(text[1]));
	int i;

	for (i = 0; ok && i < NR; i++) {
		unsigned long long grew = now[i].total - before[i].total;
		int want = cg_tree_under(nodes, node, i) ? n : 0;

		expect(&ok, grew == (unsigned long long)want, "%s grew by %llu, expected %d",
		       nodes[i].rel, grew, want);
	}
	for (i = 0; ok && i < NR; i++)
		ok &= node_ok(i);
	return ok;
}

static int check_increment_propagates_to_ancestors_only(void)
{
	struct row before[NR];

	memcpy(before, now, sizeof(now));
	if (move(EXTRA_NODE, EXTRA_MOVES))
		return KSFT_FAIL;
	return VERDICT(grew_exactly(before, EXTRA_NODE, EXTRA_MOVES));
}

/*
 * The moves counted for CPU 1 while this process runs on CPU 0: the BPF program
 * writes CPU 1's slot and passes 1 to the updated kfunc (bpf_map_lookup_percpu_elem()
 * style).  A kernel that marks the current CPU instead never flushes (b1, CPU 1).
 */
static int check_update_for_another_cpu_flushed(void)
{
	struct row before[NR];
	int n, err = 0;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return check_skip("one CPU online: no other CPU to update for");
	memcpy(before, now, sizeof(now));
	skel->data->rs_update_cpu = 1;
	for (n = 0; n < CROSS_MOVES && !err; n++) {
		pin_cpu(0);
		err = cg_enter(nodes[CROSS_NODE].path, child) || cg_enter(park.path, child);
		moved[CROSS_NODE] += !err;
	}
	skel->data->rs_update_cpu = -1;
	if (err)
		return check_fail("moving into %s: %s", nodes[CROSS_NODE].rel, strerror(errno));
	return VERDICT(grew_exactly(before, CROSS_NODE, CROSS_MOVES));
}

/*
 * Moves counted on CPU 1, which is then taken offline before the flush: rstat keeps
 * what an offline CPU updated and flushes it (it walks every possible CPU).  CPU 1
 * comes back online afterwards (and on a signal).
 */
static int check_update_on_offlined_cpu_flushed(void)
{
	struct row before[NR];
	int n, err = 0;
	bool ok;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return check_skip("one CPU online: none to take offline");
	memcpy(before, now, sizeof(now));
	for (n = 0; n < HOTPLUG_MOVES && !err; n++) {
		pin_cpu(HOTPLUG_CPU);
		if (sched_getcpu() != HOTPLUG_CPU)
			return check_fail("could not run on CPU %d", HOTPLUG_CPU);
		err = cg_enter(nodes[HOTPLUG_NODE].path, child) || cg_enter(park.path, child);
		moved[HOTPLUG_NODE] += !err;
	}
	pin_cpu(0);	/* off the CPU before it goes */
	if (err)
		return check_fail("moving into %s: %s", nodes[HOTPLUG_NODE].rel, strerror(errno));
	err = cpu_set_online(HOTPLUG_CPU, false);
	if (err == -ENOENT)
		return check_skip("CPU %d cannot be taken offline (no CPU hotplug)", HOTPLUG_CPU);
	if (err)
		return check_fail("taking CPU %d offline: %s", HOTPLUG_CPU, strerror(-err));
	ok = grew_exactly(before, HOTPLUG_NODE, HOTPLUG_MOVES);
	err = cpu_set_online(HOTPLUG_CPU, true);
	expect(&ok, !err, "bringing CPU %d back online: %s", HOTPLUG_CPU, strerror(-err));
	return VERDICT(ok);
}

static int check_tree_cleanup(void)
{
	cpu_restore_online();
	cg_reap(&child);
	bpf_link__destroy(iter);
	rstat_propagation_bpf__destroy(skel);
	return cg_cleanup() ? KSFT_FAIL : KSFT_PASS;
}

static const struct check checks[] = {
	CHECK(load_attach),
	CHECK(tree_setup, load_attach),
	CHECK(moves_counted, tree_setup),
	CHECK(iter_read, tree_setup),
	CHECK(leaf_counts_exact, iter_read),
	CHECK(empty_cgroup_reads_zero, iter_read),
	CHECK(parent_a_equals_own_plus_children, iter_read),
	CHECK(parent_b_equals_own_plus_children, iter_read),
	CHECK(test_root_equals_total, iter_read),
	CHECK(reread_stable, iter_read),
	CHECK(increment_propagates_to_ancestors_only, iter_read),
	CHECK(update_for_another_cpu_flushed, iter_read),
	CHECK(update_on_offlined_cpu_flushed, iter_read),
	CHECK(tree_cleanup),
};

int main(int argc, char **argv)
{
	broken = argc > 1 && !strcmp(argv[1], "--broken");
	cg_on_signal(cpu_restore_online);
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
