// SPDX-License-Identifier: GPL-2.0
/*
 * cgrp_storage: the semantics of cgroup local storage (BPF_MAP_TYPE_CGRP_STORAGE,
 * bpf_cgrp_storage_get/delete), mainline's since 6.2 and patches/cgrp-storage's on 6.1.
 *
 * A child parked outside the tree root/{a,b,c,d,f,s,r} is moved into a and b; two
 * children inside d call getpgid() at once; cgrp_storage.bpf.c counts both in
 * each cgroup's storage. Storage must appear on the first event and not before,
 * hold each cgroup's own counts, lose no concurrent update, take the initial
 * value given on create (f), be creatable from a sleepable program (s), answer
 * the syscall side by cgroup fd with every update flag's meaning, refuse what it
 * must (the verifier included), and live exactly as long as mainline says: past
 * rmdir and the release (no new storage on a dying cgroup), freed just before
 * the last rstat flush (r), and freed with its cgroup (a, b, d).
 */
#include "selftest.h"
#include <sys/syscall.h>
#include <linux/types.h>
#include <bpf/btf.h>
#include "cgrp_storage.h"
#include "cgrp_storage.skel.h"
#include "cgrp_storage_css.skel.h"
#include "cgrp_storage_lock.skel.h"
#include "cgrp_storage_neg.skel.h"
#include "cgrp_storage_mit.skel.h"

enum { ROOT, A, B, C, D, F, S, R, T, NR };
static struct cg_node nodes[NR] = {
	[ROOT] = { "root", -1 }, [A] = { "a", ROOT }, [B] = { "b", ROOT },
	[C] = { "c", ROOT }, [D] = { "d", ROOT }, [F] = { "f", ROOT },
	[S] = { "s", ROOT }, [R] = { "r", ROOT }, [T] = { "t", ROOT },
};
static const int moves[NR] = { [A] = 3, [B] = 5 };	/* distinct: no mix-up adds up */
#define CALLS		20000	/* getpgid() calls by each of two children in d */
#define FREE_WAIT_S	20	/* a cgroup is freed after RCU and a workqueue */
/* BPF_MAP_TYPE_CGRP_STORAGE, mainline's UAPI number (userspace's headers may predate it) */
#define CGS_MAP_TYPE	((enum bpf_map_type)32)

static struct cgrp_storage_bpf *skel;
static struct cg_node park = { .rel = "park", .parent = -1 };
static pid_t child = -1;
static int map_fd, fds[NR];

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
	/*
	 * The object built for the rstat kfunc of the kernel's name (bpf_rstat.h), every
	 * program attached but the sleepable iterator, which check_create_from_sleepable()
	 * attaches to its cgroup.
	 */
	int err = BU_LOAD_RSTAT(skel, cgrp_storage, NULL);

	if (err)
		return check_fail("open/load/attach failed: %s", strerror(-err));
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
		if (i > ROOT && i - 1 < CGS_NR_IDS)	/* a b c d; not the test root */
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

/*
 * A cgroup of a v1 hierarchy (a named one, no controller) as the key: either every
 * syscall operation takes it (mainline since it keys by cgroup_v1v2_get_from_fd())
 * or every one refuses it with EBADF (v2 only: mainline before that, the 6.1
 * backport). Never one way for the update and another for the lookup or delete.
 */
static int check_v1_cgroup_fd(void)
{
	struct cgs_value set = { .moves = 99 }, got = {};
	int up, look, del, again;
	struct cg_v1 v1;
	int st = cg_v1_make(&v1, "cgrp_storage_v1"), fd = v1.fd;
	bool ok = st == KSFT_PASS;

	if (ok) {
		up = bpf_map_update_elem(map_fd, &fd, &set, BPF_NOEXIST) ? errno : 0;
		look = bpf_map_lookup_elem(map_fd, &fd, &got) ? errno : 0;
		del = bpf_map_delete_elem(map_fd, &fd) ? errno : 0;
		again = bpf_map_lookup_elem(map_fd, &fd, &got) ? errno : 0;
		if (!up)	/* taken: all of it, with the value stored */
			expect(&ok, !look && got.moves == 99 && !del && again == ENOENT,
			       "v1 cgroup: update took it, then lookup %s (moves %llu, want 99), delete %s, lookup after it %s (want ENOENT)",
			       strerror(look), got.moves, strerror(del), strerror(again));
		else
			expect(&ok, up == EBADF && look == EBADF && del == EBADF,
			       "v1 cgroup: update %s, lookup %s, delete %s: expected all EBADF (or all to work)",
			       strerror(up), strerror(look), strerror(del));
		ksft_print_msg("a v1 cgroup fd: %s\n", up ? "refused (EBADF)" : "taken");
	}
	cg_v1_remove(&v1);
	return st != KSFT_PASS ? st : ok ? KSFT_PASS : KSFT_FAIL;
}

/* every flag of the syscall update, on c (its storage deleted just before) */
static int check_syscall_update_flags(void)
{
	struct cgs_value v[3] = { { .moves = 1 }, { .moves = 2 }, { .moves = 3 } };
	const struct {
		const char *what;
		__u64 flags;
		int err;	/* expected errno, 0: success */
		int now;	/* the value after it: v[now], -1 none */
	} steps[] = {
		{ "BPF_EXIST, none yet", BPF_EXIST, ENOENT, -1 },
		{ "BPF_ANY, none yet", BPF_ANY, 0, 0 },
		{ "BPF_ANY over it", BPF_ANY, 0, 1 },
		{ "BPF_NOEXIST over it", BPF_NOEXIST, EEXIST, 1 },
		{ "BPF_EXIST over it", BPF_EXIST, 0, 2 },
		{ "BPF_F_LOCK, no lock in the value", BPF_F_LOCK, EINVAL, 2 },
		{ "an unknown flag", 1ULL << 20, EINVAL, 2 },
	};
	struct cgs_value got;
	bool ok = true;
	size_t i;
	int err;

	for (i = 0; i < ARRAY_SIZE(v); i++)
		v[i].id = nodes[C].id;
	for (i = 0; i < ARRAY_SIZE(steps); i++) {
		err = bpf_map_update_elem(map_fd, &fds[C], &v[steps[i].now < 0 ? 0 : steps[i].now],
					  steps[i].flags) ? errno : 0;
		expect(&ok, err == steps[i].err, "%s: %s, expected %s", steps[i].what,
		       strerror(err), strerror(steps[i].err));
		err = lookup(C, &got);
		if (steps[i].now < 0)
			expect(&ok, err == -ENOENT, "%s: then lookup %s, expected ENOENT",
			       steps[i].what, strerror(-err));
		else
			expect(&ok, !err && got.moves == v[steps[i].now].moves,
			       "%s: then lookup %s, moves %llu, expected %llu", steps[i].what,
			       strerror(-err), err ? 0 : got.moves, v[steps[i].now].moves);
	}
	expect(&ok, !bpf_map_delete_elem(map_fd, &fds[C]), "delete c: %s", strerror(errno));
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* BPF_F_LOCK on a value with a bpf_spin_lock: update and lookup under the lock */
static int check_syscall_f_lock(void)
{
	struct cgrp_storage_lock_bpf *lk = cgrp_storage_lock_bpf__open_and_load();
	struct cgs_locked set = { .v = 5 }, got = {};
	int fd, err = 0;

	if (!lk) {
		bu_print_log();
		return check_fail("a cgroup storage with a bpf_spin_lock: %s", strerror(errno));
	}
	fd = bpf_map__fd(lk->maps.cgs_locked);
	if (bpf_map_update_elem(fd, &fds[C], &set, BPF_NOEXIST) ||
	    bpf_map_update_elem(fd, &fds[C], &(struct cgs_locked){ .v = 6 }, BPF_F_LOCK) ||
	    bpf_map_lookup_elem_flags(fd, &fds[C], &got, BPF_F_LOCK))
		err = errno;
	cgrp_storage_lock_bpf__destroy(lk);
	if (err || got.v != 6)
		return check_fail("BPF_F_LOCK: %s, value %llu, expected 6", strerror(err),
				  (unsigned long long)got.v);
	return KSFT_PASS;
}

/* a move into f creates its storage in cgs_init from the value the program passes */
static int check_initial_value_on_create(void)
{
	struct cgs_value want = { .moves = 0x1111, .calls = 0x2222, .id = 0x3333 }, got = {};
	int err;

	skel->bss->init_value = want;
	skel->bss->init_id = nodes[F].id;
	err = move(F, 1);
	skel->bss->init_id = 0;
	if (err)
		return err;
	if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.cgs_init), &fds[F], &got))
		return check_fail("f: no storage after the move: %s", strerror(errno));
	if (memcmp(&got, &want, sizeof(got)))
		return check_fail("f: created with moves %#llx calls %#llx id %#llx, expected the initial value %#llx %#llx %#llx",
				  got.moves, got.calls, got.id, want.moves, want.calls, want.id);
	return KSFT_PASS;
}

/* a NULL cgroup: get gives no storage, delete -EINVAL (the NULL came from the init move) */
static int check_null_cgroup(void)
{
	struct cgs_nested n = skel->data->nested;

	if (n.null_found || n.null_delete != -EINVAL)
		return check_fail("a NULL cgroup: get gave %s, delete %lld (expected none, -EINVAL)",
				  n.null_found ? "storage" : "none", (long long)n.null_delete);
	return KSFT_PASS;
}

static int call_getpgid_once(void *arg __attribute__((unused)))
{
	return syscall(SYS_getpgid, 0) < 0;
}

/*
 * Inside the creation of t's storage in cgs (a getpgid() in t, see cgs_on_getpgid),
 * with this CPU's cgroup storage busy: t's existing storage in cgs_init is found,
 * none is created in another map, a delete is refused with -EBUSY.
 */
static int check_nested_while_busy(void)
{
	struct cgs_value v = { .moves = 7, .id = nodes[T].id };
	/*
	 * Which guard the kernel has decides what a nested call may do: up to 6.x a per-CPU
	 * busy counter (mainline's API the 6.1 backport follows); 7.x locks local storage with
	 * an rqspinlock, which detects a real deadlock, and dropped the counter.
	 */
	const char *lock = bu_member_type_name("bpf_local_storage", "lock");
	bool counter = !lock || strcmp(lock, "rqspinlock_t");
	struct cgs_nested n;
	int st;

	if (bpf_map_update_elem(bpf_map__fd(skel->maps.cgs_init), &fds[T], &v, BPF_NOEXIST))
		return check_fail("t: storage in cgs_init: %s", strerror(errno));
	skel->bss->rec_id = nodes[T].id;
	skel->bss->calls_id = nodes[T].id;
	st = cg_run(nodes[T].path, call_getpgid_once, NULL);
	skel->bss->calls_id = 0;
	skel->bss->rec_id = 0;
	n = skel->data->nested;
	if (st || !n.ran)
		return check_fail("getpgid() in t: %d; the nested program %s", st,
				  n.ran ? "ran" : "never ran (no storage was created?)");
	ksft_print_msg("local storage locked by %s: %s\n", lock ?: "(no BTF)",
		       counter ? "a per-CPU busy counter refuses what a nested call would change"
			       : "no busy counter, a nested call proceeds (mainline since the rqspinlock)");
	if (counter && (!n.busy_found || n.busy_created || n.busy_delete != -EBUSY))
		return check_fail("while busy: get of existing storage %s (expected found), get with F_CREATE %s (expected none), delete %lld (expected -EBUSY)",
				  n.busy_found ? "found" : "none", n.busy_created ? "made one" : "none",
				  (long long)n.busy_delete);
	if (!counter && (!n.busy_found || !n.busy_created || n.busy_delete))
		return check_fail("nested: get of existing storage %s (expected found), get with F_CREATE %s (expected made one), delete %lld (expected 0)",
				  n.busy_found ? "found" : "none", n.busy_created ? "made one" : "none",
				  (long long)n.busy_delete);
	return KSFT_PASS;
}

/* an iter.s/cgroup program creates s's storage (the verifier gives it GFP_KERNEL) */
static int check_create_from_sleepable(void)
{
	struct bpf_link *link = bu_attach_cgroup_iter(skel->progs.cgs_create_sleepable,
						      nodes[S].path, BPF_CGROUP_ITER_SELF_ONLY);
	char buf[64];
	ssize_t n = link ? bu_read_iter(link, buf, sizeof(buf)) : -errno;

	bpf_link__destroy(link);
	if (n < 0)
		return check_fail("the sleepable iterator on s: %s", strerror(-n));
	if (skel->bss->sleepable_created != 1)
		return check_fail("created %llu times from the sleepable program, expected 1",
				  skel->bss->sleepable_created);
	return expect_value(S, 0, 1);
}

/* the verifier refuses the helpers on other map types, and this map in other helpers */
static int check_verifier_refusals(void)
{
	static const char *const progs[] = { "get_on_hash", "delete_on_task_storage",
					     "lookup_on_cgrp_storage", "task_get_on_cgrp_storage" };
	size_t i, sz;
	const void *elf = cgrp_storage_neg_bpf__elf_bytes(&sz);
	bool ok = true;

	for (i = 0; i < ARRAY_SIZE(progs); i++)
		ok &= bu_refused(elf, sz, progs[i], "cannot pass map_type");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * A storage's key is a cgroup fd: its BTF must say a 32-bit int (mainline's
 * bpf_local_storage_map_check_btf()), whatever else is 4 bytes wide. The key
 * types given here, in a BTF of our own: int (created), a 4-byte struct
 * (refused), a 4-byte enum (refused).
 */
/*
 * A 4-byte signed int of @bits bits at bit @offset: libbpf adds ints only as wide
 * as their size, so the one it added is narrowed in place (its data is ours until
 * the BTF is loaded).  Its type id, or -errno.
 */
static int add_narrow_int(struct btf *btf, const char *name, __u32 offset, __u32 bits)
{
	int id = btf__add_int(btf, name, 4, BTF_INT_SIGNED);
	struct btf_type *t;

	if (id < 0)
		return id;
	t = (struct btf_type *)btf__type_by_id(btf, id);
	*(__u32 *)(t + 1) = (BTF_INT_SIGNED << 24) | (offset << 16) | bits;
	return id;
}

static void expect_key_btf(bool *ok)
{
	struct btf *btf = btf__new_empty();
	int i_int, i_struct, i_enum, i_bits16, i_offset8, fd, err;
	const struct {
		const char *what;
		int *key_type, err;
	} keys[] = {
		{ "an int", &i_int, 0 },
		{ "a 4-byte struct", &i_struct, EINVAL },
		{ "a 4-byte enum", &i_enum, EINVAL },
		/* mainline: a key's int has 32 bits at offset 0, whatever its size */
		{ "a 4-byte int of 16 bits", &i_bits16, EINVAL },
		{ "a 4-byte int of 24 bits at bit 8", &i_offset8, EINVAL },
	};
	size_t i;

	if (!btf) {
		expect(ok, false, "btf__new_empty: %s", strerror(errno));
		return;
	}
	i_int = btf__add_int(btf, "int", 4, BTF_INT_SIGNED);
	i_bits16 = add_narrow_int(btf, "cgs_int16", 0, 16);
	i_offset8 = add_narrow_int(btf, "cgs_int24", 8, 24);
	i_struct = btf__add_struct(btf, "cgs_key4", 4);
	err = i_struct < 0 ? i_struct : btf__add_field(btf, "fd", i_int, 0, 0);
	i_enum = btf__add_enum(btf, "cgs_key_enum", 4);
	err = err ?: i_enum < 0 ? i_enum : btf__add_enum_value(btf, "CGS_KEY_FD", 0);
	err = err ?: i_bits16 < 0 ? i_bits16 : i_offset8 < 0 ? i_offset8 : 0;
	err = err ?: i_int < 0 ? i_int : btf__load_into_kernel(btf);
	if (err) {
		expect(ok, false, "a BTF of int, struct and enum: %s", strerror(-err));
		btf__free(btf);
		return;
	}
	for (i = 0; i < ARRAY_SIZE(keys); i++) {
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_NO_PREALLOC,
			    .btf_fd = btf__fd(btf), .btf_key_type_id = *keys[i].key_type,
			    .btf_value_type_id = i_int);

		fd = bpf_map_create(CGS_MAP_TYPE, "cgs_key", 4, 4, 0, &o);
		err = fd < 0 ? errno : 0;
		if (fd >= 0)
			close(fd);
		expect(ok, err == keys[i].err, "a key of BTF type %s: create %s, expected %s",
		       keys[i].what, err ? strerror(err) : "succeeded",
		       keys[i].err ? strerror(keys[i].err) : "to succeed");
	}
	btf__free(btf);
}

/*
 * The map's attributes: created with the attributes mainline documents (key an
 * int, BTF for key and value, BPF_F_NO_PREALLOC, max_entries 0) it reports them
 * back as given (bpf_map_info and fdinfo); each attribute out of them is refused at
 * create time with the errno the documentation gives (EINVAL, a key typed as no
 * int, or as an int not of 32 bits at bit 0, among them; E2BIG for a value too big
 * for any storage).
 */
/*
 * The largest value a storage may hold: the documented bound is U16_MAX less the
 * element's header (struct bpf_local_storage_elem, its size from the kernel's BTF),
 * the same on every kernel.  A map of exactly that value size is created, one byte
 * more is refused (E2BIG); each value a char array of that size in a BTF of our own.
 */
static void expect_max_value_size(bool *ok)
{
	long long elem = bu_struct_size("bpf_local_storage_elem");
	struct btf *btf = btf__new_empty();
	int i_int, i_char, vals[2], fd, err, k;

	if (!btf || elem <= 0) {
		expect(ok, false, "btf__new_empty, struct bpf_local_storage_elem's size (%lld): %s",
		       elem, strerror(errno));
		btf__free(btf);
		return;
	}
	i_int = btf__add_int(btf, "int", 4, BTF_INT_SIGNED);
	i_char = btf__add_int(btf, "char", 1, BTF_INT_CHAR);
	vals[0] = btf__add_array(btf, i_int, i_char, 65535 - elem);
	vals[1] = btf__add_array(btf, i_int, i_char, 65535 - elem + 1);
	err = i_int < 0 ? i_int : i_char < 0 ? i_char : vals[0] < 0 ? vals[0] :
	      vals[1] < 0 ? vals[1] : btf__load_into_kernel(btf);
	for (k = 0; !err && k < 2; k++) {
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_NO_PREALLOC,
			    .btf_fd = btf__fd(btf), .btf_key_type_id = i_int,
			    .btf_value_type_id = vals[k]);

		fd = bpf_map_create(CGS_MAP_TYPE, "cgs_max", 4, 65535 - elem + k, 0, &o);
		expect(ok, k ? fd < 0 && errno == E2BIG : fd >= 0,
		       "value_size %lld (U16_MAX less the %lld-byte element header%s): %s, expected %s",
		       65535 - elem + k, elem, k ? ", plus 1" : "",
		       fd >= 0 ? "created" : strerror(errno), k ? "E2BIG" : "created");
		if (fd >= 0)
			close(fd);
	}
	if (err)
		expect(ok, false, "a BTF of char arrays: %s", strerror(-err));
	btf__free(btf);
}

/*
 * A storage map as the inner map of an array of maps (its ops' map_meta_equal): the
 * outer map is created from one, a second of the same attributes is stored in it, an
 * array map (another type) is refused (EINVAL, by the comparison).
 */
static void expect_inner_map(bool *ok, const struct bpf_map_create_opts *good)
{
	const __u32 vsz = sizeof(struct cgs_value);
	int inner = bpf_map_create(CGS_MAP_TYPE, "cgs_inner", 4, vsz, 0, good);
	int other = bpf_map_create(CGS_MAP_TYPE, "cgs_inner2", 4, vsz, 0, good);
	int array = bpf_map_create(BPF_MAP_TYPE_ARRAY, "cgs_notinner", 4, vsz, 1, NULL);
	LIBBPF_OPTS(bpf_map_create_opts, o, .inner_map_fd = inner);
	int outer = inner < 0 ? -1 : bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "cgs_outer", 4,
						     4, 1, &o);
	int err = errno, key = 0, stored = -1, refused = -1;

	if (outer >= 0 && other >= 0 && array >= 0) {
		stored = bpf_map_update_elem(outer, &key, &other, BPF_ANY) ? errno : 0;
		refused = bpf_map_update_elem(outer, &key, &array, BPF_ANY) ? errno : 0;
	}
	expect(ok, outer >= 0 && !stored && refused == EINVAL,
	       "an array of storage maps: %s%s; a storage map stored: %s; an array map stored: %s (expected EINVAL)",
	       outer >= 0 ? "created" : "create: ", outer >= 0 ? "" : strerror(err),
	       stored < 0 ? "not tried" : stored ? strerror(stored) : "stored",
	       refused < 0 ? "not tried" : refused ? strerror(refused) : "stored");
	for (key = 0; key < 4; key++) {
		int fd = (int[]){ inner, other, array, outer }[key];

		if (fd >= 0)
			close(fd);
	}
}

static int check_map_create_attrs(void)
{
	LIBBPF_OPTS(bpf_map_create_opts, good, .map_flags = BPF_F_NO_PREALLOC,
		    .btf_fd = bpf_object__btf_fd(skel->obj),
		    .btf_key_type_id = bpf_map__btf_key_type_id(skel->maps.cgs),
		    .btf_value_type_id = bpf_map__btf_value_type_id(skel->maps.cgs));
	const __u32 vsz = sizeof(struct cgs_value);
	const struct {
		const char *what;
		__u32 key, value, max, flags;
		bool no_btf;
		int err;
	} bad[] = {
		{ "without BPF_F_NO_PREALLOC", 4, vsz, 0, 0, false, EINVAL },
		{ "max_entries 1", 4, vsz, 1, BPF_F_NO_PREALLOC, false, EINVAL },
		{ "key_size 8", 8, vsz, 0, BPF_F_NO_PREALLOC, false, EINVAL },
		{ "value_size 0", 4, 0, 0, BPF_F_NO_PREALLOC, false, EINVAL },
		{ "no BTF", 4, vsz, 0, BPF_F_NO_PREALLOC, true, EINVAL },
		{ "BPF_F_RDONLY (an unknown flag here)", 4, vsz, 0, BPF_F_NO_PREALLOC | BPF_F_RDONLY,
		  false, EINVAL },
		{ "value_size 65536", 4, 65536, 0, BPF_F_NO_PREALLOC, false, E2BIG },
	};
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	char path[64], text[1024], want[64];
	bool ok = true;
	size_t i;
	int fd, err;

	fd = bpf_map_create(CGS_MAP_TYPE, "cgs_attrs", 4, vsz, 0, &good);
	if (fd < 0)
		return check_fail("creating a cgroup storage map with the documented attributes: %s",
				  strerror(errno));
	err = bpf_obj_get_info_by_fd(fd, &info, &len) ? errno : 0;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	len = read_close(open(path, O_RDONLY | O_CLOEXEC), text, sizeof(text) - 1);
	text[(int)len > 0 ? len : 0] = '\0';
	close(fd);
	expect(&ok, !err && info.type == CGS_MAP_TYPE && info.key_size == 4 &&
	       info.value_size == vsz && !info.max_entries && info.map_flags == BPF_F_NO_PREALLOC &&
	       info.btf_key_type_id == good.btf_key_type_id &&
	       info.btf_value_type_id == good.btf_value_type_id && !strcmp(info.name, "cgs_attrs"),
	       "bpf_map_info (%s): type %u key %u value %u max_entries %u flags %#x btf key %u value %u name '%s'; expected %u 4 %u 0 %#x %u %u 'cgs_attrs'",
	       strerror(err), info.type, info.key_size, info.value_size, info.max_entries,
	       info.map_flags, info.btf_key_type_id, info.btf_value_type_id, info.name,
	       CGS_MAP_TYPE, vsz, BPF_F_NO_PREALLOC, good.btf_key_type_id,
	       good.btf_value_type_id);
	snprintf(want, sizeof(want), "map_type:\t%u\n", CGS_MAP_TYPE);
	expect(&ok, strstr(text, want) && strstr(text, "key_size:\t4\n") &&
	       strstr(text, "max_entries:\t0\n") && strstr(text, "map_flags:\t0x1\n"),
	       "the map's fdinfo does not say type %u, key_size 4, max_entries 0, map_flags 0x1:\n%s",
	       CGS_MAP_TYPE, text);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = bad[i].flags);

		if (!bad[i].no_btf) {
			o.btf_fd = good.btf_fd;
			o.btf_key_type_id = good.btf_key_type_id;
			o.btf_value_type_id = good.btf_value_type_id;
		}
		fd = bpf_map_create(CGS_MAP_TYPE, "cgs_bad", bad[i].key, bad[i].value,
				    bad[i].max, &o);
		err = fd < 0 ? errno : 0;
		if (fd >= 0)
			close(fd);
		expect(&ok, err == bad[i].err, "%s: create %s, expected %s", bad[i].what,
		       err ? strerror(err) : "succeeded", strerror(bad[i].err));
	}
	expect_key_btf(&ok);
	expect_max_value_size(&ok);
	expect_inner_map(&ok, &good);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The helpers from a program the kernel is told is not GPL-compatible: taken, and
 * working: the storage it creates at a cgroup's mkdir, read back through the
 * syscall side, holds what it wrote (a kernel that loads it but gives its get no
 * storage fails here).
 */
static int check_non_gpl_program_uses_storage(void)
{
	static char vlog[65536];
	struct cg_node mit = { .rel = "mit", .parent = -1 };
	struct bpf_link *link = NULL;
	size_t sz;
	const void *elf = cgrp_storage_mit_bpf__elf_bytes(&sz);
	struct bpf_object *obj = bu_load_one(elf, sz, "storage_from_non_gpl", vlog, sizeof(vlog));
	__u64 got = 0;
	int ret, fd = -1, err;

	if (!obj) {
		ksft_print_msg("storage_from_non_gpl (license \"MIT\") refused: %s\n",
			       strerror(errno));
		print_block("verifier: ", vlog);
		return check_fail("a program of a license that is not GPL-compatible calling bpf_cgrp_storage_get/delete was refused: the helpers are not GPL-only");
	}
	link = bpf_program__attach(bpf_object__find_program_by_name(obj, "storage_from_non_gpl"));
	if (!link) {
		ret = check_fail("attach storage_from_non_gpl: %s", strerror(errno));
		goto out;
	}
	if (cg_tree_create(nodes[ROOT].path, "mit", &mit, 1) != KSFT_PASS) {
		ret = check_fail("mkdir under %s: %s", nodes[ROOT].path, strerror(errno));
		goto out;
	}
	fd = cg_open(mit.path, ".", O_RDONLY | O_DIRECTORY);
	err = fd < 0 ? errno : bpf_map_lookup_elem(bpf_object__find_map_fd_by_name(obj, "cgs_mit"),
						   &fd, &got) ? errno : 0;
	if (err)
		ret = check_fail("the storage the MIT program creates at mkdir of %s: %s",
				 mit.path, strerror(err));
	else if (got != CGS_MIT_MARK)
		ret = check_fail("%s's storage holds %llu; the MIT program wrote %llu", mit.path,
				 got, CGS_MIT_MARK);
	else
		ret = KSFT_PASS;
out:
	if (fd >= 0)
		close(fd);
	bpf_link__destroy(link);
	bpf_object__close(obj);
	return ret;
}

/*
 * r's storage through its removal: still there at rmdir (a dead cgroup, no new
 * storage on it), still at the release, freed in the free path just before the
 * last rstat flush (cgroup_rstat_exit()), which finds none and can create none.
 */
static int check_storage_life(void)
{
	struct cgs_value set = { .moves = 13, .id = nodes[R].id };
	struct cgs_life l;
	int waited, err;
	bool ok = true;

	if (bpf_map_update_elem(map_fd, &fds[R], &set, BPF_NOEXIST))
		return check_fail("update r: %s", strerror(errno));
	close(fds[R]);	/* an open directory pins its cgroup */
	fds[R] = -1;
	skel->bss->watch_id = nodes[R].id;
	err = cg_destroy(nodes[R].path);
	if (err)
		return check_fail("rmdir r: %s", strerror(-err));
	for (waited = 0; waited < FREE_WAIT_S * 10 && !skel->bss->life.flush_after_free &&
	     !(skel->bss->life.free_seq && !skel->bss->life.marked); waited++)
		usleep(100000);
	l = skel->bss->life;
	expect(&ok, l.rmdir_seq && l.rmdir_has && l.rmdir_moves == 13,
	       "at rmdir: %s, moves %llu (expected its storage, 13)",
	       !l.rmdir_seq ? "not seen" : l.rmdir_has ? "storage" : "no storage", l.rmdir_moves);
	expect(&ok, !l.rmdir_created, "a create on the removed cgroup gave storage");
	expect(&ok, l.release_seq > l.rmdir_seq && l.release_has,
	       "at the release (event %llu, rmdir %llu): %s", l.release_seq, l.rmdir_seq,
	       l.release_has ? "storage" : "no storage (freed before the release)");
	expect(&ok, l.free_seq > l.release_seq && l.freed,
	       "the free (event %llu, release %llu): %s", l.free_seq, l.release_seq,
	       l.freed ? "storage gone" : "storage still there at its exit");
	if (!l.marked)	/* 7.x: the freed cgroup cannot be looked up to mark it */
		ksft_print_msg("the free could not mark the cgroup for rstat (trusted arguments only): no flush after it to observe\n");
	expect(&ok, (l.flush_after_free || !l.marked) && !l.storage_after_free,
	       "the rstat flush after the free: %llu flushes (expected >= 1 within %d s), %llu found or made storage (expected 0)",
	       l.flush_after_free, FREE_WAIT_S, l.storage_after_free);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_refusals(void)
{
	int key = fds[C], next, fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), err;
	struct cgs_value v;
	bool ok = true;

	/* keyed by a file that is no cgroup: each operation fails with EBADF */
	v = (struct cgs_value){ .moves = 1 };
	err = bpf_map_lookup_elem(map_fd, &fd, &v) ? errno : 0;
	expect(&ok, err == EBADF, "a lookup keyed by a file that is no cgroup: %s",
	       err ? strerror(err) : "succeeded");
	err = bpf_map_update_elem(map_fd, &fd, &v, BPF_ANY) ? errno : 0;
	expect(&ok, err == EBADF, "an update keyed by a file that is no cgroup: %s",
	       err ? strerror(err) : "succeeded");
	err = bpf_map_delete_elem(map_fd, &fd) ? errno : 0;
	expect(&ok, err == EBADF, "a delete keyed by a file that is no cgroup: %s",
	       err ? strerror(err) : "succeeded");
	/* mainline's (6.2+) says ENOTSUPP (524, the kernel's own: what bpftool shows);
	 * our 6.1 backport EOPNOTSUPP (its commit message says why) */
	err = bpf_map_get_next_key(map_fd, &key, &next) ? errno : 0;
	expect(&ok, err == (kernel_version() >= 602 ? 524 : EOPNOTSUPP),
	       "listing the keys: %s (%d; expected %s)", err ? strerror(err) : "succeeded", err,
	       kernel_version() >= 602 ? "524, ENOTSUPP" : "EOPNOTSUPP");
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

/*
 * A fresh cgroup given to every syscall operation, each path once: an update that
 * creates its storage, one refused (BPF_NOEXIST: EEXIST), a lookup, a delete, then
 * those that fail on it without storage (lookup, delete, a BPF_EXIST update: ENOENT
 * each); then removed: no operation may keep the reference it took on the cgroup by
 * its fd.  The oracle is cgroup core's own count: its parent's nr_dying_descendants
 * (cgroup.stat) back to 0 once the removed cgroup is released.
 */
static struct cg_node held[2] = { { .rel = "held", .parent = -1 }, { .rel = "e", .parent = 0 } };

static int check_syscall_ops_keep_no_reference(void)
{
	struct cgs_value v = { .moves = 1 };
	long long dying = -1;
	int fd, i, err, waited;
	bool ok = true;

	if (cg_tree_create(nodes[ROOT].path, "held", held, 2))
		return check_fail("creating held/e failed: %s", strerror(errno));
	fd = cg_open(held[1].path, ".", O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return check_fail("open %s: %s", held[1].path, strerror(errno));
	err = bpf_map_update_elem(map_fd, &fd, &v, BPF_NOEXIST) ? errno : 0;
	expect(&ok, !err, "update of e: %s", strerror(err));
	err = bpf_map_update_elem(map_fd, &fd, &v, BPF_NOEXIST) ? errno : 0;
	expect(&ok, err == EEXIST, "a second BPF_NOEXIST update of e: %s, want EEXIST",
	       err ? strerror(err) : "updated");
	err = bpf_map_lookup_elem(map_fd, &fd, &v) ? errno : 0;
	expect(&ok, !err, "lookup of e: %s", strerror(err));
	err = bpf_map_delete_elem(map_fd, &fd) ? errno : 0;
	expect(&ok, !err, "delete of e: %s", strerror(err));
	for (i = 0; i < 3; i++) {
		err = bpf_map_lookup_elem(map_fd, &fd, &v) ? errno : 0;
		expect(&ok, err == ENOENT, "lookup %d of a cgroup with no storage: %s, want ENOENT",
		       i, err ? strerror(err) : "found");
		err = bpf_map_delete_elem(map_fd, &fd) ? errno : 0;
		expect(&ok, err == ENOENT, "delete %d of a cgroup with no storage: %s, want ENOENT",
		       i, err ? strerror(err) : "deleted");
		err = bpf_map_update_elem(map_fd, &fd, &v, BPF_EXIST) ? errno : 0;
		expect(&ok, err == ENOENT, "BPF_EXIST update %d of a cgroup with no storage: %s, want ENOENT",
		       i, err ? strerror(err) : "updated");
	}
	close(fd);	/* an open directory pins its cgroup */
	err = cg_destroy(held[1].path);
	if (err)
		return check_fail("rmdir %s: %s", held[1].path, strerror(-err));
	for (waited = 0; waited < FREE_WAIT_S * 10; waited++) {
		dying = cg_read_key(held[0].path, "cgroup.stat", "nr_dying_descendants");
		if (dying == 0)
			break;
		usleep(100000);
	}
	expect(&ok, dying == 0,
	       "held: nr_dying_descendants %lld %d s after e's removal (want 0: an operation kept e)",
	       dying, waited / 10);
	if (dying == 0)
		ksft_print_msg("e released within %.1f s\n", waited / 10.0);
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
	CHECK(syscall_update_flags, syscall_update_lookup_delete),
	CHECK(syscall_f_lock, tree_setup),
	CHECK(initial_value_on_create, tree_setup),
	CHECK(create_from_sleepable, tree_setup),
	CHECK(null_cgroup, initial_value_on_create),
	CHECK(nested_while_busy, tree_setup),
	CHECK(refusals, tree_setup),
	CHECK(syscall_ops_keep_no_reference, tree_setup),
	CHECK(v1_cgroup_fd, load_attach),
	CHECK(verifier_refusals),
	CHECK(map_create_attrs, load_attach),
	CHECK(non_gpl_program_uses_storage, tree_setup),
	CHECK(storage_life, tree_setup),
	CHECK(freed_with_the_cgroup, each_cgroup_its_own),
	CHECK(tree_cleanup),
};

int main(void)
{
	for (int i = 0; i < NR; i++)
		fds[i] = -1;
	return checks_run(checks, ARRAY_SIZE(checks), NULL);
}
