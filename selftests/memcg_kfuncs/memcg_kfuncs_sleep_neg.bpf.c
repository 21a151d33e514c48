// SPDX-License-Identifier: GPL-2.0
/*
 * Negative case: bpf_memcg_flush_stats() is KF_SLEEPABLE (it ends in
 * cgroup_rstat_flush(), which may sleep).  Calling it from a NON-sleepable
 * "iter/cgroup" program must make the verifier refuse to load this object.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern int bpf_memcg_flush_stats(struct cgroup *cgrp) __ksym;
extern s64 bpf_memcg_node_stat_fetch(struct cgroup *cgrp,
				     enum node_stat_item item) __ksym;

SEC("iter/cgroup")
int memcg_flush_in_plain_iter(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	s64 anon;

	if (!cgrp)
		return 0;

	/* the verifier must refuse this call */
	bpf_memcg_flush_stats(cgrp);
	anon = bpf_memcg_node_stat_fetch(cgrp, NR_ANON_MAPPED);
	BPF_SEQ_PRINTF(seq, "%llu %lld\n", cgrp->kn->id, anon);
	return 0;
}
