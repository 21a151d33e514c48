// SPDX-License-Identifier: GPL-2.0
/*
 * Negative case: bpf_mem_cgroup_flush_stats() is KF_SLEEPABLE (it ends in
 * cgroup_rstat_flush(), which may sleep).  Calling it from a NON-sleepable
 * "iter/cgroup" program must make the verifier refuse to load this object.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf_memcontrol.h"

char _license[] SEC("license") = "GPL";

SEC("iter/cgroup")
int memcg_flush_in_plain_iter(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	/* the verifier must refuse this call */
	bpf_mem_cgroup_flush_stats(memcg);
	bpf_put_mem_cgroup(memcg);
	return 0;
}
