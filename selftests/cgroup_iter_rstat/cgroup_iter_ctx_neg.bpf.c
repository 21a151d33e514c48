// SPDX-License-Identifier: GPL-2.0
/*
 * A cgroup iterator program that reads ctx->cgroup without testing it: the
 * iterator calls its program once more with a NULL cgroup at the end of every
 * walk, so the verifier must know the pointer may be NULL and refuse this
 * (cgroup_iter_rstat's ctx_cgroup_null_refused).  Never loaded otherwise.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

SEC("iter/cgroup")
int ctx_cgroup_unchecked(struct bpf_iter__cgroup *ctx)
{
	BPF_SEQ_PRINTF(ctx->meta->seq, "id=%llu\n", ctx->cgroup->kn->id);
	return 0;
}
