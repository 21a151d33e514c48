// SPDX-License-Identifier: GPL-2.0
/*
 * A sleepable cgroup iterator that flushes rstat on every cgroup it visits
 * and prints one line per cgroup, then one epilogue line (the NULL-cgroup
 * call at the end of the walk):
 *
 *   cgroup seq=<meta->seq_num> id=<kn->id> level=<level> cpu_ns=<bstat sum>
 *   end visited=<n> flushed=<n>
 *
 * cpu_ns is the flushed base CPU time (bstat.cputime.sum_exec_runtime).
 * rstat_flush_in_plain_iter makes the same call from a NON-sleepable
 * iterator: the verifier must refuse it (userspace loads it on its own).
 *
 * Built twice: as is for the cgroup_rstat_* kfuncs (before 6.16), and with
 * RSTAT_API_CSS (cgroup_iter_rstat_css.bpf.c) for css_rstat_* (6.16+).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

/* reset by userspace before every walk */
__u32 visited = 0;
__u32 flushed = 0;

SEC("iter.s/cgroup")
int cgroup_rstat_dump(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	__u64 seq_num = ctx->meta->seq_num;

	if (!cgrp) {
		BPF_SEQ_PRINTF(seq, "end visited=%u flushed=%u\n", visited, flushed);
		return 0;
	}
	RSTAT_FLUSH(cgrp);	/* may sleep */
	flushed++;
	BPF_SEQ_PRINTF(seq, "cgroup seq=%llu id=%llu level=%d cpu_ns=%llu\n", seq_num,
		       cgrp->kn->id, cgrp->level, cgrp->bstat.cputime.sum_exec_runtime);
	visited++;
	return 0;
}

SEC("iter/cgroup")
int rstat_flush_in_plain_iter(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;
	RSTAT_FLUSH(cgrp);	/* the verifier must refuse this call */
	BPF_SEQ_PRINTF(ctx->meta->seq, "cgroup id=%llu\n", cgrp->kn->id);
	return 0;
}
