// SPDX-License-Identifier: GPL-2.0
/*
 * Negative cases: the verifier must refuse what the kfuncs' flags forbid.
 * Userspace loads each program alone and expects each to be refused with its
 * message; without the flag (or with a broken acquire/release pairing) the
 * verifier would take it.
 *
 *   get_untrusted      bpf_get_mem_cgroup() is KF_RCU: a css walked through a
 *                      field the verifier knows nothing about
 *                      (cgrp->self.parent) is "must be a rcu pointer"
 *   *_untrusted        each reader is KF_TRUSTED_ARGS: a memcg walked from
 *                      the referenced one (memcg->orig_objcg->memcg) is
 *                      "must be referenced or trusted"
 *   flush_untrusted    the flush too
 *   leak               a reference from bpf_get_mem_cgroup() not put:
 *                      "Unreleased reference" (KF_ACQUIRE)
 *   put_unreferenced   bpf_put_mem_cgroup() of a memcg the program did not
 *                      get (KF_RELEASE): "must be referenced or trusted"
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf_memcontrol.h"

char _license[] SEC("license") = "GPL";

unsigned long sink;

/*
 * memcg->orig_objcg (6.12; loaded on >= 6.2 only) through a CO-RE flavor, so
 * that this object also compiles against a vmlinux.h without the field.
 */
struct mem_cgroup___orig {
	struct obj_cgroup *orig_objcg;
} __attribute__((preserve_access_index));

/* a memcg the verifier cannot vouch for: walked from a referenced one */
#define WALKED(memcg) (((struct mem_cgroup___orig *)(memcg))->orig_objcg->memcg)

SEC("iter/cgroup")
int get_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;

	if (!cgrp)
		return 0;
	memcg = bpf_get_mem_cgroup(cgrp->self.parent);
	if (memcg)
		bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int read_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	sink = bpf_mem_cgroup_page_state(WALKED(memcg), NR_ANON_MAPPED);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int vm_events_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	sink = bpf_mem_cgroup_vm_events(WALKED(memcg), PGFAULT);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int memory_events_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	sink = bpf_mem_cgroup_memory_events(WALKED(memcg), MEMCG_HIGH);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int usage_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	sink = bpf_mem_cgroup_usage(WALKED(memcg));
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter.s/cgroup")
int flush_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	bpf_mem_cgroup_flush_stats(WALKED(memcg));
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int leak(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (memcg)
		sink = bpf_mem_cgroup_page_state(memcg, NR_ANON_MAPPED);
	return 0;
}

SEC("iter/cgroup")
int put_unreferenced(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (!memcg)
		return 0;
	bpf_put_mem_cgroup(WALKED(memcg));
	bpf_put_mem_cgroup(memcg);
	return 0;
}
