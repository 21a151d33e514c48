// SPDX-License-Identifier: GPL-2.0
/*
 * Negative case: bpf_mem_cgroup_flush_stats() is KF_SLEEPABLE (it ends in
 * cgroup_rstat_flush(), which may sleep).  Calling it from a NON-sleepable
 * "iter/cgroup" program must make the verifier refuse to load this object.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern struct mem_cgroup *bpf_get_mem_cgroup(struct cgroup_subsys_state *css) __ksym;
extern void bpf_put_mem_cgroup(struct mem_cgroup *memcg) __ksym;
extern void bpf_mem_cgroup_flush_stats(struct mem_cgroup *memcg) __ksym;

SEC("iter/cgroup")
int memcg_flush_in_plain_iter(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;

	if (!cgrp)
		return 0;
	memcg = bpf_get_mem_cgroup(&cgrp->self);
	if (!memcg)
		return 0;
	/* the verifier must refuse this call */
	bpf_mem_cgroup_flush_stats(memcg);
	bpf_put_mem_cgroup(memcg);
	return 0;
}
