/* SPDX-License-Identifier: GPL-2.0 */
/* What rstat_tree_bench.bpf.c counts per cgroup and CPU, shared with userspace. */
#pragma once
union rtb_counters {
	struct { __u64 count, time_ns, pages; };	/* reclaim_end: events, durations, nr_reclaimed */
	__u64 v[3];
};
/* state written by the tracepoints, prev by the flusher */
struct rtb_pcpu {
	union rtb_counters state, prev;
};
