// SPDX-License-Identifier: GPL-2.0
/*
 * Negative cases: the kfuncs must refuse a cgroup pointer the verifier cannot
 * vouch for.  A pointer walked from the iterator's cgroup through fields the
 * verifier knows nothing about (cgrp->self.parent->cgroup) inside an RCU
 * read-side section is a plain, "deprecated" PTR_TO_BTF_ID: neither trusted
 * nor RCU protected.
 *
 *   fetch_*_untrusted  the fetch kfuncs are KF_RCU: "must be a rcu pointer"
 *   flush_untrusted    the flush is KF_TRUSTED_ARGS: "must be referenced or
 *                      trusted" (walked under bpf_rcu_read_lock(), called
 *                      after it: it may sleep)
 *
 * Userspace loads each program alone and expects each to be refused with
 * that message.  Without the flag, the verifier takes the pointer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

extern int bpf_memcg_flush_stats(struct cgroup *cgrp) __ksym;
extern s64 bpf_memcg_node_stat_fetch(struct cgroup *cgrp,
				     enum node_stat_item item) __ksym;
extern s64 bpf_memcg_stat_fetch(struct cgroup *cgrp,
				enum memcg_stat_item item) __ksym;
extern s64 bpf_memcg_vm_event_fetch(struct cgroup *cgrp,
				    enum vm_event_item item) __ksym;
extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

__s64 sink;

SEC("iter/cgroup")
int fetch_node_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;
	sink = bpf_memcg_node_stat_fetch(cgrp->self.parent->cgroup, NR_ANON_MAPPED);
	return 0;
}

SEC("iter/cgroup")
int fetch_memcg_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;
	sink = bpf_memcg_stat_fetch(cgrp->self.parent->cgroup, MEMCG_KMEM);
	return 0;
}

SEC("iter/cgroup")
int fetch_event_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;

	if (!cgrp)
		return 0;
	sink = bpf_memcg_vm_event_fetch(cgrp->self.parent->cgroup, PGFAULT);
	return 0;
}

SEC("iter.s/cgroup")
int flush_untrusted(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup, *up;

	if (!cgrp)
		return 0;
	bpf_rcu_read_lock();
	up = cgrp->self.parent->cgroup;
	bpf_rcu_read_unlock();
	sink = bpf_memcg_flush_stats(up);
	return 0;
}
