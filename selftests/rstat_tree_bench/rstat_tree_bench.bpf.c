// SPDX-License-Identifier: GPL-2.0
/*
 * Hierarchical memcg-reclaim statistics through rstat, as
 * hierarchical_stats.bpf.c collects them (without its bookkeeping):
 * the reclaim tracepoints add to the current cgroup's per-CPU counters and
 * flag it to rstat; fentry/bpf_rstat_flush folds each (cgroup, CPU) delta
 * into the cgroup's total and pushes it to the parent; a sleepable
 * iterator flushes and prints "cgroup id= count= time_ns= pages=".
 * The locked adds on state.count and flush_calls are full barriers between
 * rstat's "updated" list handling and the counters (see hierarchical_stats).
 *
 * Built twice: as is for the cgroup_rstat_* kfuncs (before 6.16), and with
 * RSTAT_API_CSS (rstat_tree_bench_css.bpf.c) for css_rstat_* (6.16+).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "rstat_tree_bench.h"

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

struct total {
	struct rtb_counters total;	/* own + descendants, as flushed */
	struct rtb_counters pending;	/* pushed up by flushed children */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct rtb_pcpu);
} pcpu_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct total);
} totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} reclaim_start SEC(".maps");

__u64 flush_calls = 0;

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(rtb_reclaim_begin, int order, gfp_t gfp_flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&reclaim_start, &tid, &now, BPF_ANY);
	return 0;
}

static __always_inline void *lookup_or_zero(void *map, __u64 *id, void *zero)
{
	void *v = bpf_map_lookup_elem(map, id);

	if (v)
		return v;
	bpf_map_update_elem(map, id, zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, id);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(rtb_reclaim_end, unsigned long nr_reclaimed)
{
	struct cgroup *cgrp = bpf_get_current_task_btf()->cgroups->dfl_cgrp;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns(), *start, id, dt = 0;
	struct rtb_pcpu zero = {}, *pc;

	start = bpf_map_lookup_elem(&reclaim_start, &tid);
	if (start) {
		dt = now > *start ? now - *start : 0;
		bpf_map_delete_elem(&reclaim_start, &tid);
	}
	if (!cgrp)
		return 0;
	id = cgrp->kn->id;
	pc = lookup_or_zero(&pcpu_stats, &id, &zero);
	if (!pc)
		return 0;
	pc->state.time_ns += dt;
	pc->state.pages += nr_reclaimed;
	__sync_fetch_and_add(&pc->state.count, 1);
	RSTAT_UPDATED(cgrp, bpf_get_smp_processor_id());
	return 0;
}

static __always_inline bool nonzero(const struct rtb_counters *c)
{
	return c->count || c->time_ns || c->pages;
}

static __always_inline void add_to(struct rtb_counters *dst, const struct rtb_counters *src)
{
	dst->count += src->count;
	dst->time_ns += src->time_ns;
	dst->pages += src->pages;
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(rtb_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	struct rtb_counters delta = {};
	struct total zero = {}, *t;
	struct rtb_pcpu *pc;
	__u64 id, s;

	__sync_fetch_and_add(&flush_calls, 1);
	id = cgrp->kn->id;
	pc = bpf_map_lookup_percpu_elem(&pcpu_stats, &id, (__u32)cpu);
	if (pc) {
		s = *(volatile __u64 *)&pc->state.count;
		delta.count = s - pc->prev.count;
		pc->prev.count = s;
		s = *(volatile __u64 *)&pc->state.time_ns;
		delta.time_ns = s - pc->prev.time_ns;
		pc->prev.time_ns = s;
		s = *(volatile __u64 *)&pc->state.pages;
		delta.pages = s - pc->prev.pages;
		pc->prev.pages = s;
	}
	t = nonzero(&delta) ? lookup_or_zero(&totals, &id, &zero) : bpf_map_lookup_elem(&totals, &id);
	if (!t)
		return 0;
	add_to(&delta, &t->pending);
	t->pending = (struct rtb_counters){};
	add_to(&t->total, &delta);
	if (!parent || !nonzero(&delta))
		return 0;
	id = parent->kn->id;
	t = lookup_or_zero(&totals, &id, &zero);
	if (t)
		add_to(&t->pending, &delta);
	return 0;
}

SEC("iter.s/cgroup")
int rtb_dump(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct rtb_counters zero = {}, *c = &zero;
	struct total *t;
	__u64 id;

	if (!cgrp)
		return 0;
	RSTAT_FLUSH(cgrp);	/* may sleep */
	id = cgrp->kn->id;
	t = bpf_map_lookup_elem(&totals, &id);
	if (t)
		c = &t->total;
	BPF_SEQ_PRINTF(ctx->meta->seq, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu\n",
		       id, c->count, c->time_ns, c->pages);
	return 0;
}
