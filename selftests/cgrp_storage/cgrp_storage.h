/* SPDX-License-Identifier: GPL-2.0 */
/* What cgrp_storage.bpf.c keeps in each cgroup, shared with the userspace test. */
#ifndef CGRP_STORAGE_H
#define CGRP_STORAGE_H

#define CGS_NR_IDS	4	/* the test's cgroups whose events count */

struct cgs_value {
	__u64 moves;	/* tasks moved in (tp_btf/cgroup_attach_task) */
	__u64 calls;	/* getpgid() calls made inside */
	__u64 id;	/* the cgroup's id, written by whoever created the storage */
};

#endif /* CGRP_STORAGE_H */
