// SPDX-License-Identifier: GPL-2.0
/*
 * Sleepable cgroup iterator calling the memcg kfuncs (mm/bpf_memcontrol.c);
 * userspace picks what it does per run with the global "mode" (see
 * memcg_kfuncs.h): MK_MODE_READ gets the memcg, flushes, reads every field of
 * enum mk_field and puts it (one struct mk_read_rec); MK_MODE_PROBE makes
 * every call the kfuncs' index validation has to refuse, and a few it must
 * accept (one struct mk_probe_rec).  Item numbers are the enum constants of
 * the vmlinux.h this is compiled against: nothing numeric comes from
 * userspace.
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
#define MK_INT_MIN	(-0x7fffffff - 1)

/* the kfuncs' "no such counter", (unsigned long)-1, is recorded as -EINVAL */
static __always_inline __s64 rec(unsigned long v)
{
	return v == (unsigned long)-1 ? -MK_EINVAL : (__s64)v;
}

__u32 mode;		/* set by userspace before each iteration */
__u32 records;		/* records written since userspace reset it */
__u64 target_cgid;	/* MK_MODE_TARGET: the one cgroup of the walk to read */

/* too big for the 512-byte BPF stack: built here, then copied out */
struct mk_read_rec rrec = {};
struct mk_probe_rec prec = {};

#define MK_ITEM(slot, key, item, ...) item,
/* the item of each enum mk_field slot (F_USAGE: none) */
const volatile int items[NR_FIELDS] = { MK_FIELDS(MK_ITEM) };

static __always_inline void read_fields(struct mem_cgroup *memcg)
{
	unsigned long v;
	int i, it;

	for (i = 0; i < F_USAGE; i++) {
		it = items[i];
		if (i < F_FIRST_EVENT)
			v = bpf_mem_cgroup_page_state(memcg, it);
		else if (i < F_FIRST_MEMEV)
			v = bpf_mem_cgroup_vm_events(memcg, it);
		else
			v = bpf_mem_cgroup_memory_events(memcg, it);
		rrec.item[i] = it;
		rrec.val[i] = rec(v);
	}
	rrec.item[F_USAGE] = -1;
	rrec.val[F_USAGE] = rec(bpf_mem_cgroup_usage(memcg));
}

#define PROBE(slot, fn, it)						\
	do {								\
		prec.item[slot] = (int)(it);				\
		prec.res[slot] = rec(fn(memcg, (int)(it)));		\
	} while (0)
#define P_STAT(slot, it)	PROBE(slot, bpf_mem_cgroup_page_state, it)
#define P_EVENT(slot, it)	PROBE(slot, bpf_mem_cgroup_vm_events, it)
#define P_MEMEV(slot, it)	PROBE(slot, bpf_mem_cgroup_memory_events, it)

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
	prec.item[P_EVENT_UNTRACKED_B] = -1;
	prec.res[P_EVENT_UNTRACKED_B] = -MK_EINVAL;	/* nothing to probe */
	if (bpf_core_enum_value_exists(enum vm_event_item, PSWPIN))
		P_EVENT(P_EVENT_UNTRACKED_B, bpf_core_enum_value(enum vm_event_item, PSWPIN));
}

SEC("iter.s/cgroup")
int memcg_read(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;
	int i;

	if (!cgrp)
		return 0;	/* end of the walk: nothing to add */
	if (mode == MK_MODE_TARGET && cgrp->kn->id != target_cgid)
		return 0;	/* another cgroup of the walk */
	prec.magic = MK_MAGIC_PROBE;
	rrec.magic = MK_MAGIC_READ;
	prec.cgid = rrec.cgid = cgrp->kn->id;
	records++;
	/*
	 * One NULL check, the put on the one path that has a memcg: the 6.1
	 * verifier does not know that a tested pointer stays non-NULL.
	 */
	memcg = bpf_get_mem_cgroup(&cgrp->self);
	if (!memcg) {
		/* no memcg: nothing can be read */
		for (i = 0; i < NR_FIELDS; i++)
			rrec.val[i] = -MK_ENOENT;
		for (i = 0; i < NR_PROBES; i++)
			prec.res[i] = -MK_ENOENT;
		rrec.flush_ret = -MK_ENOENT;
	} else if (mode == MK_MODE_PROBE) {
		run_probes(memcg);
		bpf_put_mem_cgroup(memcg);
	} else {
		bpf_mem_cgroup_flush_stats(memcg);	/* may sleep */
		rrec.flush_ret = 0;
		read_fields(memcg);
		bpf_put_mem_cgroup(memcg);
	}
	if (mode == MK_MODE_PROBE)
		bpf_seq_write(seq, &prec, sizeof(prec));
	else
		bpf_seq_write(seq, &rrec, sizeof(rrec));
	return 0;
}
