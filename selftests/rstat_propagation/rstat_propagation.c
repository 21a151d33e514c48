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
 * controller's.  cpu.stat, flushed on CPU 0 after a child spun on CPU 1, must
 * show the child's own CPU time in its cgroup and the parent; a flush traces
 * each possible CPU in the rstat lock's tracepoints (6.10+).  Updates for one CPU
 * made from two CPUs while it flushes must all be flushed, and where the per-CPU
 * lock is traced (6.10 to 6.15) a lock held on purpose must make the update for
 * its CPU, and a flush, wait for it.  "--broken": the flush does not propagate
 * (must FAIL).
 */
#include "selftest.h"
#include <sched.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#define RS_NR 1
#include "rstat_counters.h"
#include "inventory.h"
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
#define ROOT_MOVES	11	/* into the cgroup2 root itself */
#define AFTER_ROOT_MOVES 3	/* into B1, once the root counts */
#define SPIN_CPU	1
#define SPIN_MS		200	/* of the spinner's own CPU time */
#define SPIN_SLACK_MS	50	/* its start and exit, around the measured spin */
#define VERDICT(ok)	((ok) ? KSFT_PASS : KSFT_FAIL)
/* the inventory's lists (selftests/inventory/rstat.toml, see test.toml) */
#define INVENTORY	"rstat.inventory.toml"

struct row {
	unsigned long long total, own, pending;
};

static struct rstat_propagation_bpf *skel;
static struct bpf_link *iter;
static bool broken;
static bool traced;	/* the rstat lock's tracepoints (6.10+) */
static bool cpu_traced;	/* and the per-CPU lock's (6.10 to 6.15) */
/* <cgroup2>/rstat_prop_park.<pid> */
static struct cg_node park = { .rel = "park", .parent = -1 };
/* <cgroup2>/rstat_prop_spin.<pid>/leaf: cpu.stat's own tree */
static struct cg_node spin_tree[2] = { { .rel = "spin", .parent = -1 }, { .rel = "leaf", .parent = 0 } };
static int spin_pipe[2] = { -1, -1 };
static int moved[NR];
static pid_t child = -1;
static const char *cgroot;	/* the cgroup2 root */
static struct row now[NR];
static char text[2][4096];

/* rstat_propagation.bpf.c's skeleton, on the css API build's object if need be */
static int check_load_attach(void)
{
	int err;

	if (broken)
		ksft_print_msg("BROKEN flush (--broken): nothing is pushed to the parent\n");
	traced = bu_has_tracepoint("cgroup_rstat_locked") &&
		 bu_has_tracepoint("cgroup_rstat_unlock");
	cpu_traced = traced && bu_has_tracepoint("cgroup_rstat_cpu_lock_contended") &&
		     bu_has_tracepoint("cgroup_rstat_cpu_locked") &&
		     bu_has_tracepoint("cgroup_rstat_cpu_unlock") &&
		     bu_has_tracepoint("cgroup_rstat_cpu_lock_contended_fastpath") &&
		     bu_has_tracepoint("cgroup_rstat_cpu_locked_fastpath");
	err = BU_LOAD_RSTAT(skel, rstat_propagation,
			    !traced ? "rp_trace_*" : !cpu_traced ? "rp_trace_cpu_*" : NULL);
	if (err)
		return check_fail("open/load/attach failed: %s", strerror(-err));
	skel->bss->rs_broken = broken;
	return KSFT_PASS;
}

static int check_tree_setup(void)
{
	struct rs_total zero = {};
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
 * @moves moves into @node made on CPU 0, each counted by the program for CPU 1: it
 * writes CPU 1's slot and passes 1 to the updated kfunc (bpf_map_lookup_percpu_elem()
 * style); 0, or the check's verdict when a move failed
 */
static int moves_counted_for_cpu1(int node, int moves)
{
	int n, err = 0;

	skel->data->rs_update_cpu = 1;
	for (n = 0; n < moves && !err; n++) {
		pin_cpu(0);
		err = cg_enter(nodes[node].path, child) || cg_enter(park.path, child);
		moved[node] += !err;
	}
	skel->data->rs_update_cpu = -1;
	return err ? check_fail("moving into %s: %s", nodes[node].rel, strerror(errno)) : 0;
}

/*
 * The moves counted for CPU 1 while this process runs on CPU 0.  A kernel that marks
 * the current CPU instead never flushes (b1, CPU 1).
 */
static int check_update_for_another_cpu_flushed(void)
{
	struct row before[NR];

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return check_skip("one CPU online: no other CPU to update for");
	memcpy(before, now, sizeof(now));
	return moves_counted_for_cpu1(CROSS_NODE, CROSS_MOVES) ?:
	       VERDICT(grew_exactly(before, CROSS_NODE, CROSS_MOVES));
}

/* HOTPLUG_CPU offline, this process on CPU 0: 0, or the check's verdict when not */
static int take_hotplug_cpu_offline(void)
{
	int err;

	pin_cpu(0);	/* off the CPU before it goes */
	err = cpu_set_online(HOTPLUG_CPU, false);
	if (err == -ENOENT)
		return check_skip("CPU %d cannot be taken offline (no CPU hotplug)", HOTPLUG_CPU);
	if (err)
		return check_fail("taking CPU %d offline: %s", HOTPLUG_CPU, strerror(-err));
	return 0;
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
	if (err) {
		pin_cpu(0);
		return check_fail("moving into %s: %s", nodes[HOTPLUG_NODE].rel, strerror(errno));
	}
	err = take_hotplug_cpu_offline();
	if (err)
		return err;
	ok = grew_exactly(before, HOTPLUG_NODE, HOTPLUG_MOVES);
	err = cpu_set_online(HOTPLUG_CPU, true);
	expect(&ok, !err, "bringing CPU %d back online: %s", HOTPLUG_CPU, strerror(-err));
	return VERDICT(ok);
}

/*
 * Moves counted for CPU 1 while CPU 1 is offline, from CPU 0 (the program passes 1
 * to the updated kfunc): an offline CPU is still a possible one, its per-CPU
 * state is there and the flush walks it; an update for it is kept, not dropped.
 */
static int check_update_for_offline_cpu_flushed(void)
{
	struct row before[NR];
	int err;
	bool ok;

	memcpy(before, now, sizeof(now));
	err = sysconf(_SC_NPROCESSORS_ONLN) < 2 ?
	      check_skip("one CPU online: none to take offline") : take_hotplug_cpu_offline();
	if (err)
		return err;
	err = moves_counted_for_cpu1(HOTPLUG_NODE, HOTPLUG_MOVES);
	ok = !err && grew_exactly(before, HOTPLUG_NODE, HOTPLUG_MOVES);
	err = cpu_set_online(HOTPLUG_CPU, true);
	expect(&ok, !err, "bringing CPU %d back online: %s", HOTPLUG_CPU, strerror(-err));
	return VERDICT(ok);
}

/*
 * The cgroup2 root, the one cgroup rstat flushes with no parent (the hook gets NULL
 * for it). Every flush of the test root pushed its counts to the root (the test
 * root's parent), where they wait until the root itself is flushed; moves of the
 * child into the root are the root's own. Read by a flush of the root alone, after
 * 3 more moves into b1: total = every move into the tree + the root's own.
 */
static int check_cgroup2_root_flushed(void)
{
	struct rs_total zero = {};
	unsigned long long id, total, own, pending, tree = 0;
	struct bpf_link *self;
	__u64 root_id = cg_id(cgroot);
	char line[256];
	int n, err = 0;
	bool ok = true;

	/* made by the test root's first push already, in a kernel that pushes */
	if (bpf_map__update_elem(skel->maps.rs_totals, &root_id, sizeof(root_id), &zero,
				 sizeof(zero), BPF_NOEXIST) && errno != EEXIST)
		return check_fail("counting for the cgroup2 root: %s", strerror(errno));
	for (n = 0; n < ROOT_MOVES && !err; n++) {
		pin_cpu(n);
		err = cg_enter(cgroot, child) || cg_enter(park.path, child);
	}
	err = err ?: move(B1, AFTER_ROOT_MOVES);
	if (err)
		return check_fail("moving the child into %s and b1: %s", cgroot, strerror(errno));
	self = bu_attach_cgroup_iter(skel->progs.rp_dump, cgroot, BPF_CGROUP_ITER_SELF_ONLY);
	n = self ? bu_read_iter(self, line, sizeof(line)) : -errno;
	bpf_link__destroy(self);
	if (n <= 0)
		return check_fail("reading the cgroup2 root: %s", n ? strerror(-n) : "nothing");
	if (sscanf(line, "%llu %llu %llu %llu", &id, &total, &own, &pending) != 4)
		return check_fail("the cgroup2 root's line: '%s'", line);
	for (n = 0; n < NR; n++)
		tree += moved[n];
	expect(&ok, id == root_id && own == ROOT_MOVES && total == tree + ROOT_MOVES && !pending,
	       "cgroup2 root (id %llu): total %llu, own %llu, pending %llu; expected total %llu (the tree's %llu moves + its own), own %d, nothing pending",
	       id, total, own, pending, tree + ROOT_MOVES, tree, ROOT_MOVES);
	return VERDICT(ok);
}

static long long thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* in the spinner: SPIN_MS of its CPU time on SPIN_CPU, the time spun to the pipe */
static int spin(void *unused)
{
	long long t0 = thread_ns(), t;

	(void)unused;
	if (sched_getcpu() != SPIN_CPU)
		return 2;
	do
		t = thread_ns();
	while (t - t0 < SPIN_MS * 1000000LL);
	t -= t0;
	return write(spin_pipe[1], &t, sizeof(t)) == sizeof(t) ? 0 : 1;
}

/*
 * The base stats (cpu.stat) go through the same flush as the hook: a child born on
 * CPU 1 spins there in spin/leaf, and cpu.stat read from CPU 0 (a flush on CPU 0)
 * must show all of it in the leaf and in its parent.  A flush that reads the
 * flushing CPU's counters for every CPU it walks shows none of it.  Oracle: the
 * child's own CLOCK_THREAD_CPUTIME_ID across the spin (the scheduler's per-task
 * time, not a cgroup's); usage_usec may exceed it by the child's start and exit,
 * at most SPIN_SLACK_MS, less than the SPIN_MS a parent counted twice would add.
 */
static int check_cpu_time_on_another_cpu_flushed(void)
{
	long long before[2], after, spun = 0;
	bool ok = true;
	int i, rc;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return check_skip("one CPU online: no other CPU to spin on");
	if (cg_tree_create(cgroot, "rstat_prop_spin", spin_tree, 2) || pipe(spin_pipe))
		return check_fail("setting up the spinner's cgroups: %s", strerror(errno));
	pin_cpu(0);
	for (i = 0; i < 2; i++)
		before[i] = cg_read_key(spin_tree[i].path, "cpu.stat", "usage_usec");
	pin_cpu(SPIN_CPU);	/* the child inherits it: born and run on SPIN_CPU */
	rc = cg_run(spin_tree[1].path, spin, NULL);
	pin_cpu(0);
	if (rc || read(spin_pipe[0], &spun, sizeof(spun)) != sizeof(spun))
		return check_fail("the spinner: exit %d%s", rc,
				  rc == 2 ? " (it did not run on CPU 1)" : "");
	if (sched_getcpu() != 0)
		return check_fail("could not run on CPU 0");
	spun /= 1000;
	for (i = 1; i >= 0; i--) {
		after = cg_read_key(spin_tree[i].path, "cpu.stat", "usage_usec");
		ksft_print_msg("%s: usage_usec +%lld, the child spun %lld us on CPU %d\n",
			       spin_tree[i].rel, after - before[i], spun, SPIN_CPU);
		expect(&ok, before[i] >= 0 && after - before[i] >= spun &&
		       after - before[i] <= spun + SPIN_SLACK_MS * 1000,
		       "%s: usage_usec grew by %lld (read from CPU 0); the child spun %lld us on CPU %d (allowed up to %d ms more)",
		       spin_tree[i].rel, after - before[i], spun, SPIN_CPU, SPIN_SLACK_MS);
	}
	return VERDICT(ok);
}

/*
 * The keys of cpu.stat (a leaf without the cpu controller, and the cgroup2 root)
 * and of a leaf's cpu.stat.local are the inventory's lists for this kernel
 * (captured from real guests): a kernel that prints a new key, or stops printing
 * one, fails here naming it.
 */
static int check_cpu_stat_keys_listed(void)
{
	static const struct {
		const char *file, *list;
		bool root;
	} files[] = {
		{ "cpu.stat", "cpu.stat.leaf", false }, { "cpu.stat", "cpu.stat.root", true },
		{ "cpu.stat.local", "cpu.stat.local.leaf", false },
	};
	static char text[4096], keys[64][64];
	const char *found[64], *cg;
	struct inv_list l;
	int k, n, bad = 0, err;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(files); i++) {
		cg = files[i].root ? cgroot : nodes[B1].path;
		n = cg_read(cg, files[i].file, text, sizeof(text));
		n = n < 0 ? 0 : inv_keys(text, keys, ARRAY_SIZE(keys));
		err = inv_load(INVENTORY, files[i].list, &l);
		if (err && err != -ENOENT)
			return KSFT_FAIL;
		/* no list: the file prints no key on any kernel captured (cpu.stat.local without
		 * CFS bandwidth), none expected here either */
		for (k = 0; k < n; k++)
			found[k] = keys[k];
		bad += inv_compare(&l, found, n, files[i].list);
		ksft_print_msg("%s of %s: %d keys, %d in the inventory's list of %s\n",
			       files[i].file, files[i].root ? "the cgroup2 root" : "b1", n, l.n,
			       l.this_kernel ? "this kernel" : "every kernel");
		inv_free(&l);
	}
	return VERDICT(!bad);
}

/* rstat_prop_split.<pid>/{user,sys,nice}: one kind of CPU time each */
enum { SPLIT, S_USER, S_SYS, S_NICE, NR_SPLIT };
static struct cg_node split[NR_SPLIT] = {
	[SPLIT] = { .rel = "split", .parent = -1 }, [S_USER] = { .rel = "user", .parent = SPLIT },
	[S_SYS] = { .rel = "sys", .parent = SPLIT }, [S_NICE] = { .rel = "nice", .parent = SPLIT },
};
#define NICE	10

static long long tv_us(struct timeval tv)
{
	return tv.tv_sec * 1000000LL + tv.tv_usec;
}

/*
 * In a split leaf, on SPIN_CPU: SPIN_MS of its own CPU time spent in user space
 * (S_USER), in the kernel reading /dev/zero (S_SYS) or in user space at nice NICE
 * (S_NICE); then its own rusage (user, system: microseconds) to the pipe.
 */
static int spin_kind(void *arg)
{
	static char buf[65536];
	int kind = *(int *)arg, fd = -1;
	long long t0 = thread_ns(), r[2];
	struct rusage ru;

	if (sched_getcpu() != SPIN_CPU)
		return 2;
	if (kind == S_NICE && setpriority(PRIO_PROCESS, 0, NICE))
		return 3;
	if (kind == S_SYS && (fd = open("/dev/zero", O_RDONLY | O_CLOEXEC)) < 0)
		return 4;
	/* the clock read is a system call: the user spinners spin in user space between reads */
	while (thread_ns() - t0 < SPIN_MS * 1000000LL) {
		if (fd >= 0 && read(fd, buf, sizeof(buf)) != sizeof(buf))
			return 5;
		for (volatile long j = 0; fd < 0 && j < 1000000; j++)
			;
	}
	getrusage(RUSAGE_SELF, &ru);
	r[0] = tv_us(ru.ru_utime);
	r[1] = tv_us(ru.ru_stime);
	return write(spin_pipe[1], r, sizeof(r)) == sizeof(r) ? 0 : 1;
}

/* on CPU 0 until killed: cpu.stat of every split cgroup read (each read a flush) every
 * 10 ms, so that the spinner's time is flushed many times while it is made */
static void read_split_until_killed(void)
{
	int i;

	pin_cpu(0);
	for (;;) {
		for (i = 0; i < NR_SPLIT; i++)
			cg_read_key(split[i].path, "cpu.stat", "nice_usec");
		usleep(10000);
	}
}

/*
 * cpu.stat's split of the time (user_usec, system_usec, nice_usec), flushed on CPU
 * 0 every 10 ms while a child spins on CPU 1 (a flush must add only what is new since
 * the last one) and after it, in each split leaf: a user spinner, a kernel
 * spinner (reads of /dev/zero), a user spinner at nice 10.  Oracle: each child's
 * own rusage (its utime and stime: the scheduler's per-task accounting, not a
 * cgroup's) and its nice value; each field may differ from it by SPIN_SLACK_MS
 * (the child's start in the parent cgroup and its exit, around the measured
 * rusage, and the tick sampling both sides share); nice_usec grows only in the
 * nice leaf (6.12+: 6.1 has no nice_usec), and the parent's usage grows by the
 * leaves' together (up to 3 us of rounding).  nice_usec is the ticks the niced
 * child was sampled in (not adjusted to its runtime as user and system are): its
 * oracle is /proc/stat's nice over the same spin, every CPU's kernel_cpustat that
 * the same ticks fill (nothing else runs niced), within a tick of each (/proc/stat
 * truncates to USER_HZ).  Against the child's user time it was 112 ms for 169 ms
 * under TCG on 7.2, and failed on 6.12 too: a tick sampled, not a time measured.
 */
static bool proc_stat_us(long long *v);

static int check_cpu_stat_user_system_nice(void)
{
	static const char *const fields[] = { "usage_usec", "user_usec", "system_usec", "nice_usec" };
	long long before[NR_SPLIT][4], after[NR_SPLIT][4], ru[NR_SPLIT][2] = {}, d, sum = 0;
	long long slack = SPIN_SLACK_MS * 1000, ps0[5], ps1[5], tick = 1000000 / sysconf(_SC_CLK_TCK);
	bool ok = true, nice = true, ps = true;
	volatile pid_t reader;
	int i, f, rc, kind;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return check_skip("one CPU online: no other CPU to spin on");
	if (cg_tree_create(cgroot, "rstat_prop_split", split, NR_SPLIT))
		return check_fail("setting up the split cgroups: %s", strerror(errno));
	if (spin_pipe[0] < 0 && pipe(spin_pipe))
		return check_fail("pipe: %s", strerror(errno));
	pin_cpu(0);
	for (i = 0; i < NR_SPLIT; i++)
		for (f = 0; f < 4; f++)
			before[i][f] = cg_read_key(split[i].path, "cpu.stat", fields[f]);
	nice = before[SPLIT][3] >= 0;
	for (kind = S_USER; kind <= S_NICE; kind++) {
		if (kind == S_NICE)
			ps &= proc_stat_us(ps0);
		reader = fork();
		if (!reader)
			read_split_until_killed();
		pin_cpu(SPIN_CPU);
		rc = cg_run(split[kind].path, spin_kind, &kind);
		pin_cpu(0);
		cg_reap(&reader);
		if (kind == S_NICE)
			ps &= proc_stat_us(ps1);
		if (rc || read(spin_pipe[0], ru[kind], sizeof(ru[kind])) != sizeof(ru[kind]))
			return check_fail("the %s spinner: exit %d", split[kind].rel, rc);
	}
	for (i = 0; i < NR_SPLIT; i++)
		for (f = 0; f < 4; f++)
			after[i][f] = cg_read_key(split[i].path, "cpu.stat", fields[f]);
	for (kind = S_USER; kind <= S_NICE; kind++) {
		long long user = after[kind][1] - before[kind][1], sys = after[kind][2] - before[kind][2];

		ksft_print_msg("%s: usage +%lld, user +%lld, system +%lld, nice +%lld us; the child's rusage: user %lld, system %lld us\n",
			       split[kind].rel, after[kind][0] - before[kind][0], user, sys,
			       nice ? after[kind][3] - before[kind][3] : -1, ru[kind][0], ru[kind][1]);
		expect(&ok, user >= ru[kind][0] - slack && user <= ru[kind][0] + slack,
		       "%s: user_usec +%lld, the child's user time %lld us (+- %lld)", split[kind].rel,
		       user, ru[kind][0], slack);
		expect(&ok, sys >= ru[kind][1] - slack && sys <= ru[kind][1] + slack,
		       "%s: system_usec +%lld, the child's system time %lld us (+- %lld)",
		       split[kind].rel, sys, ru[kind][1], slack);
		if (nice && kind != S_NICE) {
			d = after[kind][3] - before[kind][3];
			expect(&ok, !d, "%s: nice_usec +%lld, expected 0 (nothing niced ran there)",
			       split[kind].rel, d);
		} else if (nice) {
			long long pn = ps1[1] - ps0[1];

			d = after[kind][3] - before[kind][3];
			expect(&ok, ps, "/proc/stat: not read");
			expect(&ok, ps && d >= pn - 2 * tick && d <= pn + 2 * tick && d > 0,
			       "%s: nice_usec +%lld, /proc/stat's nice +%lld us over the spin (+- %lld; > 0)",
			       split[kind].rel, d, pn, 2 * tick);
		}
		sum += after[kind][0] - before[kind][0];
	}
	d = after[SPLIT][0] - before[SPLIT][0];
	expect(&ok, d >= sum - 3 && d <= sum + 3, "split: usage_usec +%lld, its leaves' +%lld", d, sum);
	expect(&ok, ru[S_USER][0] > ru[S_USER][1] && ru[S_SYS][1] > ru[S_SYS][0],
	       "the spinners did not spin as meant: user %lld/%lld, sys %lld/%lld us (user/system)",
	       ru[S_USER][0], ru[S_USER][1], ru[S_SYS][0], ru[S_SYS][1]);
	return VERDICT(ok);
}

/* /proc/stat's cpu line in microseconds: user, nice, system, irq, softirq; false if unread */
static bool proc_stat_us(long long *v)
{
	long long f[7], hz = sysconf(_SC_CLK_TCK);
	char buf[512];
	int i, n = read_close(open("/proc/stat", O_RDONLY | O_CLOEXEC), buf, sizeof(buf) - 1);

	if (n <= 0 || hz <= 0)
		return false;
	buf[n] = '\0';
	/* user nice system idle iowait irq softirq */
	if (sscanf(buf, "cpu %lld %lld %lld %lld %lld %lld %lld", &f[0], &f[1], &f[2], &f[3],
		   &f[4], &f[5], &f[6]) != 7)
		return false;
	for (i = 0; i < 7; i++)
		f[i] *= 1000000 / hz;
	v[0] = f[0];
	v[1] = f[1];
	v[2] = f[2];
	v[3] = f[5];
	v[4] = f[6];
	return true;
}

/*
 * The cgroup2 root's cpu.stat is summed from every CPU's kernel_cpustat, not flushed by
 * rstat: against /proc/stat's cpu line (the same per-CPU times, summed and printed by
 * fs/proc/stat.c in clock ticks), read between two reads of the root's cpu.stat:
 * user_usec = user + nice, system_usec = system + irq + softirq, usage_usec their sum,
 * nice_usec = nice (6.12+).  /proc/stat truncates each field to a tick: the root's first
 * read may be up to a tick per field above it, its second at least it.  The niced
 * spinner of cpu_stat_user_system_nice ran just before: nice holds 200 ms.
 */
static int check_cpu_stat_root_matches_proc_stat(void)
{
	static const char *const fields[] = { "usage_usec", "user_usec", "system_usec", "nice_usec" };
	long long a[4], b[4], p[5], want[4], tick = 1000000 / sysconf(_SC_CLK_TCK), slack;
	bool ok = true;
	int f;

	for (f = 0; f < 4; f++)
		a[f] = cg_read_key(cgroot, "cpu.stat", fields[f]);
	if (!proc_stat_us(p))
		return check_fail("/proc/stat: no cpu line");
	for (f = 0; f < 4; f++)
		b[f] = cg_read_key(cgroot, "cpu.stat", fields[f]);
	want[1] = p[0] + p[1];
	want[2] = p[2] + p[3] + p[4];
	want[0] = want[1] + want[2];
	want[3] = p[1];
	ksft_print_msg("cgroup2 root cpu.stat usage/user/system/nice %lld/%lld/%lld/%lld then %lld/%lld/%lld/%lld us; /proc/stat user %lld nice %lld system %lld irq %lld softirq %lld us\n",
		       a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], p[0], p[1], p[2], p[3], p[4]);
	for (f = 0; f < 4; f++) {
		if (f == 3 && a[3] < 0)
			continue;	/* no nice_usec before 6.x (6.1) */
		slack = tick * (f == 0 ? 5 : f == 2 ? 3 : f == 1 ? 2 : 1);
		expect(&ok, a[f] >= 0 && a[f] - slack <= want[f] && want[f] <= b[f],
		       "root %s %lld then %lld us, /proc/stat's %lld us: expected between (less %lld us of ticks truncated)",
		       fields[f], a[f], b[f], want[f], slack);
	}
	return VERDICT(ok);
}

/* the possible CPUs in order (/sys/devices/system/cpu/possible): how many, or -1 */
static int possible_cpus(int *cpus, int max)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	char buf[256], *p = buf;
	int n = 0, a, b, len;

	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	while (p && sscanf(p, "%d%n", &a, &len) == 1) {
		p += len;
		b = a;
		if (*p == '-' && sscanf(p + 1, "%d%n", &b, &len) == 1)
			p += 1 + len;
		for (; a <= b; a++) {
			if (n == max)
				return -1;
			cpus[n++] = a;
		}
		p = *p == ',' ? p + 1 : NULL;
	}
	return n;
}

/*
 * The flush loop names each CPU it walks in the rstat lock's tracepoints: one flush
 * of the test root (its iterator, self only, read on CPU 0) must trace, for every
 * possible CPU c in order: with cgroup_rstat_flush (6.1, 6.12) locked(-1), then
 * unlock(c) and locked(c) (the loop lets go of one lock held across CPUs), then
 * unlock(-1); with css_rstat_flush (7.2, where the lock is taken per CPU) locked(c)
 * and unlock(c).  Where rstat has a per-CPU lock with tracepoints (6.10 to 6.15),
 * each CPU's list is taken under that CPU's lock first: cpu_locked(c) uncontended,
 * cpu_unlock(c) (a wait on it, contended(c) then locked(c) contended, reads as one
 * uncontended lock of c).  The kernel's BTF says which flush it has; a loop that
 * names the current CPU, or skips a CPU, or a lock traced with its arguments mixed
 * up, traces something else.
 */
static int check_flush_loop_traces_each_cpu(void)
{
	int cpus[31], n = possible_cpus(cpus, 31), got, i, k;
	char line[256], seq[1024] = "", *w = seq, want[2][1024] = { "", "" };
	bool per_cpu = bu_has_func("css_rstat_flush");
	struct bpf_link *self;

	if (!traced)
		return check_skip("no rstat lock tracepoints in this kernel (6.10+)");
	if (n <= 0)
		return check_fail("reading /sys/devices/system/cpu/possible (up to 31 CPUs)");
	skel->bss->trace_n = 0;
	skel->bss->trace_id = nodes[ROOT].id;
	pin_cpu(0);
	self = bu_attach_cgroup_iter(skel->progs.rp_dump, nodes[ROOT].path,
				     BPF_CGROUP_ITER_SELF_ONLY);
	i = self ? bu_read_iter(self, line, sizeof(line)) : -errno;
	bpf_link__destroy(self);
	skel->bss->trace_id = 0;
	if (i <= 0)
		return check_fail("reading the test root: %s", i ? strerror(-i) : "nothing");
	got = skel->bss->trace_n;
	for (i = 0; i < got && i < (int)ARRAY_SIZE(skel->bss->trace_cpu); i++) {
		char what = skel->bss->trace_what[i];

		/* a wait for a CPU's lock, then that lock: as if it were free */
		if (what == 'w' && i + 1 < got && i + 1 < (int)ARRAY_SIZE(skel->bss->trace_cpu) &&
		    skel->bss->trace_what[i + 1] == 'k' &&
		    skel->bss->trace_cpu[i + 1] == skel->bss->trace_cpu[i])
			what = 'l', i++;
		w += snprintf(w, seq + sizeof(seq) - w, " %c%d", what, skel->bss->trace_cpu[i]);
	}
	/* the two loops' traces of the possible CPUs */
	strcat(want[0], " L-1");
	for (k = 0; k < n; k++) {
		if (cpu_traced)
			snprintf(want[0] + strlen(want[0]), sizeof(want[0]) - strlen(want[0]),
				 " l%d u%d", cpus[k], cpus[k]);
		snprintf(want[0] + strlen(want[0]), sizeof(want[0]) - strlen(want[0]), " U%d L%d",
			 cpus[k], cpus[k]);
		snprintf(want[1] + strlen(want[1]), sizeof(want[1]) - strlen(want[1]), " L%d U%d",
			 cpus[k], cpus[k]);
	}
	strcat(want[0], " U-1");
	ksft_print_msg("the test root's flush traced:%s\n", seq);
	if (!strcmp(seq, want[per_cpu]))
		return KSFT_PASS;
	return check_fail("expected (%d possible CPUs, in order, %s)%s", n,
			  per_cpu ? "css_rstat_flush: a lock per CPU" : "cgroup_rstat_flush: one lock",
			  want[per_cpu]);
}

/*
 * Updates for one CPU made from two CPUs at once.  Two children, each in a leaf of
 * <cgroup2>/rstat_prop_race.<pid> (x, y) and pinned to a CPU of its own (0 and 1),
 * count for RACE_CPU (rs_update_cpu) through rp_race_update for RACE_MS, one
 * BPF_PROG_TEST_RUN at a time; y's child flushes the race root after each of its own
 * (cpu.stat).  Both link their leaf into the race root's list of RACE_CPU while the
 * flush takes that list apart: the list is RACE_CPU's, and so must be the lock (or
 * the lock-free list) each update and flush takes it with.  Each leaf must then read
 * exactly what its child counted: an update made under another CPU's lock can lose a
 * leaf from the list with the leaf still marked as on it, and nothing it counts
 * afterwards is flushed again.
 */
#define RACE_CPU	1
#define RACE_MS		1500
enum { RACE_ROOT, RACE_X, RACE_Y, RACE_NR };
static struct cg_node race[RACE_NR] = {
	[RACE_ROOT] = { "race", -1 }, [RACE_X] = { "x", RACE_ROOT }, [RACE_Y] = { "y", RACE_ROOT },
};

struct racer {
	int cpu;		/* the CPU it runs on */
	bool flushes;		/* the race root's cpu.stat read after each update */
	long long start_ns;	/* CLOCK_MONOTONIC: when both start */
	long long *counted;	/* shared: the updates it made */
};

static long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int race_updates(void *arg)
{
	struct racer *r = arg;
	LIBBPF_OPTS(bpf_test_run_opts, run);
	int fd = bpf_program__fd(skel->progs.rp_race_update);
	long long end = r->start_ns + RACE_MS * 1000000LL;
	char buf[512];

	pin_cpu(r->cpu);
	if (sched_getcpu() != r->cpu)
		return 2;
	while (mono_ns() < r->start_ns)
		;
	while (mono_ns() < end) {
		if (bpf_prog_test_run_opts(fd, &run))
			return 3;
		__atomic_add_fetch(r->counted, 1, __ATOMIC_RELAXED);
		if (r->flushes && cg_read(race[RACE_ROOT].path, "cpu.stat", buf, sizeof(buf)) < 0)
			return 4;
	}
	return 0;
}

/* @node's total as the iterator flushes and reads it (self only), or -1 */
static long long race_total(int node)
{
	struct bpf_link *self = bu_attach_cgroup_iter(skel->progs.rp_dump, race[node].path,
						      BPF_CGROUP_ITER_SELF_ONLY);
	unsigned long long id, total, own, pending;
	char line[256];
	ssize_t n = self ? bu_read_iter(self, line, sizeof(line) - 1) : -1;

	bpf_link__destroy(self);
	if (n <= 0)
		return -1;
	line[n] = '\0';
	if (sscanf(line, "%llu %llu %llu %llu", &id, &total, &own, &pending) != 4 ||
	    id != race[node].id)
		return -1;
	return (long long)total;
}

/* why a kernel traces no per-CPU rstat lock */
static const char *no_cpu_lock_traced(void)
{
	return traced ? "this kernel's rstat has no per-CPU lock (6.16+: lock-free updated lists)"
		      : "no rstat lock tracepoints in this kernel (6.10+)";
}

/* the race tree, made once; a check's verdict */
static int race_tree(void)
{
	return race[RACE_ROOT].id ? KSFT_PASS :
	       cg_tree_create(cgroot, "rstat_prop_race", race, RACE_NR);
}

static int check_concurrent_updates_for_one_cpu(void)
{
	long long *counted, got[2];
	struct racer r[2] = { { .cpu = 0 }, { .cpu = RACE_CPU, .flushes = true } };
	pid_t pid[2] = { -1, -1 };
	int k, st[2] = { -1, -1 };
	bool ok = true;

	if (sysconf(_SC_NPROCESSORS_ONLN) <= RACE_CPU)
		return check_skip("CPU %d is not online: no two CPUs to race on", RACE_CPU);
	counted = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (counted == MAP_FAILED)
		return check_fail("mmap: %s", strerror(errno));
	if (race_tree() != KSFT_PASS)
		return KSFT_FAIL;
	skel->bss->race_id[0] = race[RACE_X].id;
	skel->bss->race_id[1] = race[RACE_Y].id;
	skel->data->rs_update_cpu = RACE_CPU;
	for (k = 0; k < 2; k++) {
		r[k].counted = &counted[k];
		r[k].start_ns = mono_ns() + 300000000LL;	/* both forked by then */
	}
	for (k = 0; k < 2; k++)
		pid[k] = cg_spawn(race[RACE_X + k].path, race_updates, &r[k]);
	for (k = 0; k < 2; k++)
		st[k] = pid[k] > 0 ? cg_wait(pid[k]) : -1;
	skel->data->rs_update_cpu = -1;
	skel->bss->race_id[0] = skel->bss->race_id[1] = 0;
	for (k = 0; k < 2; k++)
		got[k] = race_total(RACE_X + k);
	ksft_print_msg("updates for CPU %d from CPU 0 (x) and CPU %d (y, flushing after each): %lld and %lld; x and y read %lld and %lld\n",
		       RACE_CPU, RACE_CPU, counted[0], counted[1], got[0], got[1]);
	for (k = 0; k < 2; k++) {
		expect(&ok, st[k] == 0,
		       "%s's child: exit %d (2: not on its CPU, 3: a test run failed, 4: cpu.stat unread)",
		       race[RACE_X + k].rel, st[k]);
		expect(&ok, counted[k] > 0 && got[k] == counted[k],
		       "%s: total %lld, its child counted %lld", race[RACE_X + k].rel, got[k],
		       counted[k]);
	}
	munmap(counted, 4096);
	return VERDICT(ok);
}

/*
 * What both held-lock checks start with: the per-CPU lock traced, two CPUs, the race
 * tree, x counted by rp_race_update, and a page shared with x's child in *@shared; a
 * check's verdict.
 */
static int held_lock_setup(void **shared)
{
	if (!cpu_traced)
		return check_skip("%s", no_cpu_lock_traced());
	if (sysconf(_SC_NPROCESSORS_ONLN) <= RACE_CPU)
		return check_skip("CPU %d is not online: no two CPUs", RACE_CPU);
	if (race_tree() != KSFT_PASS)
		return KSFT_FAIL;
	*shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (*shared == MAP_FAILED)
		return check_fail("mmap: %s", strerror(errno));
	skel->bss->race_id[0] = race[RACE_X].id;
	skel->bss->hold_id = 0;
	skel->bss->hold_state = 0;
	return KSFT_PASS;
}

/* spins while the hold's state is @from, at most @ms; the state then */
static __u32 hold_state_after(__u32 from, int ms)
{
	long long until = mono_ns() + ms * 1000000LL;
	__u32 st;

	while ((st = __atomic_load_n(&skel->bss->hold_state, __ATOMIC_ACQUIRE)) == from &&
	       mono_ns() < until)
		;
	return st;
}

/* waits at most 5 s for a child to say it is @ready (pinned, about to act) */
static void child_ready(pid_t pid, volatile int *ready)
{
	long long until = mono_ns() + 5000000000LL;

	while (pid > 0 && !*ready && mono_ns() < until)
		usleep(1000);
}

/*
 * Where rstat has a per-CPU lock with tracepoints (6.10 to 6.15), an update for
 * RACE_CPU made on CPU 0 takes RACE_CPU's lock: a flush of the race root on RACE_CPU
 * holds that lock HOLD_MS (rp_trace_cpu_unlock spins in its unlock tracepoint, x just
 * taken off RACE_CPU's list) while x's child, pinned to CPU 0, makes x's update for
 * RACE_CPU; the update must wait for that lock (its contended tracepoint, for x and
 * RACE_CPU) and take a good part of HOLD_MS.  An update that takes the caller's CPU
 * lock does not wait.  Held where the flush locks instead, before it pops the list,
 * the update can find x still on RACE_CPU's list and take no lock: no wait in 16 of
 * 20 runs with the race tree just made.  6.16's lists are lock-free and 6.1 traces no lock:
 * concurrent_updates_for_one_cpu covers them.
 */
#define HOLD_MS		50
#define WAIT_MIN_MS	10	/* the hold less the waiter's start: measured 40-50 ms */

struct waiter {
	volatile int ready;	/* pinned to CPU 0, waiting for the hold */
	long long took_ns;	/* its update's BPF_PROG_TEST_RUN */
};

static int update_when_held(void *arg)
{
	struct waiter *w = arg;
	LIBBPF_OPTS(bpf_test_run_opts, run);
	int fd = bpf_program__fd(skel->progs.rp_race_update);
	long long t0;

	pin_cpu(0);
	if (sched_getcpu() != 0)
		return 2;
	w->ready = 1;
	if (hold_state_after(0, 5000) != 1)
		return 5;
	t0 = mono_ns();
	if (bpf_prog_test_run_opts(fd, &run))
		return 3;
	w->took_ns = mono_ns() - t0;
	return 0;
}

static int check_update_waits_for_its_cpus_lock(void)
{
	struct waiter *w;
	char buf[512];
	pid_t waiter = -1, holder;
	int st = -1, hst = -1;
	bool ok = true;

	st = held_lock_setup((void **)&w);
	if (st != KSFT_PASS)
		return st;
	skel->data->rs_update_cpu = RACE_CPU;
	waiter = cg_spawn(race[RACE_X].path, update_when_held, w);
	child_ready(waiter, &w->ready);
	/* x off every CPU's list, then a flush on RACE_CPU that holds its lock */
	cg_read(race[RACE_ROOT].path, "cpu.stat", buf, sizeof(buf));
	skel->bss->cont_n = skel->bss->cont_other = 0;
	skel->data->hold_cpu = RACE_CPU;
	skel->bss->cont_id = race[RACE_X].id;
	skel->bss->hold_ns = HOLD_MS * 1000000ULL;
	skel->bss->hold_state = 0;
	skel->bss->hold_at_unlock = 1;
	skel->bss->hold_id = race[RACE_ROOT].id;
	holder = fork();
	if (!holder) {
		pin_cpu(RACE_CPU);
		_exit(sched_getcpu() != RACE_CPU ? 2 :
		      cg_read(race[RACE_ROOT].path, "cpu.stat", buf, sizeof(buf)) < 0 ? 4 : 0);
	}
	if (holder > 0 && waitpid(holder, &hst, 0) == holder)
		hst = WIFEXITED(hst) ? WEXITSTATUS(hst) : -1;
	st = waiter > 0 ? cg_wait(waiter) : -1;
	skel->bss->hold_id = 0;
	skel->bss->hold_at_unlock = 0;
	skel->bss->cont_id = 0;
	skel->bss->race_id[0] = 0;
	skel->data->rs_update_cpu = -1;
	/* x's own time, accounted on CPU 0 while the flush held CPU 0's lock, can wait too */
	ksft_print_msg("a flush on CPU %d held its lock %d ms (hold state %u); x's update for CPU %d made on CPU 0 took %.1f ms; x waited %u time(s) for CPU %d's lock, %u for another CPU's\n",
		       RACE_CPU, HOLD_MS, skel->bss->hold_state, RACE_CPU, w->took_ns / 1e6,
		       skel->bss->cont_n, RACE_CPU, skel->bss->cont_other);
	expect(&ok, hst == 0 && skel->bss->hold_state == 2,
	       "the flush on CPU %d: exit %d (2: not on its CPU, 4: cpu.stat unread), hold state %u (2: held, then let go)",
	       RACE_CPU, hst, skel->bss->hold_state);
	expect(&ok, st == 0, "x's child: exit %d (2: not on CPU 0, 3: its test run failed, 5: no hold within 5 s)",
	       st);
	/*
	 * At least one wait: the good 6.12 kernel once traced two for x and CPU 1 in the
	 * window (79 ms in all, a CI run of 2026-11-29), while an update that takes the
	 * caller's lock traces none for CPU 1 and takes well under WAIT_MIN_MS.
	 */
	expect(&ok, skel->bss->cont_n >= 1 && w->took_ns >= WAIT_MIN_MS * 1000000LL,
	       "x's update for CPU %d did not wait for CPU %d's lock (waits for it traced: %u; took %.1f ms, expected a wait, >= %d ms)",
	       RACE_CPU, RACE_CPU, skel->bss->cont_n, w->took_ns / 1e6, WAIT_MIN_MS);
	munmap(w, 4096);
	return VERDICT(ok);
}

/*
 * The other way round, and what a flush traces when it waits: an update of x made on
 * RACE_CPU, for RACE_CPU, holds that CPU's lock HOLD_MS (in its locked tracepoint)
 * while a flush of the race root runs on CPU 0; the flush must wait for RACE_CPU's
 * lock and trace it: contended(RACE_CPU), then locked(RACE_CPU) contended.  A wait
 * traced with the flushing CPU names CPU 0.
 *
 * x's child updates x over and over on RACE_CPU, so x is on RACE_CPU's list at any
 * time but just after a flush (its own cputime puts it back on each tick, too).  The
 * hold is armed, then an untraced flush takes x off the list: the next update of x
 * takes the lock and holds it.  A hold that began before that flush, or that leaves
 * less than HOLD_LEFT_MS when the traced flush begins, proves nothing: tried again,
 * up to HOLD_TRIES times.
 */
#define HOLD_TRIES	5
#define HOLD_LEFT_MS	(2 * WAIT_MIN_MS)

struct holder {
	volatile int ready;	/* pinned to RACE_CPU */
	volatile int stop;	/* the traced flush is over */
	long long runs;		/* updates made */
};

static int update_until_stopped(void *arg)
{
	struct holder *h = arg;
	LIBBPF_OPTS(bpf_test_run_opts, run);
	int fd = bpf_program__fd(skel->progs.rp_race_update);
	long long until;

	pin_cpu(RACE_CPU);
	if (sched_getcpu() != RACE_CPU)
		return 2;
	h->ready = 1;
	for (until = mono_ns() + 30000000000LL; !h->stop; h->runs++) {
		if (bpf_prog_test_run_opts(fd, &run))
			return 3;
		if (mono_ns() > until)
			return 5;
	}
	return 0;
}

/*
 * One try: arm the hold, take x off the lists and, once an update holds the lock with
 * HOLD_LEFT_MS to go, flush the race root traced; the time the traced flush took, or
 * -1 when this try proves nothing.
 */
static long long flush_during_a_hold(void)
{
	char buf[512];
	long long t0, took = -1;

	skel->bss->hold_state = 0;
	skel->bss->hold_id = race[RACE_X].id;
	cg_read(race[RACE_ROOT].path, "cpu.stat", buf, sizeof(buf));	/* x off the lists */
	if (hold_state_after(0, 1000) == 1) {
		skel->bss->trace_id = race[RACE_ROOT].id;
		t0 = mono_ns();
		if ((long long)skel->bss->hold_until - t0 >= HOLD_LEFT_MS * 1000000LL) {
			cg_read(race[RACE_ROOT].path, "cpu.stat", buf, sizeof(buf));
			took = mono_ns() - t0;
		}
		skel->bss->trace_id = 0;
	}
	skel->bss->hold_id = 0;
	hold_state_after(1, 1000);	/* the hold over before the next try or the verdict */
	return took;
}

static int check_flush_waits_for_an_updates_lock(void)
{
	char seq[256] = "", *p = seq;
	struct holder *h;
	long long took = -1;
	pid_t pid;
	int i, n, st, tries = 0, waits = 0, right = 0;
	bool ok = true;

	st = held_lock_setup((void **)&h);
	if (st != KSFT_PASS)
		return st;
	pid = cg_spawn(race[RACE_X].path, update_until_stopped, h);
	child_ready(pid, &h->ready);
	pin_cpu(0);
	skel->bss->hold_ns = HOLD_MS * 1000000ULL;
	skel->data->hold_cpu = RACE_CPU;
	skel->bss->trace_n = 0;
	while (pid > 0 && h->ready && took < 0 && tries < HOLD_TRIES) {
		tries++;
		skel->bss->trace_n = 0;
		took = flush_during_a_hold();
	}
	h->stop = 1;
	st = pid > 0 ? cg_wait(pid) : -1;
	skel->bss->race_id[0] = 0;
	n = took < 0 ? 0 : skel->bss->trace_n;
	for (i = 0; i < n && i < (int)ARRAY_SIZE(skel->bss->trace_cpu); i++) {
		p += snprintf(p, seq + sizeof(seq) - p, " %c%d", skel->bss->trace_what[i],
			      skel->bss->trace_cpu[i]);
		if (skel->bss->trace_what[i] == 'w') {
			waits++;
			right += skel->bss->trace_cpu[i] == RACE_CPU && i + 1 < n &&
				 skel->bss->trace_what[i + 1] == 'k' &&
				 skel->bss->trace_cpu[i + 1] == RACE_CPU;
		}
	}
	ksft_print_msg("an update on CPU %d held its lock %d ms (try %d of %d, %lld updates of x made); the race root's flush on CPU 0 took %.1f ms and traced:%s\n",
		       RACE_CPU, HOLD_MS, tries, HOLD_TRIES, h->runs, took / 1e6, seq);
	expect(&ok, st == 0, "x's child: exit %d (2: not on CPU %d, 3: its test run failed, 5: not stopped within 30 s)",
	       st, RACE_CPU);
	expect(&ok, took >= 0,
	       "no update of x took CPU %d's lock and held it with %d ms to go, in %d tries (hold state %u)",
	       RACE_CPU, HOLD_LEFT_MS, tries, skel->bss->hold_state);
	if (took >= 0)
		expect(&ok, waits == 1 && right == 1 && took >= WAIT_MIN_MS * 1000000LL,
		       "the flush's wait: expected one, for CPU %d's lock (w%d k%d) of >= %d ms; traced %d, %d of them right, %.1f ms",
		       RACE_CPU, RACE_CPU, RACE_CPU, WAIT_MIN_MS, waits, right, took / 1e6);
	munmap(h, 4096);
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
	CHECK(update_for_offline_cpu_flushed, iter_read),
	CHECK(cgroup2_root_flushed, iter_read),
	CHECK(cpu_time_on_another_cpu_flushed, tree_setup),
	CHECK(cpu_stat_user_system_nice, tree_setup),
	CHECK(cpu_stat_root_matches_proc_stat, tree_setup),
	CHECK(cpu_stat_keys_listed, tree_setup),
	CHECK(flush_loop_traces_each_cpu, tree_setup),
	CHECK(concurrent_updates_for_one_cpu, tree_setup),
	CHECK(update_waits_for_its_cpus_lock, tree_setup),
	CHECK(flush_waits_for_an_updates_lock, tree_setup),
	CHECK(tree_cleanup),
};

int main(int argc, char **argv)
{
	broken = argc > 1 && !strcmp(argv[1], "--broken");
	cg_on_signal(cpu_restore_online);
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
