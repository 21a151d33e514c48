/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by memcg_kfuncs.bpf.c and memcg_kfuncs.c: the iterator's records.
 * Only slot numbers are shared: the BPF program passes the enum constants of
 * its vmlinux.h (they differ between kernels) and reports them in item[].
 */
#ifndef MEMCG_KFUNCS_H
#define MEMCG_KFUNCS_H

#define MK_MAGIC_READ	0x31726b636d656dULL	/* "memckr1" */
#define MK_MAGIC_PROBE	0x31706b636d656dULL	/* "memckp1" */

enum mk_mode {
	MK_MODE_READ = 1,	/* bpf_mem_cgroup_flush_stats(), then the reads */
	MK_MODE_PROBE = 2,	/* the validation probes below */
	MK_MODE_TARGET = 3,	/* MK_MODE_READ of target_cgid only, on a walk */
};

/* What MK_MODE_READ reads: X(slot, key, item, unit, file, optional), in the
 * order page_state (node, then memcg items), vm_events, memory_events, usage */
#define MK_FIELDS(X)								\
	X(F_ANON, "anon", NR_ANON_MAPPED, U_PAGES, S_STAT, 0)			\
	X(F_FILE, "file", NR_FILE_PAGES, U_PAGES, S_STAT, 0)			\
	X(F_SHMEM, "shmem", NR_SHMEM, U_PAGES, S_STAT, 0)			\
	X(F_FILE_MAPPED, "file_mapped", NR_FILE_MAPPED, U_PAGES, S_STAT, 0)	\
	X(F_FILE_DIRTY, "file_dirty", NR_FILE_DIRTY, U_PAGES, S_STAT, 0)	\
	X(F_INACTIVE_ANON, "inactive_anon", NR_INACTIVE_ANON, U_PAGES, S_STAT, 0) \
	X(F_ACTIVE_ANON, "active_anon", NR_ACTIVE_ANON, U_PAGES, S_STAT, 0)	\
	X(F_INACTIVE_FILE, "inactive_file", NR_INACTIVE_FILE, U_PAGES, S_STAT, 0) \
	X(F_ACTIVE_FILE, "active_file", NR_ACTIVE_FILE, U_PAGES, S_STAT, 0)	\
	X(F_UNEVICTABLE, "unevictable", NR_UNEVICTABLE, U_PAGES, S_STAT, 0)	\
	X(F_KERNEL_STACK, "kernel_stack", NR_KERNEL_STACK_KB, U_SUBPAGE, S_STAT, 0) \
	X(F_PAGETABLES, "pagetables", NR_PAGETABLE, U_PAGES, S_STAT, 0)	\
	X(F_SLAB_RECL, "slab_reclaimable", NR_SLAB_RECLAIMABLE_B, U_SUBPAGE, S_STAT, 0) \
	X(F_SLAB_UNRECL, "slab_unreclaimable", NR_SLAB_UNRECLAIMABLE_B, U_SUBPAGE, S_STAT, 0) \
	X(F_WS_REFAULT_ANON, "workingset_refault_anon", WORKINGSET_REFAULT_ANON, U_COUNT, S_STAT, 0) \
	X(F_WS_REFAULT_FILE, "workingset_refault_file", WORKINGSET_REFAULT_FILE, U_COUNT, S_STAT, 0) \
	X(F_KERNEL, "kernel", MEMCG_KMEM, U_PAGES, S_STAT, 1)			\
	X(F_SOCK, "sock", MEMCG_SOCK, U_PAGES, S_STAT, 0)			\
	X(F_PERCPU, "percpu", MEMCG_PERCPU_B, U_SUBPAGE, S_STAT, 0)		\
	X(F_VMALLOC, "vmalloc", MEMCG_VMALLOC, U_PAGES, S_STAT, 1)		\
	X(F_PGFAULT, "pgfault", PGFAULT, U_COUNT, S_STAT, 0)			\
	X(F_PGMAJFAULT, "pgmajfault", PGMAJFAULT, U_COUNT, S_STAT, 0)		\
	X(F_PGACTIVATE, "pgactivate", PGACTIVATE, U_COUNT, S_STAT, 0)		\
	X(F_PGDEACTIVATE, "pgdeactivate", PGDEACTIVATE, U_COUNT, S_STAT, 0)	\
	X(F_EV_LOW, "low", MEMCG_LOW, U_EXACT, S_EVENTS, 0)			\
	X(F_EV_HIGH, "high", MEMCG_HIGH, U_EXACT, S_EVENTS, 0)			\
	X(F_EV_MAX, "max", MEMCG_MAX, U_EXACT, S_EVENTS, 0)			\
	X(F_EV_OOM, "oom", MEMCG_OOM, U_EXACT, S_EVENTS, 0)			\
	X(F_EV_OOM_KILL, "oom_kill", MEMCG_OOM_KILL, U_EXACT, S_EVENTS, 0)	\
	X(F_EV_OOM_GROUP_KILL, "oom_group_kill", MEMCG_OOM_GROUP_KILL, U_EXACT, S_EVENTS, 1) \
	X(F_EV_SWAP_HIGH, "high", MEMCG_SWAP_HIGH, U_EXACT, S_SWAP_EVENTS, 1)	\
	X(F_EV_SWAP_MAX, "max", MEMCG_SWAP_MAX, U_EXACT, S_SWAP_EVENTS, 1)	\
	X(F_EV_SWAP_FAIL, "fail", MEMCG_SWAP_FAIL, U_EXACT, S_SWAP_EVENTS, 1)	\
	X(F_USAGE, "usage", -1, U_PAGES, S_CURRENT, 0)

#define MK_SLOT(slot, ...) slot,
enum mk_field { MK_FIELDS(MK_SLOT) NR_FIELDS };

#define F_FIRST_EVENT	F_PGFAULT
#define F_FIRST_MEMEV	F_EV_LOW

struct mk_read_rec {
	__u64 magic;		/* MK_MAGIC_READ */
	__u64 cgid;		/* cgrp->kn->id, == st_ino of the directory */
	__s64 flush_ret;	/* 0: flushed; no memcg: -ENOENT (every val too) */
	__s64 item[NR_FIELDS];	/* the enum value passed (diagnostics) */
	__s64 val[NR_FIELDS];	/* the result; (unsigned long)-1: -EINVAL */
};

/* MK_MODE_PROBE, every call the validation must handle: X(slot, call) */
#define MK_PROBES(X)								\
	/* valid calls (without a memcg none is made: -ENOENT) */		\
	X(P_FLUSH, "get_mem_cgroup(&cgrp->self) + flush_stats(): 0")		\
	X(P_NODE_VALID, "page_state(NR_ANON_MAPPED)")				\
	X(P_MEMCG_VALID, "page_state(MEMCG_KMEM)")				\
	X(P_EVENT_VALID, "vm_events(PGFAULT)")					\
	X(P_MEMEV_VALID, "memory_events(MEMCG_HIGH)")				\
	X(P_USAGE, "usage()")							\
	X(P_ROOT, "get_root_mem_cgroup() + page_state(anon)")			\
	/* the first and last valid items: a bound one off refuses them */	\
	X(P_NODE_FIRST, "page_state(0: NR_LRU_BASE)")				\
	X(P_MEMCG_FIRST, "page_state(NR_VM_NODE_STAT_ITEMS: MEMCG_SWAP)")	\
	X(P_MEMCG_LAST, "page_state(MEMCG_NR_STAT - 1)")			\
	/* out of range: (unsigned long)-1, recorded -EINVAL */		\
	X(P_NODE_END, "page_state(MEMCG_NR_STAT + 1)")				\
	X(P_NODE_END_PLUS5, "page_state(MEMCG_NR_STAT + 5)")			\
	X(P_NODE_INT_MAX, "page_state(0x7fffffff)")				\
	X(P_NODE_MINUS1, "page_state(-1)")					\
	X(P_NODE_INT_MIN, "page_state(INT_MIN)")				\
	X(P_MEMEV_END, "memory_events(MEMCG_NR_MEMORY_EVENTS)")			\
	X(P_MEMEV_MINUS1, "memory_events(-1)")					\
	X(P_MEMCG_END, "page_state(MEMCG_NR_STAT)")				\
	X(P_MEMCG_END_PLUS5, "page_state(MEMCG_NR_STAT + 5)")			\
	X(P_MEMCG_INT_MAX, "page_state(0x7fffffff)")				\
	X(P_MEMCG_MINUS1, "page_state(-1)")					\
	X(P_EVENT_END, "vm_events(NR_VM_EVENT_ITEMS)")				\
	X(P_EVENT_END_PLUS5, "vm_events(NR_VM_EVENT_ITEMS + 5)")		\
	X(P_EVENT_INT_MAX, "vm_events(0x7fffffff)")				\
	X(P_EVENT_MINUS1, "vm_events(-1)")					\
	/* in range but not tracked per memcg (node items: from 6.11) */	\
	X(P_NODE_UNTRACKED_A, "page_state(NR_ISOLATED_ANON)")			\
	X(P_NODE_UNTRACKED_B, "page_state(NR_DIRTIED)")			\
	X(P_EVENT_UNTRACKED_A, "vm_events(PGFREE)")				\
	X(P_EVENT_UNTRACKED_B, "vm_events(PSWPIN)")

enum mk_probe { MK_PROBES(MK_SLOT) NR_PROBES };

#define P_FIRST_RANGE		P_NODE_END
#define P_FIRST_UNTRACKED	P_NODE_UNTRACKED_A

struct mk_probe_rec {
	__u64 magic;		/* MK_MAGIC_PROBE */
	__u64 cgid;
	__s64 item[NR_PROBES];	/* the item passed (-1: none) */
	__s64 res[NR_PROBES];	/* what the kfunc returned */
};

#endif /* MEMCG_KFUNCS_H */
