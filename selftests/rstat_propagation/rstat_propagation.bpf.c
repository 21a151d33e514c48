// SPDX-License-Identifier: GPL-2.0
/*
 * Deterministic rstat propagation: every move of a task into a cgroup of the
 * test's tree (tp_btf/cgroup_attach_task) counts 1 for that cgroup on this
 * CPU and tells rstat; fentry/bpf_rstat_flush folds (cgroup, CPU)'s delta and
 * what its children pushed up into the cgroup's total and pushes it to the
 * parent; a sleepable cgroup iterator flushes and prints the totals.
 *
 * Only cgroups userspace put in "totals" (its tree) are counted.  Flushes are
 * serialised by the rstat lock, so the totals need no atomics.  The locked
 * adds on the global counters are full barriers: the updater's "store state;
 * test on-list" and a concurrent flusher's "unlink; load state" cannot both
 * miss each other.  With RSTAT_API_CSS (rstat_propagation_css.bpf.c) the
 * mainline (6.16+) css_rstat_* kfuncs are called instead of cgroup_rstat_*.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

/* set by "--broken": the flush does not push to the parent (must FAIL) */
const volatile bool broken;

struct pcpu_count {
	__u64 state;	/* moves recorded on this CPU (only this CPU writes) */
	__u64 prev;	/* state at the last flush of (cgroup, CPU) */
};

struct total {
	__u64 total;	/* own + all descendants, as flushed */
	__u64 own;	/* moves into this very cgroup */
	__u64 pending;	/* pushed up by flushed children, not yet folded */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, struct pcpu_count);
} pcpu SEC(".maps");

/* the test's tree: filled (zeroed) by userspace, keyed by cgroup id */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, struct total);
} totals SEC(".maps");

__u64 events;		/* moves into the tree seen */
__u64 flushes;		/* bpf_rstat_flush() calls */
__u64 map_errors;

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(rp_attach, struct cgroup *dst, const char *path,
	     struct task_struct *task, bool threadgroup)
{
	struct pcpu_count zero = {}, *pc;
	__u64 id = dst->kn->id;

	if (!bpf_map_lookup_elem(&totals, &id))
		return 0;
	pc = bpf_map_lookup_elem(&pcpu, &id);
	if (!pc) {
		bpf_map_update_elem(&pcpu, &id, &zero, BPF_NOEXIST);
		pc = bpf_map_lookup_elem(&pcpu, &id);
		if (!pc) {
			__sync_fetch_and_add(&map_errors, 1);
			return 0;
		}
	}
	__sync_fetch_and_add(&pc->state, 1);
	__sync_fetch_and_add(&events, 1);
	RSTAT_UPDATED(dst, bpf_get_smp_processor_id());
	return 0;
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(rp_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	__u64 id = cgrp->kn->id, own = 0, delta, s;
	struct pcpu_count *pc;
	struct total *t;

	__sync_fetch_and_add(&flushes, 1);
	t = bpf_map_lookup_elem(&totals, &id);
	if (!t)
		return 0;
	pc = bpf_map_lookup_percpu_elem(&pcpu, &id, cpu);
	if (pc) {
		s = *(volatile __u64 *)&pc->state;
		own = s - pc->prev;
		pc->prev = s;
	}
	delta = own + t->pending;
	t->pending = 0;
	t->own += own;
	t->total += delta;
	if (broken || !parent || !delta)
		return 0;
	id = parent->kn->id;
	t = bpf_map_lookup_elem(&totals, &id);
	if (t)
		t->pending += delta;
	return 0;
}

/* "<id> <total> <own> <pending>" per cgroup of the walk, after a flush */
SEC("iter.s/cgroup")
int rp_dump(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct total zero = {}, *t;
	__u64 id;

	if (!cgrp)
		return 0;
	RSTAT_FLUSH(cgrp);
	id = cgrp->kn->id;
	t = bpf_map_lookup_elem(&totals, &id);
	if (!t)
		t = &zero;
	BPF_SEQ_PRINTF(ctx->meta->seq, "%llu %llu %llu %llu\n", id, t->total, t->own,
		       t->pending);
	return 0;
}
