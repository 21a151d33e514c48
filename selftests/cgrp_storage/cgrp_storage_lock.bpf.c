// SPDX-License-Identifier: GPL-2.0
/*
 * A cgroup local storage whose value holds a bpf_spin_lock, for the syscall
 * side's BPF_F_LOCK (cgrp_storage.c loads it alone: a kernel that refuses such
 * a map fails that check, not the whole test).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "cgrp_storage.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cgs_locked);
} cgs_locked SEC(".maps");
