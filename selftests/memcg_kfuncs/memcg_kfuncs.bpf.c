// SPDX-License-Identifier: GPL-2.0
/*
 * Sleepable cgroup iterator calling the memcg kfuncs (mm/bpf_memcontrol.c),
 * one struct mk_rec per cgroup; userspace sets the global "mode" per run (see
 * memcg_kfuncs.h): MK_MODE_READ gets the memcg, flushes, reads every
 * MK_FIELDS item and puts it (MK_MODE_ROOT the same on the root memcg from
 * bpf_get_root_mem_cgroup()); MK_MODE_PROBE makes every MK_PROBES call the
 * index validation must refuse or accept.  With rstat_first set, the walked
 * cgroup's subtree is flushed by the rstat flush kfunc first, which unlike
 * bpf_mem_cgroup_flush_stats() skips no flush below a threshold: the values
 * are then exact.  Item numbers are the enum constants of the vmlinux.h this
 * is compiled against, none from userspace.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "memcg_kfuncs.h"
#include "bpf_memcontrol.h"
#include "bpf_rstat.h"

char _license[] SEC("license") = "GPL";

#define MK_EINVAL	22
#define MK_ENOENT	2

__u32 mode;		/* set by userspace before each iteration */
__u32 records;		/* records written since userspace reset it */
__u64 target_cgid;	/* MK_MODE_TARGET: the one cgroup of the walk to read */
bool rstat_first;	/* flush the walked cgroup's subtree unconditionally first */

struct mk_rec rec = {};	/* too big for the 512-byte BPF stack */

#define F_KIND(key, kind, ...) K_##kind,
#define F_ITEM(key, kind, item, ...) (item),
#define P_KIND(kind, item) K_##kind,
#define P_ITEM(kind, item) (item),
const volatile __u8 fkind[MK_N] = { MK_FIELDS(F_KIND) };
const volatile int fitem[MK_N] = { MK_FIELDS(F_ITEM) };
const volatile __u8 pkind[MK_N] = { MK_PROBES(P_KIND) };
const volatile int pitem[MK_N] = { MK_PROBES(P_ITEM) };

/* local flavors of the enums: the item that counts vmalloc memory, by CO-RE */
enum memcg_stat_item___mk { MEMCG_VMALLOC___mk };
enum node_stat_item___mk { NR_VMALLOC___mk };

static __always_inline int vmalloc_item(void)
{
	if (bpf_core_enum_value_exists(enum memcg_stat_item___mk, MEMCG_VMALLOC___mk))
		return bpf_core_enum_value(enum memcg_stat_item___mk, MEMCG_VMALLOC___mk);
	return bpf_core_enum_value(enum node_stat_item___mk, NR_VMALLOC___mk);
}

/*
 * The reclaim events (MK_RECLAIM): vm events up to 7.1, node items from 7.2, some
 * absent before 6.x (khugepaged, proactive): the kfunc the running kernel puts each
 * behind, by CO-RE; 0 for one the kernel does not have.
 */
enum vm_event_item___ev {
	PGSCAN_KSWAPD___ev, PGSCAN_DIRECT___ev, PGSCAN_KHUGEPAGED___ev, PGSCAN_PROACTIVE___ev,
	PGSTEAL_KSWAPD___ev, PGSTEAL_DIRECT___ev, PGSTEAL_KHUGEPAGED___ev, PGSTEAL_PROACTIVE___ev,
};
enum node_stat_item___ns {
	PGSCAN_KSWAPD___ns, PGSCAN_DIRECT___ns, PGSCAN_KHUGEPAGED___ns, PGSCAN_PROACTIVE___ns,
	PGSTEAL_KSWAPD___ns, PGSTEAL_DIRECT___ns, PGSTEAL_KHUGEPAGED___ns, PGSTEAL_PROACTIVE___ns,
};

#define RECLAIM(memcg, name)							\
	(bpf_core_enum_value_exists(enum vm_event_item___ev, name##___ev) ?	\
	 bpf_mem_cgroup_vm_events(memcg, bpf_core_enum_value(enum vm_event_item___ev, name##___ev)) : \
	 bpf_core_enum_value_exists(enum node_stat_item___ns, name##___ns) ?	\
	 bpf_mem_cgroup_page_state(memcg, bpf_core_enum_value(enum node_stat_item___ns, name##___ns)) : 0)

static __always_inline unsigned long reclaim_item(struct mem_cgroup *memcg, int it)
{
	switch (it) {
	case 0: return RECLAIM(memcg, PGSCAN_KSWAPD);
	case 1: return RECLAIM(memcg, PGSCAN_DIRECT);
	case 2: return RECLAIM(memcg, PGSCAN_KHUGEPAGED);
	case 3: return RECLAIM(memcg, PGSCAN_PROACTIVE);
	case 4: return RECLAIM(memcg, PGSTEAL_KSWAPD);
	case 5: return RECLAIM(memcg, PGSTEAL_DIRECT);
	case 6: return RECLAIM(memcg, PGSTEAL_KHUGEPAGED);
	default: return RECLAIM(memcg, PGSTEAL_PROACTIVE);
	}
}

/* the kfunc of @kind on @memcg; "no such counter", (unsigned long)-1: -EINVAL */
static __always_inline __s64 call(int kind, struct mem_cgroup *memcg, int it)
{
	struct mem_cgroup *root;
	unsigned long v = 0;

	if (kind == K_state) {
		v = bpf_mem_cgroup_page_state(memcg, it);
	} else if (kind == K_events) {
		v = bpf_mem_cgroup_vm_events(memcg, it);
	} else if (kind == K_memev) {
		v = bpf_mem_cgroup_memory_events(memcg, it);
	} else if (kind == K_usage) {
		v = bpf_mem_cgroup_usage(memcg);
	} else if (kind == K_reclaim) {
		v = reclaim_item(memcg, it);
	} else if (kind == K_flush) {
		bpf_mem_cgroup_flush_stats(memcg);	/* may sleep */
	} else {
		root = bpf_get_root_mem_cgroup();
		if (!root)
			return -MK_ENOENT;
		v = bpf_mem_cgroup_page_state(root, it);
		bpf_put_mem_cgroup(root);
	}
	return v == (unsigned long)-1 ? -MK_EINVAL : (__s64)v;
}

SEC("iter.s/cgroup")
int memcg_read(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	bool probe = mode == MK_MODE_PROBE;
	int i, n = probe ? NR_PROBES : NR_FIELDS;
	struct mem_cgroup *memcg;

	if (!cgrp || (mode == MK_MODE_TARGET && cgrp->kn->id != target_cgid))
		return 0;	/* the walk's end, or another cgroup of it */
	rec.magic = MK_MAGIC + mode;
	rec.cgid = cgrp->kn->id;
	records++;
	for (i = 0; i < MK_N && i < n; i++) {
		rec.item[i] = probe ? pitem[i] : fitem[i];
		if (rec.item[i] == MK_VMALLOC)
			rec.item[i] = vmalloc_item();
		rec.val[i] = -MK_ENOENT;	/* without a memcg nothing is read */
	}
	if (rstat_first && !probe)
		RSTAT_FLUSH(cgrp);	/* may sleep */
	/* one NULL check, one put: the 6.1 verifier forgets a tested pointer */
	memcg = mode == MK_MODE_ROOT ? bpf_get_root_mem_cgroup() : bpf_get_mem_cgroup(&cgrp->self);
	if (memcg) {
		if (!probe)
			bpf_mem_cgroup_flush_stats(memcg);
		for (i = 0; i < MK_N && i < n; i++)
			rec.val[i] = call(probe ? pkind[i] : fkind[i], memcg, rec.item[i]);
		bpf_put_mem_cgroup(memcg);
	}
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
