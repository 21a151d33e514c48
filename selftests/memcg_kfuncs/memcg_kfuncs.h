/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between memcg_kfuncs.bpf.c and memcg_kfuncs.c: the record layouts
 * the iterator writes to its seq_file and the meaning of each slot.
 *
 * Only slot numbers are shared.  The kernel enum values (enum node_stat_item,
 * enum memcg_stat_item, enum vm_event_item) differ between kernels (6.1 and
 * 6.12) and configs; the BPF program uses the constants of the vmlinux.h it
 * is compiled against and reports the numbers it passed in item[], for
 * diagnostics only.  Userspace never passes an item number.
 */
#ifndef MEMCG_KFUNCS_H
#define MEMCG_KFUNCS_H

#define MK_MAGIC_READ	0x31726b636d656dULL	/* "memckr1" */
#define MK_MAGIC_PROBE	0x31706b636d656dULL	/* "memckp1" */

enum mk_mode {
	MK_MODE_READ = 1,	/* bpf_mem_cgroup_flush_stats(), then the reads */
	MK_MODE_NOFLUSH = 2,	/* the reads only (what the last flush left) */
	MK_MODE_PROBE = 3,	/* the validation probes below */
	MK_MODE_TARGET = 4,	/* MK_MODE_READ for the cgroup whose id is target_cgid
				 * only, on a walk of its ancestor's descendants */
};

/* what MK_MODE_READ / MK_MODE_NOFLUSH read; the memory.stat key is in
 * memcg_kfuncs.c */
enum mk_field {
	/* enum node_stat_item, bpf_mem_cgroup_page_state() */
	F_ANON,			/* NR_ANON_MAPPED */
	F_FILE,			/* NR_FILE_PAGES */
	F_SHMEM,		/* NR_SHMEM */
	F_FILE_MAPPED,		/* NR_FILE_MAPPED */
	F_FILE_DIRTY,		/* NR_FILE_DIRTY */
	F_INACTIVE_ANON,	/* NR_INACTIVE_ANON */
	F_ACTIVE_ANON,		/* NR_ACTIVE_ANON */
	F_INACTIVE_FILE,	/* NR_INACTIVE_FILE */
	F_ACTIVE_FILE,		/* NR_ACTIVE_FILE */
	F_UNEVICTABLE,		/* NR_UNEVICTABLE */
	F_KERNEL_STACK,		/* NR_KERNEL_STACK_KB (reported in bytes) */
	F_PAGETABLES,		/* NR_PAGETABLE */
	F_SLAB_RECLAIMABLE,	/* NR_SLAB_RECLAIMABLE_B */
	F_SLAB_UNRECLAIMABLE,	/* NR_SLAB_UNRECLAIMABLE_B */
	F_WS_REFAULT_ANON,	/* WORKINGSET_REFAULT_ANON (a count) */
	F_WS_REFAULT_FILE,	/* WORKINGSET_REFAULT_FILE (a count) */
	/* enum memcg_stat_item, bpf_mem_cgroup_page_state() */
	F_KERNEL,		/* MEMCG_KMEM */
	F_SOCK,			/* MEMCG_SOCK */
	F_PERCPU,		/* MEMCG_PERCPU_B */
	F_VMALLOC,		/* MEMCG_VMALLOC */
	/* enum vm_event_item, bpf_mem_cgroup_vm_events() */
	F_PGFAULT,		/* PGFAULT */
	F_PGMAJFAULT,		/* PGMAJFAULT */
	F_PGACTIVATE,		/* PGACTIVATE */
	F_PGDEACTIVATE,		/* PGDEACTIVATE */
	NR_FIELDS
};

#define F_FIRST_MEMCG	F_KERNEL
#define F_FIRST_EVENT	F_PGFAULT

struct mk_read_rec {
	__u64 magic;		/* MK_MAGIC_READ */
	__u64 cgid;		/* cgrp->kn->id, == st_ino of the directory */
	__s64 flush_ret;	/* 0: flushed; 1: not asked to; -ENOENT: no memcg */
	__s64 item[NR_FIELDS];	/* the enum value passed (diagnostics) */
	__s64 val[NR_FIELDS];	/* what the read returned; (unsigned long)-1 is
				 * written -EINVAL, no memcg -ENOENT */
};

/* MK_MODE_PROBE: every call the validation must handle */
enum mk_probe {
	/* valid calls (sanity; without a memcg none is made: -ENOENT) */
	P_FLUSH,		/* bpf_get_mem_cgroup() then flush: 0, or -ENOENT
				 * if it returned NULL */
	P_NODE_VALID,		/* page_state, NR_ANON_MAPPED */
	P_MEMCG_VALID,		/* page_state, MEMCG_KMEM */
	P_EVENT_VALID,		/* vm_events, PGFAULT */
	P_MEMEV_VALID,		/* memory_events, MEMCG_HIGH */
	P_USAGE,		/* usage */
	P_ROOT,			/* bpf_get_root_mem_cgroup(), page_state(anon) */
	/* the first and last valid items: a bound one off refuses them (every
	 * memcg_stat_item is tracked; event 0, PGPGIN, is not on every kernel) */
	P_NODE_FIRST,		/* page_state, 0 (NR_LRU_BASE) */
	P_MEMCG_FIRST,		/* page_state, NR_VM_NODE_STAT_ITEMS (MEMCG_SWAP) */
	P_MEMCG_LAST,		/* page_state, MEMCG_NR_STAT - 1 */
	/* out of range: (unsigned long)-1, recorded -EINVAL */
	P_NODE_END,		/* page_state, NR_VM_NODE_STAT_ITEMS */
	P_NODE_END_PLUS5,	/* page_state, NR_VM_NODE_STAT_ITEMS + 5 */
	P_NODE_INT_MAX,		/* page_state, 0x7fffffff */
	P_NODE_MINUS1,		/* page_state, -1 */
	P_NODE_INT_MIN,		/* page_state, INT_MIN */
	P_MEMEV_END,		/* memory_events, MEMCG_NR_MEMORY_EVENTS */
	P_MEMEV_MINUS1,		/* memory_events, -1 */
	P_MEMCG_END,		/* page_state, MEMCG_NR_STAT */
	P_MEMCG_END_PLUS5,	/* page_state, MEMCG_NR_STAT + 5 */
	P_MEMCG_INT_MAX,	/* page_state, 0x7fffffff */
	P_MEMCG_MINUS1,		/* page_state, -1 */
	P_EVENT_END,		/* vm_events, NR_VM_EVENT_ITEMS */
	P_EVENT_END_PLUS5,	/* vm_events, NR_VM_EVENT_ITEMS + 5 */
	P_EVENT_INT_MAX,	/* vm_events, 0x7fffffff */
	P_EVENT_MINUS1,		/* vm_events, -1 */
	/* in range but not tracked per memcg */
	P_NODE_UNTRACKED_A,	/* page_state, NR_ISOLATED_ANON */
	P_NODE_UNTRACKED_B,	/* page_state, NR_DIRTIED */
	P_EVENT_UNTRACKED_A,	/* vm_events, PGFREE */
	P_EVENT_UNTRACKED_B,	/* vm_events, PSWPIN */
	NR_PROBES
};

#define P_FIRST_RANGE		P_NODE_END
#define P_FIRST_UNTRACKED	P_NODE_UNTRACKED_A

struct mk_probe_rec {
	__u64 magic;		/* MK_MAGIC_PROBE */
	__u64 cgid;
	__s64 item[NR_PROBES];	/* the item passed (-1 for the flush) */
	__s64 res[NR_PROBES];	/* what the kfunc returned */
};

#endif /* MEMCG_KFUNCS_H */
