// SPDX-License-Identifier: GPL-2.0
/* Hierarchical reclaim stats through rstat, as hierarchical_stats.bpf.c: the
 * tracepoints count per CPU and flag the cgroup; the flush hook folds deltas into
 * totals pushed to the parent; iter.s/cgroup flushes and prints them.  The locked
 * adds are full barriers against rstat's "updated" list. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf_rstat.h"
#include "rstat_tree_bench.h"

char _license[] SEC("license") = "GPL";

struct total { union rtb_counters total, pending; };	/* pending: from the children */

#define HASH_MAP(_name, _type, _key, _value) struct { __uint(type, _type);		\
	__uint(max_entries, 4096); __type(key, _key); __type(value, _value); } _name SEC(".maps")
HASH_MAP(pcpu_stats, BPF_MAP_TYPE_PERCPU_HASH, __u64, struct rtb_pcpu);
HASH_MAP(totals, BPF_MAP_TYPE_HASH, __u64, struct total);
HASH_MAP(reclaim_start, BPF_MAP_TYPE_HASH, __u32, __u64);

__u64 flush_calls = 0;

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(rtb_reclaim_begin, int order, gfp_t gfp_flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&reclaim_start, &tid, &now, BPF_ANY);
	return 0;
}

/* the entry of @id, made (zeroed) first if missing and @make */
static __always_inline void *entry(void *map, __u64 *id, void *zero, bool make)
{
	void *v = bpf_map_lookup_elem(map, id);

	if (v || !make)
		return v;
	bpf_map_update_elem(map, id, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, id);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(rtb_reclaim_end, unsigned long nr_reclaimed)
{
	struct cgroup *cgrp = bpf_get_current_task_btf()->cgroups->dfl_cgrp;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns(), *start, id, dt;
	struct rtb_pcpu zero = {}, *pc;

	start = bpf_map_lookup_elem(&reclaim_start, &tid);
	dt = start && now > *start ? now - *start : 0;
	bpf_map_delete_elem(&reclaim_start, &tid);
	id = cgrp ? cgrp->kn->id : 0;
	pc = cgrp ? entry(&pcpu_stats, &id, &zero, true) : NULL;
	if (!pc)
		return 0;
	pc->state.time_ns += dt;
	pc->state.pages += nr_reclaimed;
	__sync_fetch_and_add(&pc->state.count, 1);
	RSTAT_UPDATED(cgrp, bpf_get_smp_processor_id());
	return 0;
}

/* *dst += *src; whether *src is nonzero */
static __always_inline bool add_to(union rtb_counters *dst, const union rtb_counters *src)
{
	for (int i = 0; i < 3; i++)
		dst->v[i] += src->v[i];
	return src->count || src->time_ns || src->pages;
}

SEC("iter.s/cgroup")
int rtb_dump(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	__u64 id = cgrp ? cgrp->kn->id : 0;
	struct total zero = {}, *t;

	if (!cgrp)
		return 0;
	RSTAT_FLUSH(cgrp);	/* may sleep */
	t = bpf_map_lookup_elem(&totals, &id) ?: &zero;
	BPF_SEQ_PRINTF(ctx->meta->seq, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu\n",
		       id, t->total.count, t->total.time_ns, t->total.pages);
	return 0;
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(rtb_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	union rtb_counters delta = {};
	struct total zero = {}, *t;
	struct rtb_pcpu *pc;
	__u64 id = cgrp->kn->id;

	__sync_fetch_and_add(&flush_calls, 1);
	pc = bpf_map_lookup_percpu_elem(&pcpu_stats, &id, (__u32)cpu);
	for (int i = 0; pc && i < 3; i++) {
		delta.v[i] = *(volatile __u64 *)&pc->state.v[i] - pc->prev.v[i];
		pc->prev.v[i] += delta.v[i];
	}
	t = entry(&totals, &id, &zero, delta.count || delta.time_ns || delta.pages);
	if (!t)
		return 0;
	add_to(&delta, &t->pending);
	t->pending = (union rtb_counters){};
	if (!add_to(&t->total, &delta) || !parent)
		return 0;
	id = parent->kn->id;
	t = entry(&totals, &id, &zero, true);
	if (t)
		add_to(&t->pending, &delta);
	return 0;
}
