/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Memcg-reclaim statistics per cgroup, summed up the tree by rstat
 * (rstat_counters.bpf.h).  tp_btf/mm_vmscan_memcg_reclaim_{begin,end}: the
 * reclaim runs in the task that asked for it, so the end event (count,
 * end - begin of the task, nr_reclaimed) is counted for the current task's
 * cgroup.  rc_dump (iter.s/cgroup): flushes, then one line per cgroup:
 *
 *   cgroup id=I count=C time_ns=T pages=P own_count=.. own_time_ns=.. own_pages=.. pending_pages=.. lru_pages=L own_lru_pages=..
 *
 * tp_btf/mm_vmscan_lru_shrink_inactive adds the pages each LRU shrink reclaimed
 * (the number memcg counts as pgsteal) for the current task's cgroup: before 6.4
 * a memcg reclaim's nr_reclaimed also counts the slab pages it freed, so P - L is
 * that slab, measured (0 from 6.4).
 *
 * The whole BPF side of a test: its X.bpf.c includes this after vmlinux.h,
 * bpf_helpers.h and bpf_tracing.h.
 */
#ifndef SELFTESTS_LIB_RECLAIM_STATS_BPF_H
#define SELFTESTS_LIB_RECLAIM_STATS_BPF_H

#include "reclaim_stats.h"
#include "rstat_counters.bpf.h"

char _license[] SEC("license") = "GPL";

/* begin timestamp per task (thread id) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} rc_start SEC(".maps");

struct rc_global rc = {};

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(rc_reclaim_begin, int order, gfp_t gfp_flags)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	__sync_fetch_and_add(&rc.begin_events, 1);
	if (bpf_map_update_elem(&rc_start, &tid, &now, BPF_ANY))
		__sync_fetch_and_add(&rc.map_errors, 1);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(rc_reclaim_end, unsigned long nr_reclaimed)
{
	struct cgroup *cgrp = bpf_get_current_task_btf()->cgroups->dfl_cgrp;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns(), add[RS_NR] = { [RC_COUNT] = 1, [RC_PAGES] = nr_reclaimed }, *start;

	__sync_fetch_and_add(&rc.end_events, 1);
	start = bpf_map_lookup_elem(&rc_start, &tid);
	if (start) {
		add[RC_TIME_NS] = now > *start ? now - *start : 0;
		bpf_map_delete_elem(&rc_start, &tid);
	} else {
		__sync_fetch_and_add(&rc.unmatched_end, 1);
	}
	if (!cgrp)
		return 0;
	if (cgrp->kn->id != bpf_get_current_cgroup_id())
		__sync_fetch_and_add(&rc.id_mismatch, 1);
	rs_count(cgrp, add);
	return 0;
}

SEC("tp_btf/mm_vmscan_lru_shrink_inactive")
int BPF_PROG(rc_lru_shrink, int nid, unsigned long nr_scanned, unsigned long nr_reclaimed,
	     struct reclaim_stat *stat, int priority, int file)
{
	struct cgroup *cgrp = bpf_get_current_task_btf()->cgroups->dfl_cgrp;
	__u64 add[RS_NR] = { [RC_LRU] = nr_reclaimed };

	if (!cgrp || !nr_reclaimed)
		return 0;
	rs_count(cgrp, add);
	return 0;
}

RS_DUMP(rc_dump, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu own_count=%llu own_time_ns=%llu own_pages=%llu pending_pages=%llu lru_pages=%llu own_lru_pages=%llu\n",
	cgrp->kn->id, t->total[RC_COUNT], t->total[RC_TIME_NS], t->total[RC_PAGES],
	t->own[RC_COUNT], t->own[RC_TIME_NS], t->own[RC_PAGES], t->pending[RC_PAGES],
	t->total[RC_LRU], t->own[RC_LRU])

#endif /* SELFTESTS_LIB_RECLAIM_STATS_BPF_H */
