// SPDX-License-Identifier: GPL-2.0
/*
 * The iterator side of memcg_kfuncs_bench: for each cgroup it visits, the
 * same work a read of memory.stat does for the fields an agent wants --
 * bpf_memcg_flush_stats() (the flush memory.stat does) and one fetch per
 * field -- and the values in binary.
 *
 *   MB_MODE_SEQ   (one SELF_ONLY link per cgroup): one struct mb_rec to the
 *                 seq_file, read() by userspace.
 *   MB_MODE_TREE  (one DESCENDANTS_PRE link over the parent): a record per
 *                 descendant into recs[] (global data, mmapped by
 *                 userspace); the walk's root, skip_id, is skipped without
 *                 flushing or fetching.  Not the seq_file: a cgroup
 *                 iterator cannot continue a walk in a second read() (it
 *                 returns -EOPNOTSUPP), so one walk's output must fit in
 *                 its 32 KiB buffer, which 1000 records of 80 bytes do not.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "memcg_kfuncs_bench.h"

char _license[] SEC("license") = "GPL";

extern int bpf_memcg_flush_stats(struct cgroup *cgrp) __ksym;
extern s64 bpf_memcg_node_stat_fetch(struct cgroup *cgrp,
				     enum node_stat_item item) __ksym;
extern s64 bpf_memcg_stat_fetch(struct cgroup *cgrp,
				enum memcg_stat_item item) __ksym;
extern s64 bpf_memcg_vm_event_fetch(struct cgroup *cgrp,
				    enum vm_event_item item) __ksym;

__u32 mode = 0;
__u64 skip_id = 0;
__u32 nrec = 0;
__u32 overflow = 0;
struct mb_rec recs[MB_MAX_TREE] = {};

static __always_inline void fill(struct mb_rec *r, struct cgroup *cgrp, __u64 id)
{
	r->id = id;
	r->flush_ret = bpf_memcg_flush_stats(cgrp);
	r->val[B_ANON] = bpf_memcg_node_stat_fetch(cgrp, NR_ANON_MAPPED);
	r->val[B_FILE] = bpf_memcg_node_stat_fetch(cgrp, NR_FILE_PAGES);
	r->val[B_KERNEL] = bpf_memcg_stat_fetch(cgrp, MEMCG_KMEM);
	r->val[B_SHMEM] = bpf_memcg_node_stat_fetch(cgrp, NR_SHMEM);
	r->val[B_FILE_MAPPED] = bpf_memcg_node_stat_fetch(cgrp, NR_FILE_MAPPED);
	r->val[B_WS_REFAULT_ANON] =
		bpf_memcg_node_stat_fetch(cgrp, WORKINGSET_REFAULT_ANON);
	r->val[B_PGFAULT] = bpf_memcg_vm_event_fetch(cgrp, PGFAULT);
	r->val[B_PGMAJFAULT] = bpf_memcg_vm_event_fetch(cgrp, PGMAJFAULT);
}

SEC("iter.s/cgroup")
int memcg_bench(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct mb_rec rec;
	__u64 id;
	__u32 i;

	if (!cgrp)
		return 0;
	id = cgrp->kn->id;

	if (mode == MB_MODE_TREE) {
		if (id == skip_id)
			return 0;
		i = nrec;
		if (i >= MB_MAX_TREE) {
			overflow++;
			return 0;
		}
		fill(&recs[i], cgrp, id);
		nrec = i + 1;
		return 0;
	}

	fill(&rec, cgrp, id);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
