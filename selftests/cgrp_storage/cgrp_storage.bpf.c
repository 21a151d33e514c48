// SPDX-License-Identifier: GPL-2.0
/*
 * cgrp_storage: cgroup local storage as BPF programs see it. Moves of a task
 * into one of the test's cgroups and getpgid() calls made inside one are
 * counted in that cgroup's storage; the negative cases are tried on every
 * move; the free of a cgroup's storage is watched with fentry.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cgrp_storage.h"

#define ENOENT 2

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cgs_value);
} cgs SEC(".maps");

/* a second storage, never written: a cgroup's storages stay apart */
struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} cgs_unused SEC(".maps");

__u64 ids[CGS_NR_IDS];	/* set by the test */
__u64 calls_id;		/* the cgroup whose getpgid() calls count */
__u64 created, freeing, freed, get_errors, bad_flags_got, unused_got, unused_delete_not_enoent;

static bool ours(__u64 id)
{
	for (int i = 0; i < CGS_NR_IDS; i++)
		if (id && ids[i] == id)
			return true;
	return false;
}

static struct cgs_value *cgs_get(struct cgroup *cg)
{
	struct cgs_value *v = bpf_cgrp_storage_get(&cgs, cg, 0, 0);

	if (v)
		return v;
	v = bpf_cgrp_storage_get(&cgs, cg, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (v) {
		__sync_fetch_and_add(&created, 1);
		v->id = cg->kn->id;
		return v;
	}
	/* another CPU created it first: its creation won, ours failed */
	v = bpf_cgrp_storage_get(&cgs, cg, 0, 0);
	if (!v)
		__sync_fetch_and_add(&get_errors, 1);
	return v;
}

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(cgs_on_attach, struct cgroup *dst, const char *path, struct task_struct *task,
	     bool threadgroup)
{
	struct cgs_value *v;

	if (!ours(dst->kn->id))
		return 0;
	if (bpf_cgrp_storage_get(&cgs, dst, 0, ~BPF_LOCAL_STORAGE_GET_F_CREATE))
		__sync_fetch_and_add(&bad_flags_got, 1);
	if (bpf_cgrp_storage_get(&cgs_unused, dst, 0, 0))
		__sync_fetch_and_add(&unused_got, 1);
	if (bpf_cgrp_storage_delete(&cgs_unused, dst) != -ENOENT)
		__sync_fetch_and_add(&unused_delete_not_enoent, 1);
	v = cgs_get(dst);
	if (v)
		__sync_fetch_and_add(&v->moves, 1);
	return 0;
}

SEC("fentry/__x64_sys_getpgid")
int BPF_PROG(cgs_on_getpgid)
{
	struct cgroup *cg = bpf_get_current_task_btf()->cgroups->dfl_cgrp;
	struct cgs_value *v;

	if (!calls_id || cg->kn->id != calls_id)
		return 0;
	v = cgs_get(cg);
	if (v)
		__sync_fetch_and_add(&v->calls, 1);
	return 0;
}

/*
 * A storage of ours about to be freed (the id its creator wrote), then gone: the
 * call alone proves nothing, a free that unlinks nothing must not count.
 */
SEC("fentry/bpf_cgrp_storage_free")
int BPF_PROG(cgs_on_free, struct cgroup *cg)
{
	struct cgs_value *v = bpf_cgrp_storage_get(&cgs, cg, 0, 0);

	if (v && ours(v->id))
		__sync_fetch_and_add(&freeing, 1);
	return 0;
}

SEC("fexit/bpf_cgrp_storage_free")
int BPF_PROG(cgs_after_free, struct cgroup *cg)
{
	if (ours(cg->kn->id) && !bpf_cgrp_storage_get(&cgs, cg, 0, 0))
		__sync_fetch_and_add(&freed, 1);
	return 0;
}
