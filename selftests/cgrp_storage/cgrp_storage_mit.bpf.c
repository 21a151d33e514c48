// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Cgroup local storage from a program whose license is not GPL-compatible
 * (this object tells the kernel "MIT"): bpf_cgrp_storage_get() and
 * bpf_cgrp_storage_delete() are not GPL-only in mainline, as no local
 * storage's helpers are, so the verifier must take it, and the storage it
 * creates at a cgroup's mkdir holds what it wrote (read back by the test).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cgrp_storage.h"

char _license[] SEC("license") = "MIT";

struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} cgs_mit SEC(".maps");

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(storage_from_non_gpl, struct cgroup *cgrp, const char *path)
{
	__u64 *v = bpf_cgrp_storage_get(&cgs_mit, cgrp, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (v)
		*v = CGS_MIT_MARK;
	else
		bpf_cgrp_storage_delete(&cgs_mit, cgrp);
	return 0;
}
