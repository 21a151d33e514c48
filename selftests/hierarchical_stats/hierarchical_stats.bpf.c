// SPDX-License-Identifier: GPL-2.0
/*
 * Hierarchical memcg-reclaim statistics collected with BPF and aggregated by
 * rstat (upstream's old cgroup_hierarchical_stats workflow, vmscan events).
 * Collection (tp_btf/mm_vmscan_memcg_reclaim_begin and _end):
 *   The tracepoints carry no memcg; try_to_free_mem_cgroup_pages() runs in
 *   the context of the task that asked for the reclaim, so the event is
 *   charged to the current task's cgroup (task->cgroups->dfl_cgrp).  For
 *   every end event we add, on the current CPU, 1 to count, end - begin of
 *   the same task to time_ns and nr_reclaimed to pages, in the cgroup's
 *   per-CPU element of pcpu_stats, and then tell rstat with
 *   RSTAT_UPDATED(cgrp, cpu).
 *
 * Aggregation (fentry/bpf_rstat_flush(cgrp, parent, cpu)):
 *   rstat calls the hook for every updated cgroup of a flushed subtree, once
 *   per CPU, children before their parent.  For (cgrp, cpu) we take the
 *   per-CPU delta since the last flush (state - prev; only the flusher
 *   writes prev, only the tracepoints of that CPU write state, so no update
 *   is lost), add what the children pushed into cgrp's "pending", fold the
 *   sum into cgrp's total and push it into the parent's pending.  Flushes are
 *   serialised by the rstat lock, so the totals map needs no atomics.
 *   With hs_broken set (--broken) the push to the parent is left out:
 *   parents then stay at their own, i.e. zero, and the test must fail.
 *
 * Reading (iter.s/cgroup, one SELF_ONLY link per cgroup):
 *   RSTAT_FLUSH(cgrp) (sleepable kfunc), then one line "cgroup id=<kn id>
 *   count= time_ns= pages= own_count= own_time_ns= own_pages= pending_pages="
 *   ("own": what tasks in this very cgroup contributed).
 *
 * Ordering (why there are atomics on the global counters): the updater does
 * "store state; load updated_next" (in the rstat updated kfunc), a
 * concurrent flusher "store updated_next = NULL (unlink); load state".  On
 * x86 a store may pass a later load, and then both could miss each other:
 * the flusher folds the old state and the updater sees the cgroup still on
 * the list and does not re-add it, so the last update would wait for the
 * next one, which in a test that stops reclaiming never comes.  The locked
 * add on a global counter between the store and the load on both sides is
 * a full barrier and closes that window.
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

/* Per cgroup: written only by the flusher, under cgroup_rstat_lock. */
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
	__u32 cpu = bpf_get_smp_processor_id();
	struct hs_pcpu zero = {}, *pc;
	struct cgroup *cgrp;
	__u64 *start, now, dt = 0, id;

	now = bpf_ktime_get_ns();
	__sync_fetch_and_add(&g.end_events, 1);
	start = bpf_map_lookup_elem(&reclaim_start, &tid);
	if (start) {
		if (now > *start)
			dt = now - *start;
		bpf_map_delete_elem(&reclaim_start, &tid);
	} else {
		__sync_fetch_and_add(&g.unmatched_end, 1);
	}

	/* the reclaim belongs to the cgroup of the task that asked for it */
	cgrp = task->cgroups->dfl_cgrp;
	if (!cgrp)
		return 0;
	id = cgrp->kn->id;
	if (id != bpf_get_current_cgroup_id())
		__sync_fetch_and_add(&g.id_mismatch, 1);

	pc = bpf_map_lookup_elem(&pcpu_stats, &id);
	if (!pc) {
		/* -EEXIST: created by another CPU meanwhile; look up again */
		bpf_map_update_elem(&pcpu_stats, &id, &zero, BPF_NOEXIST);
		pc = bpf_map_lookup_elem(&pcpu_stats, &id);
		if (!pc) {
			__sync_fetch_and_add(&g.map_errors, 1);
			return 0;
		}
	}
	/* this CPU's element: only this CPU writes state */
	pc->state.time_ns += dt;
	pc->state.pages += nr_reclaimed;
	/* locked add: state is visible before rstat's on-list test (see top) */
	__sync_fetch_and_add(&pc->state.count, 1);

	RSTAT_UPDATED(cgrp, cpu);
	return 0;
}

static __always_inline bool is_zero(const struct hs_counters *c)
{
	return !c->count && !c->time_ns && !c->pages;
}

static __always_inline void add_to(struct hs_counters *dst,
				   const struct hs_counters *src)
{
	dst->count += src->count;
	dst->time_ns += src->time_ns;
	dst->pages += src->pages;
}

static __always_inline struct hs_total *total_of(__u64 id)
{
	struct hs_total zero = {}, *t;

	t = bpf_map_lookup_elem(&totals, &id);
	if (t)
		return t;
	bpf_map_update_elem(&totals, &id, &zero, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&totals, &id);
	if (!t)
		__sync_fetch_and_add(&g.map_errors, 1);
	return t;
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(hs_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	struct hs_counters own = {}, delta;
	struct hs_total *t;
	struct hs_pcpu *pc;
	__u64 id, s;

	/* locked add: full barrier after rstat's unlink (see top) */
	__sync_fetch_and_add(&g.flush_calls, 1);
	id = cgrp->kn->id;

	pc = bpf_map_lookup_percpu_elem(&pcpu_stats, &id, (__u32)cpu);
	if (pc) {
		s = READ_ONCE_U64(pc->state.count);
		own.count = s - pc->prev.count;
		pc->prev.count = s;
		s = READ_ONCE_U64(pc->state.time_ns);
		own.time_ns = s - pc->prev.time_ns;
		pc->prev.time_ns = s;
		s = READ_ONCE_U64(pc->state.pages);
		own.pages = s - pc->prev.pages;
		pc->prev.pages = s;
	}

	if (is_zero(&own)) {
		t = bpf_map_lookup_elem(&totals, &id);
		if (!t)
			return 0;	/* nothing recorded, nothing pending */
	} else {
		__sync_fetch_and_add(&g.flush_folded, 1);
		t = total_of(id);
		if (!t)
			return 0;
	}

	delta = own;
	add_to(&delta, &t->pending);
	t->pending.count = 0;
	t->pending.time_ns = 0;
	t->pending.pages = 0;
	add_to(&t->own, &own);
	add_to(&t->total, &delta);

	if (!parent || is_zero(&delta) || hs_broken)
		return 0;
	t = total_of(parent->kn->id);
	if (t)
		add_to(&t->pending, &delta);
	return 0;
}

SEC("iter.s/cgroup")
int hs_dump(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct hs_total *t;
	__u64 id;

	if (!cgrp)
		return 0;	/* end of the walk */

	/* fold every CPU's delta of the subtree, children first (may sleep) */
	RSTAT_FLUSH(cgrp);

	id = cgrp->kn->id;
	__sync_fetch_and_add(&g.iter_calls, 1);
	t = bpf_map_lookup_elem(&totals, &id);
	if (!t) {
		BPF_SEQ_PRINTF(seq, "cgroup id=%llu count=0 time_ns=0 pages=0 own_count=0 own_time_ns=0 own_pages=0 pending_pages=0\n",
			       id);
		return 0;
	}
	BPF_SEQ_PRINTF(seq, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu\n",
		       id, t->total.count, t->total.time_ns, t->total.pages,
		       t->own.count, t->own.time_ns, t->own.pages,
		       t->pending.pages);
	return 0;
}
