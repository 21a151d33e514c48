// SPDX-License-Identifier: GPL-2.0
/*
 * A sleepable cgroup iterator that flushes rstat on every cgroup it visits and
 * prints a line per cgroup (cpu_ns: the flushed base CPU time), then an
 * epilogue (the NULL-cgroup call at the walk's end); it ends the walk early after
 * the cgroup userspace names.  The verifier must refuse
 * rstat_flush_in_plain_iter, the same call from a non-sleepable iterator.
 * Built twice: for cgroup_rstat_* (before 6.16), and with RSTAT_API_CSS
 * (cgroup_iter_rstat_css.bpf.c) for css_rstat_* (6.16+).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

__u32 visited, flushed;	/* reset by userspace before every walk */
__u64 stop_after_id;	/* set by userspace: return 1 (stop the walk) after this cgroup */

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
	return stop_after_id && cgrp->kn->id == stop_after_id;
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
