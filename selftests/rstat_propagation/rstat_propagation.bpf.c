// SPDX-License-Identifier: GPL-2.0
/*
 * Deterministic rstat propagation: every move of a task into a cgroup of the
 * test's tree (tp_btf/cgroup_attach_task) counts 1 for that cgroup on this
 * CPU, summed up the tree by rstat (lib/rstat_counters.bpf.h); a sleepable
 * cgroup iterator flushes and prints "<id> <total> <own> <pending>" per
 * cgroup.  Only the cgroups userspace put in rs_totals (its tree) count.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define RS_NR 1
#include "rstat_counters.bpf.h"

char _license[] SEC("license") = "GPL";

__u64 events;		/* moves into the tree seen */

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(rp_attach, struct cgroup *dst, const char *path,
	     struct task_struct *task, bool threadgroup)
{
	__u64 id = dst->kn->id, one[RS_NR] = { 1 };

	if (!bpf_map_lookup_elem(&rs_totals, &id))
		return 0;
	__sync_fetch_and_add(&events, 1);
	rs_count(dst, one);
	return 0;
}

/*
 * The rstat lock's tracepoints (6.10+) for the cgroup userspace names in
 * trace_id, in order: 'L' locked and 'U' unlock, each with the CPU it names
 * (the flush loop's CPU, -1 outside the loop).  One flusher at a time holds
 * the lock, so the events of one flush come in order.
 */
#define TRACE_MAX 128
__u64 trace_id;
__u32 trace_n;
int trace_cpu[TRACE_MAX];
char trace_what[TRACE_MAX];

static void trace_event(struct cgroup *cgrp, int cpu, char what)
{
	__u32 n = trace_n;

	if (!trace_id || cgrp->kn->id != trace_id || n >= TRACE_MAX)
		return;
	trace_cpu[n] = cpu;
	trace_what[n] = what;
	trace_n = n + 1;
}

SEC("tp_btf/cgroup_rstat_locked")
int BPF_PROG(rp_trace_locked, struct cgroup *cgrp, int cpu, bool contended)
{
	trace_event(cgrp, cpu, 'L');
	return 0;
}

SEC("tp_btf/cgroup_rstat_unlock")
int BPF_PROG(rp_trace_unlock, struct cgroup *cgrp, int cpu, bool contended)
{
	trace_event(cgrp, cpu, 'U');
	return 0;
}

/*
 * The per-CPU rstat lock's tracepoints (6.10 to 6.15: 6.16 has no per-CPU lock), of the
 * flush side only (the update side's are the _fastpath ones), into the same trace:
 * 'w' contended (waiting), 'l' locked uncontended, 'k' locked after waiting, 'u' unlock.
 */
SEC("tp_btf/cgroup_rstat_cpu_lock_contended")
int BPF_PROG(rp_trace_cpu_contended, struct cgroup *cgrp, int cpu, bool contended)
{
	trace_event(cgrp, cpu, 'w');
	return 0;
}

/*
 * A per-CPU lock held on purpose (update_waits_for_its_cpus_lock,
 * flush_waits_for_an_updates_lock): the first time the lock of CPU hold_cpu is taken
 * for the cgroup hold_id (by a flush of it, or an update of it), it is held hold_ns
 * (hold_state 1 while it is, 2 after) until hold_until (CLOCK_MONOTONIC, ns).  With
 * hold_at_unlock, it is held instead where a flush of hold_id lets it go: the CPU's
 * list popped, so that every cgroup under hold_id is off it.  An update of cont_id that
 * waits for a lock is counted: cont_n for the lock of CPU hold_cpu, cont_other for
 * another CPU's.
 */
__u64 hold_id, hold_ns, hold_until, cont_id;
__s32 hold_cpu = -1;
__u32 hold_state, hold_at_unlock, cont_n, cont_other;

static long hold_spin(__u64 index, void *until)
{
	return bpf_ktime_get_ns() >= *(__u64 *)until;
}

static void hold_lock(struct cgroup *cgrp, int cpu)
{
	__u64 until;

	if (!hold_id || cgrp->kn->id != hold_id || cpu != hold_cpu || hold_state)
		return;
	until = bpf_ktime_get_ns() + hold_ns;
	hold_until = until;
	hold_state = 1;
	bpf_loop(1 << 23, hold_spin, &until, 0);
	hold_state = 2;
}

SEC("tp_btf/cgroup_rstat_cpu_locked")
int BPF_PROG(rp_trace_cpu_locked, struct cgroup *cgrp, int cpu, bool contended)
{
	trace_event(cgrp, cpu, contended ? 'k' : 'l');
	if (!hold_at_unlock)
		hold_lock(cgrp, cpu);
	return 0;
}

SEC("tp_btf/cgroup_rstat_cpu_locked_fastpath")
int BPF_PROG(rp_trace_cpu_locked_fastpath, struct cgroup *cgrp, int cpu, bool contended)
{
	if (!hold_at_unlock)
		hold_lock(cgrp, cpu);
	return 0;
}

SEC("tp_btf/cgroup_rstat_cpu_lock_contended_fastpath")
int BPF_PROG(rp_trace_cpu_contended_fastpath, struct cgroup *cgrp, int cpu, bool contended)
{
	if (cont_id && cgrp->kn->id == cont_id) {
		if (cpu == hold_cpu)
			cont_n++;
		else
			cont_other++;
	}
	return 0;
}

SEC("tp_btf/cgroup_rstat_cpu_unlock")
int BPF_PROG(rp_trace_cpu_unlock, struct cgroup *cgrp, int cpu, bool contended)
{
	trace_event(cgrp, cpu, 'u');
	if (hold_at_unlock)
		hold_lock(cgrp, cpu);
	return 0;
}

/*
 * Updates for one CPU from two CPUs at once (concurrent_updates_for_one_cpu): a task
 * in one of the cgroups race_id names runs bpf_fentry_test1() (BPF_PROG_TEST_RUN of
 * this program) and counts 1 for its cgroup, in the slot of and for the CPU userspace
 * put in rs_update_cpu.
 */
__u64 race_id[2];

SEC("fentry/bpf_fentry_test1")
int BPF_PROG(rp_race_update, int a)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct cgroup *cgrp = task->cgroups->dfl_cgrp;
	__u64 id = cgrp->kn->id, one[RS_NR] = { 1 };

	if (id && (id == race_id[0] || id == race_id[1]))
		rs_count(cgrp, one);
	return 0;
}

RS_DUMP(rp_dump, "%llu %llu %llu %llu\n", cgrp->kn->id, t->total[0], t->own[0], t->pending[0])
