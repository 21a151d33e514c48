// SPDX-License-Identifier: GPL-2.0
/*
 * Sleepable cgroup iterator for the memcg statistics kfuncs.  Attached with
 * one SELF_ONLY link per cgroup; userspace picks what it does per run with
 * the global "mode" (see memcg_kfuncs.h):
 *
 *   MK_MODE_READ     bpf_memcg_flush_stats(), then every field of
 *                    enum mk_field; writes one struct mk_read_rec
 *   MK_MODE_NOFLUSH  the same fetches without the flush
 *   MK_MODE_PROBE    every call the kfuncs' item/cgroup validation has to
 *                    refuse (and a few it must accept); writes one
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

char _license[] SEC("license") = "GPL";

extern int bpf_memcg_flush_stats(struct cgroup *cgrp) __ksym;
extern s64 bpf_memcg_node_stat_fetch(struct cgroup *cgrp,
				     enum node_stat_item item) __ksym;
extern s64 bpf_memcg_stat_fetch(struct cgroup *cgrp,
				enum memcg_stat_item item) __ksym;
extern s64 bpf_memcg_vm_event_fetch(struct cgroup *cgrp,
				    enum vm_event_item item) __ksym;

/* set by userspace before each iteration */
__u32 mode = 0;
/* number of records written since userspace last reset it */
__u32 records = 0;
/* MK_MODE_TARGET: the one cgroup of the walk to read */
__u64 target_cgid = 0;

/* too big for the 512-byte BPF stack: built here, then copied out */
struct mk_read_rec rrec = {};
struct mk_probe_rec prec = {};

#define NODE(slot, it)							\
	do {								\
		rrec.item[slot] = (it);					\
		rrec.val[slot] = bpf_memcg_node_stat_fetch(cgrp, (it));	\
	} while (0)
#define MEMCG(slot, it)							\
	do {								\
		rrec.item[slot] = (it);					\
		rrec.val[slot] = bpf_memcg_stat_fetch(cgrp, (it));	\
	} while (0)
#define EVENT(slot, it)							\
	do {								\
		rrec.item[slot] = (it);					\
		rrec.val[slot] = bpf_memcg_vm_event_fetch(cgrp, (it));	\
	} while (0)

static __always_inline void read_fields(struct cgroup *cgrp)
{
	NODE(F_ANON, NR_ANON_MAPPED);
	NODE(F_FILE, NR_FILE_PAGES);
	NODE(F_SHMEM, NR_SHMEM);
	NODE(F_FILE_MAPPED, NR_FILE_MAPPED);
	NODE(F_FILE_DIRTY, NR_FILE_DIRTY);
	NODE(F_INACTIVE_ANON, NR_INACTIVE_ANON);
	NODE(F_ACTIVE_ANON, NR_ACTIVE_ANON);
	NODE(F_INACTIVE_FILE, NR_INACTIVE_FILE);
	NODE(F_ACTIVE_FILE, NR_ACTIVE_FILE);
	NODE(F_UNEVICTABLE, NR_UNEVICTABLE);
	NODE(F_KERNEL_STACK, NR_KERNEL_STACK_KB);
	NODE(F_PAGETABLES, NR_PAGETABLE);
	NODE(F_SLAB_RECLAIMABLE, NR_SLAB_RECLAIMABLE_B);
	NODE(F_SLAB_UNRECLAIMABLE, NR_SLAB_UNRECLAIMABLE_B);
	NODE(F_WS_REFAULT_ANON, WORKINGSET_REFAULT_ANON);
	NODE(F_WS_REFAULT_FILE, WORKINGSET_REFAULT_FILE);
	MEMCG(F_KERNEL, MEMCG_KMEM);
	MEMCG(F_SOCK, MEMCG_SOCK);
	MEMCG(F_PERCPU, MEMCG_PERCPU_B);
	MEMCG(F_VMALLOC, MEMCG_VMALLOC);
	EVENT(F_PGFAULT, PGFAULT);
	EVENT(F_PGMAJFAULT, PGMAJFAULT);
	EVENT(F_PGACTIVATE, PGACTIVATE);
	EVENT(F_PGDEACTIVATE, PGDEACTIVATE);
}

#define P_NODE(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = bpf_memcg_node_stat_fetch(cgrp,	\
				(enum node_stat_item)(it));		\
	} while (0)
#define P_MEMCG(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = bpf_memcg_stat_fetch(cgrp,		\
				(enum memcg_stat_item)(it));		\
	} while (0)
#define P_EVENT(slot, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = bpf_memcg_vm_event_fetch(cgrp,		\
				(enum vm_event_item)(it));		\
	} while (0)

/* INT_MIN without relying on a header that vmlinux.h may not mix with */
#define MK_INT_MIN (-0x7fffffff - 1)

static __always_inline void run_probes(struct cgroup *cgrp)
{
	prec.item[P_FLUSH] = -1;
	prec.res[P_FLUSH] = bpf_memcg_flush_stats(cgrp);
	P_NODE(P_NODE_VALID, NR_ANON_MAPPED);
	P_MEMCG(P_MEMCG_VALID, MEMCG_KMEM);
	P_EVENT(P_EVENT_VALID, PGFAULT);
	P_NODE(P_NODE_FIRST, 0);
	P_MEMCG(P_MEMCG_FIRST, NR_VM_NODE_STAT_ITEMS);
	P_MEMCG(P_MEMCG_LAST, MEMCG_NR_STAT - 1);

	P_NODE(P_NODE_END, NR_VM_NODE_STAT_ITEMS);
	P_NODE(P_NODE_END_PLUS5, NR_VM_NODE_STAT_ITEMS + 5);
	P_NODE(P_NODE_INT_MAX, 0x7fffffff);
	P_NODE(P_NODE_MINUS1, -1);
	P_NODE(P_NODE_INT_MIN, MK_INT_MIN);
	P_NODE(P_NODE_MEMCG_ITEM, MEMCG_KMEM);
	P_MEMCG(P_MEMCG_NODE_ITEM, NR_ANON_MAPPED);
	P_MEMCG(P_MEMCG_END, MEMCG_NR_STAT);
	P_MEMCG(P_MEMCG_END_PLUS5, MEMCG_NR_STAT + 5);
	P_MEMCG(P_MEMCG_INT_MAX, 0x7fffffff);
	P_MEMCG(P_MEMCG_MINUS1, -1);
	P_EVENT(P_EVENT_END, NR_VM_EVENT_ITEMS);
	P_EVENT(P_EVENT_END_PLUS5, NR_VM_EVENT_ITEMS + 5);
	P_EVENT(P_EVENT_INT_MAX, 0x7fffffff);
	P_EVENT(P_EVENT_MINUS1, -1);

	P_NODE(P_NODE_UNTRACKED_A, NR_ISOLATED_ANON);
	P_NODE(P_NODE_UNTRACKED_B, NR_DIRTIED);
	P_EVENT(P_EVENT_UNTRACKED_A, PGFREE);
	/* PSWPIN is unconditional today; do not depend on it */
	if (bpf_core_enum_value_exists(enum vm_event_item, PSWPIN)) {
		P_EVENT(P_EVENT_UNTRACKED_B,
			bpf_core_enum_value(enum vm_event_item, PSWPIN));
	} else {
		prec.item[P_EVENT_UNTRACKED_B] = -1;
		prec.res[P_EVENT_UNTRACKED_B] = -22;	/* -EINVAL: nothing to probe */
	}
}

SEC("iter.s/cgroup")
int memcg_read(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;	/* end of the walk: nothing to add */

	if (mode == MK_MODE_PROBE) {
		prec.magic = MK_MAGIC_PROBE;
		prec.cgid = cgrp->kn->id;
		run_probes(cgrp);
		bpf_seq_write(seq, &prec, sizeof(prec));
		records++;
		return 0;
	}

	if (mode == MK_MODE_TARGET && cgrp->kn->id != target_cgid)
		return 0;	/* another cgroup of the walk */
	rrec.magic = MK_MAGIC_READ;
	rrec.cgid = cgrp->kn->id;
	rrec.flush_ret = 1;
	if (mode == MK_MODE_READ || mode == MK_MODE_TARGET)
		rrec.flush_ret = bpf_memcg_flush_stats(cgrp);	/* may sleep */
	read_fields(cgrp);
	bpf_seq_write(seq, &rrec, sizeof(rrec));
	records++;
	return 0;
}
