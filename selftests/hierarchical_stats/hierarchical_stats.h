/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Types shared by hierarchical_stats.bpf.c (through vmlinux.h) and
 * hierarchical_stats.c (through <linux/types.h>).  The userspace side must
 * include this before the skeletons, which refer to struct hs_global.
 */
#ifndef HIERARCHICAL_STATS_H
#define HIERARCHICAL_STATS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* The three per-cgroup statistics, in every map value below. */
struct hs_counters {
	__u64 count;	/* mm_vmscan_memcg_reclaim_end events */
	__u64 time_ns;	/* sum of (end - begin) of the same task */
	__u64 pages;	/* sum of the end events' nr_reclaimed */
};

/*
 * Global bookkeeping in .bss, only ever added to (atomically), so userspace
 * looks at differences across a run.
 */
struct hs_global {
	__u64 begin_events;	/* memcg_reclaim_begin seen */
	__u64 end_events;	/* memcg_reclaim_end seen */
	__u64 unmatched_end;	/* end without a recorded begin of the task */
	__u64 id_mismatch;	/* dfl_cgrp->kn->id != bpf_get_current_cgroup_id() */
	__u64 map_errors;	/* a map update failed: a statistic was lost */
	__u64 flush_calls;	/* bpf_rstat_flush() invocations seen */
	__u64 flush_folded;	/* ... that found a per-cpu delta to fold */
	__u64 iter_calls;	/* cgroups printed by the iterator */
};

#endif /* HIERARCHICAL_STATS_H */
