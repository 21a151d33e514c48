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

/* what cgrp_storage_mit.bpf.c's program writes in the storage it creates ("MIT") */
#define CGS_MIT_MARK	0x4d4954ULL

/* a storage with a bpf_spin_lock, for BPF_F_LOCK (cgrp_storage_lock.bpf.c) */
struct cgs_locked {
	struct bpf_spin_lock lock;
	__u64 v;
};

/* what the programs saw of the watched cgroup's life (cgrp_storage.bpf.c) */
struct cgs_life {
	__u64 seq;			/* events seen, numbering the ones below */
	__u64 rmdir_seq, release_seq, free_seq;
	__u64 rmdir_has, rmdir_moves;	/* its storage at rmdir, and its value */
	__u64 rmdir_created;		/* a create on it at rmdir gave storage */
	__u64 release_has;		/* its storage at the release */
	__u64 freed;			/* its storage gone at bpf_cgrp_storage_free()'s exit */
	__u64 flush_before_free, flush_after_free, storage_after_free;
	__u64 marked;			/* the free could mark it for rstat (no: 7.x, see bpf_rstat.h) */
};

/* what the helpers gave inside another storage operation of this CPU (busy), and for a
 * NULL cgroup (cgrp_storage.bpf.c: cgs_nested, cgs_on_attach) */
struct cgs_nested {
	__u64 ran;		/* the nested program ran for rec_id's cgroup */
	__u64 busy_found;	/* get of existing storage while busy: found it */
	__u64 busy_created;	/* get with F_CREATE while busy: made storage */
	__s64 busy_delete;	/* delete while busy: its return */
	__u64 null_found;	/* get of a NULL cgroup: gave storage */
	__s64 null_delete;	/* delete of a NULL cgroup: its return */
};

#endif /* CGRP_STORAGE_H */
