// SPDX-License-Identifier: GPL-2.0
/*
 * Sleepable cgroup iterator for the memcg kfuncs (mm/bpf_memcontrol.c).  Attached with
 * one SELF_ONLY link per cgroup; userspace picks what it does per run with
 * the global "mode" (see memcg_kfuncs.h):
 *
 *   MK_MODE_READ     bpf_get_mem_cgroup(), bpf_mem_cgroup_flush_stats(),
 *                    then every field of enum mk_field, bpf_put_mem_cgroup();
 *                    writes one struct mk_read_rec
 *   MK_MODE_NOFLUSH  the same reads without the flush
 *   MK_MODE_PROBE    every call the kfuncs' index validation has to refuse
 *                    (and a few it must accept); writes one
 *                    struct mk_probe_rec
 *
 * All item numbers come from the enum constants of the vmlinux.h this file
 * is compiled against (the harness builds it against the kernel under
 * test), so nothing numeric crosses from userspace.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "memcg_kfuncs.h"
#include "bpf_memcontrol.h"

char _license[] SEC("license") = "GPL";

#define MK_EINVAL	22
#define MK_ENOENT	2

/* the kfuncs' "no such counter", (unsigned long)-1, is recorded as -EINVAL */
static __always_inline __s64 rec(unsigned long v)
{
	return v == (unsigned long)-1 ? -MK_EINVAL : (__s64)v;
}

/* set by userspace before each iteration */
__u32 mode = 0;
/* number of records written since userspace last reset it */
__u32 records = 0;
/* MK_MODE_TARGET: the one cgroup of the walk to read */
__u64 target_cgid = 0;

/* too big for the 512-byte BPF stack: built here, then copied out */
struct mk_read_rec rrec = {};
struct mk_probe_rec prec = {};

#define STAT(slot, it)							\
	do {								\
		rrec.item[slot] = (it);					\
		rrec.val[slot] = rec(bpf_mem_cgroup_page_state(memcg, (it))); \
	} while (0)
#define EVENT(slot, it)							\
	do {								\
		rrec.item[slot] = (it);					\
		rrec.val[slot] = rec(bpf_mem_cgroup_vm_events(memcg, (it))); \
	} while (0)

static __always_inline void read_fields(struct mem_cgroup *memcg)
{
	STAT(F_ANON, NR_ANON_MAPPED);
	STAT(F_FILE, NR_FILE_PAGES);
	STAT(F_SHMEM, NR_SHMEM);
	STAT(F_FILE_MAPPED, NR_FILE_MAPPED);
	STAT(F_FILE_DIRTY, NR_FILE_DIRTY);
	STAT(F_INACTIVE_ANON, NR_INACTIVE_ANON);
	STAT(F_ACTIVE_ANON, NR_ACTIVE_ANON);
	STAT(F_INACTIVE_FILE, NR_INACTIVE_FILE);
	STAT(F_ACTIVE_FILE, NR_ACTIVE_FILE);
	STAT(F_UNEVICTABLE, NR_UNEVICTABLE);
	STAT(F_KERNEL_STACK, NR_KERNEL_STACK_KB);
	STAT(F_PAGETABLES, NR_PAGETABLE);
	STAT(F_SLAB_RECLAIMABLE, NR_SLAB_RECLAIMABLE_B);
	STAT(F_SLAB_UNRECLAIMABLE, NR_SLAB_UNRECLAIMABLE_B);
	STAT(F_WS_REFAULT_ANON, WORKINGSET_REFAULT_ANON);
	STAT(F_WS_REFAULT_FILE, WORKINGSET_REFAULT_FILE);
	STAT(F_KERNEL, MEMCG_KMEM);
	STAT(F_SOCK, MEMCG_SOCK);
	STAT(F_PERCPU, MEMCG_PERCPU_B);
	STAT(F_VMALLOC, MEMCG_VMALLOC);
	EVENT(F_PGFAULT, PGFAULT);
	EVENT(F_PGMAJFAULT, PGMAJFAULT);
	EVENT(F_PGACTIVATE, PGACTIVATE);
	EVENT(F_PGDEACTIVATE, PGDEACTIVATE);
}

#define P_STAT(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = rec(bpf_mem_cgroup_page_state(memcg, (int)(it))); \
	} while (0)
#define P_EVENT(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = rec(bpf_mem_cgroup_vm_events(memcg,	\
				(enum vm_event_item)(it)));		\
	} while (0)
#define P_MEMEV(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = rec(bpf_mem_cgroup_memory_events(memcg, \
				(enum memcg_memory_event)(it)));	\
	} while (0)

/* INT_MIN without relying on a header that vmlinux.h may not mix with */
#define MK_INT_MIN (-0x7fffffff - 1)

static __always_inline void run_probes(struct mem_cgroup *memcg)
{
	struct mem_cgroup *root;

	prec.item[P_FLUSH] = -1;
	bpf_mem_cgroup_flush_stats(memcg);
	prec.res[P_FLUSH] = 0;
	P_STAT(P_NODE_VALID, NR_ANON_MAPPED);
	P_STAT(P_MEMCG_VALID, MEMCG_KMEM);
	P_EVENT(P_EVENT_VALID, PGFAULT);
	P_MEMEV(P_MEMEV_VALID, MEMCG_HIGH);
	prec.item[P_USAGE] = -1;
	prec.res[P_USAGE] = rec(bpf_mem_cgroup_usage(memcg));
	prec.item[P_ROOT] = NR_ANON_MAPPED;
	prec.res[P_ROOT] = -MK_ENOENT;
	root = bpf_get_root_mem_cgroup();
	if (root) {
		prec.res[P_ROOT] = rec(bpf_mem_cgroup_page_state(root, NR_ANON_MAPPED));
		bpf_put_mem_cgroup(root);
	}
	P_STAT(P_NODE_FIRST, 0);
	P_STAT(P_MEMCG_FIRST, NR_VM_NODE_STAT_ITEMS);
	P_STAT(P_MEMCG_LAST, MEMCG_NR_STAT - 1);

	P_STAT(P_NODE_END, MEMCG_NR_STAT + 1);
	P_STAT(P_NODE_END_PLUS5, MEMCG_NR_STAT + 5);
	P_STAT(P_NODE_INT_MAX, 0x7fffffff);
	P_STAT(P_NODE_MINUS1, -1);
	P_STAT(P_NODE_INT_MIN, MK_INT_MIN);
	P_MEMEV(P_MEMEV_END, MEMCG_NR_MEMORY_EVENTS);
	P_MEMEV(P_MEMEV_MINUS1, -1);
	P_STAT(P_MEMCG_END, MEMCG_NR_STAT);
	P_STAT(P_MEMCG_END_PLUS5, MEMCG_NR_STAT + 5);
	P_STAT(P_MEMCG_INT_MAX, 0x7fffffff);
	P_STAT(P_MEMCG_MINUS1, -1);
	P_EVENT(P_EVENT_END, NR_VM_EVENT_ITEMS);
	P_EVENT(P_EVENT_END_PLUS5, NR_VM_EVENT_ITEMS + 5);
	P_EVENT(P_EVENT_INT_MAX, 0x7fffffff);
	P_EVENT(P_EVENT_MINUS1, -1);

	P_STAT(P_NODE_UNTRACKED_A, NR_ISOLATED_ANON);
	P_STAT(P_NODE_UNTRACKED_B, NR_DIRTIED);
	P_EVENT(P_EVENT_UNTRACKED_A, PGFREE);
	/* PSWPIN is unconditional today; do not depend on it */
	if (bpf_core_enum_value_exists(enum vm_event_item, PSWPIN)) {
		P_EVENT(P_EVENT_UNTRACKED_B,
			bpf_core_enum_value(enum vm_event_item, PSWPIN));
	} else {
		prec.item[P_EVENT_UNTRACKED_B] = -1;
		prec.res[P_EVENT_UNTRACKED_B] = -MK_EINVAL;	/* nothing to probe */
	}
}

/* no memcg: bpf_get_mem_cgroup() returned NULL and no read can be made */
static __always_inline void no_memcg(__s64 *res, int n)
{
	int i;

	for (i = 0; i < n; i++)
		res[i] = -MK_ENOENT;
}

SEC("iter.s/cgroup")
int memcg_read(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;

	if (!cgrp)
		return 0;	/* end of the walk: nothing to add */
	if (mode == MK_MODE_TARGET && cgrp->kn->id != target_cgid)
		return 0;	/* another cgroup of the walk */

	memcg = bpf_get_mem_cgroup(&cgrp->self);
	/*
	 * One NULL check, the put on the one path that has a memcg: the 6.1
	 * verifier does not know that a tested pointer stays non-NULL, and a
	 * second "if (memcg)" before the put would leave it a path without one.
	 */
	if (!memcg) {
		if (mode == MK_MODE_PROBE) {
			prec.magic = MK_MAGIC_PROBE;
			prec.cgid = cgrp->kn->id;
			no_memcg(prec.res, NR_PROBES);
			bpf_seq_write(seq, &prec, sizeof(prec));
		} else {
			rrec.magic = MK_MAGIC_READ;
			rrec.cgid = cgrp->kn->id;
			rrec.flush_ret = -MK_ENOENT;
			no_memcg(rrec.val, NR_FIELDS);
			bpf_seq_write(seq, &rrec, sizeof(rrec));
		}
		records++;
		return 0;
	}
	if (mode == MK_MODE_PROBE) {
		prec.magic = MK_MAGIC_PROBE;
		prec.cgid = cgrp->kn->id;
		run_probes(memcg);
		bpf_seq_write(seq, &prec, sizeof(prec));
	} else {
		rrec.magic = MK_MAGIC_READ;
		rrec.cgid = cgrp->kn->id;
		rrec.flush_ret = 1;
		if (mode == MK_MODE_READ || mode == MK_MODE_TARGET) {
			bpf_mem_cgroup_flush_stats(memcg);	/* may sleep */
			rrec.flush_ret = 0;
		}
		read_fields(memcg);
		bpf_seq_write(seq, &rrec, sizeof(rrec));
	}
	bpf_put_mem_cgroup(memcg);
	records++;
	return 0;
}
