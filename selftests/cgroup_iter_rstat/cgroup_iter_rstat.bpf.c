// SPDX-License-Identifier: GPL-2.0
/*
 * Sleepable cgroup iterator that flushes rstat on every cgroup it visits and
 * reports one line per cgroup:
 *
 *   cgroup seq=<meta->seq_num> id=<kn->id> level=<level> cpu_ns=<bstat sum>
 *
 * and, when the walk is complete (the iterator calls us once with a NULL
 * cgroup), one epilogue line:
 *
 *   end visited=<n> flushed=<n>
 *
 * cpu_ns is cgrp->bstat.cputime.sum_exec_runtime read right after
 * cgroup_rstat_flush(cgrp), i.e. the flushed base CPU-time statistic.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern void cgroup_rstat_flush(struct cgroup *cgrp) __ksym;

/* Reset by userspace before every iteration. */
__u32 visited = 0;
__u32 flushed = 0;

SEC("iter.s/cgroup")
int cgroup_rstat_dump(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	__u64 seq_num = ctx->meta->seq_num;
	__u64 id, cpu_ns;
	int level;

	if (!cgrp) {
		/* Walk finished: post-processing call. */
		BPF_SEQ_PRINTF(seq, "end visited=%u flushed=%u\n",
			       visited, flushed);
		return 0;
	}

	/* May sleep; only legal because this program is sleepable. */
	cgroup_rstat_flush(cgrp);
	flushed++;

	id = cgrp->kn->id;
	level = cgrp->level;
	cpu_ns = cgrp->bstat.cputime.sum_exec_runtime;

	BPF_SEQ_PRINTF(seq, "cgroup seq=%llu id=%llu level=%d cpu_ns=%llu\n",
		       seq_num, id, level, cpu_ns);
	visited++;
	return 0;
}
