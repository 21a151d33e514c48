/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-cgroup counters summed up the cgroup tree by rstat, the way the
 * kernel's own rstat users do it, with BPF maps keyed by cgroup id or, built
 * with RS_CGRP_STORAGE, in cgroup local storage (the same programs and maps):
 *
 * rs_count(cgrp, add)  adds RS_NR counters for @cgrp on this CPU (or on the CPU
 *	userspace put in rs_update_cpu) and tells rstat (RSTAT_UPDATED) that
 *	(cgroup, that CPU) has something to flush.
 * rs_flush (fentry/bpf_rstat_flush)  rstat calls it for every (cgroup, CPU)
 *	with updates, children before parents, under the rstat lock: the CPU's
 *	delta since the last flush plus what the children pushed up (pending)
 *	is folded into the cgroup's total and pushed to the parent's pending
 *	(not with rs_broken set, the broken variants' "forgot the parent").
 * rs_read(cgrp)  RSTAT_FLUSH(cgrp) (so: sleepable programs only), then the
 *	cgroup's totals, zero when it never counted anything.
 * RS_DUMP(name, fmt, args...)  a cgroup iterator printing a line of rs_read()'s.
 *
 * The flushes are serialised by the rstat lock: the totals need no atomics.
 * The locked adds (the first counter in rs_count(), rs_flushes in rs_flush)
 * are full barriers: the updater's "store state; test on-list" and the
 * flusher's "unlink; load state" cannot both miss each other, which on x86
 * could lose the last update until the next one, which a finished test
 * never makes.
 *
 * RS_NR must be known first; include after vmlinux.h, bpf_helpers.h, bpf_tracing.h.
 * With RSTAT_API_CSS the 6.16+ kfunc names are called (bpf_rstat.h).
 */
#ifndef SELFTESTS_LIB_RSTAT_COUNTERS_BPF_H
#define SELFTESTS_LIB_RSTAT_COUNTERS_BPF_H

#include "bpf_rstat.h"
#include "rstat_counters.h"

#ifdef RS_CGRP_STORAGE
/*
 * Per-cgroup state in cgroup local storage: found from the cgroup without a
 * lookup by id, and freed with the cgroup.  32 is BPF_MAP_TYPE_CGRP_STORAGE
 * in the UAPI (6.2+, patches/cgrp-storage on 6.1): a kernel without it has no
 * such enumerator in its vmlinux.h, and the object must still compile there.
 * One difference: the kernel frees a cgroup's storage before its last rstat
 * flush (css_free_rwork_fn), so what a removed cgroup counted after its last
 * read is not pushed to its parent here; with maps keyed by id it is.
 */
#define RS_MAP_CGRP_STORAGE 32
struct {
	__uint(type, RS_MAP_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rs_pcpu_all);
} rs_pcpu SEC(".maps");

struct {
	__uint(type, RS_MAP_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rs_total);
} rs_totals SEC(".maps");
#else
#define RS_MAX_CGROUPS 4096

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, RS_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct rs_pcpu);
} rs_pcpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RS_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct rs_total);
} rs_totals SEC(".maps");
#endif

bool rs_broken;			/* set by userspace: the flush forgets the parent */
/* set by userspace: count in this CPU's slot and tell rstat this CPU, not the current
 * one (-1), as a program updating another CPU's per-CPU state does */
__s32 rs_update_cpu = -1;
__u64 rs_flushes;		/* bpf_rstat_flush() calls */
__u64 rs_folded;		/* ... that found a per-CPU delta */
__u64 rs_map_errors;		/* a map update failed: counts were lost */
struct rs_total rs_none;	/* what rs_read() gives for a cgroup without totals */

#ifdef RS_CGRP_STORAGE
/* @cgrp's counters of @cpu; with @create made (zeroed) if absent */
static __always_inline struct rs_pcpu *rs_pcpu_of(struct cgroup *cgrp, __u32 cpu, bool create)
{
	struct rs_pcpu_all *all = bpf_cgrp_storage_get(&rs_pcpu, cgrp, 0,
						       create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);

	if ((!all && create) || cpu >= RS_MAX_CPUS) {
		__sync_fetch_and_add(&rs_map_errors, 1);
		return NULL;
	}
	return all ? &all->cpu[cpu] : NULL;
}

/* @cgrp's totals; with @create made if absent (never for a dying cgroup) */
static __always_inline struct rs_total *rs_total_of(struct cgroup *cgrp, bool create)
{
	struct rs_total *t = bpf_cgrp_storage_get(&rs_totals, cgrp, 0,
						  create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);

	if (!t && create)
		__sync_fetch_and_add(&rs_map_errors, 1);
	return t;
}

/*
 * The totals of @cgrp and its ancestors, made where absent, from rs_count():
 * not in the flush, where interrupts are off.  Made in the flush, storage
 * failed for a burst of new cgroups (rstat_tree_bench on 6.12 lost their
 * counts: 4 of 8 new leaves, 6 of 90 in another run): 6.12 takes it from the
 * BPF memory allocator, whose per-CPU free lists are refilled from irq_work,
 * which cannot run until the flush re-enables interrupts.
 */
#define RS_MAX_DEPTH 16
static __always_inline void rs_prepare(struct cgroup *cgrp)
{
	struct cgroup *c = cgrp;
	int i;

	for (i = 0; c && i < RS_MAX_DEPTH; i++) {
		if (bpf_cgrp_storage_get(&rs_totals, c, 0, 0))
			return;	/* then its ancestors have theirs too */
		if (!rs_total_of(c, true))
			return;
		c = c->self.parent ? c->self.parent->cgroup : NULL;
	}
}
#else
/* @map's element for @id, made (zeroed) if absent; -EEXIST: another CPU made it */
static __always_inline void *rs_elem(void *map, __u64 *id, void *zero)
{
	void *v = bpf_map_lookup_elem(map, id);

	if (v)
		return v;
	bpf_map_update_elem(map, id, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, id);
	if (!v)
		__sync_fetch_and_add(&rs_map_errors, 1);
	return v;
}

/* @cgrp's counters of @cpu; with @create made (every CPU's, zeroed) if absent */
static __always_inline struct rs_pcpu *rs_pcpu_of(struct cgroup *cgrp, __u32 cpu, bool create)
{
	struct rs_pcpu zero = {};
	__u64 id = cgrp->kn->id;

	if (create && !rs_elem(&rs_pcpu, &id, &zero))
		return NULL;
	return bpf_map_lookup_percpu_elem(&rs_pcpu, &id, cpu);
}

static __always_inline struct rs_total *rs_total_of(struct cgroup *cgrp, bool create)
{
	struct rs_total zero = {};
	__u64 id = cgrp->kn->id;

	return create ? rs_elem(&rs_totals, &id, &zero) : bpf_map_lookup_elem(&rs_totals, &id);
}

/* the hash maps are preallocated: made in the flush, an element cannot fail for memory */
static __always_inline void rs_prepare(struct cgroup *cgrp)
{
}
#endif

static __always_inline void rs_count(struct cgroup *cgrp, const __u64 *add)
{
	__u32 cpu = rs_update_cpu >= 0 ? (__u32)rs_update_cpu : bpf_get_smp_processor_id();
	struct rs_pcpu *pc = rs_pcpu_of(cgrp, cpu, true);
	int i;

	if (!pc)
		return;
	rs_prepare(cgrp);
	for (i = 1; i < RS_NR; i++)
		pc->state[i] += add[i];
	__sync_fetch_and_add(&pc->state[0], add[0]);	/* the barrier: see the top */
	RSTAT_UPDATED(cgrp, cpu);
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(rs_flush, struct cgroup *cgrp, struct cgroup *parent, int cpu)
{
	__u64 delta[RS_NR] = {}, any = 0, s;
	struct rs_total *t;
	struct rs_pcpu *pc;
	int i;

	__sync_fetch_and_add(&rs_flushes, 1);	/* the barrier: see the top */
	pc = rs_pcpu_of(cgrp, (__u32)cpu, false);
	for (i = 0; pc && i < RS_NR; i++) {
		s = *(volatile __u64 *)&pc->state[i];
		delta[i] = s - pc->prev[i];
		pc->prev[i] = s;
		any |= delta[i];
	}
	if (any)
		__sync_fetch_and_add(&rs_folded, 1);
	/* no totals and nothing new: nothing can be pending either */
	t = rs_total_of(cgrp, any);
	for (i = 0, any = 0; t && i < RS_NR; i++) {
		t->own[i] += delta[i];
		delta[i] += t->pending[i];
		t->pending[i] = 0;
		t->total[i] += delta[i];
		any |= delta[i];
	}
	if (!t || !parent || rs_broken || !any)
		return 0;
	t = rs_total_of(parent, true);
	for (i = 0; t && i < RS_NR; i++)
		t->pending[i] += delta[i];
	return 0;
}

static __always_inline const struct rs_total *rs_read(struct cgroup *cgrp)
{
	const struct rs_total *t;

	RSTAT_FLUSH(cgrp);	/* children first; may sleep */
	t = rs_total_of(cgrp, false);
	return t ?: &rs_none;
}

/* a sleepable cgroup iterator printing, per cgroup, @fmt of @args: of cgrp and its totals t */
#define RS_DUMP(name, fmt, args...)					\
SEC("iter.s/cgroup")							\
int name(struct bpf_iter__cgroup *ctx)					\
{									\
	struct cgroup *cgrp = ctx->cgroup;				\
	const struct rs_total *t;					\
									\
	if (!cgrp)							\
		return 0;	/* the end of the walk */		\
	t = rs_read(cgrp);						\
	BPF_SEQ_PRINTF(ctx->meta->seq, fmt, args);			\
	return 0;							\
}

#endif /* SELFTESTS_LIB_RSTAT_COUNTERS_BPF_H */
