/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What reclaim_stats.bpf.h counts, for both sides: the three counters per
 * cgroup (rstat_counters.h) and the global bookkeeping.  Userspace includes
 * this before the skeleton, which refers to struct rc_global.
 */
#ifndef SELFTESTS_LIB_RECLAIM_STATS_H
#define SELFTESTS_LIB_RECLAIM_STATS_H

enum {
	RC_COUNT,	/* mm_vmscan_memcg_reclaim_end events */
	RC_TIME_NS,	/* sum of (end - begin) of the same task */
	RC_PAGES,	/* sum of the end events' nr_reclaimed */
	RC_LRU,		/* pages reclaimed from the LRU lists (mm_vmscan_lru_shrink_inactive):
			 * what memcg counts as pgsteal; RC_PAGES less freed slab before 6.4 */
	RS_NR
};

#include "rstat_counters.h"

/* only ever added to (atomically): userspace compares before and after */
struct rc_global {
	__u64 begin_events;	/* memcg_reclaim_begin seen */
	__u64 end_events;	/* memcg_reclaim_end seen */
	__u64 unmatched_end;	/* end without a recorded begin of the task */
	__u64 id_mismatch;	/* dfl_cgrp->kn->id != bpf_get_current_cgroup_id() */
	__u64 map_errors;	/* a begin timestamp was lost */
};

#endif /* SELFTESTS_LIB_RECLAIM_STATS_H */
