// SPDX-License-Identifier: GPL-2.0
/*
 * Memcg-reclaim statistics per cgroup, aggregated by rstat.
 * tp_btf/mm_vmscan_memcg_reclaim_{begin,end}: the reclaim runs in the task
 *   that asked for it, so the end event (count, end - begin, nr_reclaimed)
 *   goes to the current task's cgroup, on this CPU, then RSTAT_UPDATED().
 * fentry/bpf_rstat_flush (children before parents, under the rstat lock):
 *   per-CPU delta since the last flush + what the children pushed ("pending")
 *   is folded into the total and pushed to the parent (not with hs_broken).
 * iter.s/cgroup: RSTAT_FLUSH(cgrp), then one line of the totals.
 * The locked adds between "store state; load on-list" (updater) and "unlink;
 * load state" (flusher) are full barriers: without them x86 could lose the
 * last update until the next one, which a finished test never makes.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "hierarchical_stats.h"

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

/* set by userspace before load (--broken): do not propagate to the parent */
const volatile __u32 hs_broken = 0;

#define HS_MAX_CGROUPS 4096
#define HS_MAX_TASKS 4096
#define READ_ONCE_U64(x) (*(volatile __u64 *)&(x))

/* Per cgroup, per CPU: written by the tracepoints (state) and the flusher (prev). */
struct hs_pcpu {
	struct hs_counters state;	/* everything recorded on this CPU */
	struct hs_counters prev;	/* state at the last flush of (cgroup, CPU) */
};

/* Per cgroup: written only by the flusher, under the rstat lock. */
struct hs_total {
	struct hs_counters total;	/* own + all descendants, as flushed */
	struct hs_counters own;		/* tasks in this cgroup only */
	struct hs_counters pending;	/* pushed up by flushed children */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, HS_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct hs_pcpu);
} pcpu_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct hs_total);
} totals SEC(".maps");

/* begin timestamp per task (thread id) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_TASKS);
	__type(key, __u32);
	__type(value, __u64);
} reclaim_start SEC(".maps");

struct hs_global g = {};

/* @map's element for @id, created zeroed if absent (-EEXIST: another CPU won) */
static __always_inline void *elem_of(void *map, __u64 *id, void *zero)
{
	void *v = bpf_map_lookup_elem(map, id);

	if (v)
		return v;
	bpf_map_update_elem(map, id, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, id);
	if (!v)
		__sync_fetch_and_add(&g.map_errors, 1);
	return v;
}

static __always_inline void add_to(struct hs_counters *dst, const struct hs_counters *src)
{
	dst->count += src->count;
	dst->time_ns += src->time_ns;
	dst->pages += src->pages;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(hs_reclaim_begin, int order, gfp_t gfp_flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	__sync_fetch_and_add(&g.begin_events, 1);
	if (bpf_map_update_elem(&reclaim_start, &tid, &now, BPF_ANY))
		__sync_fetch_and_add(&g.map_errors, 1);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(hs_reclaim_end, unsigned long nr_reclaimed)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hs_pcpu zero = {}, *pc;
	__u64 *start, now, dt = 0, id;
	struct cgroup *cgrp;

	now = bpf_ktime_get_ns();
	__sync_fetch_and_add(&g.end_events, 1);
	start = bpf_map_lookup_elem(&reclaim_start, &tid);
	if (start) {
		dt = now > *start ? now - *start : 0;
		bpf_map_delete_elem(&reclaim_start, &tid);
	} else {
		__sync_fetch_and_add(&g.unmatched_end, 1);
	}
	cgrp = task->cgroups->dfl_cgrp;
	if (!cgrp)
		return 0;
	id = cgrp->kn->id;
	if (id != bpf_get_current_cgroup_id())
		__sync_fetch_and_add(&g.id_mismatch, 1);
	pc = elem_of(&pcpu_stats, &id, &zero);
	if (!pc)
		return 0;
	/* this CPU's element: only this CPU writes state */
	add_to(&pc->state, &(struct hs_counters){ .time_ns = dt, .pages = nr_reclaimed });
	/* locked add: state is visible before rstat's on-list test (see top) */
	__sync_fetch_and_add(&pc->state.count, 1);
	RSTAT_UPDATED(cgrp, bpf_get_smp_processor_id());
	return 0;
}

/* own.f = state.f - prev.f; prev.f = state.f */
#define TAKE(f) ({ __u64 s = READ_ONCE_U64(pc->state.f); own.f = s - pc->prev.f; pc->prev.f = s; })

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(hs_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	struct hs_counters own = {}, delta;
	struct hs_total zero = {}, *t;
	struct hs_pcpu *pc;
	__u64 id;

	/* locked add: full barrier after rstat's unlink (see top) */
	__sync_fetch_and_add(&g.flush_calls, 1);
	id = cgrp->kn->id;
	pc = bpf_map_lookup_percpu_elem(&pcpu_stats, &id, (__u32)cpu);
	if (pc) {
		TAKE(count);
		TAKE(time_ns);
		TAKE(pages);
	}
	if (own.count || own.time_ns || own.pages) {
		__sync_fetch_and_add(&g.flush_folded, 1);
		t = elem_of(&totals, &id, &zero);
	} else {
		t = bpf_map_lookup_elem(&totals, &id);	/* none: nothing pending */
	}
	if (!t)
		return 0;
	delta = own;
	add_to(&delta, &t->pending);
	t->pending = (struct hs_counters){};
	add_to(&t->own, &own);
	add_to(&t->total, &delta);
	if (!parent || hs_broken || !(delta.count || delta.time_ns || delta.pages))
		return 0;
	id = parent->kn->id;
	t = elem_of(&totals, &id, &zero);
	if (t)
		add_to(&t->pending, &delta);
	return 0;
}

SEC("iter.s/cgroup")
int hs_dump(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct hs_total zero = {}, *t;
	__u64 id;

	if (!cgrp)
		return 0;	/* end of the walk */
	/* fold every CPU's delta of the subtree, children first (may sleep) */
	RSTAT_FLUSH(cgrp);
	id = cgrp->kn->id;
	__sync_fetch_and_add(&g.iter_calls, 1);
	t = bpf_map_lookup_elem(&totals, &id);
	if (!t)
		t = &zero;
	BPF_SEQ_PRINTF(seq, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu\n",
		       id, t->total.count, t->total.time_ns, t->total.pages,
		       t->own.count, t->own.time_ns, t->own.pages, t->pending.pages);
	return 0;
}
