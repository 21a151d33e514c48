// SPDX-License-Identifier: GPL-2.0
/*
 * Programs the verifier must refuse, each loaded alone by cgrp_storage.c: the
 * cgroup storage helpers given a map of another type, and a cgroup storage
 * given to helpers of other maps.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} cgs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, int);
	__type(value, __u64);
} hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} task SEC(".maps");

__u64 sink;

/* a program on cgroup_attach_task that does @call */
#define NEG(name, call)							\
SEC("tp_btf/cgroup_attach_task")					\
int BPF_PROG(name, struct cgroup *dst, const char *path,		\
	     struct task_struct *t, bool threadgroup)			\
{									\
	int key = 0;							\
									\
	(void)key;							\
	call;								\
	return 0;							\
}

NEG(get_on_hash, sink = (__u64)bpf_cgrp_storage_get(&hash, dst, 0, 0))
NEG(delete_on_task_storage, sink = bpf_cgrp_storage_delete(&task, dst))
NEG(lookup_on_cgrp_storage, sink = (__u64)bpf_map_lookup_elem(&cgs, &key))
NEG(task_get_on_cgrp_storage, sink = (__u64)bpf_task_storage_get(&cgs, t, 0, 0))
