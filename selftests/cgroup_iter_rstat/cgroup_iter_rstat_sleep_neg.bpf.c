// SPDX-License-Identifier: GPL-2.0
/*
 * Negative case: the same rstat flush as cgroup_iter_rstat.bpf.c, but from a
 * NON-sleepable cgroup iterator.  cgroup_rstat_flush() is registered as
 * KF_SLEEPABLE, so the verifier must refuse to load this program.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern void cgroup_rstat_flush(struct cgroup *cgrp) __ksym;

SEC("iter/cgroup")
int rstat_flush_in_plain_iter(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;

	/* the verifier must refuse this call */
	cgroup_rstat_flush(cgrp);
	BPF_SEQ_PRINTF(seq, "cgroup id=%llu\n", cgrp->kn->id);
	return 0;
}
