// SPDX-License-Identifier: GPL-2.0
/*
 * cgrp_storage: cgroup local storage as BPF programs see it. Moves of a task
 * into one of the test's cgroups and getpgid() calls made inside one are
 * counted in that cgroup's storage; the negative cases are tried on every
 * move; a move into init_id's cgroup creates storage from an initial value; a
 * sleepable iterator creates storage; the life of watch_id's storage is
 * followed through rmdir, release, free and the rstat flush after the free.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cgrp_storage.h"
#include "bpf_rstat.h"

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

/* a third storage, created from init_value by a move into init_id's cgroup */
struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cgs_value);
} cgs_init SEC(".maps");

/* created on a dying cgroup, which must not happen: always empty */
struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} cgs_dying SEC(".maps");


__u64 ids[CGS_NR_IDS];	/* set by the test */
struct cgs_value init_value;	/* set by the test */
__u64 init_id, watch_id, sleepable_created, rec_id;
struct cgs_life life;
struct cgs_nested nested = { .null_delete = 1, .busy_delete = 1 };
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

	if (init_id && dst->kn->id == init_id) {
		bpf_cgrp_storage_get(&cgs_init, dst, &init_value, BPF_LOCAL_STORAGE_GET_F_CREATE);
		/* a NULL cgroup: no storage, -EINVAL */
		nested.null_found = !!bpf_cgrp_storage_get(&cgs_init, NULL, 0, 0);
		nested.null_delete = bpf_cgrp_storage_delete(&cgs_init, NULL);
	}
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
	if (watch_id && cg->kn->id == watch_id) {
		life.free_seq = ++life.seq;
		/* something for the flush that follows the free (cgroup_rstat_exit()); not on
		 * kernels whose rstat kfunc takes trusted cgroups only: this one has no id left */
		life.marked = RSTAT_UPDATED(cg, bpf_get_smp_processor_id());
	}
	return 0;
}

SEC("fexit/bpf_cgrp_storage_free")
int BPF_PROG(cgs_after_free, struct cgroup *cg)
{
	bool gone = !bpf_cgrp_storage_get(&cgs, cg, 0, 0);

	if (ours(cg->kn->id) && gone)
		__sync_fetch_and_add(&freed, 1);
	if (watch_id && cg->kn->id == watch_id)
		life.freed = gone;
	return 0;
}

/* the watched cgroup removed: dead, not released; its storage must still be there */
SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(cgs_on_rmdir, struct cgroup *cg, const char *path)
{
	struct cgs_value *v;

	if (!watch_id || cg->kn->id != watch_id)
		return 0;
	life.rmdir_seq = ++life.seq;
	v = bpf_cgrp_storage_get(&cgs, cg, 0, 0);
	life.rmdir_has = !!v;
	life.rmdir_moves = v ? v->moves : 0;
	life.rmdir_created = !!bpf_cgrp_storage_get(&cgs_dying, cg, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	return 0;
}

SEC("tp_btf/cgroup_release")
int BPF_PROG(cgs_on_release, struct cgroup *cg, const char *path)
{
	if (!watch_id || cg->kn->id != watch_id)
		return 0;
	life.release_seq = ++life.seq;
	life.release_has = !!bpf_cgrp_storage_get(&cgs, cg, 0, 0);
	return 0;
}

SEC("fentry/bpf_rstat_flush")
int BPF_PROG(cgs_on_flush, struct cgroup *cg, struct cgroup *parent, int cpu)
{
	if (!watch_id || cg->kn->id != watch_id)
		return 0;
	if (!life.freed) {
		life.flush_before_free++;
		return 0;
	}
	life.flush_after_free++;
	if (bpf_cgrp_storage_get(&cgs, cg, 0, 0) ||
	    bpf_cgrp_storage_get(&cgs, cg, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
		life.storage_after_free++;
	return 0;
}

/*
 * Inside the creation of a storage (bpf_local_storage_update(), called with this CPU's
 * cgroup storage busy) for rec_id's cgroup: an existing storage is still found, none
 * is created, a delete is refused with -EBUSY (mainline's bpf_cgrp_storage_get/delete).
 */
SEC("fentry/bpf_local_storage_update")
int BPF_PROG(cgs_nested_ops)
{
	struct cgroup *cg = bpf_get_current_task_btf()->cgroups->dfl_cgrp;

	if (!rec_id || cg->kn->id != rec_id || nested.ran)
		return 0;
	nested.ran = 1;
	nested.busy_found = !!bpf_cgrp_storage_get(&cgs_init, cg, 0, 0);
	nested.busy_created = !!bpf_cgrp_storage_get(&cgs_dying, cg, 0,
						     BPF_LOCAL_STORAGE_GET_F_CREATE);
	nested.busy_delete = bpf_cgrp_storage_delete(&cgs_init, cg);
	return 0;
}

/* storage created from a sleepable program (GFP_KERNEL): the walked cgroup's */
SEC("iter.s/cgroup")
int cgs_create_sleepable(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cg = ctx->cgroup;
	struct cgs_value *v;

	if (!cg)
		return 0;
	v = bpf_cgrp_storage_get(&cgs, cg, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (v) {
		v->id = cg->kn->id;
		v->calls = 1;
		sleepable_created++;
	}
	return 0;
}
