/* SPDX-License-Identifier: GPL-2.0 */
/* What rstat_tree_bench.bpf.c counts per cgroup, shared with the userspace. */
#ifndef RSTAT_TREE_BENCH_H
#define RSTAT_TREE_BENCH_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

struct rtb_counters {
	__u64 count;	/* mm_vmscan_memcg_reclaim_end events */
	__u64 time_ns;	/* sum of (end - begin) of the same task */
	__u64 pages;	/* sum of nr_reclaimed */
};

/* per cgroup and CPU: state written by the tracepoints, prev by the flusher */
struct rtb_pcpu {
	struct rtb_counters state, prev;
};

#endif /* RSTAT_TREE_BENCH_H */
