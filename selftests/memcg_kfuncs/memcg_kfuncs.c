// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs: the memcg kfuncs called from a sleepable cgroup iterator, one
 * SELF_ONLY link per cgroup.  P = <cgroup2>/memcg_kfuncs.<pid> (+memory) holds
 * C (the worker's memory: anon, shmem, mapped, and kernel memory of every
 * memcg-level kind), N (no +memory) with leaf L (no memcg), E (read via P's
 * descendants walk), H (memory.high), S (swapped out) and Z (removed, its
 * memcg kept by its page cache); R is the cgroup2 root.
 *
 * Oracles are the test's own: the charges it made, memory.current (a page
 * counter), memory.events, memory.swap.current, cgroup.threads, /proc/vmstat,
 * zswap's debugfs count.  memory.stat is filled by the function the page_state
 * kfunc calls: it is compared too, as a consistency check, not as the oracle.
 * Reads flush the subtree with the rstat flush kfunc first, which unlike
 * bpf_mem_cgroup_flush_stats() skips no flush below a threshold: the values are
 * exact then, and tolerances are a few pages where a per-CPU stock can hold
 * bytes back, far below the smallest charge the test makes (512 KiB).  Only
 * flush_makes_new_memory_visible relies on the kfunc flush alone, with its
 * threshold TP = 2 * 64 (MEMCG_CHARGE_BATCH) * CPUs pages.
 */
#include "selftest.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <linux/magic.h>

#include "inventory.h"
#include "memcg_kfuncs.h"
#include "memcg_kfuncs.skel.h"
#include "memcg_kfuncs_css.skel.h"
#include "memcg_kfuncs_neg.skel.h"
#include "memcg_kfuncs_extra.skel.h"

#define ANON_BYTES	(64 * MiB)	/* anonymous, touched page by page */
#define SHMEM_BYTES	(16 * MiB)	/* a memfd, touched, unmapped */
#define MAPPED_BYTES	(8 * MiB)	/* a memfd, touched, kept mapped */
#define MORE_ANON_BYTES	(32 * MiB)	/* the freshness step */
#define SLACK_BYTES	(4 * MiB)	/* the worker's own pages in C: < 1 MiB */
#define HIGH_BYTES	(4 * MiB)	/* H's memory.high */
#define WRITE_BYTES	(32 * MiB)	/* page cache written in H */
/* kernel memory charged to C by its worker (lower bounds; the charges are larger) */
#define VMALLOC_BYTES	(8 * MiB)	/* a BPF array map's area: vmalloc'ed */
#define PCPU_VALUE	4096		/* per CPU, per element of a per-CPU hash map */
#define PCPU_ELEMS	256
#define DGRAMS	64		/* UDP datagrams queued, unread, on loopback */
#define DGRAM_BYTES	(32 * 1024)
#define THREADS		32		/* sleeping threads: their kernel stacks */
#define SLAB_FILES	2048		/* empty files: inodes and dentries */
#ifndef ENOTSUPP
#define ENOTSUPP	524		/* the kernel's own, not in userspace's errno.h */
#endif
#define SLAB_MIN	192		/* a dentry at least, per file */
#define SWAP_ANON	(32 * MiB)	/* S's anon, then reclaimed to swap */
#define SWAP_RECLAIM	"24M"
#define SWAP_RECLAIM_BYTES (24 * MiB)
/* before 6.4 a reclaim counts the slab it frees as reclaimed pages too: S has no files,
 * a few pages at most */
#define RECLAIM_SLAB_PAGES 256
#define ZOMBIE_BYTES	(8 * MiB)	/* Z's page cache, kept after its removal */
/* what else moves the root's values while the test reads them: the rest of the guest */
#define ROOT_NOISE	(4 * MiB)

static const struct {
	const char *key, *call;	/* key in its file; the kfunc and item */
	bool optional;		/* not in every kernel's file */
	enum mk_unit unit;
} fdesc[NR_FIELDS] = {
#define MK_FDESC(key, kind, item, opt, unit) { #key, #kind "(" #item ")", opt, unit },
	MK_FIELDS(MK_FDESC)
};
#define MK_PKIND(kind, item) K_##kind,
static const enum mk_kind pkind[NR_PROBES] = { MK_PROBES(MK_PKIND) };
#define MK_PCALL(kind, item) #kind "(" #item ")",
static const char *const pcall[NR_PROBES] = { MK_PROBES(MK_PCALL) };

enum { CG_P, CG_C, CG_N, CG_L, CG_E, CG_H, CG_S, CG_Z, CG_O, CG_D, NUM_CG, CG_R = NUM_CG };
#define CG_NAMES "PCNLEHSZODR"

/* memory for P's children (C, N, E, H, S, Z, O, D), not for N's (L); R: the cgroup2 root */
static struct cg_node cgs[NUM_CG + 1] = {
	[CG_P] = { "P", -1, "+memory" }, [CG_C] = { "child", CG_P }, [CG_N] = { "nomem", CG_P },
	[CG_L] = { "nomem/leaf", CG_N }, [CG_E] = { "flushed", CG_P }, [CG_H] = { "high", CG_P },
	[CG_S] = { "swapped", CG_P }, [CG_Z] = { "zombie", CG_P }, [CG_O] = { "oom", CG_P },
	[CG_D] = { "dirty", CG_P }, [CG_R] = { "cgroup2 root", -1 },
};
/* the inventory's lists (selftests/inventory/memcg_kfuncs.toml, see test.toml) */
#define INVENTORY "memcg_kfuncs.inventory.toml"
static struct bpf_link *links[NUM_CG + 1];	/* SELF_ONLY; none for E and Z */

static struct memcg_kfuncs_bpf *skel;
static const void *neg_elf, *extra_elf;	/* programs loaded alone */
static size_t neg_sz, extra_sz;
static struct bpf_link *walk_link;	/* P's DESCENDANTS_PRE walk, for E */
static long page_size, ncpus;
static long long tol_units, tp;		/* TP in pages; in bytes */
static int kver;			/* 611 for 6.11 */
static volatile pid_t worker_pid, swap_pid;
static char scratch_file[PATH_MAX];	/* H's page cache */
static char zombie_file[PATH_MAX];	/* Z's page cache */
static char slab_dir[PATH_MAX];		/* C's files */
static char zswap_was[8];		/* zswap's "enabled" before the test set it */
static int sv[2] = { -1, -1 };		/* the worker's socket: commands, acks */
static int swap_sock = -1;		/* S's worker's: "ready" */
static struct mk_rec c_rec;		/* C after its charges, exact */

#define ZSWAP_ENABLED "/sys/module/zswap/parameters/enabled"

/* the growth of field @f from record @a to record @b */
#define GREW(b, a, f) ((long long)((b).val[F_##f] - (a).val[F_##f]))

/* the file a field is compared with */
static const char *file_of(int f)
{
	return f < F_low ? "memory.stat" : f < F_swap_high ? "memory.events" :
	       f < F_usage ? "memory.swap.events" : f == F_usage ? "memory.current" :
	       "memory.swap.current";
}

/* the key of field @f in its file */
static const char *key_of(int f)
{
	return fdesc[f].key + (f >= F_swap_high && f < F_usage ? 5 : 0);
}

/*
 * How far two exact reads of an idle cgroup may be apart: bytes a per-CPU stock
 * holds back (a page per CPU) for the byte-kept items, nothing otherwise.
 */
static long long exact_tol(int f)
{
	return fdesc[f].unit == U_BYTES ? ncpus * page_size : 0;
}

/*
 * One walk of @link for the cgroup @id (@who in messages), mode @mode, exactly flushed
 * first when @exact: exactly one record about it, every read >= 0 (probes aside).
 */
static int read_link(struct bpf_link *link, unsigned long long id, const char *who,
		     struct mk_rec *r, int mode, bool exact)
{
	static struct mk_rec buf[2];
	bool probe = mode == MK_MODE_PROBE;
	ssize_t n;
	int f;

	skel->bss->mode = mode;
	skel->bss->records = 0;
	skel->bss->rstat_first = exact;
	skel->bss->target_cgid = id;
	n = bu_read_iter(link, buf, sizeof(buf));
	if (n != (ssize_t)sizeof(*r) || skel->bss->records != 1 || buf[0].magic != MK_MAGIC + mode ||
	    buf[0].cgid != id)
		return check_fail("iterator on %s: %zd bytes (expected %zu), %u records (1), magic 0x%llx (0x%llx), cgroup id %llu (%llu)",
				  who, n, sizeof(*r), skel->bss->records,
				  (unsigned long long)buf[0].magic, MK_MAGIC + mode,
				  (unsigned long long)buf[0].cgid, id);
	*r = buf[0];
	for (f = 0; f < NR_FIELDS && !probe; f++)
		if (r->val[f] < 0)
			return check_fail("%s: %s (item %lld) gave %lld, expected >= 0 (-2: no memcg)",
					  who, fdesc[f].call,
					  (long long)r->item[f], (long long)r->val[f]);
	return 0;
}

/* read_link() of @cgi's link (READ on E: MK_MODE_TARGET on P's walk, no link pins it) */
static int read_mode(int cgi, struct mk_rec *r, int mode, bool exact)
{
	char who[2] = { CG_NAMES[cgi] };

	if (cgi == CG_E && mode == MK_MODE_READ)
		mode = MK_MODE_TARGET;
	return read_link(cgi == CG_E ? walk_link : links[cgi], cgs[cgi].id, who, r, mode, exact);
}

/* an exact read of @cgi (see the top) */
static int read_rec(int cgi, struct mk_rec *r)
{
	return read_mode(cgi, r, MK_MODE_READ, true);
}

/* read_rec() of a cgroup a check made for itself, outside the tree: through a
 * SELF_ONLY link made for the one read */
static int read_rec_path(const char *path, struct mk_rec *r)
{
	struct bpf_link *link = bu_attach_cgroup_iter(skel->progs.memcg_read, path,
						      BPF_CGROUP_ITER_SELF_ONLY);
	int err;

	if (!link)
		return check_fail("attaching an iterator to %s: %s", path, strerror(errno));
	err = read_link(link, cg_id(path), path, r, MK_MODE_READ, true);
	bpf_link__destroy(link);
	return err;
}

static int check_load_sleepable_iter(void)
{
	/* the object built for the rstat flush kfunc of the kernel's name (bpf_rstat.h) */
	int err = BU_LOAD_RSTAT(skel, memcg_kfuncs, NULL);
	long long vmalloc = bu_enum_value("memcg_stat_item", "MEMCG_VMALLOC");

	if (err) {
		memcg_kfuncs_bpf__destroy(skel);
		skel = NULL;
	} else {
		/* MEMCG_VMALLOC up to 7.1, the node item NR_VMALLOC from 7.2 */
		skel->data->vmalloc_item = vmalloc >= 0 ? vmalloc
				: bu_enum_value("node_stat_item", "NR_VMALLOC");
	}
	return err ? check_fail("loading the iter.s/cgroup program: %s", strerror(-err)) : KSFT_PASS;
}

static int check_cgroup_setup(void)
{
	struct bpf_program *prog = skel->progs.memcg_read;
	const char *mnt;
	int i = cg_find_root(&mnt, "memory") ?: cg_tree_create(mnt, "memcg_kfuncs", cgs, NUM_CG);

	if (i != KSFT_PASS)
		return i;
	snprintf(cgs[CG_R].path, sizeof(cgs[CG_R].path), "%s", mnt);
	cgs[CG_R].id = cg_id(mnt);
	walk_link = bu_attach_cgroup_iter(prog, cgs[CG_P].path, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	for (i = 0; i <= CG_R; i++) {
		if (i != CG_R && (cg_read_key(cgs[i].path, "memory.stat", "anon") >= 0) != (i != CG_L))
			return check_fail("%s: memory.stat %s", cgs[i].path,
					  i == CG_L ? "exists without +memory" : "missing");
		/* E has no link of its own (see check_flush_keeps_no_reference()), Z goes */
		if (i != CG_E && i != CG_Z)
			links[i] = bu_attach_cgroup_iter(prog, cgs[i].path, BPF_CGROUP_ITER_SELF_ONLY);
		if (!walk_link || (i != CG_E && i != CG_Z && !links[i])) {
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
	if (read_mode(CG_P, &p, MK_MODE_PROBE, false) || read_mode(CG_L, &l, MK_MODE_PROBE, false))
		return verdict[1] = verdict[2] = KSFT_FAIL;
	for (i = 0; i < NR_PROBES; i++) {
		long long v = p.val[i];
		/* on P the flush 0, the valid calls >= 0, the others -EINVAL; before
		 * 6.11 memcg keeps every node stat item (the 6.1 backport) and the
		 * cgroup v1 events; from 6.11 the config decides the v1 events */
		bool v1 = i >= P_FIRST_V1, either = v1 && kver >= 611;
		bool valid = i < P_FIRST_RANGE || (v1 && kver < 611) ||
			     (i >= P_FIRST_UNTRACKED && pkind[i] == K_state && kver < 611);

		grp = i >= P_FIRST_UNTRACKED ? 1 : i >= P_FIRST_RANGE ? 0 : 2;
		if (!(pkind[i] == K_flush ? v == 0 : either ? v >= 0 || v == -EINVAL :
		      valid ? v >= 0 : v == -EINVAL) || l.val[i] != -ENOENT)
			verdict[grp] = check_fail("%s = %lld: on P %lld (%s), on L %lld (-ENOENT)",
						  pcall[i], (long long)p.item[i], v,
						  either ? ">= 0 or -EINVAL" : valid ? ">= 0" : "-EINVAL",
						  (long long)l.val[i]);
	}
	return verdict[0];
}

static int run_extra(const char *prog, int cgi, char *out, size_t len);

/*
 * The keys C's memory.stat, memory.events and memory.swap.events print are the
 * inventory's lists for this kernel (captured from real guests: every key a row
 * or a gap): a kernel that prints a new key, or stops printing one, fails here
 * naming it.
 */
static int check_memory_files_keys_listed(void)
{
	static const char *const files[] = { "memory.stat", "memory.events", "memory.swap.events" };
	static char text[16384], keys[256][64];
	const char *found[256];
	char name[64];
	struct inv_list l;
	size_t i;
	int k, n, bad = 0;

	for (i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(name, sizeof(name), "%s.leaf", files[i]);
		if (cg_read(cgs[CG_C].path, files[i], text, sizeof(text)) <= 0)
			return check_fail("%s/%s: %s", cgs[CG_C].path, files[i], strerror(errno));
		if (inv_load(INVENTORY, name, &l))
			return KSFT_FAIL;
		n = inv_keys(text, keys, ARRAY_SIZE(keys));
		for (k = 0; k < n; k++)
			found[k] = keys[k];
		bad += inv_compare(&l, found, n, files[i]);
		ksft_print_msg("%s: %d keys, %d in the inventory's list of %s\n", files[i], n, l.n,
			       l.this_kernel ? "this kernel" : "every kernel (none of this one)");
		inv_free(&l);
	}
	return bad ? KSFT_FAIL : KSFT_PASS;
}

/* the name of @idx in the enum(s) a kfunc of @kind takes; "index N" if none */
static const char *item_name(enum mk_kind kind, long long idx)
{
	static const char *names[512];
	static long long vals[512];
	static char unknown[32];
	int i, n;

	if (kind == K_state) {
		long long node_end = bu_enum_value("node_stat_item", "NR_VM_NODE_STAT_ITEMS");

		n = idx < node_end ? bu_enum_names("node_stat_item", names, vals, 512) :
			bu_enum_names("memcg_stat_item", names, vals, 512);
	} else if (kind == K_events) {
		n = bu_enum_names("vm_event_item", names, vals, 512);
	} else {
		n = bu_enum_names("memcg_memory_event", names, vals, 512);
	}
	for (i = 0; i < n && i < 512; i++) {
		size_t len = strlen(names[i]);

		/* aliases of the first item of a group, and the enums' ends */
		if (vals[i] == idx && !(len > 5 && !strcmp(names[i] + len - 5, "_BASE")) &&
		    strncmp(names[i], "NR_VM_", 6) && strcmp(names[i], "MEMCG_NR_STAT") &&
		    strcmp(names[i], "MEMCG_NR_MEMORY_EVENTS"))
			return names[i];
	}
	snprintf(unknown, sizeof(unknown), "index %lld", idx);
	return unknown;
}

/*
 * The items each reading kfunc accepts, scanned index by index over its enum
 * (and past its end) on P, named from the kernel's BTF, are the inventory's
 * lists (captured from each kernel's source): a kernel whose kfunc exposes a new
 * item, or refuses a listed one, fails here naming it.  So are the kfuncs of the
 * family in the kernel's BTF (every bpf_*mem_cgroup* function).
 */
static int check_kfunc_items_listed(void)
{
	static const struct {
		const char *prog, *list;
		enum mk_kind kind;
	} scans[] = {
		{ "scan_page_state", "memcg_kfuncs.page_state_items", K_state },
		{ "scan_vm_events", "memcg_kfuncs.vm_event_items", K_events },
		{ "scan_memory_events", "memcg_kfuncs.memory_events", K_memev },
	};
	static char out[65536];
	const char *found[512], *funcs[64];
	struct inv_list l, kf;
	char *line, *save;
	int n, bad = 0, err, i, k;
	size_t j;

	for (j = 0; j < ARRAY_SIZE(scans); j++) {
		err = run_extra(scans[j].prog, CG_P, out, sizeof(out));
		if (err)
			return check_fail("%s on P: %s", scans[j].prog, strerror(-err));
		if (inv_load(INVENTORY, scans[j].list, &l))
			return KSFT_FAIL;
		n = 0;
		for (line = strtok_r(out, "\n", &save); line && n < 512; line = strtok_r(NULL, "\n", &save))
			found[n++] = item_name(scans[j].kind, strtoll(line, NULL, 10));
		bad += inv_compare(&l, found, n, scans[j].prog);
		ksft_print_msg("%s: %d items accepted, %d in the inventory's list of %s\n",
			       scans[j].prog, n, l.n, l.this_kernel ? "this kernel" : "every kernel");
		inv_free(&l);
	}
	if (inv_load(INVENTORY, "memcg_kfuncs.kfuncs", &kf))
		return KSFT_FAIL;
	n = bu_func_names("bpf_", "mem_cgroup", funcs, ARRAY_SIZE(funcs));
	for (i = 0; i < n && i < (int)ARRAY_SIZE(funcs); i++) {
		for (k = 0; k < kf.n && strcmp(kf.items[k], funcs[i]); k++)
			;
		if (k == kf.n && ++bad)
			ksft_print_msg("the kernel's BTF has %s, not in the inventory's kfuncs\n", funcs[i]);
	}
	inv_free(&kf);
	return bad ? KSFT_FAIL : KSFT_PASS;
}

static int check_nonsleepable_flush_rejected(void)
{
	return bu_refused(neg_elf, neg_sz, "memcg_flush_in_plain_iter", "sleep") ? KSFT_PASS : KSFT_FAIL;
}

static int check_untrusted_cgroup_rejected(void)
{
	static const char *const cases[][2] = {
		{ "get_untrusted", "must be a rcu pointer" }, { "leak", "Unreleased reference" },
		{ "leak_root", "Unreleased reference" },
		{ "read_untrusted" }, { "vm_events_untrusted" }, { "memory_events_untrusted" },
		{ "usage_untrusted" }, { "flush_untrusted" },
		/* 6.x: "must be referenced or trusted"; 7.x tests the release first:
		 * "release kfunc ... expects referenced PTR_TO_BTF_ID" */
		{ "put_unreferenced", "referenced" },
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

/* the css iterator's flags (6.7+), each broken by a program the verifier must refuse
 * (memcg_kfuncs_neg.bpf.c's css_walk_*), with the message of the rule it breaks */
static int check_css_walk_refusals(void)
{
	static const char *const cases[][2] = {
		/* 6.12 refuses the first next(), 7.x the new() */
		{ "css_walk_sleepable", "expected an RCU CS|requires RCU critical section" },
		{ "css_walk_untrusted_start", "must be referenced or trusted" },
		{ "css_walk_next_unchecked", "invalid mem access" },
		{ "css_walk_not_destroyed", "Unreleased reference" },
	};
	bool ok = true;
	size_t c;

	if (!bu_has_func("bpf_iter_css_new"))
		return check_skip("no css iterator in this kernel (6.7+)");
	for (c = 0; c < ARRAY_SIZE(cases); c++)
		ok &= bu_refused(neg_elf, neg_sz, cases[c][0], cases[c][1]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the lines program @prog of memcg_kfuncs_extra.bpf.c prints on the cgroup at @path;
 * a refusal with the verifier's last lines */
static int run_extra_at(const char *prog, const char *path, char *out, size_t len)
{
	static char vlog[65536];
	struct bpf_object *obj = bu_load_one(extra_elf, extra_sz, prog, vlog, sizeof(vlog));
	struct bpf_link *link;
	size_t at;
	ssize_t n;

	if (!obj) {
		n = -errno;
		at = strlen(vlog) > 600 ? strlen(vlog) - 600 : 0;
		ksft_print_msg("%s refused (%s); the verifier's log ends:\n", prog, strerror(-n));
		print_block("  ", vlog + at);
		return (int)n;
	}
	link = bu_attach_cgroup_iter(bpf_object__find_program_by_name(obj, prog), path,
				     BPF_CGROUP_ITER_SELF_ONLY);
	n = link ? bu_read_iter(link, out, len) : -errno;
	bpf_link__destroy(link);
	bpf_object__close(obj);
	return n < 0 ? (int)n : 0;
}

static int run_extra(const char *prog, int cgi, char *out, size_t len)
{
	return run_extra_at(prog, cgs[cgi].path, out, len);
}

/*
 * bpf_get_mem_cgroup() and a css read from cgrp->subsys[memory_cgrp_id], which is
 * NULL where the cgroup has no memory controller (L).  6.1 (no KF_RCU): the NULL
 * reaches the kfunc, which must return NULL for L and C's memcg for C; a kernel
 * that dereferences it oopses here and the harness sees the splat.  6.2+: the
 * verifier keeps it from the kfunc, for a reason the kernel's BTF decides.  A gcc
 * build has no type tags, so the css is an untrusted pointer ("must be a rcu
 * pointer"), NULL-checked or not.  A clang build tags it __rcu: an RCU pointer
 * that may be NULL ("Possibly NULL pointer passed to trusted arg0"), accepted once
 * NULL-checked; then L gets no memcg and C its own (the memcg's cgroup id is C's).
 */
static int check_null_css_is_null(void)
{
	char l[64] = "", c[64] = "", want[64];
	int err;

	if (kver >= 602) {
		bool tags = bu_btf_has_type_tags();
		bool ok;

		ksft_print_msg("the kernel's BTF %s type tags\n", tags ? "has" : "has no");
		ok = bu_refused(extra_elf, extra_sz, "null_css_get",
				tags ? "Possibly NULL pointer passed to trusted arg0" :
				"must be a rcu pointer");
		if (!tags)
			return bu_refused(extra_elf, extra_sz, "checked_css_get",
					  "must be a rcu pointer") && ok ? KSFT_PASS : KSFT_FAIL;
		if (!ok)
			return KSFT_FAIL;
		snprintf(want, sizeof(want), "memcg_of=%llu\n", (unsigned long long)cgs[CG_C].id);
		err = run_extra("checked_css_get", CG_L, l, sizeof(l)) ?:
		      run_extra("checked_css_get", CG_C, c, sizeof(c));
		if (err)
			return check_fail("checked_css_get: %s", strerror(-err));
		if (strcmp(l, "memcg_of=0\n") || strcmp(c, want))
			return check_fail("checked_css_get: L '%.30s' (expected memcg_of=0: no memcg), C '%.30s' (expected %.30s: C's own memcg)",
					  l, c, want);
		return KSFT_PASS;
	}
	err = run_extra("null_css_get", CG_L, l, sizeof(l)) ?:
	      run_extra("null_css_get", CG_C, c, sizeof(c));
	if (err)
		return check_fail("null_css_get: %s", strerror(-err));
	if (strcmp(l, "memcg=0\n") || strcmp(c, "memcg=1\n"))
		return check_fail("bpf_get_mem_cgroup(cgrp->subsys[memory_cgrp_id]): L '%.20s' (expected memcg=0: no memcg, NULL css), C '%.20s' (expected memcg=1)",
				  l, c);
	return KSFT_PASS;
}

/*
 * bpf_get_mem_cgroup() given another controller's css goes to the same cgroup's
 * memcg (its documented contract, and mainline's): the root cgroup's pids css, which
 * always exists, gives the root memcg, a css of the memory controller.  A kernel that
 * takes any controller's css for a memcg hands the pids css back as one.  6.2+ kernels
 * whose BTF has no type tags (gcc builds) let no program reach another controller's
 * css (the verifier refuses cgrp->subsys[], as null_css_is_null shows): skipped there.
 */
static int check_foreign_css_gets_its_memcg(void)
{
	int given, got, pids, memory;
	unsigned long long of;
	char out[128];
	int err;

	if (kver >= 602 && !bu_btf_has_type_tags())
		return check_skip("the kernel's BTF has no type tags (a gcc build): no program can hand the kfunc another controller's css; the clang cells (6.12-llvm) do");
	err = run_extra("foreign_css_get", CG_R, out, sizeof(out));
	if (err)
		return check_fail("foreign_css_get: %s", strerror(-err));
	if (sscanf(out, "given=%d got=%d memcg_of=%llu want=%d,%d", &given, &got, &of, &pids,
		   &memory) != 5)
		return check_fail("foreign_css_get printed '%.60s'", out);
	ksft_print_msg("bpf_get_mem_cgroup(the root's css of controller %d): a css of controller %d of cgroup %llu\n",
		       given, got, of);
	if (given != pids)
		return check_fail("the css given is of controller %d, not pids (%d)", given, pids);
	if (got != memory || of != cgs[CG_R].id)
		return check_fail("expected the root's memcg (controller %d, cgroup %llu): got %s",
				  memory, (unsigned long long)cgs[CG_R].id,
				  got < 0 ? "NULL" : got == pids ? "the pids css itself" : "another css");
	return KSFT_PASS;
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

static int park_fd[2] = { -1, -1 };	/* the threads block reading it */

static void *park(void *arg)
{
	char c;

	(void)arg;
	return read(park_fd[0], &c, 1) < 0 ? NULL : arg;
}

/* "lo" up, for the UDP datagrams: 0 or errno */
static int loopback_up(void)
{
	struct ifreq ifr = {};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), err = 0;

	if (fd < 0)
		return errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr))
		err = errno;
	ifr.ifr_flags |= IFF_UP;
	if (!err && ioctl(fd, SIOCSIFFLAGS, &ifr))
		err = errno;
	close(fd);
	return err;
}

/* errno, said with what failed (by the worker, before its result line) */
static int item_failed(const char *what)
{
	int err = errno;

	ksft_print_msg("worker: %s: %s\n", what, strerror(err));
	return err;
}

/*
 * Kernel memory of every memcg-level kind, charged to the caller's memcg: a BPF
 * array map (its area is vmalloc'ed), a per-CPU hash map filled (per-CPU memory),
 * unread UDP datagrams (socket memory), sleeping threads (kernel stacks), empty
 * files (slab); kept until the process exits.  0 or an errno.
 */
static int kernel_items(void)
{
	LIBBPF_OPTS(bpf_map_create_opts, nopre, .map_flags = BPF_F_NO_PREALLOC);
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	int rcv = 8 * MiB, vm, pc, r, s, i, fd, tries;
	static char value[PCPU_VALUE * 64], dgram[DGRAM_BYTES];
	pthread_t t;

	vm = bpf_map_create(BPF_MAP_TYPE_ARRAY, "mk_vmalloc", 4, 4096, VMALLOC_BYTES / 4096, NULL);
	pc = bpf_map_create(BPF_MAP_TYPE_PERCPU_HASH, "mk_percpu", 4, PCPU_VALUE, PCPU_ELEMS, &nopre);
	if (vm < 0 || pc < 0)
		return item_failed("BPF maps");
	/* the elements come from per-CPU caches refilled asynchronously: ENOMEM, retried */
	for (i = 0, tries = 0; i < PCPU_ELEMS && tries < 10000; tries++) {
		if (!bpf_map_update_elem(pc, &i, value, BPF_NOEXIST))
			i++;
		else if (errno == ENOMEM)
			usleep(1000);
		else
			break;
	}
	if (i < PCPU_ELEMS)
		return item_failed("per-CPU hash map elements");
	if ((errno = loopback_up()))
		return item_failed("lo up");
	r = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (r < 0 || s < 0 || setsockopt(r, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) ||
	    bind(r, (struct sockaddr *)&a, sizeof(a)) || getsockname(r, (struct sockaddr *)&a, &alen))
		return item_failed("UDP sockets");
	for (i = 0; i < DGRAMS; i++)
		if (sendto(s, dgram, sizeof(dgram), 0, (struct sockaddr *)&a, alen) != sizeof(dgram))
			return item_failed("UDP datagrams");
	if (pipe2(park_fd, O_CLOEXEC))
		return item_failed("pipe");
	for (i = 0; i < THREADS; i++)
		if ((errno = pthread_create(&t, NULL, park, NULL)))
			return item_failed("threads");
	if (mkdir(slab_dir, 0700))
		return item_failed(slab_dir);
	for (i = 0; i < SLAB_FILES; i++) {
		char name[PATH_MAX + 16];

		snprintf(name, sizeof(name), "%s/%d", slab_dir, i);
		fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			return item_failed("files");
		close(fd);
	}
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
	err = err ?: kernel_items();
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

/* the cgroup2 mount's options and flags while a check has it remounted otherwise:
 * given back by the check, or by stop_worker() if the test is stopped meanwhile */
static char cg2_opts[512];
static unsigned long cg2_flags;
static volatile sig_atomic_t cg2_remounted;

static int cgroup2_restore(void)
{
	if (!cg2_remounted)
		return 0;
	cg2_remounted = 0;
	return mount(NULL, cgs[CG_R].path, NULL, MS_REMOUNT | cg2_flags, cg2_opts);
}

/* workers, files, zswap's setting and a remount go; async-signal-safe (also run on
 * SIGTERM) */
static void stop_worker(void)
{
	int fd;

	cg_reap(&worker_pid);
	cg_reap(&swap_pid);
	cgroup2_restore();
	if (scratch_file[0])
		unlink(scratch_file);
	if (zombie_file[0])
		unlink(zombie_file);
	if (zswap_was[0]) {
		fd = open(ZSWAP_ENABLED, O_WRONLY | O_CLOEXEC);
		if (fd >= 0 && write(fd, zswap_was, 1) == 1)
			zswap_was[0] = '\0';
		if (fd >= 0)
			close(fd);
	}
}

static int check_charge_memory_in_child(void)
{
	const char *dir = getenv("HARNESS_SCRATCH") ?: "/tmp";
	int err;

	snprintf(slab_dir, sizeof(slab_dir), "%s/memcg_kfuncs.%d.files", dir, (int)getpid());
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return check_fail("socketpair: %s", strerror(errno));
	worker_pid = cg_spawn(cgs[CG_C].path, worker, NULL);
	close(sv[1]);	/* the worker's death: EOF */
	err = worker_pid < 0 ? -worker_pid : worker_ack(NULL);
	if (err)
		return check_fail("worker in %s: %s", cgs[CG_C].path, strerror(err));
	return read_rec(CG_C, &c_rec) ? KSFT_FAIL : KSFT_PASS;
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

/* C's user memory against what its worker made (exact read: no flush tolerance) */
static int check_child_values_match_created(void)
{
	long long all = SHMEM_BYTES + MAPPED_BYTES;
	const struct mk_rec *r = &c_rec;
	bool ok = true;

	in_range(&ok, 1, "anon", r->val[F_anon], ANON_BYTES, ANON_BYTES + SLACK_BYTES);
	in_range(&ok, 1, "shmem (both memfds)", r->val[F_shmem], all, all + SLACK_BYTES);
	in_range(&ok, 1, "file", r->val[F_file], all, all + SLACK_BYTES);
	in_range(&ok, 1, "file_mapped", r->val[F_file_mapped], MAPPED_BYTES,
		 MAPPED_BYTES + SLACK_BYTES);
	in_range(&ok, 1, "pgfault (>= pages touched)", r->val[F_pgfault],
		 (ANON_BYTES + MAPPED_BYTES) / page_size, LLONG_MAX);
	/* a page-table page maps 512 pages: at least one per 512 pages the worker mapped */
	in_range(&ok, 1, "pagetables (>= a page per 512 pages mapped)", r->val[F_pagetables],
		 (ANON_BYTES + MAPPED_BYTES) / (512 * page_size) * page_size, LLONG_MAX);
	/* shmem pages are swap-backed: on the anon LRUs with the anon pages */
	in_range(&ok, 1, "inactive_anon + active_anon",
		 r->val[F_inactive_anon] + r->val[F_active_anon], ANON_BYTES + all, LLONG_MAX);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the lines of @cg's @file */
static long long count_lines(const char *cg, const char *file)
{
	static char buf[65536];
	long long n = 0;
	int len = cg_read(cg, file, buf, sizeof(buf));
	int i;

	for (i = 0; i < len; i++)
		n += buf[i] == '\n';
	return len < 0 ? -1 : n;
}

static void expect_sum_of_parts(bool *ok, int cgi, const char *key);

/*
 * The memcg-level items exist in C, each at least what its worker charged: the
 * vmalloc'ed map area, the per-CPU values (CPUs possible), the queued datagrams'
 * payload; kernel stacks exactly one THREAD_SIZE (16 KiB, 32 with KASAN) per thread
 * made in C (cgroup.threads counts them); kernel memory covering all of them; and
 * memory.stat's slab line the sum of its two slab_ lines, which no kfunc reads.
 */
static int check_child_kernel_items_charged(void)
{
	const struct mk_rec *r = &c_rec;
	long long threads = count_lines(cgs[CG_C].path, "cgroup.threads");
	long long stack = r->val[F_kernel_stack], kernel_min;
	long possible = libbpf_num_possible_cpus();
	bool ok = true;

	in_range(&ok, 1, "vmalloc", r->val[F_vmalloc], VMALLOC_BYTES, VMALLOC_BYTES + SLACK_BYTES);
	in_range(&ok, 1, "percpu", r->val[F_percpu], (long long)PCPU_ELEMS * PCPU_VALUE * possible,
		 (long long)PCPU_ELEMS * PCPU_VALUE * possible + SLACK_BYTES);
	in_range(&ok, 1, "sock", r->val[F_sock], DGRAMS * DGRAM_BYTES,
		 2LL * DGRAMS * DGRAM_BYTES + SLACK_BYTES);
	in_range(&ok, 1, "slab_reclaimable + slab_unreclaimable",
		 r->val[F_slab_reclaimable] + r->val[F_slab_unreclaimable],
		 (long long)SLAB_FILES * SLAB_MIN, LLONG_MAX);
	/* the worker forked outside C (then moved in): its own stack is charged there */
	expect(&ok, threads == THREADS + 1 && (stack == THREADS * 16384LL || stack == THREADS * 32768LL),
	       "kernel_stack %lld B, %lld threads in C (cgroup.threads): expected %d threads made in C, 16 or 32 KiB each, and the worker",
	       stack, threads, THREADS);
	ksft_print_msg("C: vmalloc %lld, percpu %lld, sock %lld, kernel_stack %lld (%lld threads), slab %lld + %lld, kernel %lld B\n",
		       (long long)r->val[F_vmalloc], (long long)r->val[F_percpu],
		       (long long)r->val[F_sock], stack, threads,
		       (long long)r->val[F_slab_reclaimable], (long long)r->val[F_slab_unreclaimable],
		       (long long)r->val[F_kernel]);
	kernel_min = r->val[F_vmalloc] + r->val[F_percpu] + stack +
		     r->val[F_slab_reclaimable] + r->val[F_slab_unreclaimable] - ncpus * page_size;
	in_range(&ok, 1, "kernel (>= vmalloc + percpu + stacks + slab)", r->val[F_kernel],
		 kernel_min, LLONG_MAX);
	expect_sum_of_parts(&ok, CG_C, "slab");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* @r against @file of @cgi; the number of fields off by more than @tol(f) */
static int compare(const struct mk_rec *r, int cgi, const char *file, bool print,
		   long long (*tol)(int f))
{
	static char buf[16384];
	bool have = cg_read(cgs[cgi].path, file, buf, sizeof(buf)) > 0;
	int f, bad = 0;

	for (f = 0; f < NR_FIELDS; f++) {
		const char *key = key_of(f);
		long long v, d, t = tol(f);

		if (strcmp(file_of(f), file))
			continue;
		v = !have ? -1 : f >= F_usage ? strtoll(buf, NULL, 10) : key_value(buf, key);
		if (v < 0 && fdesc[f].optional)
			continue;	/* not in this kernel's file */
		d = r->val[f] - v;
		if (v >= 0 && d <= t && d >= -t)
			continue;
		bad++;
		if (print)
			ksft_print_msg("%c %s %s: kfunc %lld, file %lld, diff %lld, tolerance %lld\n",
				       CG_NAMES[cgi], file, key, (long long)r->val[f], v, d, t);
	}
	return bad;
}

/* an exact kfunc read of @cgi agrees with its @file; up to 3 attempts (a charge or
 * an event may land between the two reads) */
static bool agree(int cgi, const char *file, struct mk_rec *out)
{
	struct mk_rec tmp, *r = out ?: &tmp;
	int attempt, bad = 1;

	for (attempt = 1; bad && attempt <= 3; attempt++) {
		if (attempt > 1)
			usleep(200000);
		if (read_rec(cgi, r))
			return false;
		bad = compare(r, cgi, file, attempt == 3, exact_tol);
	}
	return !bad;
}

/* child_matches_memory_stat, then parent_matches_memory_stat: consistency, not an oracle */
static int check_matches_memory_stat(void)
{
	static int calls;

	return agree(calls++ ? CG_P : CG_C, "memory.stat", NULL) ? KSFT_PASS : KSFT_FAIL;
}

/*
 * memory.numa_stat against memory.stat, for P and C: each key's per-node values
 * (the per-node lruvec counters, flushed with the memcg's) summed over the nodes is
 * the memcg-wide counter memory.stat prints, hierarchical both.  Exact: read while
 * memory.stat reads the same before and after (no flush moved either in between);
 * a parent's numa_stat read locally misses C's MiBs.
 */
static int check_numa_stat_sums_to_memory_stat(void)
{
	static char before[16384], numa[16384], after[16384];
	static const int who[] = { CG_P, CG_C };
	char *line, *save, *tok, *in, key[64];
	bool ok = true, still;
	long long sum, v;
	size_t w;
	int try, n;

	snprintf(numa, sizeof(numa), "%s/memory.numa_stat", cgs[CG_P].path);
	if (access(numa, F_OK) && errno == ENOENT)
		return check_skip("no memory.numa_stat (CONFIG_NUMA off): matrix cell 6.12-numa has it");
	for (w = 0; w < ARRAY_SIZE(who); w++) {
		const char *path = cgs[who[w]].path;

		for (try = 0, still = false; try < 5 && !still; try++) {
			if (cg_read(path, "memory.stat", before, sizeof(before)) <= 0 ||
			    cg_read(path, "memory.numa_stat", numa, sizeof(numa)) <= 0 ||
			    cg_read(path, "memory.stat", after, sizeof(after)) <= 0)
				return check_fail("%s: reading memory.stat, memory.numa_stat: %s", path,
						  strerror(errno));
			still = !strcmp(before, after);
		}
		if (!still)
			return check_fail("%s: memory.stat changed between every two reads in 5", path);
		for (n = 0, line = strtok_r(numa, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save), n++) {
			if (sscanf(line, "%63s", key) != 1)
				continue;
			for (sum = 0, tok = strtok_r(line + strlen(key), " ", &in); tok;
			     tok = strtok_r(NULL, " ", &in)) {
				long long nv;

				if (sscanf(tok, "N%*d=%lld", &nv) != 1)
					return check_fail("%s: memory.numa_stat: '%.40s'", path, tok);
				sum += nv;
			}
			v = key_value(after, key);
			expect(&ok, v == sum, "%s %s: memory.numa_stat's nodes sum to %lld, memory.stat says %lld",
			       cgs[who[w]].rel, key, sum, v);
		}
		ksft_print_msg("%s: %d keys of memory.numa_stat, each its nodes' sum = memory.stat's (anon %lld)\n",
			       cgs[who[w]].rel, n, key_value(after, "anon"));
		expect(&ok, n >= 10, "%s: memory.numa_stat has %d keys", cgs[who[w]].rel, n);
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * What P may hold beyond C, per field, while C is the only child with tasks: P's
 * own kernel memory (its children's memcgs are charged to it, a few hundred KiB:
 * kernel, slab, percpu, and so usage: 256 KiB on 7.2); nothing for the rest.  Every C value of such a kind is
 * MiBs, so a parent read locally (its own only) or credited twice fails.
 */
static long long parent_own_max(int f)
{
	return f == F_kernel || f == F_percpu || f == F_slab_reclaimable ||
	       f == F_slab_unreclaimable || f == F_usage ? 1 * MiB : 0;
}

static int check_parent_includes_child(void)
{
	struct mk_rec p, c;
	bool ok = true;
	int f;

	if (read_rec(CG_C, &c) || read_rec(CG_P, &p))
		return KSFT_FAIL;
	for (f = 0; f < NR_FIELDS; f++) {
		long long d = p.val[f] - c.val[f], tol = exact_tol(f) + 16 * page_size;

		if (fdesc[f].unit == U_COUNT)
			tol = 0;
		/* 16 pages: reads of P and C a moment apart in an idle tree */
		expect(&ok, d >= -tol && d <= parent_own_max(f) + tol,
		       "%s: P %lld, C %lld, P - C %lld, expected [%lld, %lld] (P's own)",
		       fdesc[f].call, (long long)p.val[f], (long long)c.val[f], d, -tol,
		       parent_own_max(f) + tol);
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The root memcg read two ways on R's link: bpf_get_root_mem_cgroup() and
 * bpf_get_mem_cgroup() of R's own css must be the same memcg; every value >= 0.
 * ROOT_NOISE: the rest of the guest runs between the two reads.
 */
static long long root_tol(int f)
{
	return fdesc[f].unit == U_COUNT ? 4096 : ROOT_NOISE;
}

static int check_root_matches_css_read(void)
{
	struct mk_rec a, b;
	int f, bad = 0;

	if (read_mode(CG_R, &a, MK_MODE_ROOT, true) || read_mode(CG_R, &b, MK_MODE_READ, true))
		return KSFT_FAIL;
	for (f = 0; f < NR_FIELDS; f++) {
		long long d = a.val[f] - b.val[f];

		if (d > root_tol(f) || d < -root_tol(f))
			bad += !!check_fail("root %s: bpf_get_root_mem_cgroup() %lld, root css %lld",
					    fdesc[f].call, (long long)a.val[f], (long long)b.val[f]);
	}
	return bad ? KSFT_FAIL : KSFT_PASS;
}

/* the sum of memory.current of R's children; -1 if unreadable */
static long long top_level_current(void)
{
	DIR *d = opendir(cgs[CG_R].path);
	struct dirent *e;
	char path[CG_PATH_MAX + 256];
	long long sum = 0, v;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (e->d_type != DT_DIR || e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", cgs[CG_R].path, e->d_name);
		v = cg_read_long(path, "memory.current");
		sum += v > 0 ? v : 0;
	}
	closedir(d);
	return sum;
}

/*
 * The root's usage is its page counter, to which every charge of a top-level cgroup
 * propagates: the sum of their memory.current, exactly, when nothing is charged in
 * between (3 attempts) and nothing removed still holds charges.  Something removed
 * always may: the kernel memory of a released cgroup is reparented (its objcg, on
 * every kernel since 5.9) and stays on the root's counter until freed, and a kernel
 * that reparents a removed cgroup's pages too (reparents(): 7.x) moves them there at
 * once; a dying cgroup (cgroup.stat's nr_dying_descendants of R) has no memory.current
 * to read.  So the root may hold up to DYING_SLACK more (seen: 8 pages on 6.12 and 6.1
 * after the other checks, none dying; 24 pages on 7.2).  cg_cleanup() reclaims what a
 * test's cgroups held before it removes them, so that they do not stay dying.  A usage
 * read from the statistics instead of the counter misses the kernel memory (tens of
 * MiB here); a peak or memory+swap reads more than the slack after the charges above.
 */
#define DYING_SLACK	(1 * MiB)

/*
 * Whether the kernel moves a removed memcg's pages to its parent when it goes
 * offline (7.x: objcg per node, LRU folios reparented) rather than leave them
 * charged to the offline memcg until they are freed (6.x).  The kernel's BTF says.
 */
static bool reparents(void)
{
	return bu_member_type_name("mem_cgroup_per_node", "objcg") != NULL;
}

static int check_root_usage_is_children_sum(void)
{
	long long s0 = -1, s1 = -1, u = -1, dying = -1;
	struct mk_rec r;
	int attempt;

	for (attempt = 1; attempt <= 3; attempt++) {
		dying = cg_read_key(cgs[CG_R].path, "cgroup.stat", "nr_dying_descendants");
		s0 = top_level_current();
		if (read_mode(CG_R, &r, MK_MODE_ROOT, false))
			return KSFT_FAIL;
		u = r.val[F_usage];
		s1 = top_level_current();
		if (s0 == s1 && s0 > 0 && u >= s0 && u - s0 <= DYING_SLACK) {
			ksft_print_msg("root usage %lld B, the top-level cgroups' memory.current %lld B (%lld dying cgroups)\n",
				       u, s0, dying);
			return KSFT_PASS;
		}
		usleep(500000);	/* a removed cgroup's charges go with its release */
	}
	return check_fail("root usage %lld B, the top-level cgroups' memory.current %lld then %lld B: expected equal (up to %lld B more: %lld dying cgroups)",
			  u, s0, s1, (long long)DYING_SLACK, dying);
}

/*
 * The root memcg counts every charged anon page: its anon is /proc/vmstat's
 * nr_anon_pages (per-CPU differences folded by vm.stat_refresh first), within what
 * the guest changes in between; C's 64 MiB are in both.
 */
static int check_root_anon_matches_vmstat(void)
{
	long long vm = -1, anon = -1;
	struct mk_rec r;
	int attempt, fd;

	for (attempt = 1; attempt <= 3; attempt++) {
		fd = open("/proc/sys/vm/stat_refresh", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "1", 1) != 1)
				ksft_print_msg("vm.stat_refresh: %s\n", strerror(errno));
			close(fd);
		}
		if (read_mode(CG_R, &r, MK_MODE_ROOT, true))
			return KSFT_FAIL;
		anon = r.val[F_anon];
		vm = cg_read_key("/proc", "vmstat", "nr_anon_pages") * page_size;
		if (vm > 0 && anon - vm <= ROOT_NOISE && vm - anon <= ROOT_NOISE &&
		    anon >= c_rec.val[F_anon]) {
			ksft_print_msg("root anon %lld B, nr_anon_pages %lld B\n", anon, vm);
			return KSFT_PASS;
		}
	}
	return check_fail("root anon %lld B, /proc/vmstat nr_anon_pages %lld B, C's anon %lld B: expected root = vmstat (+- %lld) and >= C",
			  anon, vm, (long long)c_rec.val[F_anon], ROOT_NOISE);
}

/*
 * +32 MiB in C made visible by bpf_mem_cgroup_flush_stats() alone (no rstat flush:
 * its threshold, TP, is the tolerance); C's, P's and the root's anon and faults grow
 * by the step (the root's within ROOT_NOISE).
 *
 * A step that falls short is followed by one more, from exact values: mainline's
 * flush zeroes a CPU's count of pending updates after it has read that CPU's values,
 * so updates made on that CPU in between (a periodic flush racing the worker) are
 * pending but counted nowhere, and the next flush below the threshold leaves them
 * (seen once in about 25 runs on 7.2: 645 pages of anon and faults, TP 256).  Only
 * a step that showed at least half of itself gets another: a flush that flushes
 * nothing shows none of it (a periodic flush in between could make a second chance
 * pass), and a wrong threshold falls short at both steps.
 */
static int check_flush_makes_new_memory_visible(void)
{
	static const int who[3] = { CG_C, CG_P, CG_R };
	int k, err, step, attempt, last = kver < 608 ? 3 : 1;
	long long want = MORE_ANON_BYTES, grew;
	struct mk_rec r0[3], r1[3];
	bool ok = false, most = true;

	for (step = 1; !ok && most && step <= 2; step++) {
		if (step == 2)
			ksft_print_msg("step 1 fell short (above): step 2, from exact values\n");
		/* exact at step 2: step 1's unflushed pages would count as its growth */
		for (k = 0; k < 3; k++)
			if (read_mode(who[k], &r0[k], k == 2 ? MK_MODE_ROOT : MK_MODE_READ,
				      step == 2))
				return KSFT_FAIL;
		err = worker_ack("+");
		if (err)
			return check_fail("worker: +%lld MiB anon: %s", want / MiB, strerror(err));
		/* < 6.8 (6.1): the flush is a trylock that may give up while another runs */
		for (attempt = 1, ok = false; !ok && attempt <= last; attempt++) {
			if (attempt > 1)
				usleep(200000);
			for (k = 0; k < 3; k++)
				if (read_mode(who[k], &r1[k], k == 2 ? MK_MODE_ROOT : MK_MODE_READ,
					      false))
					return KSFT_FAIL;
			/* most: this attempt saw at least half of the step everywhere */
			for (k = 0, ok = most = true; k < 3; k++) {
				char what[40];
				long long noise = k == 2 ? ROOT_NOISE : SLACK_BYTES;

				grew = r1[k].val[F_anon] - r0[k].val[F_anon];
				snprintf(what, sizeof(what), "step %d: %c anon growth", step,
					 CG_NAMES[who[k]]);
				in_range(&ok, attempt == last, what, grew, want - tp,
					 want + noise + tp);
				most &= grew >= want / 2;
				grew = r1[k].val[F_pgfault] - r0[k].val[F_pgfault];
				snprintf(what, sizeof(what), "step %d: %c pgfault growth", step,
					 CG_NAMES[who[k]]);
				in_range(&ok, attempt == last, what, grew,
					 want / page_size - tol_units, LLONG_MAX);
				most &= grew >= want / page_size / 2;
			}
		}
	}
	/*
	 * memory.stat flushes what it prints on its own read: one more step, read there
	 * before any kfunc flushes it. At least half of it: a periodic flush racing the
	 * step can leave some hundred pages pending below the threshold on a good kernel
	 * (above); a memory.stat that prints what the last periodic flush left shows none
	 * of the step, or what a periodic flush inside the step's faults took of it.
	 */
	if (ok) {
		long long before = cg_read_key(cgs[CG_C].path, "memory.stat", "anon"), after = -1;

		err = worker_ack("+");
		if (err)
			return check_fail("worker: +%lld MiB anon: %s", want / MiB, strerror(err));
		for (attempt = 1; attempt <= last; attempt++) {
			if (attempt > 1)
				usleep(200000);
			after = cg_read_key(cgs[CG_C].path, "memory.stat", "anon");
			if (after - before >= want / 2)
				break;
		}
		in_range(&ok, true, "C memory.stat anon growth, read before any kfunc flushed it",
			 before < 0 || after < 0 ? -1 : after - before, want / 2,
			 want + SLACK_BYTES + tp);
	}
	if (read_rec(CG_C, &c_rec))
		return KSFT_FAIL;
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_usage_matches_memory_current(void)
{
	struct mk_rec c = {}, p = {};
	bool ok = agree(CG_C, "memory.current", &c);

	ok &= agree(CG_P, "memory.current", &p);
	expect(&ok, c.val[F_usage] > 0 && p.val[F_usage] >= c.val[F_usage],
	       "usage(): C %lld B (> 0), P %lld B (>= C)", (long long)c.val[F_usage],
	       (long long)p.val[F_usage]);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in H: WRITE_BYTES of page cache to @arg, synced as it goes (reclaimable) */
static int write_over_high(void *arg)
{
	return write_file(arg, WRITE_BYTES, 0x5a, true);
}

/* the scratch directory (a disk file system: reclaimable page cache), or NULL */
static const char *scratch_dir(void)
{
	const char *dir = getenv("HARNESS_SCRATCH") ?: "/tmp";
	struct statfs sfs;

	return statfs(dir, &sfs) || sfs.f_type == TMPFS_MAGIC ? NULL : dir;
}

static int check_memory_events_match_memory_events(void)
{
	const char *dir = scratch_dir();
	char *path = scratch_file, high[32];
	struct mk_rec h = {}, p = {};
	bool ok = true;
	int k, st;

	if (!dir)
		return check_skip("no disk file system for scratch: no reclaimable page cache");
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

/* in S: SWAP_ANON of anon memory, compressible (for zswap) but not one value per
 * page (zswap stores such pages without memory), then sleep */
static int swap_worker(void *arg)
{
	char *p = mmap(NULL, SWAP_ANON, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long long off;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (p == MAP_FAILED)
		return 1;
	madvise(p, SWAP_ANON, MADV_NOHUGEPAGE);
	for (off = 0; off < SWAP_ANON; off += 64)
		snprintf(p + off, 64, "page %lld, line %lld ", off / page_size, off % page_size);
	if (write(swap_sock, "k", 1) != 1)
		return 2;
	for (;;)
		pause();
}

/* one of zswap's debugfs counts (stored_pages, pool_total_size), -1 if not readable */
static long long zswap_debugfs(const char *name)
{
	char path[64], buf[32];
	int n;

	snprintf(path, sizeof(path), "/sys/kernel/debug/zswap/%s", name);
	n = read_close(open(path, O_RDONLY | O_CLOEXEC), buf, sizeof(buf) - 1);

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtoll(buf, NULL, 10);
}

/*
 * S's anon, partly swapped out (zram, through zswap where the kernel has it): the
 * kfuncs' swap equals memory.swap.current (the swap page counter), usage still
 * equals memory.current (swap is not usage), anon + swap cover what was made; with
 * zswap, S's zswapped pages are what zswap stored meanwhile, and P has S's.
 */
/*
 * memory.stat's aggregate @key line (pgsteal, pgscan; slab) against the sum of its
 * parts printed beside it (every "@key_" line: kswapd, direct, khugepaged, and
 * proactive where the kernel has it; slab_reclaimable, slab_unreclaimable): equal,
 * read from one read of the file.
 */
static void expect_sum_of_parts(bool *ok, int cgi, const char *key)
{
	static char text[16384];
	long long whole = -1, parts = 0, v;
	size_t kl = strlen(key);
	char *line, *save, name[64];
	int n = 0, attempt;

	/*
	 * up to 3 reads: memory.stat reads a counter again for an aggregate line (slab
	 * re-reads slab_reclaimable), and a stats flush between the two reads (the
	 * periodic one, another reader's) makes them differ once on a correct kernel
	 */
	for (attempt = 1; attempt <= 3 && (attempt == 1 || whole != parts); attempt++) {
		if (attempt > 1)
			usleep(200000);
		if (cg_read(cgs[cgi].path, "memory.stat", text, sizeof(text)) <= 0) {
			expect(ok, false, "%s: memory.stat not read", cgs[cgi].rel);
			return;
		}
		whole = -1;
		parts = 0;
		n = 0;
		for (line = strtok_r(text, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			if (sscanf(line, "%63s %lld", name, &v) != 2 || strncmp(name, key, kl))
				continue;
			if (!name[kl])
				whole = v;
			else if (name[kl] == '_' && ++n)
				parts += v;
		}
	}
	expect(ok, whole >= 0 && n >= 2 && whole == parts,
	       "%s: memory.stat %s %lld, its %d %s_* lines sum to %lld: expected equal (3 reads)",
	       cgs[cgi].rel, key, whole, n, key, parts);
}

/* swap_worker in S, its memory written: 0, or the worker's failure (it is gone) */
static int swap_worker_start(void)
{
	int fds[2], st;
	char c;

	cg_reap(&swap_pid);	/* a check that failed early left its worker */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
		return check_fail("socketpair: %s", strerror(errno));
	swap_sock = fds[1];
	swap_pid = cg_spawn(cgs[CG_S].path, swap_worker, NULL);
	close(fds[1]);
	if (swap_pid < 0 || read(fds[0], &c, 1) != 1) {
		st = swap_pid < 0 ? swap_pid : cg_wait(swap_pid);
		swap_pid = -1;
		close(fds[0]);
		return check_fail("the worker in S: %d", st);
	}
	close(fds[0]);
	return 0;
}

/* memory.reclaim SWAP_RECLAIM of S (again while the kernel says EAGAIN); 0 or errno */
static int reclaim_s(void)
{
	int attempt, err = 0;

	for (attempt = 0; attempt < 3; attempt++) {
		err = -cg_write(cgs[CG_S].path, "memory.reclaim", SWAP_RECLAIM);
		if (err != EAGAIN)
			break;
	}
	return err;
}

static int check_swapped_out_child(void)
{
	long long swap_cur, cur, z0 = -1, z1, pool0 = -1, pool1, lo, hi, steal, scan;
	struct mk_rec s, s0, p;
	bool ok = true, zswap;
	int err, fd;

	fd = open(ZSWAP_ENABLED, O_RDWR | O_CLOEXEC);
	zswap = fd >= 0 && read(fd, zswap_was, 1) == 1 && pwrite(fd, "Y", 1, 0) == 1;
	if (fd >= 0)
		close(fd);
	if (zswap) {
		z0 = zswap_debugfs("stored_pages");
		pool0 = zswap_debugfs("pool_total_size");
	}
	if (swap_worker_start() || read_rec(CG_S, &s0))
		return KSFT_FAIL;
	err = reclaim_s();
	swap_cur = cg_read_long(cgs[CG_S].path, "memory.swap.current");
	if (err || swap_cur < 8 * MiB)
		return check_fail("memory.reclaim %s of S: %s; memory.swap.current %lld (expected >= 8 MiB: is there swap?)",
				  SWAP_RECLAIM, strerror(err), swap_cur);
	ok &= agree(CG_S, "memory.swap.current", &s);
	ok &= agree(CG_S, "memory.current", &s);
	cur = cg_read_long(cgs[CG_S].path, "memory.current");
	lo = SWAP_ANON;
	hi = SWAP_ANON + SLACK_BYTES + s.val[F_swapcached];
	in_range(&ok, 1, "S anon + swap", s.val[F_anon] + s.val[F_swap], lo, hi);
	expect(&ok, s.val[F_usage] == cur, "S usage %lld, memory.current %lld: expected equal (swap is not usage)",
	       (long long)s.val[F_usage], cur);
	/* the reclaim the test asked for, in the reclaim events of every kind of reclaimer */
	steal = GREW(s, s0, pgsteal_kswapd) + GREW(s, s0, pgsteal_direct) +
		GREW(s, s0, pgsteal_khugepaged) + GREW(s, s0, pgsteal_proactive);
	scan = GREW(s, s0, pgscan_kswapd) + GREW(s, s0, pgscan_direct) +
	       GREW(s, s0, pgscan_khugepaged) + GREW(s, s0, pgscan_proactive);
	ksft_print_msg("S: memory.reclaim %s: pgsteal +%lld, pgscan +%lld pages\n", SWAP_RECLAIM,
		       steal, scan);
	in_range(&ok, 1, "S pgsteal (all reclaimers) over the memory.reclaim", steal,
		 SWAP_RECLAIM_BYTES / page_size - RECLAIM_SLAB_PAGES, SWAP_ANON / page_size);
	expect(&ok, scan >= steal, "S pgscan +%lld < pgsteal +%lld: every page stolen was scanned",
	       scan, steal);
	if (read_rec(CG_P, &p))
		return KSFT_FAIL;
	expect(&ok, p.val[F_swap] >= s.val[F_swap], "P swap %lld < S swap %lld",
	       (long long)p.val[F_swap], (long long)s.val[F_swap]);
	ksft_print_msg("S: anon %lld, swap %lld (memory.swap.current %lld), swapcached %lld, usage %lld, zswapped %lld, zswap %lld B\n",
		       (long long)s.val[F_anon], (long long)s.val[F_swap], swap_cur,
		       (long long)s.val[F_swapcached], (long long)s.val[F_usage],
		       (long long)s.val[F_zswapped], (long long)s.val[F_zswap]);
	if (zswap) {
		z1 = zswap_debugfs("stored_pages");
		pool1 = zswap_debugfs("pool_total_size");
		ksft_print_msg("zswap stored_pages %lld -> %lld, pool_total_size %lld -> %lld B\n",
			       z0, z1, pool0, pool1);
		if (z0 < 0 || z1 < 0 || pool0 < 0 || pool1 < 0)
			ksft_print_msg("NOT CHECKED: S's zswap against zswap's own counts (/sys/kernel/debug/zswap unreadable: mount debugfs): zswapped and zswap judged by each other and by P only\n");
		expect(&ok, s.val[F_zswapped] > 0 && s.val[F_zswap] > 0,
		       "zswap on: S zswapped %lld B, zswap %lld B: expected > 0",
		       (long long)s.val[F_zswapped], (long long)s.val[F_zswap]);
		/* zswap is what the stored pages take compressed: never more than the pages */
		expect(&ok, s.val[F_zswap] <= s.val[F_zswapped],
		       "S zswap %lld B, its zswapped pages %lld B: expected the compressed size at most the pages' size",
		       (long long)s.val[F_zswap], (long long)s.val[F_zswapped]);
		/*
		 * ...and within the pool that holds them: zsmalloc's pages, counted by
		 * zswap apart from any memcg, hold every stored page's compressed bytes
		 * (a kernel charging a page's uncompressed size is 8x over it here)
		 */
		expect(&ok, pool1 < 0 || s.val[F_zswap] <= pool1,
		       "S zswap %lld B, zswap's pool %lld B: expected the compressed bytes within the pool that holds them",
		       (long long)s.val[F_zswap], pool1);
		/*
		 * and most of what the pool grew by meanwhile (nothing else swaps): its
		 * overhead over the compressed bytes, zsmalloc's size classes and partly
		 * filled zspages, was 3.4% on 6.1, 6.12 and 7.2 (3,543,040 B for
		 * 3,422,699; 3,067,904 for 2,967,209; 3,084,288 for 2,980,223)
		 */
		expect(&ok, pool0 < 0 || pool1 < 0 || 2 * s.val[F_zswap] >= pool1 - pool0,
		       "S zswap %lld B, zswap's pool grew %lld -> %lld B: expected at least half the growth",
		       (long long)s.val[F_zswap], pool0, pool1);
		expect(&ok, z0 < 0 || z1 < 0 || s.val[F_zswapped] == (z1 - z0) * page_size,
		       "S zswapped %lld B, zswap stored_pages %lld -> %lld: expected the growth",
		       (long long)s.val[F_zswapped], z0, z1);
		expect(&ok, p.val[F_zswapped] >= s.val[F_zswapped] &&
		       p.val[F_zswap] >= s.val[F_zswap] - ncpus * page_size,
		       "P zswapped %lld zswap %lld, S %lld %lld: expected P >= S",
		       (long long)p.val[F_zswapped], (long long)p.val[F_zswap],
		       (long long)s.val[F_zswapped], (long long)s.val[F_zswap]);
	} else {
		ksft_print_msg("no zswap in this kernel (%s): swap only\n", ZSWAP_ENABLED);
	}
	expect_sum_of_parts(&ok, CG_S, "pgsteal");
	expect_sum_of_parts(&ok, CG_S, "pgscan");
	expect_sum_of_parts(&ok, CG_P, "pgsteal");
	/*
	 * memory.stat's swap lines (zswap, zswapped, swapcached, pswpout...) only ever
	 * differ from 0 here: each judged above through the kfuncs, and memory.stat
	 * must print the same (its table names each item on its own)
	 */
	expect(&ok, agree(CG_S, "memory.stat", NULL),
	       "S, swapped out: memory.stat and the kfuncs disagree (the lines above)");
	/* ...and its parent's, where a line read locally would print none of S's swap */
	expect(&ok, agree(CG_P, "memory.stat", NULL),
	       "P, S swapped out below it: memory.stat and the kfuncs disagree (the lines above)");
	cg_reap(&swap_pid);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in S: 1 MiB of anon memory touched, more than a CPU's stock of charges: a charge
 * that takes the slow path, which compares the memcg's counters with their high */
static int touch_1m(void *arg)
{
	(void)arg;
	return cg_alloc_anon(1 * MiB) ? 0 : 1;
}

/*
 * memory.swap.high: S's swap (its worker's anon, reclaimed to swap) held while
 * swap.high is set 16 pages below it; a charge in S then finds the swap over its
 * high, and the task's return to user space counts a swap high event (so close a
 * limit costs no throttling).  It is memory.swap.events' high, in S and
 * hierarchically in P, never memory.events' high (memory.high is max).
 */
static int check_swap_high_counted(void)
{
	long long swap_cur;
	struct mk_rec s0, s1, p0, p1;
	char high[32];
	bool ok = true;
	int err, st;

	if (swap_worker_start())
		return KSFT_FAIL;
	err = reclaim_s();
	swap_cur = cg_read_long(cgs[CG_S].path, "memory.swap.current");
	if (err || swap_cur < 4 * MiB) {
		cg_reap(&swap_pid);
		return check_fail("memory.reclaim %s of S: %s; memory.swap.current %lld (expected >= 4 MiB)",
				  SWAP_RECLAIM, strerror(err), swap_cur);
	}
	snprintf(high, sizeof(high), "%lld", swap_cur - 16 * page_size);
	if (read_rec(CG_S, &s0) || read_rec(CG_P, &p0) ||
	    cg_write(cgs[CG_S].path, "memory.swap.high", high)) {
		cg_reap(&swap_pid);
		return check_fail("S: memory.swap.high %s: %s", high, strerror(errno));
	}
	st = cg_run(cgs[CG_S].path, touch_1m, NULL);
	err = read_rec(CG_S, &s1) || read_rec(CG_P, &p1);
	ok &= agree(CG_S, "memory.swap.events", NULL) && agree(CG_S, "memory.events", NULL);
	cg_write(cgs[CG_S].path, "memory.swap.high", "max");
	cg_reap(&swap_pid);
	if (st || err)
		return check_fail("S: 1 MiB touched: %d; reading the events: %d", st, err);
	ksft_print_msg("S: swap %lld B, swap.high %s; 1 MiB charged: memory.swap.events high +%lld (P +%lld), memory.events high +%lld\n",
		       swap_cur, high, GREW(s1, s0, swap_high), GREW(p1, p0, swap_high),
		       GREW(s1, s0, high));
	expect(&ok, GREW(s1, s0, swap_high) >= 1, "S: expected swap high events (its swap over memory.swap.high)");
	expect(&ok, GREW(p1, p0, swap_high) == GREW(s1, s0, swap_high),
	       "P: expected S's swap high events counted up the tree");
	expect(&ok, GREW(s1, s0, high) == 0, "S: expected no memory.events high (memory.high is max)");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

#define LOW_MAX		"32M"		/* X's memory.max */
#define LOW_FILE	(24 * MiB)	/* A's clean page cache, under A's memory.low */
#define LOW_ANON	(24 * MiB)	/* B's anon, no swap: A must give */

static int read_back(void *arg);

/* in A: LOW_FILE of clean page cache in @arg, kept after the exit, read twice: on the
 * active list (what reclaim then evicts is workingset, activated again on refault) */
static int write_clean(void *arg)
{
	int fd, err = write_file(arg, LOW_FILE, 0x66, false);

	if (err)
		return err;
	fd = open(arg, O_RDONLY | O_CLOEXEC);
	err = fd < 0 || fsync(fd) ? 2 : 0;
	if (fd >= 0)
		close(fd);
	return err ?: read_back(arg) ?: read_back(arg);
}

static int alloc_low_anon(void *arg)
{
	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return cg_alloc_anon(LOW_ANON) ? 0 : 3;
}

/* in A: the file @arg read through, its pages faulted back into the page cache */
static int read_back(void *arg)
{
	static char buf[65536];
	int fd = open(arg, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 1;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		;
	close(fd);
	return n < 0 ? 2 : 0;
}

/*
 * A's workingset lines after its evicted cache was read back (@st: the reader's
 * exit): each counts pages of the same refaults, every activation a refault and every
 * restore an activation (mm/workingset.c), so restore <= activate <= refault, per
 * kind; some refault must be seen.  A line printed in another unit (bytes) breaks the
 * order as soon as one page is activated.
 */
static void expect_workingset(bool *ok, const char *cg, int st)
{
	static const char *const kinds[] = { "file", "anon" };
	char key[3][40], text[16384];
	bool read_ok = cg_read(cg, "memory.stat", text, sizeof(text)) > 0;
	long long v[3];
	int k, i;

	expect(ok, !st && read_ok, "A: reading its file back: exit %d; memory.stat: %s", st,
	       read_ok ? "read" : strerror(errno));
	for (k = 0; k < 2; k++) {
		for (i = 0; i < 3; i++) {
			snprintf(key[i], sizeof(key[i]), "workingset_%s_%s",
				 (const char *[]){ "refault", "activate", "restore" }[i], kinds[k]);
			v[i] = key_value(text, key[i]);
		}
		ksft_print_msg("A: %s %lld, %s %lld, %s %lld\n", key[0], v[0], key[1], v[1], key[2], v[2]);
		expect(ok, v[0] >= 0 && v[1] >= 0 && v[2] >= 0 && v[2] <= v[1] && v[1] <= v[0],
		       "A's workingset lines of %s: expected restore <= activate <= refault", kinds[k]);
	}
	expect(ok, key_value(text, "workingset_refault_file") > 0,
	       "A: expected refaults of the cache reclaim took, read back");
}

/*
 * memory.low breached: below P, X (memory.max LOW_MAX) holds A (memory.low far
 * above what it holds: LOW_FILE of clean page cache) and B (no swap).  B touches
 * LOW_ANON: X's reclaim finds nothing it may take but A's protected cache, and
 * takes it in its second pass, counting a low event for A (memory.events low, and
 * X's hierarchically).  The oracle is the breach itself: A's memory.current fell
 * while B lived, and it could not fall otherwise.
 */
static int check_low_event_counted(void)
{
	static char x[CG_PATH_MAX + 8], a[CG_PATH_MAX + 16], b[CG_PATH_MAX + 16], file[PATH_MAX];
	const char *dir = scratch_dir();
	long long a0, a1, la0, la1, lx0, lx1, kf0, kf1;
	struct mk_rec r;
	bool ok = true;
	int st, st2, err;

	if (!dir)
		return check_skip("no disk file system for scratch: no clean page cache to protect");
	snprintf(x, sizeof(x), "%s/low", cgs[CG_P].path);
	snprintf(a, sizeof(a), "%s/a", x);
	snprintf(b, sizeof(b), "%s/b", x);
	snprintf(file, sizeof(file), "%s/memcg_kfuncs.%d.low", dir, (int)getpid());
	err = cg_create(x) ?: cg_write(x, "cgroup.subtree_control", "+memory") ?: cg_create(a) ?:
	      cg_create(b) ?: cg_write(x, "memory.max", LOW_MAX) ?:
	      cg_write(a, "memory.low", "1G") ?: cg_write(b, "memory.swap.max", "0");
	if (err)
		return check_fail("making X, A, B below P: %s", strerror(-err));
	st = cg_run(a, write_clean, file);
	a0 = cg_read_long(a, "memory.current");
	la0 = cg_read_key(a, "memory.events", "low");
	lx0 = cg_read_key(x, "memory.events", "low");
	if (st || a0 < LOW_FILE / 2 || la0 < 0 || lx0 < 0) {
		unlink(file);
		return check_fail("A: %lld MiB of page cache written (exit %d); memory.current %lld",
				  LOW_FILE / MiB, st, a0);
	}
	kf0 = read_rec_path(a, &r) ? -1 : (long long)r.val[F_low];
	st = cg_run(b, alloc_low_anon, NULL);
	a1 = cg_read_long(a, "memory.current");
	la1 = cg_read_key(a, "memory.events", "low");
	lx1 = cg_read_key(x, "memory.events", "low");
	kf1 = read_rec_path(a, &r) ? -1 : (long long)r.val[F_low];
	/* A reads its file again: what reclaim took refaults, some of it activated */
	st2 = cg_run(a, read_back, file);
	expect_workingset(&ok, a, st2);
	unlink(file);
	ksft_print_msg("A (memory.low 1G) held %lld KiB; B touched %lld MiB (exit %d): A %lld KiB, memory.events low A +%lld, X +%lld, the kfunc's A +%lld\n",
		       a0 / 1024, LOW_ANON / MiB, st, a1 / 1024, la1 - la0, lx1 - lx0, kf1 - kf0);
	expect(&ok, !st && a1 < a0 - 8 * MiB,
	       "the breach: expected B to live (exit 0) and A to give at least 8 MiB of its cache");
	expect(&ok, la1 - la0 >= 1, "A: expected a low event (its protection breached)");
	expect(&ok, lx1 - lx0 == la1 - la0, "X: expected A's low events counted up the tree");
	expect(&ok, kf0 >= 0 && kf1 - kf0 == la1 - la0, "the kfunc's MEMCG_LOW of A: +%lld, memory.events +%lld",
	       kf1 - kf0, la1 - la0);
	err = cg_destroy(b) ?: cg_destroy(a) ?: cg_destroy(x);
	expect(&ok, !err, "removing X, A, B: %s", strerror(-err));
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* in Z: ZOMBIE_BYTES of page cache to @arg, kept after the exit */
static int write_kept(void *arg)
{
	return write_file(arg, ZOMBIE_BYTES, 0x33, false);
}

/* the two ends a child passes a socket it made back through (SCM_RIGHTS) */
static int pin_pass[2] = { -1, -1 };

/*
 * A socket made in the cgroup this runs in, sent to the parent: its sk_memcg holds
 * a reference to the cgroup's memcg (mem_cgroup_sk_alloc(): css_tryget()) for as
 * long as the parent keeps it, on every kernel.
 */
static int make_pinning_socket(void *arg)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u = {};
	char c = 0;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	(void)arg;
	if (sk < 0)
		return 1;
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &sk, sizeof(int));
	return sendmsg(pin_pass[1], &m, 0) == 1 ? 0 : 2;
}

/* the socket make_pinning_socket() sent, -1 if none came */
static int take_pinning_socket(void)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u = {};
	char c;
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int sk = -1;

	if (recvmsg(pin_pass[0], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&m);
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&sk, CMSG_DATA(cm), sizeof(int));
	return sk;
}

/* pages of @path in the page cache (mincore), -1 on error */
static long long resident(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long long n = 0, pages = ZOMBIE_BYTES / page_size, i;
	unsigned char *vec = malloc(pages);
	void *p = fd < 0 ? MAP_FAILED : mmap(NULL, ZOMBIE_BYTES, PROT_READ, MAP_SHARED, fd, 0);

	if (p != MAP_FAILED && vec && !mincore(p, ZOMBIE_BYTES, vec))
		for (i = 0; i < pages; i++)
			n += vec[i] & 1;
	else
		n = -1;
	if (p != MAP_FAILED)
		munmap(p, ZOMBIE_BYTES);
	if (fd >= 0)
		close(fd);
	free(vec);
	return n;
}

/* the memcg flush callback's fexit program (zombie_flush) on Z, while part of Z's
 * page cache goes: it sees the flush of Z's offline memcg and gets it */
struct zombie_seen {
	__u64 id, calls, online, got, file;
};

static int zombie_by_flush(struct zombie_seen *z)
{
	static char vlog[65536];
	struct bpf_object *obj = bu_load_one(extra_elf, extra_sz, "zombie_flush", vlog,
					     sizeof(vlog));
	struct bpf_map *map = obj ? bpf_object__find_map_by_name(obj, "zombie") : NULL;
	struct bpf_link *link = NULL;
	struct mk_rec p;
	__u32 key = 0;
	int err = 0, fd;

	memset(z, 0, sizeof(*z));
	z->id = cgs[CG_Z].id;
	if (!map || bpf_map__update_elem(map, &key, sizeof(key), z, sizeof(*z), BPF_ANY) ||
	    !(link = bpf_program__attach(bpf_object__find_program_by_name(obj, "zombie_flush")))) {
		err = -errno;
		ksft_print_msg("zombie_flush: %s; the verifier's log ends:\n", strerror(-err));
		print_block("  ", vlog + (strlen(vlog) > 600 ? strlen(vlog) - 600 : 0));
		goto out;
	}
	/* half of Z's page cache uncharged: Z's memcg has stats to flush */
	fd = open(zombie_file, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || ftruncate(fd, ZOMBIE_BYTES / 2))
		err = -errno;
	if (fd >= 0)
		close(fd);
	if (!err && read_rec(CG_P, &p))	/* flushes P's subtree: Z's memcg with it */
		err = -EIO;
	if (!err && bpf_map__lookup_elem(map, &key, sizeof(key), z, sizeof(*z), 0))
		err = -errno;
out:
	bpf_link__destroy(link);
	bpf_object__close(obj);
	return err;
}

/*
 * Without the css iterator (6.1) a program meets an offline memcg in its rstat
 * flush: Z removed, half of its page cache truncated, P's subtree flushed; each
 * flush of Z's memcg is offline and bpf_get_mem_cgroup() must hand it out.
 */
static int offline_memcg_by_flush(long long pages)
{
	struct zombie_seen z;
	int err = zombie_by_flush(&z);
	bool ok = true;

	ksft_print_msg("Z (removed; %lld of its pages resident): memcg flushes seen %llu, online %llu, got %llu, file %llu\n",
		       pages, (unsigned long long)z.calls, (unsigned long long)z.online,
		       (unsigned long long)z.got, (unsigned long long)z.file);
	unlink(zombie_file);
	zombie_file[0] = '\0';
	/*
	 * -ENOTSUPP from the attach: the kernel cannot put a BPF trampoline on the
	 * callback at all (no ftrace direct calls: 6.1's arm64), which the harness's
	 * feature probe reports too. The route is not observable there; any other
	 * error is a failure.
	 */
	if (err == -ENOTSUPP)
		return check_skip("fexit cannot attach on this kernel (-ENOTSUPP: no ftrace direct calls), so the flush route to Z's memcg cannot be observed");
	if (err)
		return check_fail("the flush route to Z's memcg: %s", strerror(-err));
	expect(&ok, z.calls >= 1 && !z.online,
	       "flushes of Z's memcg seen: %llu, online in %llu: expected >= 1, all offline",
	       (unsigned long long)z.calls, (unsigned long long)z.online);
	expect(&ok, z.got == z.calls,
	       "bpf_get_mem_cgroup() of Z's offline memcg: the memcg %llu of %llu times, expected every time (css_tryget() holds)",
	       (unsigned long long)z.got, (unsigned long long)z.calls);
	if (z.got)	/* after the last CPU's flush: the half left, exactly */
		in_range(&ok, 1, "Z's file", z.file, ZOMBIE_BYTES / 2 - tp, ZOMBIE_BYTES / 2 + MiB);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * Z removed while its page cache keeps its memcg: offline, not freed.  A kernel that
 * reparents (reparents(): 7.x) hands Z's page cache to P's objcg when Z goes offline,
 * and nothing of it keeps Z's memcg: there a socket made in Z keeps it (its statistics
 * still count the page cache, 8 MiB on 7.2).  Reached by
 * P's css walk (the cgroup iterator skips dead cgroups, and a removed cgroup no
 * longer points to its memcg), or by the flush route where there is no css
 * iterator; bpf_get_mem_cgroup() hands it out as mainline does (css_tryget()
 * succeeds until the last reference goes), with its page cache in its values and
 * in P's.
 */
static int check_offline_memcg_handed_out(void)
{
	const char *dir = scratch_dir() ?: "/tmp";
	unsigned long found = 0, online = 0, got = 0, file = 0, usage = 0;
	bool moved = reparents();
	int pin = -1;
	static char walk[4096];
	char *line, *save;
	long long dying, pages;
	struct mk_rec p;
	int st, err;
	bool ok = true;

	snprintf(zombie_file, sizeof(zombie_file), "%s/memcg_kfuncs.%d.zombie", dir, (int)getpid());
	st = cg_run(cgs[CG_Z].path, write_kept, zombie_file);
	if (moved) {
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pin_pass))
			return check_fail("socketpair: %s", strerror(errno));
		st = st ?: cg_run(cgs[CG_Z].path, make_pinning_socket, NULL);
		pin = take_pinning_socket();
		close(pin_pass[0]);
		close(pin_pass[1]);
		if (pin < 0)
			return check_fail("no socket made in Z to keep its memcg (writer %d)", st);
		ksft_print_msg("the kernel reparents a removed memcg's pages: a socket made in Z keeps its memcg\n");
	}
	err = cg_destroy(cgs[CG_Z].path);
	dying = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
	pages = resident(zombie_file);
	if (st || err || dying < 1 || pages * page_size < ZOMBIE_BYTES - tp)
		return check_fail("Z: writer %d, rmdir %s, P's nr_dying_descendants %lld (>= 1), resident %lld pages (~%lld)",
				  st, strerror(-err), dying, pages, ZOMBIE_BYTES / page_size);
	if (!bu_has_func("bpf_iter_css_new"))	/* no css iterator (6.7+): the flush route */
		return offline_memcg_by_flush(pages);
	if (read_rec(CG_P, &p))	/* flushes P's subtree, Z's memcg included */
		return KSFT_FAIL;
	err = run_extra("zombie_walk", CG_P, walk, sizeof(walk));
	for (line = err ? NULL : strtok_r(walk, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long id;
		unsigned long o, g, fl, u;

		if (sscanf(line, "id=%llu online=%lu got=%lu file=%lu usage=%lu", &id, &o, &g, &fl,
			   &u) == 5 && id == cgs[CG_Z].id) {
			found++;
			online = o;
			got = g;
			file = fl;
			usage = u;
		}
	}
	if (err)
		return check_fail("the css walk of P: %s", strerror(-err));
	ksft_print_msg("Z (removed; %lld of its pages resident): found %lu, online %lu, got %lu, file %lu, usage %lu; P's file %lld\n",
		       pages, found, online, got, file, usage, (long long)p.val[F_file]);
	expect(&ok, found == 1 && !online, "Z's memcg in P's css walk: found %lu times, online %lu: expected once, offline",
	       found, online);
	expect(&ok, got == 1, "bpf_get_mem_cgroup() of Z's offline memcg: %s, expected the memcg (css_tryget() holds)",
	       got ? "the memcg" : "NULL");
	if (got) {
		in_range(&ok, 1, "Z's file", file, ZOMBIE_BYTES - tp, ZOMBIE_BYTES + SLACK_BYTES);
		in_range(&ok, 1, "Z's usage", usage, file, LLONG_MAX);
		in_range(&ok, 1, "P's file (includes Z's)", p.val[F_file], file, LLONG_MAX);
	}
	if (pin >= 0)
		close(pin);
	unlink(zombie_file);
	zombie_file[0] = '\0';
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* E, got + flushed + put 8 times and removed, must stop dying within 10 s; read
 * through P's walk: a link would pin it until an RCU tasks-trace grace period */
static int check_flush_keeps_no_reference(void)
{
	long long before, now = -1;
	struct mk_rec r;
	int k, tries, err;

	for (tries = 0; tries < 100; tries++, usleep(100000)) {
		before = cg_read_key(cgs[CG_P].path, "cgroup.stat", "nr_dying_descendants");
		if (!before)
			break;	/* Z's memcg is gone with its page cache */
	}
	for (k = 0; k < 8; k++)
		if (read_mode(CG_E, &r, MK_MODE_READ, false))
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

/* @prog of the extra object, loaded alone and run once by BPF_PROG_RUN; its pt_out */
static int run_pt(struct bpf_object *obj, const char *prog, struct pt_out *o)
{
	static char pkt[64];	/* a zeroed frame, for the packet program types */
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	struct bpf_program *p = bpf_object__find_program_by_name(obj, prog);
	struct bpf_map *m, *bss = NULL;
	__u32 key = 0;
	int err;

	bpf_object__for_each_map(m, obj)
		if (bpf_map__is_internal(m) && strstr(bpf_map__name(m), ".bss"))
			bss = m;
	if (!p || !bss || bpf_map__value_size(bss) != sizeof(*o))
		return -ENOENT;
	if (bpf_program__type(p) != BPF_PROG_TYPE_SYSCALL) {
		opts.data_in = pkt;
		opts.data_size_in = sizeof(pkt);
	}
	*o = (struct pt_out){};	/* each run counts from zero: the object is run again */
	if (bpf_map__update_elem(bss, &key, sizeof(key), o, sizeof(*o), 0))
		return -errno;
	err = bpf_prog_test_run_opts(bpf_program__fd(p), &opts);
	if (err)
		return -errno;
	return bpf_map__lookup_elem(bss, &key, sizeof(key), o, sizeof(*o), 0) ? -errno : 0;
}

/*
 * The kfuncs from programs of other types than the iterators, each run by
 * BPF_PROG_RUN (the syscall program, sleepable, flushes too): the kernel must
 * accept exactly the program types its registration names (the inventory's
 * list for this kernel, captured from its source: BPF_PROG_TYPE_UNSPEC is
 * every type), refusing the others, and each run reads the root memcg: got,
 * its usage the top-level cgroups' memory.current summed (up to DYING_SLACK
 * while cgroups are dying; 3 attempts), anon and faults > 0.
 */
static int check_prog_types_registered(void)
{
	static const struct {
		const char *prog, *type;
	} pt[] = {
		{ "pt_syscall", "BPF_PROG_TYPE_SYSCALL" },
		{ "pt_sched_cls", "BPF_PROG_TYPE_SCHED_CLS" },
		{ "pt_xdp", "BPF_PROG_TYPE_XDP" },
		{ "pt_socket_filter", "BPF_PROG_TYPE_SOCKET_FILTER" },
	};
	static char vlog[65536];
	struct inv_list reg;
	struct bpf_object *obj;
	struct pt_out o = {};
	long long s0 = -1, s1 = -1, dying = -1;
	bool ok = true, all, want;
	int attempt, err;
	size_t i;

	if (inv_load(INVENTORY, "memcg_kfuncs.registration", &reg))
		return KSFT_FAIL;
	all = inv_has(&reg, "BPF_PROG_TYPE_UNSPEC");
	for (i = 0; i < ARRAY_SIZE(pt); i++) {
		want = all || inv_has(&reg, pt[i].type);
		if (!want) {
			expect(&ok, bu_refused(extra_elf, extra_sz, pt[i].prog, "is not allowed"),
			       "%s: a %s program must be refused (not registered for it)",
			       pt[i].prog, pt[i].type);
			continue;
		}
		obj = bu_load_one(extra_elf, extra_sz, pt[i].prog, vlog, sizeof(vlog));
		if (!obj) {
			ksft_print_msg("%s (%s) refused: %s; the verifier's log ends:\n", pt[i].prog,
				       pt[i].type, strerror(errno));
			print_block("  ", vlog + (strlen(vlog) > 600 ? strlen(vlog) - 600 : 0));
			ok = false;
			continue;
		}
		for (attempt = 1, err = 0; attempt <= 3; attempt++) {
			dying = cg_read_key(cgs[CG_R].path, "cgroup.stat", "nr_dying_descendants");
			s0 = top_level_current();
			err = run_pt(obj, pt[i].prog, &o);
			s1 = top_level_current();
			if (err || (s0 == s1 && s0 > 0 && (long long)o.usage >= s0 &&
				    (long long)o.usage - s0 <= DYING_SLACK))
				break;
			usleep(500000);
		}
		bpf_object__close(obj);
		ksft_print_msg("%s (%s): ran %llu, root memcg %s, usage %llu B (top-level memory.current %lld, then %lld; %lld dying cgroups), anon %llu B, pgfault %llu\n",
			       pt[i].prog, pt[i].type, (unsigned long long)o.ran,
			       o.got ? "got" : "NULL", (unsigned long long)o.usage, s0, s1, dying,
			       (unsigned long long)o.anon, (unsigned long long)o.pgfault);
		expect(&ok, !err && attempt <= 3 && o.ran == 1 && o.got && o.anon > 0 && o.pgfault > 0,
		       "%s: run %s; expected one run, the root memcg, its usage the top-level cgroups' memory.current (3 attempts), anon and pgfault > 0",
		       pt[i].prog, err ? strerror(-err) : "ok");
	}
	inv_free(&reg);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* whether the kernel was booted with memcg disabled: cgroup_disable=LIST naming memory */
static bool booted_without_memcg(void)
{
	char cmd[4096], *tok, *save = NULL, *name, *in = NULL;
	ssize_t n = read_close(open("/proc/cmdline", O_RDONLY | O_CLOEXEC), cmd, sizeof(cmd) - 1);

	if (n <= 0)
		return false;
	cmd[n] = '\0';
	for (tok = strtok_r(cmd, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		if (strncmp(tok, "cgroup_disable=", 15))
			continue;
		for (name = strtok_r(tok + 15, ",", &in); name; name = strtok_r(NULL, ",", &in))
			if (!strcmp(name, "memory"))
				return true;
	}
	return false;
}

/*
 * Booted with cgroup_disable=memory (matrix cell 6.12-memcg-disabled): there is no
 * memcg to hand out, and bpf_get_root_mem_cgroup() says so with NULL, as does
 * bpf_get_mem_cgroup() of the root cgroup's own css, as mainline's do, though the
 * kernel allocated its root memcg at boot all the same and the root cgroup's
 * subsys[] holds it (cgroup_init_subsys() does for a disabled controller too).  The oracle that the
 * controller is off is the root cgroup's cgroup.controllers without "memory" (the
 * kernel's own word: /proc/cgroups lists only v1 controllers from 6.16); skipped on
 * a kernel booted with it on.
 */
static int check_root_memcg_null_when_disabled(void)
{
	static char vlog[65536];
	char self[64] = "";
	struct bpf_object *obj;
	struct pt_out o = {};
	const char *root;
	int err;

	if (!booted_without_memcg())
		return check_skip("the memory controller is on: boot with cgroup_disable=memory (matrix cell 6.12-memcg-disabled)");
	err = cg_find_root(&root, NULL);
	if (err != KSFT_PASS)
		return err;
	if (cg_has_word(root, "cgroup.controllers", "memory"))
		return check_fail("booted with cgroup_disable=memory, but %s/cgroup.controllers lists memory",
				  root);
	obj = bu_load_one(extra_elf, extra_sz, "pt_syscall", vlog, sizeof(vlog));
	if (!obj) {
		print_block("verifier: ", vlog);
		return check_fail("pt_syscall refused: %s", strerror(errno));
	}
	err = run_pt(obj, "pt_syscall", &o);
	bpf_object__close(obj);
	if (err)
		return check_fail("pt_syscall: BPF_PROG_RUN: %s", strerror(-err));
	ksft_print_msg("memory controller disabled: pt_syscall ran %llu time(s), bpf_get_root_mem_cgroup() gave %s\n",
		       (unsigned long long)o.ran, o.got ? "a root memcg" : "NULL");
	if (o.ran != 1 || o.got)
		return check_fail("bpf_get_root_mem_cgroup() with the memory controller disabled: %s (mainline: NULL)",
				  o.ran != 1 ? "the program did not run once" : "a root memcg");
	err = run_extra_at("self_css_get", root, self, sizeof(self));
	if (err)
		return check_fail("self_css_get on %s: %s", root, strerror(-err));
	ksft_print_msg("bpf_get_mem_cgroup(the root cgroup's own css): %s", self);
	return !strcmp(self, "memcg_of=0\n") ? KSFT_PASS :
	       check_fail("bpf_get_mem_cgroup() with the memory controller disabled gave the memcg of cgroup %.30s (mainline: NULL)",
			  self + strcspn(self, "=") + 1);
}

#define THP_DIR		"/sys/kernel/mm/transparent_hugepage"

/* @bytes of private anon memory at a 2 MiB boundary (a huge page's), from a mapping
 * 2 MiB larger; MAP_FAILED */
static char *map_huge_aligned(long long bytes)
{
	char *map = mmap(NULL, bytes + 2 * MiB, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return map == MAP_FAILED ? map :
	       (char *)(((unsigned long)map + 2 * MiB - 1) & ~(2 * MiB - 1));
}
#define KH_ANON		(8 * MiB)	/* K's anon, in small pages, then collapsed */
#define KH_FILE		(12 * MiB)	/* K's clean page cache: what khugepaged reclaims */
#define KH_WAIT_S	60		/* for khugepaged to steal in K */
static int kh_sock = -1;		/* K's worker's: "ready" */

/* in K: KH_FILE of clean page cache in @arg (a file), KH_ANON of anon memory in small
 * pages (THP "madvise", no advice yet); "ready", then at the go (K's memory.max set)
 * MADV_HUGEPAGE for khugepaged; sleep */
static int kh_worker(void *arg)
{
	const char *path = arg;
	char *p = map_huge_aligned(KH_ANON);
	static char buf[65536];
	long long off;
	char go;
	int fd;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
	if (p == MAP_FAILED || fd < 0)
		return 1;
	memset(buf, 'k', sizeof(buf));
	for (off = 0; off < KH_FILE; off += sizeof(buf))
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			return 2;
	if (fsync(fd))	/* clean: reclaim takes it without writeback */
		return 3;
	close(fd);
	for (off = 0; off < KH_ANON; off += page_size)
		p[off] = 1;
	if (write(kh_sock, "k", 1) != 1 || read(kh_sock, &go, 1) != 1)
		return 5;
	if (madvise(p, KH_ANON, MADV_HUGEPAGE))
		return 4;
	for (;;)
		pause();
}

/* the sum of @cg's memory.stat keys "@what_*" (pgsteal_, pgscan_: every reclaimer's),
 * and its "@what" line, from one read; -1 when unreadable */
static long long reclaim_parts(const char *cg, const char *what, long long *total)
{
	static char text[16384];
	char key[64], *line, *save = NULL;
	size_t n = strlen(what);
	long long v, sum = 0;

	*total = -1;
	if (cg_read(cg, "memory.stat", text, sizeof(text)) <= 0)
		return -1;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "%63s %lld", key, &v) != 2)
			continue;
		if (!strcmp(key, what))
			*total = v;
		else if (!strncmp(key, what, n) && key[n] == '_')
			sum += v;
	}
	return sum;
}

/* @val written to the file at @path; 0 or -1 */
static int put_string(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : write(fd, val, strlen(val));

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)strlen(val) ? 0 : -1;
}

/* one THP sysfs file: its value (the bracketed word of a choice) into @was, then @val */
static int thp_set(const char *file, const char *val, char *was, size_t len)
{
	char path[128], text[128], *open_, *close_;
	ssize_t n;

	snprintf(path, sizeof(path), THP_DIR "/%s", file);
	n = read_close(open(path, O_RDONLY | O_CLOEXEC), text, sizeof(text) - 1);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	open_ = strchr(text, '[');
	close_ = open_ ? strchr(open_, ']') : NULL;
	if (open_ && close_) {
		*close_ = '\0';
		snprintf(was, len, "%.*s", (int)len - 1, open_ + 1);
	} else {
		text[strcspn(text, "\n")] = '\0';
		snprintf(was, len, "%.*s", (int)len - 1, text);
	}
	return put_string(path, val);
}

/*
 * Reclaim by khugepaged, counted where memory.stat shows it: K (under P, memory.max
 * just above what it holds) has clean page cache and anon memory in small pages that
 * it advised for huge pages; khugepaged's collapse charges a new huge page to K,
 * which must reclaim K's page cache to make room, and that reclaim is khugepaged's
 * (pgsteal_khugepaged).  The oracle is memory.stat's own lines in one read: each
 * cgroup's pgsteal is the sum of its pgsteal_* (every reclaimer), in K and in P, and
 * P's pgsteal_khugepaged holds K's (hierarchical); the kfunc's read of P agrees.
 * Skipped on a kernel without THP (matrix cell 6.12-thp has it).
 */
static int check_khugepaged_steals_counted(void)
{
	const char *dir = scratch_dir();
	static const char *const files[] = { "enabled", "khugepaged/scan_sleep_millisecs",
		"khugepaged/alloc_sleep_millisecs", "khugepaged/pages_to_scan" };
	static const char *const vals[] = { "madvise", "10", "10", "4096" };
	char was[4][32] = {}, path[PATH_MAX], max[32], c, tpath[128];
	struct cg_node k = { .rel = "khugepaged", .parent = -1 };
	long long kh = 0, k_total, k_sum, p_total, p_sum, p_kh, cur;
	struct mk_rec pr;
	bool ok = true;
	int fds[2], i, set = 0, ret = KSFT_PASS, err;
	pid_t pid = -1;

	if (access(THP_DIR "/khugepaged", F_OK))
		return check_skip("no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE: matrix cell 6.12-thp)");
	if (!dir)
		return check_skip("no disk file system for scratch: no clean page cache to reclaim");
	if (cg_read_key(cgs[CG_P].path, "memory.stat", "pgsteal_khugepaged") < 0)
		return check_skip("memory.stat has no pgsteal_khugepaged (6.3+)");
	for (; set < (int)ARRAY_SIZE(files); set++)
		if (thp_set(files[set], vals[set], was[set], sizeof(was[set])))
			break;
	if (set < (int)ARRAY_SIZE(files)) {
		ret = check_fail("setting %s/%s to %s: %s", THP_DIR, files[set], vals[set],
				 strerror(errno));
		goto out;
	}
	snprintf(path, sizeof(path), "%s/memcg_kfuncs.kh.%d", dir, (int)getpid());
	if (cg_tree_create(cgs[CG_P].path, "k", &k, 1) != KSFT_PASS ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds)) {
		ret = check_fail("K: %s", strerror(errno));
		goto out;
	}
	kh_sock = fds[1];
	pid = cg_spawn(k.path, kh_worker, path);
	close(fds[1]);
	if (pid < 0 || read(fds[0], &c, 1) != 1) {
		close(fds[0]);
		ret = check_fail("the worker in K: %d", pid < 0 ? pid : cg_wait(pid));
		pid = -1;
		goto out;
	}
	/* room for nothing more, before khugepaged may look: a huge page's charge reclaims */
	cur = cg_read_long(k.path, "memory.current");
	snprintf(max, sizeof(max), "%lld", cur + MiB);
	err = cur <= 0 || cg_write(k.path, "memory.max", max) ? -1 : 0;
	if (err || write(fds[0], "g", 1) != 1) {
		close(fds[0]);
		ret = check_fail("K's memory.max %s, then the worker's go: %s", max, strerror(errno));
		goto out;
	}
	close(fds[0]);
	for (i = 0; i < KH_WAIT_S * 10 && kh <= 0; i++) {
		usleep(100000);
		kh = cg_read_key(k.path, "memory.stat", "pgsteal_khugepaged");
	}
	ksft_print_msg("K (memory.max %s): pgsteal_khugepaged %lld after %d ms, thp_collapse_alloc %lld\n",
		       max, kh, i * 100, cg_read_key(k.path, "memory.stat", "thp_collapse_alloc"));
	if (kh <= 0) {
		ret = check_fail("khugepaged reclaimed nothing in K in %d s (pgsteal_khugepaged %lld): its collapse never needed room",
				 KH_WAIT_S, kh);
		goto out;
	}
	k_sum = reclaim_parts(k.path, "pgsteal", &k_total);
	p_sum = reclaim_parts(cgs[CG_P].path, "pgsteal", &p_total);
	p_kh = cg_read_key(cgs[CG_P].path, "memory.stat", "pgsteal_khugepaged");
	ksft_print_msg("K: pgsteal %lld, its parts %lld; P: pgsteal %lld, its parts %lld, pgsteal_khugepaged %lld\n",
		       k_total, k_sum, p_total, p_sum, p_kh);
	expect(&ok, k_total == k_sum, "K's memory.stat: pgsteal %lld, the sum of its pgsteal_* %lld",
	       k_total, k_sum);
	expect(&ok, p_total == p_sum, "P's memory.stat: pgsteal %lld, the sum of its pgsteal_* %lld",
	       p_total, p_sum);
	expect(&ok, p_kh >= kh, "P's pgsteal_khugepaged %lld < K's %lld: a child's steals are P's",
	       p_kh, kh);
	/* the scans of the same reclaim, summed the same way (khugepaged's among them) */
	k_sum = reclaim_parts(k.path, "pgscan", &k_total);
	p_sum = reclaim_parts(cgs[CG_P].path, "pgscan", &p_total);
	ksft_print_msg("K: pgscan %lld, its parts %lld; P: pgscan %lld, its parts %lld\n",
		       k_total, k_sum, p_total, p_sum);
	expect(&ok, k_total == k_sum && p_total == p_sum && p_total >= k_total && k_total >= kh,
	       "pgscan: K %lld (its parts %lld), P %lld (its parts %lld); K stole %lld",
	       k_total, k_sum, p_total, p_sum, kh);
	if (read_rec(CG_P, &pr))
		ok = false;
	else
		expect(&ok, (long long)pr.val[F_pgsteal_khugepaged] >= p_kh,
		       "P's PGSTEAL_KHUGEPAGED by the kfunc %lld < memory.stat's %lld (read before it)",
		       (long long)pr.val[F_pgsteal_khugepaged], p_kh);
	ret = ok ? KSFT_PASS : KSFT_FAIL;
out:
	if (pid > 0) {
		kill(pid, SIGKILL);
		cg_wait(pid);
	}
	unlink(path);
	/* gone before the next check: P's children are what the others expect */
	if (k.id && (err = cg_destroy(k.path)))
		ret = check_fail("removing K %s: %s", k.path, strerror(-err));
	while (set-- > 0) {
		snprintf(tpath, sizeof(tpath), THP_DIR "/%s", files[set]);
		put_string(tpath, was[set]);
	}
	return ret;
}

#define OOM_MAX		"16M"	/* O's memory.max */
#define OOM_SWAP_MAX	"2M"	/* O's memory.swap.max: some swap, then none */
#define OOM_BYTES	(64 * MiB)	/* what a worker in O tries to touch */

/* in O: touch OOM_BYTES of anonymous memory, more than O may hold: the OOM killer's */
static int oom_alloc(void *arg)
{
	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return cg_alloc_anon(OOM_BYTES) ? 0 : 3;
}

/* "killed" when @st is a SIGKILL's, else what it is */
static const char *death(int st)
{
	static char buf[32];

	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		return "killed";
	snprintf(buf, sizeof(buf), WIFEXITED(st) ? "exit %d" : "signal %d",
		 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return buf;
}


/* the status of @sleeper, a task of a group the OOM killer should kill whole: within
 * 5 s, or 0 ("exit 0": not killed with its group) when it was still alive and is
 * killed here */
static int group_member_end(pid_t sleeper)
{
	int st = 0, k;

	for (k = 0; k < 50 && waitpid(sleeper, &st, WNOHANG) == 0; k++)
		usleep(100000);
	if (k < 50)
		return st;
	kill(sleeper, SIGKILL);
	waitpid(sleeper, NULL, 0);
	return 0;
}

/* inotify watches (IN_MODIFY) on @cg's memory.events and memory.events.local: the
 * inotify fd, or -1; the two watch descriptors in @wd */
static int watch_events(const char *cg, int wd[2])
{
	static const char *const files[] = { "memory.events", "memory.events.local" };
	char path[CG_PATH_MAX + 64];
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC), i;

	for (i = 0; in >= 0 && i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", cg, files[i]);
		wd[i] = inotify_add_watch(in, path, IN_MODIFY);
		if (wd[i] < 0) {
			close(in);
			in = -1;
		}
	}
	return in;
}

/* which of the two watches of watch_events() saw a modification within 2 s (a
 * cgroup file's notification is rate-limited and sent from a timer): bit 0, bit 1 */
static int notified(int in, const int wd[2])
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd pfd = { .fd = in, .events = POLLIN };
	int seen = 0, tries;
	ssize_t n, off;

	for (tries = 0; tries < 20 && seen != 3; tries++) {
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		n = read(in, buf, sizeof(buf));
		for (off = 0; n > 0 && off < n; ) {
			const struct inotify_event *e = (const void *)(buf + off);

			seen |= (e->wd == wd[0]) | (e->wd == wd[1]) << 1;
			off += sizeof(*e) + e->len;
		}
	}
	return seen;
}

/*
 * Memory events the test causes itself, counted as it saw them happen: in O
 * (memory.max 16M, memory.swap.max 2M) one process touching 64 MiB must swap
 * until swap.max refuses (swap_max, swap_fail), hit memory.max (max) and be
 * OOM-killed: waitpid() sees one SIGKILL, so oom_kill grows by exactly 1
 * (oom >= 1, oom_group_kill 0); with memory.oom.group set, a sleeper and a
 * toucher are killed together: oom_group_kill exactly +1, oom_kill +2 or more
 * (the victim may be counted again in the group's kill).  P's events are
 * hierarchical: they grow exactly as O's.  memory.events agrees.
 */
static int check_oom_events_counted(void)
{
	static const char *const local_keys[] = { "oom_kill", "max" };
	long long local0[2][2];
	struct mk_rec o0, o1, o2, p0, p1;
	pid_t pid, sleeper;
	int st = 0, st2 = 0, err, k;
	bool ok = true;

	err = cg_write(cgs[CG_O].path, "memory.max", OOM_MAX) ?:
	      cg_write(cgs[CG_O].path, "memory.swap.max", OOM_SWAP_MAX);
	if (err)
		return check_fail("O: memory.max %s, memory.swap.max %s: %s", OOM_MAX, OOM_SWAP_MAX,
				  strerror(-err));
	if (read_rec(CG_O, &o0) || read_rec(CG_P, &p0))
		return KSFT_FAIL;
	for (k = 0; k < 2; k++) {
		local0[k][0] = cg_read_key(cgs[CG_O].path, "memory.events.local", local_keys[k]);
		local0[k][1] = cg_read_key(cgs[CG_P].path, "memory.events.local", local_keys[k]);
	}
	pid = cg_spawn(cgs[CG_O].path, oom_alloc, NULL);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return check_fail("the worker in O: %s", strerror(pid < 0 ? -pid : errno));
	if (read_rec(CG_O, &o1) || read_rec(CG_P, &p1))
		return KSFT_FAIL;
	/* memory.events.local: the events of the cgroup itself: O's are its memory.events'
	 * (a leaf), P's do not grow (its own limit was not hit, nothing of its own killed) */
	for (k = 0; k < 2; k++) {
		long long o = cg_read_key(cgs[CG_O].path, "memory.events.local", local_keys[k]);
		long long p = cg_read_key(cgs[CG_P].path, "memory.events.local", local_keys[k]);
		long long hier = k ? GREW(o1, o0, max) : GREW(o1, o0, oom_kill);

		expect(&ok, local0[k][0] >= 0 && local0[k][1] >= 0 && o - local0[k][0] == hier &&
		       p == local0[k][1],
		       "memory.events.local %s: O +%lld (its memory.events +%lld), P +%lld (expected +0: the events were O's)",
		       local_keys[k], o - local0[k][0], hier, p - local0[k][1]);
	}
	ksft_print_msg("O: the worker %s; max +%lld, oom +%lld, oom_kill +%lld, oom_group_kill +%lld, swap_max +%lld, swap_fail +%lld\n",
		       death(st), GREW(o1, o0, max), GREW(o1, o0, oom), GREW(o1, o0, oom_kill),
		       GREW(o1, o0, oom_group_kill), GREW(o1, o0, swap_max), GREW(o1, o0, swap_fail));
	expect(&ok, !strcmp(death(st), "killed"), "O's worker: %s, expected killed (SIGKILL) by the OOM killer",
	       death(st));
	expect(&ok, GREW(o1, o0, oom_kill) == 1 && GREW(o1, o0, oom) >= 1 && GREW(o1, o0, max) >= 1 &&
	       GREW(o1, o0, oom_group_kill) == 0,
	       "O: expected oom_kill +1 (one process killed), oom and max >= +1, oom_group_kill +0");
	/*
	 * Not "swap_max >= +1": reclaim scans anon only while the memcg has swap room
	 * under swap.max, so a 4 KiB page's swap charge fails only in a race with another
	 * reclaimer (+0 seen on 6.1 and 7.2, +1 and +16 elsewhere).  Every failed charge
	 * is a failed swap-out.
	 */
	expect(&ok, GREW(o1, o0, swap_fail) >= GREW(o1, o0, swap_max),
	       "O: expected swap_fail >= swap_max (swap.max %s: each refused charge fails a swap-out)",
	       OOM_SWAP_MAX);
	expect(&ok, GREW(p1, p0, oom_kill) == GREW(o1, o0, oom_kill) &&
	       GREW(p1, p0, oom) == GREW(o1, o0, oom) && GREW(p1, p0, max) == GREW(o1, o0, max) &&
	       GREW(p1, p0, swap_max) == GREW(o1, o0, swap_max),
	       "P (hierarchical): oom_kill +%lld, oom +%lld, max +%lld, swap_max +%lld: expected O's growth",
	       GREW(p1, p0, oom_kill), GREW(p1, p0, oom), GREW(p1, p0, max), GREW(p1, p0, swap_max));
	ok &= agree(CG_O, "memory.events", NULL) && agree(CG_O, "memory.swap.events", NULL);
	err = cg_write(cgs[CG_O].path, "memory.oom.group", "1");
	sleeper = err ? -1 : cg_spawn(cgs[CG_O].path, NULL, NULL);
	pid = sleeper < 0 ? -1 : cg_spawn(cgs[CG_O].path, oom_alloc, NULL);
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		if (sleeper > 0)
			cg_reap(&sleeper);
		return check_fail("memory.oom.group of O, its two workers: %s", strerror(errno));
	}
	/* the sleeper dies with the group, or is killed here after 5 s (and reported) */
	st2 = group_member_end(sleeper);
	if (read_rec(CG_O, &o2))
		return KSFT_FAIL;
	ksft_print_msg("O with memory.oom.group: the toucher %s, the sleeper %s; oom_kill +%lld, oom_group_kill +%lld\n",
		       death(st), death(st2), GREW(o2, o1, oom_kill), GREW(o2, o1, oom_group_kill));
	expect(&ok, !strcmp(death(st), "killed") && !strcmp(death(st2), "killed") &&
	       GREW(o2, o1, oom_group_kill) == 1 && GREW(o2, o1, oom_kill) >= 2,
	       "O's group: expected both killed, oom_group_kill +1, oom_kill >= +2");
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* the cgroup2 mount at @mnt (/proc/self/mountinfo): its super options, "rw" and "ro"
 * left out, and its per-mount flags (nosuid, nodev, ...), which a remount replaces
 * with what it is given: what a remount must give back; 0 or -errno */
static int cgroup2_mount(const char *mnt, char *opts, size_t len, unsigned long *flags)
{
	static const struct { const char *name; unsigned long flag; } names[] = {
		{ "ro", MS_RDONLY }, { "nosuid", MS_NOSUID }, { "nodev", MS_NODEV },
		{ "noexec", MS_NOEXEC }, { "noatime", MS_NOATIME }, { "nodiratime", MS_NODIRATIME },
		{ "relatime", MS_RELATIME }, { "strictatime", MS_STRICTATIME },
	};
	char line[4096], point[PATH_MAX], per[512], *sep, *sup, *tok, *save;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int err = -ENOENT;
	size_t i;

	if (!f)
		return -errno;
	while (err && fgets(line, sizeof(line), f)) {
		sep = strstr(line, " - cgroup2 ");
		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s %511s", point, per) != 2 ||
		    strcmp(point, mnt))
			continue;
		sup = strchr(sep + strlen(" - cgroup2 "), ' ');
		if (!sup)
			continue;
		sup[strcspn(sup, "\n")] = '\0';
		sup++;
		if (!strncmp(sup, "rw", 2) || !strncmp(sup, "ro", 2))
			sup += sup[2] == ',' ? 3 : 2;
		snprintf(opts, len, "%s", sup);
		*flags = 0;
		for (tok = strtok_r(per, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			for (i = 0; i < ARRAY_SIZE(names); i++)
				if (!strcmp(tok, names[i].name))
					*flags |= names[i].flag;
		err = 0;
	}
	fclose(f);
	return err;
}

/*
 * cgroup2's memory_localevents mount option: memory.events counts a cgroup's own
 * events only, its parent's do not grow with them (and no more does the kfunc, which
 * reads the same counters: the option is the kernel's, memcg_memory_event()'s).  O
 * hits memory.max and is OOM-killed once with the option on: O's max and oom_kill
 * grow, P's stay; then the mount's options are given back as they were.
 */
static int check_localevents_option_keeps_events_local(void)
{
	char on[600], now[512];
	struct mk_rec o0, o1, p0, p1;
	const char *mnt = cgs[CG_R].path;
	unsigned long now_flags;
	bool ok = true;
	pid_t pid;
	int st = 0, err;

	err = cgroup2_mount(mnt, cg2_opts, sizeof(cg2_opts), &cg2_flags);
	if (err)
		return check_fail("the cgroup2 mount at %s in /proc/self/mountinfo: %s", mnt,
				  strerror(-err));
	if (strstr(cg2_opts, "memory_localevents"))
		return check_skip("%s is mounted with memory_localevents already (%s)", mnt, cg2_opts);
	snprintf(on, sizeof(on), "%s%smemory_localevents", cg2_opts, cg2_opts[0] ? "," : "");
	err = cg_write(cgs[CG_O].path, "memory.max", OOM_MAX) ?:
	      cg_write(cgs[CG_O].path, "memory.swap.max", OOM_SWAP_MAX) ?:
	      cg_write(cgs[CG_O].path, "memory.oom.group", "0");
	if (err)
		return check_fail("O's limits: %s", strerror(-err));
	if (read_rec(CG_O, &o0) || read_rec(CG_P, &p0))
		return KSFT_FAIL;
	cg2_remounted = 1;
	if (mount(NULL, mnt, NULL, MS_REMOUNT | cg2_flags, on)) {
		cg2_remounted = 0;
		return check_fail("remounting %s with '%s': %s", mnt, on, strerror(errno));
	}
	pid = cg_spawn(cgs[CG_O].path, oom_alloc, NULL);
	if (pid > 0 && waitpid(pid, &st, 0) != pid)
		pid = -errno;
	err = read_rec(CG_O, &o1) || read_rec(CG_P, &p1);
	if (cgroup2_restore() || cgroup2_mount(mnt, now, sizeof(now), &now_flags) ||
	    strcmp(now, cg2_opts) || now_flags != cg2_flags)
		return check_fail("giving %s its options back ('%s', flags %#lx): %s", mnt, cg2_opts,
				  cg2_flags, strerror(errno));
	if (pid < 0 || err)
		return check_fail("the worker in O: %s", pid < 0 ? strerror(-pid) : "reading the events");
	ksft_print_msg("memory_localevents on: O's worker %s; O max +%lld, oom_kill +%lld; P max +%lld, oom_kill +%lld (memory.events by the kfunc)\n",
		       death(st), GREW(o1, o0, max), GREW(o1, o0, oom_kill), GREW(p1, p0, max),
		       GREW(p1, p0, oom_kill));
	expect(&ok, GREW(o1, o0, max) >= 1 && GREW(o1, o0, oom_kill) == 1,
	       "O: expected max >= +1 and oom_kill +1 (its worker OOM-killed)");
	expect(&ok, GREW(p1, p0, max) == 0 && GREW(p1, p0, oom_kill) == 0 && GREW(p1, p0, oom) == 0,
	       "P: expected its events +0 with memory_localevents (O's are O's own)");
	ok &= agree(CG_P, "memory.events", NULL);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * memory.oom.group below the OOM's domain: X (memory.max OOM_MAX, no swap) holds G,
 * whose memory.oom.group is set, with a sleeper and a toucher of OOM_BYTES.  The OOM
 * is X's, its victim G's toucher, and G (the highest cgroup with the flag between the
 * victim and the domain) goes whole: the sleeper is killed too, G's oom_group_kill
 * grows by 1 (and X's, up the tree).  A kernel that honours the flag only where the
 * OOM is the group's own kills the toucher alone.  A reader watching G's memory.events
 * and memory.events.local is woken by the kills (inotify IN_MODIFY).
 */
static int check_oom_group_below_domain(void)
{
	static char x[CG_PATH_MAX + 8], g[CG_PATH_MAX + 16];
	int st = 0, st2, err, in, wd[2], seen;
	long long g0, g1, x0, x1;
	pid_t sleeper, pid;
	bool ok = true;

	snprintf(x, sizeof(x), "%s/oomdom", cgs[CG_P].path);
	snprintf(g, sizeof(g), "%s/group", x);
	err = cg_create(x) ?: cg_write(x, "cgroup.subtree_control", "+memory") ?: cg_create(g) ?:
	      cg_write(x, "memory.max", OOM_MAX) ?: cg_write(x, "memory.swap.max", "0") ?:
	      cg_write(g, "memory.oom.group", "1");
	if (err)
		return check_fail("making X (the OOM's domain) and G (memory.oom.group) below P: %s",
				  strerror(-err));
	g0 = cg_read_key(g, "memory.events", "oom_group_kill");
	x0 = cg_read_key(x, "memory.events", "oom_group_kill");
	in = watch_events(g, wd);
	sleeper = cg_spawn(g, NULL, NULL);
	pid = sleeper < 0 ? -1 : cg_spawn(g, oom_alloc, NULL);
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		cg_reap(&sleeper);
		if (in >= 0)
			close(in);
		return check_fail("G's two workers: %s", strerror(errno));
	}
	/* a reader polling either file is woken by the events it shows: G's oom_kill and
	 * oom_group_kill (no swap event here: X has no swap to fail) */
	seen = in >= 0 ? notified(in, wd) : -1;
	if (in >= 0)
		close(in);
	expect(&ok, seen == 3, "G's memory.events %s, memory.events.local %s by its kills (inotify IN_MODIFY)",
	       seen < 0 ? "not watched" : seen & 1 ? "notified" : "not notified",
	       seen < 0 ? "not watched" : seen & 2 ? "notified" : "not notified");
	st2 = group_member_end(sleeper);
	g1 = cg_read_key(g, "memory.events", "oom_group_kill");
	x1 = cg_read_key(x, "memory.events", "oom_group_kill");
	ksft_print_msg("OOM at X's memory.max: G's toucher %s, its sleeper %s; oom_group_kill G +%lld, X +%lld\n",
		       death(st), death(st2), g1 - g0, x1 - x0);
	expect(&ok, !strcmp(death(st), "killed") && !strcmp(death(st2), "killed"),
	       "expected both of G's tasks killed (G's memory.oom.group, the OOM X's)");
	expect(&ok, g0 >= 0 && g1 - g0 == 1 && x1 - x0 == 1,
	       "expected oom_group_kill +1 in G and in X");
	err = cg_destroy(g) ?: cg_destroy(x);
	expect(&ok, !err, "removing X and G: %s", strerror(-err));
	return ok ? KSFT_PASS : KSFT_FAIL;
}

#define HUGE_BYTES	(8 * MiB)	/* faulted in as huge pages: 4 of 2 MiB */
static int huge_pipe[2] = { -1, -1 };

/* in T: HUGE_BYTES of anon memory at a 2 MiB boundary, MADV_HUGEPAGE, touched; its
 * AnonHugePages (kB, smaps_rollup: the VMAs' own count) to the pipe; sleep */
static int huge_worker(void *arg)
{
	char *p = map_huge_aligned(HUGE_BYTES);
	char text[4096];
	long long kb = -1, off;
	ssize_t n;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (p == MAP_FAILED || madvise(p, HUGE_BYTES, MADV_HUGEPAGE))
		return 1;
	for (off = 0; off < HUGE_BYTES; off += page_size)
		p[off] = 1;
	n = read_close(open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC), text,
		       sizeof(text) - 1);
	if (n > 0) {
		text[n] = '\0';
		if (strstr(text, "AnonHugePages:"))
			sscanf(strstr(text, "AnonHugePages:"), "AnonHugePages: %lld", &kb);
	}
	if (write(huge_pipe[1], &kb, sizeof(kb)) != sizeof(kb))
		return 2;
	for (;;)
		pause();
}

/*
 * Huge pages counted (THP kernels: matrix cell 6.12-thp): in T, a cgroup of its own
 * below P, one process faults HUGE_BYTES of MADV_HUGEPAGE memory ("enabled" set to
 * madvise for it).  Oracles: the process's AnonHugePages (smaps_rollup: the page
 * tables' own count) and the machine's thp_fault_alloc (/proc/vmstat, the node
 * counter).  memory.stat's anon_thp is AnonHugePages in bytes, its thp_fault_alloc
 * the huge pages faulted, as /proc/vmstat's grew.
 */
static int check_huge_pages_counted(void)
{
	static char t[CG_PATH_MAX + 8];
	long long kb = -1, v0, v1, anon_thp, faults;
	char was[32] = "";
	bool ok = true;
	pid_t pid;
	int err;

	if (access(THP_DIR "/enabled", F_OK))
		return check_skip("no transparent huge pages (CONFIG_TRANSPARENT_HUGEPAGE: matrix cell 6.12-thp)");
	snprintf(t, sizeof(t), "%s/thp", cgs[CG_P].path);
	if (pipe2(huge_pipe, O_CLOEXEC))
		return check_fail("a pipe: %s", strerror(errno));
	if (thp_set("enabled", "madvise", was, sizeof(was))) {
		close(huge_pipe[0]);
		close(huge_pipe[1]);
		return check_fail("THP enabled = madvise: %s", strerror(errno));
	}
	err = cg_create(t);
	v0 = cg_read_key("/proc", "vmstat", "thp_fault_alloc");
	pid = err ? -1 : cg_spawn(t, huge_worker, NULL);
	if (pid < 0 || read(huge_pipe[0], &kb, sizeof(kb)) != sizeof(kb))
		kb = -2;
	v1 = cg_read_key("/proc", "vmstat", "thp_fault_alloc");
	anon_thp = cg_read_key(t, "memory.stat", "anon_thp");
	faults = cg_read_key(t, "memory.stat", "thp_fault_alloc");
	cg_reap(&pid);
	close(huge_pipe[0]);
	close(huge_pipe[1]);
	thp_set("enabled", was, was, sizeof(was));
	ksft_print_msg("T: AnonHugePages %lld kB; memory.stat anon_thp %lld B, thp_fault_alloc %lld; /proc/vmstat thp_fault_alloc +%lld\n",
		       kb, anon_thp, faults, v1 - v0);
	expect(&ok, kb >= 2048, "T's worker: AnonHugePages %lld kB, expected huge pages (>= 2048 kB)", kb);
	expect(&ok, anon_thp == kb * 1024, "T: memory.stat anon_thp %lld, expected AnonHugePages in bytes, %lld",
	       anon_thp, kb * 1024);
	expect(&ok, faults == kb / 2048 && v1 - v0 == kb / 2048,
	       "T: thp_fault_alloc %lld, /proc/vmstat +%lld; expected the %lld huge pages faulted",
	       faults, v1 - v0, kb / 2048);
	err = err ?: cg_destroy(t);
	expect(&ok, !err, "making and removing T: %s", strerror(-err));
	return ok ? KSFT_PASS : KSFT_FAIL;
}

#define DIRTY_BYTES	(8 * MiB)	/* written into D's page cache, not synced */
#define DIRTY_SLACK	(256 * 1024)	/* the file system's own metadata blocks */

/* in D: DIRTY_BYTES to the file @arg, left dirty (no sync) */
static int write_dirty(void *arg)
{
	return write_file(arg, DIRTY_BYTES, 0x44, false);
}

/*
 * Dirty and writeback pages against the writes that made them: a process in D
 * writes 8 MiB to a disk file and exits without syncing: D's file_dirty +
 * file_writeback is those 8 MiB (nothing reaches the background threshold or the
 * 30 s expiry meanwhile), at most the file system's metadata blocks more; after
 * the test's fsync() of the file both are back to at most those blocks.
 */
static int check_dirty_pages_follow_writes(void)
{
	const char *dir = scratch_dir();
	char path[PATH_MAX];
	struct mk_rec d0, d1;
	long long pend;
	bool ok = true;
	int st, fd;

	if (!dir)
		return check_skip("no disk file system for scratch: no page cache to write back");
	snprintf(path, sizeof(path), "%s/memcg_kfuncs.%d.dirty", dir, (int)getpid());
	st = cg_run(cgs[CG_D].path, write_dirty, path);
	if (st || read_rec(CG_D, &d0)) {
		unlink(path);
		return check_fail("the writer in D: %d", st);
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	st = fd < 0 || fsync(fd) ? errno : 0;
	if (fd >= 0)
		close(fd);
	if (st || read_rec(CG_D, &d1)) {
		unlink(path);
		return check_fail("fsync of %s: %s", path, strerror(st));
	}
	unlink(path);
	pend = d0.val[F_file_dirty] + d0.val[F_file_writeback];
	ksft_print_msg("D after %lld MiB written: file_dirty %lld, file_writeback %lld, file %lld B; after fsync: file_dirty %lld, file_writeback %lld B\n",
		       DIRTY_BYTES / MiB, (long long)d0.val[F_file_dirty],
		       (long long)d0.val[F_file_writeback], (long long)d0.val[F_file],
		       (long long)d1.val[F_file_dirty], (long long)d1.val[F_file_writeback]);
	in_range(&ok, 1, "D file_dirty + file_writeback after the writes", pend, DIRTY_BYTES,
		 DIRTY_BYTES + DIRTY_SLACK);
	in_range(&ok, 1, "D file_dirty after fsync", d1.val[F_file_dirty], 0, DIRTY_SLACK);
	in_range(&ok, 1, "D file_writeback after fsync", d1.val[F_file_writeback], 0, DIRTY_SLACK);
	in_range(&ok, 1, "D file after the writes", d0.val[F_file], DIRTY_BYTES, LLONG_MAX);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

#define MLOCK_BYTES	(4 * MiB)	/* mlock()ed by a worker in D */
#define MLOCK_BATCH	(64 * 4096LL)	/* per-CPU mlock batches not yet on the LRU */

/* in D: MLOCK_BYTES of anonymous memory mlock()ed, "k" to the pipe @arg, then sleep */
static int mlock_worker(void *arg)
{
	int fd = *(int *)arg;
	char *p = mmap(NULL, MLOCK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (p == MAP_FAILED || mlock(p, MLOCK_BYTES))
		return 1;
	memset(p, 1, MLOCK_BYTES);
	if (write(fd, "k", 1) != 1)
		return 2;
	for (;;)
		pause();
}

/*
 * Unevictable pages against the pages the test locked: a process in D mlock()s 4 MiB
 * (its /proc/PID/status VmLck says so): D's unevictable grows by them (less what the
 * per-CPU mlock batches still hold: 64 pages), and falls back once it is killed.
 */
static int check_mlocked_pages_unevictable(void)
{
	struct mk_rec d0, d1, d2;
	int fds[2], st = 0;
	long long vmlck, grew, fell;
	char c, status[32], text[4096], *at;
	pid_t pid;
	bool ok = true;

	if (read_rec(CG_D, &d0) || pipe2(fds, O_CLOEXEC))
		return KSFT_FAIL;
	pid = cg_spawn(cgs[CG_D].path, mlock_worker, &fds[1]);
	close(fds[1]);
	if (pid < 0 || read(fds[0], &c, 1) != 1) {
		close(fds[0]);
		st = pid < 0 ? pid : cg_wait(pid);
		return check_fail("the mlock worker in D: %d", st);
	}
	close(fds[0]);
	snprintf(status, sizeof(status), "/proc/%d", (int)pid);
	vmlck = cg_read(status, "status", text, sizeof(text)) > 0 && (at = strstr(text, "VmLck:")) ?
		strtoll(at + 6, NULL, 10) : -1;
	if (read_rec(CG_D, &d1)) {
		cg_reap(&pid);
		return KSFT_FAIL;
	}
	cg_reap(&pid);
	if (read_rec(CG_D, &d2))
		return KSFT_FAIL;
	grew = d1.val[F_unevictable] - d0.val[F_unevictable];
	fell = d1.val[F_unevictable] - d2.val[F_unevictable];
	ksft_print_msg("D: unevictable %lld -> %lld with %lld MiB mlock()ed (VmLck %lld kB) -> %lld B after the worker's end\n",
		       (long long)d0.val[F_unevictable], (long long)d1.val[F_unevictable],
		       MLOCK_BYTES / MiB, vmlck, (long long)d2.val[F_unevictable]);
	expect(&ok, vmlck * 1024 == MLOCK_BYTES, "VmLck %lld kB, expected %lld kB", vmlck,
	       MLOCK_BYTES / 1024);
	in_range(&ok, 1, "D unevictable growth", grew, MLOCK_BYTES - MLOCK_BATCH,
		 MLOCK_BYTES + SLACK_BYTES);
	in_range(&ok, 1, "D unevictable fall after the end", fell, MLOCK_BYTES - MLOCK_BATCH,
		 MLOCK_BYTES + SLACK_BYTES);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/*
 * The css walk (6.7+: bpf_iter_css_new/next/destroy) from P's memcg in each order
 * against the tree the test made: pre-order P, then its children in the order they were
 * made (C, N, E, H, S, Z, O, D: each has a memcg; N's child L has none); post-order the
 * same children,
 * then P; ancestors up P, then the cgroup2 root; an order 0 or 99, SELF_ONLY (the cgroup
 * iterator's alone), and 99 again on an iterator that walked before, each refused
 * (-EINVAL) and walking nothing.
 */
static int check_css_walk_orders(void)
{
	/* P's children in the order they were made: all have a memcg (P enables +memory) */
	static const int kids[] = { CG_C, CG_N, CG_E, CG_H, CG_S, CG_Z, CG_O, CG_D };
	static char out[8192], copy[8192];
	static const char *const walks[] = { "pre", "post", "ancestors up", "order 0",
		"order 99", "order SELF_ONLY", "order 99 on an iterator that walked",
		"pre on an iterator that stopped after two" };
	enum { NW = ARRAY_SIZE(walks) };
	unsigned long long want[NW][16], got[NW][16];
	int nwant[NW] = {}, ngot[NW] = {}, ret[NW], cur = -1, o, i, err;
	char *line, *save;
	bool ok = true;

	if (!bu_has_func("bpf_iter_css_new"))
		return check_skip("no css iterator in this kernel (6.7+)");
	for (o = 0; o < NW; o++)
		ret[o] = 1;
	want[0][nwant[0]++] = cgs[CG_P].id;
	for (i = 0; i < (int)ARRAY_SIZE(kids); i++) {
		want[0][nwant[0]++] = cgs[kids[i]].id;
		want[1][nwant[1]++] = cgs[kids[i]].id;
	}
	want[1][nwant[1]++] = cgs[CG_P].id;
	want[2][nwant[2]++] = cgs[CG_P].id;
	want[2][nwant[2]++] = cgs[CG_R].id;
	memcpy(want[NW - 1], want[0], sizeof(want[0]));
	nwant[NW - 1] = nwant[0];
	err = run_extra("css_walks", CG_P, out, sizeof(out));
	if (err)
		return check_fail("css_walks on P: %s", strerror(-err));
	memcpy(copy, out, sizeof(copy));
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long id;
		int order, r;

		if (sscanf(line, "order=%d ret=%d", &order, &r) == 2 && cur < NW - 1)
			ret[++cur] = r;
		else if (sscanf(line, "id=%llu", &id) == 1 && cur >= 0 && ngot[cur] < 16)
			got[cur][ngot[cur]++] = id;
	}
	for (o = 0; o < NW; o++) {
		int valid = o < 3 || o == NW - 1 ? 0 : -EINVAL;
		bool same = ngot[o] == nwant[o] && ret[o] == valid;

		for (i = 0; same && i < ngot[o]; i++)
			same = got[o][i] == want[o][i];
		expect(&ok, same, "walk %d (%s): returned %d, %d csses; expected %d, %d (the tree)", o,
		       walks[o], ret[o], ngot[o], valid, nwant[o]);
	}
	if (!ok)
		print_block("  | ", copy);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

#define MAJ_BYTES	(4 * MiB)	/* a file read back through a mapping, not cached */

/* in D: fault in every page of the file @arg (clean, dropped from the page cache) by a
 * read through a mapping; its own major faults since the fork (getrusage) to the pipe:
 * the whole life, as it may fault on its own code too once it is in D (seen: 1 more) */
struct maj_arg {
	const char *path;
	int fd;
};

static int fault_file(void *arg)
{
	struct maj_arg *a = arg;
	struct rusage r;
	volatile char sink;
	long long off, d;
	int fd = open(a->path, O_RDONLY | O_CLOEXEC);
	char *p = fd < 0 ? MAP_FAILED : mmap(NULL, MAJ_BYTES, PROT_READ, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return 1;
	for (off = 0; off < MAJ_BYTES; off += page_size)
		sink = p[off];
	(void)sink;
	getrusage(RUSAGE_SELF, &r);
	d = r.ru_majflt;
	return write(a->fd, &d, sizeof(d)) == sizeof(d) ? 0 : 2;
}

/*
 * Major faults against the faulting task's own count: a file written, synced and
 * dropped from the page cache (POSIX_FADV_DONTNEED) is read through a mapping by a
 * process in D: D's pgmajfault grows by at least one, by no more than the major faults
 * getrusage() gives that process (the task's counter: it also counts a fault retried
 * while readahead's I/O was in flight, which memcg does not) and no more than the
 * machine's (/proc/vmstat: the node counter the same events go to).
 */
static int check_major_faults_counted(void)
{
	const char *dir = scratch_dir();
	char path[PATH_MAX], chunk[65536];
	struct maj_arg a = { .path = path };
	struct mk_rec d0, d1;
	long long majflt = -1, off, grew, vm0, vm1;
	int fds[2], fd, st;
	bool ok = true;

	if (!dir)
		return check_skip("no disk file system for scratch: no page cache to drop");
	snprintf(path, sizeof(path), "%s/memcg_kfuncs.%d.maj", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	memset(chunk, 0x6d, sizeof(chunk));
	for (off = 0; fd >= 0 && off < MAJ_BYTES; off += sizeof(chunk))
		if (write(fd, chunk, sizeof(chunk)) != sizeof(chunk))
			break;
	st = fd < 0 || off < MAJ_BYTES || fsync(fd) ||
	     posix_fadvise(fd, 0, MAJ_BYTES, POSIX_FADV_DONTNEED) ? errno : 0;
	if (fd >= 0)
		close(fd);
	if (st || pipe2(fds, O_CLOEXEC)) {
		unlink(path);
		return check_fail("%s: written, synced, dropped: %s", path, strerror(st ?: errno));
	}
	a.fd = fds[1];
	vm0 = cg_read_key("/proc", "vmstat", "pgmajfault");
	if (read_rec(CG_D, &d0)) {
		unlink(path);
		return KSFT_FAIL;
	}
	st = cg_run(cgs[CG_D].path, fault_file, &a);
	vm1 = cg_read_key("/proc", "vmstat", "pgmajfault");
	close(fds[1]);
	if (st || read(fds[0], &majflt, sizeof(majflt)) != sizeof(majflt) || read_rec(CG_D, &d1)) {
		check_fail("the faulting process in D: %d", st);
		ok = false;
	}
	close(fds[0]);
	unlink(path);
	if (!ok)
		return KSFT_FAIL;
	grew = GREW(d1, d0, pgmajfault);
	ksft_print_msg("D: pgmajfault +%lld over reading %lld MiB not cached; the process's own major faults %lld, /proc/vmstat pgmajfault +%lld\n",
		       grew, MAJ_BYTES / MiB, majflt, vm1 - vm0);
	expect(&ok, grew >= 1 && grew <= majflt && grew <= vm1 - vm0,
	       "D pgmajfault +%lld: expected at least 1, at most the process's major faults (%lld) and the machine's (/proc/vmstat +%lld)",
	       grew, majflt, vm1 - vm0);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* C's files, one by one (a shell's rm -r is not async-signal-safe either) */
static void remove_slab_dir(void)
{
	char name[PATH_MAX + 16];
	int i;

	if (!slab_dir[0])
		return;
	for (i = 0; i < SLAB_FILES; i++) {
		snprintf(name, sizeof(name), "%s/%d", slab_dir, i);
		unlink(name);
	}
	rmdir(slab_dir);
}

static int check_cgroup_cleanup(void)
{
	int i;

	stop_worker();
	remove_slab_dir();
	bpf_link__destroy(walk_link);
	for (i = 0; i <= CG_R; i++)
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
		CHECK(kfunc_items_listed, cgroup_setup),
		CHECK(memory_files_keys_listed, cgroup_setup),
		CHECK(prog_types_registered, cgroup_setup),
		CHECK(root_memcg_null_when_disabled),
		CHECK(css_walk_orders, cgroup_setup),
		CHECK(css_walk_refusals),
		CHECK(nonsleepable_flush_rejected),
		CHECK(untrusted_cgroup_rejected),
		CHECK(null_css_is_null, cgroup_setup),
		CHECK(foreign_css_gets_its_memcg, cgroup_setup),
		CHECK(charge_memory_in_child, cgroup_setup),
		CHECK(child_values_match_created, charge_memory_in_child),
		CHECK(child_kernel_items_charged, charge_memory_in_child),
		CHECK_BY(child_matches_memory_stat, check_matches_memory_stat, charge_memory_in_child),
		CHECK_BY(parent_matches_memory_stat, check_matches_memory_stat, charge_memory_in_child),
		CHECK(parent_includes_child, charge_memory_in_child),
		CHECK(numa_stat_sums_to_memory_stat, charge_memory_in_child),
		CHECK(root_matches_css_read, charge_memory_in_child),
		CHECK(root_usage_is_children_sum, charge_memory_in_child),
		CHECK(root_anon_matches_vmstat, charge_memory_in_child),
		CHECK(flush_makes_new_memory_visible, charge_memory_in_child),
		CHECK(usage_matches_memory_current, charge_memory_in_child),
		CHECK(memory_events_match_memory_events, cgroup_setup),
		CHECK(swapped_out_child, cgroup_setup),
		CHECK(swap_high_counted, cgroup_setup),
		CHECK(oom_events_counted, cgroup_setup),
		CHECK(low_event_counted, cgroup_setup),
		CHECK(oom_group_below_domain, cgroup_setup),
		CHECK(localevents_option_keeps_events_local, cgroup_setup),
		CHECK(dirty_pages_follow_writes, cgroup_setup),
		CHECK(mlocked_pages_unevictable, cgroup_setup),
		CHECK(major_faults_counted, cgroup_setup),
		CHECK(offline_memcg_handed_out, cgroup_setup),
		CHECK(flush_keeps_no_reference, cgroup_setup),
		CHECK(khugepaged_steals_counted, cgroup_setup),
		CHECK(huge_pages_counted, cgroup_setup),
		CHECK(cgroup_cleanup),
	};
	neg_elf = memcg_kfuncs_neg_bpf__elf_bytes(&neg_sz);
	extra_elf = memcg_kfuncs_extra_bpf__elf_bytes(&extra_sz);
	cg_on_signal(stop_worker);
	page_size = sysconf(_SC_PAGESIZE);
	ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	tol_units = 2LL * 64 /* MEMCG_CHARGE_BATCH */ * ncpus;
	tp = tol_units * page_size;
	kver = kernel_version();
	return checks_run(checks, ARRAY_SIZE(checks), bu_missing_funcs(need) ?:
			  bu_missing_funcs((const char *const[]){ bu_has_func("css_rstat_flush") ?
				"css_rstat_flush" : "cgroup_rstat_flush", NULL }));
}
