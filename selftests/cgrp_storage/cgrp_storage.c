// SPDX-License-Identifier: GPL-2.0
/*
 * cgrp_storage: the semantics of cgroup local storage (BPF_MAP_TYPE_CGRP_STORAGE,
 * bpf_cgrp_storage_get/delete), mainline's since 6.2 and patches/cgrp-storage's on 6.1.
 *
 * A child parked outside the tree root/{a,b,c,d} is moved into a and b; two
 * children inside d call getpgid() at once; cgrp_storage.bpf.c counts both
 * in each cgroup's storage. Storage must appear on the first event and not
 * before, hold each cgroup's own counts, lose no concurrent update, answer
 * the syscall side by cgroup fd, refuse what it must, and be freed with its
 * cgroup.
 */
#include "selftest.h"
#include <sys/syscall.h>
#include <linux/types.h>
#include "cgrp_storage.h"
#include "cgrp_storage.skel.h"

enum { ROOT, A, B, C, D, NR };
static struct cg_node nodes[NR] = {
	[ROOT] = { "root", -1 }, [A] = { "a", ROOT }, [B] = { "b", ROOT },
	[C] = { "c", ROOT }, [D] = { "d", ROOT },
};
static const int moves[NR] = { [A] = 3, [B] = 5 };	/* distinct: no mix-up adds up */
#define CALLS		20000	/* getpgid() calls by each of two children in d */
#define FREE_WAIT_S	20	/* a cgroup is freed after RCU and a workqueue */

static struct cgrp_storage_bpf *skel;
static struct cg_node park = { .rel = "park", .parent = -1 };
static pid_t child = -1;
static int map_fd, fds[NR] = { -1, -1, -1, -1, -1 };

/* the storage of node @i through the syscall side: 0, or -errno (-ENOENT: none) */
static int lookup(int i, struct cgs_value *v)
{
	return bpf_map_lookup_elem(map_fd, &fds[i], v) ? -errno : 0;
}

static int expect_value(int i, __u64 moved, __u64 calls)
{
	struct cgs_value v;
	int err = lookup(i, &v);

	if (err)
		return check_fail("%s: lookup: %s", nodes[i].rel, strerror(-err));
	if (v.moves != moved || v.calls != calls || v.id != nodes[i].id)
		return check_fail("%s: moves %llu calls %llu id %llu, want %llu %llu %llu",
				  nodes[i].rel, v.moves, v.calls, v.id, moved, calls, nodes[i].id);
	return KSFT_PASS;
}

static int expect_none(int i)
{
	struct cgs_value v;
	int err = lookup(i, &v);

	return err == -ENOENT ? KSFT_PASS :
	       check_fail("%s: lookup gave %s, want ENOENT", nodes[i].rel, strerror(-err));
}

static int check_load_attach(void)
{
	skel = cgrp_storage_bpf__open_and_load();
	if (!skel || cgrp_storage_bpf__attach(skel)) {
		bu_print_log();
		return check_fail("open/load/attach failed: %s", strerror(errno));
	}
	map_fd = bpf_map__fd(skel->maps.cgs);
	return KSFT_PASS;
}

static int check_tree_setup(void)
{
	const char *cgroot;
	int i = cg_find_root(&cgroot, NULL);

	if (i != KSFT_PASS)
		return i;
	if (cg_tree_create(cgroot, "cgrp_storage_park", &park, 1) ||
	    cg_tree_create(cgroot, "cgrp_storage", nodes, NR))
		return check_fail("creating the tree failed: %s", strerror(errno));
	for (i = 0; i < NR; i++) {
		fds[i] = cg_open(nodes[i].path, ".", O_RDONLY | O_DIRECTORY);
		if (fds[i] < 0)
			return check_fail("open %s: %s", nodes[i].path, strerror(errno));
		if (i > ROOT)	/* the test root itself is not counted */
			skel->bss->ids[i - 1] = nodes[i].id;
	}
	child = cg_spawn(park.path, NULL, NULL);	/* sleeps */
	return child > 0 ? KSFT_PASS : check_fail("spawn: %s", strerror(-child));
}

static int check_none_before_first_event(void)
{
	return expect_none(A) ?: (skel->bss->created ? check_fail("created %llu",
			       skel->bss->created) : KSFT_PASS);
}

static int move(int i, int n)
{
	for (; n > 0; n--)
		if (cg_enter(nodes[i].path, child) || cg_enter(park.path, child))
			return check_fail("moving into %s: %s", nodes[i].rel, strerror(errno));
	return KSFT_PASS;
}

static int check_created_on_first_event(void)
{
	return move(A, 1) ?: expect_value(A, 1, 0) ?:
	       (skel->bss->created == 1 ? KSFT_PASS :
		check_fail("created %llu storages, want 1", skel->bss->created));
}

static int check_each_cgroup_its_own(void)
{
	return move(A, moves[A] - 1) ?: move(B, moves[B]) ?: expect_value(A, moves[A], 0) ?:
	       expect_value(B, moves[B], 0) ?: expect_none(C) ?: expect_none(ROOT);
}

static int call_getpgid(void *arg __attribute__((unused)))
{
	for (int i = 0; i < CALLS; i++)
		syscall(SYS_getpgid, 0);
	return 0;
}

static int check_concurrent_updates_exact(void)
{
	pid_t pids[2];
	int i;

	skel->bss->calls_id = nodes[D].id;
	for (i = 0; i < 2; i++)
		pids[i] = cg_spawn(nodes[D].path, call_getpgid, NULL);
	for (i = 0; i < 2; i++)
		if (pids[i] < 0 || cg_wait(pids[i]))
			return check_fail("getpgid child %d failed", i);
	skel->bss->calls_id = 0;
	return expect_value(D, 2, 2 * CALLS);	/* each child moved in once, too */
}

static int check_syscall_update_lookup_delete(void)
{
	struct cgs_value set = { .moves = 42, .id = nodes[C].id };

	if (bpf_map_update_elem(map_fd, &fds[C], &set, BPF_NOEXIST))
		return check_fail("update c: %s", strerror(errno));
	if (!bpf_map_update_elem(map_fd, &fds[C], &set, BPF_NOEXIST) || errno != EEXIST)
		return check_fail("a second BPF_NOEXIST update: %s, want EEXIST", strerror(errno));
	if (expect_value(C, 42, 0) != KSFT_PASS)
		return KSFT_FAIL;
	if (bpf_map_delete_elem(map_fd, &fds[C]))
		return check_fail("delete c: %s", strerror(errno));
	if (!bpf_map_delete_elem(map_fd, &fds[C]) || errno != ENOENT)
		return check_fail("deleting again: %s, want ENOENT", strerror(errno));
	return expect_none(C);
}

static int check_refusals(void)
{
	int key = fds[C], next, fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	struct cgs_value v;
	bool ok = true;

	expect(&ok, bpf_map_lookup_elem(map_fd, &fd, &v) != 0,
	       "a lookup keyed by a file that is no cgroup succeeded");
	expect(&ok, bpf_map_get_next_key(map_fd, &key, &next) != 0,
	       "listing the keys succeeded");
	close(fd);
	expect(&ok, !skel->bss->bad_flags_got, "%llu gets with an unknown flag gave storage",
	       skel->bss->bad_flags_got);
	expect(&ok, !skel->bss->unused_got, "the unused map gave storage %llu times",
	       skel->bss->unused_got);
	expect(&ok, !skel->bss->unused_delete_not_enoent,
	       "%llu deletes from the unused map were not -ENOENT",
	       skel->bss->unused_delete_not_enoent);
	expect(&ok, !skel->bss->get_errors, "%llu gets failed", skel->bss->get_errors);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* a, b and d hold storage (c's was deleted): removing them must free all three */
static int check_freed_with_the_cgroup(void)
{
	static const int gone[] = { A, B, D };
	int i, waited;

	for (i = 0; i < (int)ARRAY_SIZE(gone); i++) {
		close(fds[gone[i]]);	/* an open directory pins its cgroup */
		fds[gone[i]] = -1;
		int err = cg_destroy(nodes[gone[i]].path);

		if (err)
			return check_fail("rmdir %s: %s", nodes[gone[i]].rel, strerror(-err));
	}
	for (waited = 0; waited < FREE_WAIT_S * 10 && skel->bss->freed < ARRAY_SIZE(gone);
	     waited++)
		usleep(100000);
	if (skel->bss->freeing != ARRAY_SIZE(gone) || skel->bss->freed != ARRAY_SIZE(gone))
		return check_fail("%llu storages went to be freed and %llu were gone after %d s, "
				  "want %zu", skel->bss->freeing, skel->bss->freed, waited / 10,
				  ARRAY_SIZE(gone));
	ksft_print_msg("freed within %.1f s\n", waited / 10.0);
	return KSFT_PASS;
}

static int check_tree_cleanup(void)
{
	cg_reap(&child);
	for (int i = 0; i < NR; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cgrp_storage_bpf__destroy(skel);
	return cg_cleanup() ? KSFT_FAIL : KSFT_PASS;
}

static const struct check checks[] = {
	CHECK(load_attach),
	CHECK(tree_setup, load_attach),
	CHECK(none_before_first_event, tree_setup),
	CHECK(created_on_first_event, tree_setup),
	CHECK(each_cgroup_its_own, created_on_first_event),
	CHECK(concurrent_updates_exact, tree_setup),
	CHECK(syscall_update_lookup_delete, tree_setup),
	CHECK(refusals, tree_setup),
	CHECK(freed_with_the_cgroup, each_cgroup_its_own),
	CHECK(tree_cleanup),
};

int main(void)
{
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
