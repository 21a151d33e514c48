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
#define TRACE_MAX 64
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

RS_DUMP(rp_dump, "%llu %llu %llu %llu\n", cgrp->kn->id, t->total[0], t->own[0], t->pending[0])
