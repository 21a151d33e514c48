/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by memcg_kfuncs.bpf.c and memcg_kfuncs.c: the iterator's records.
 * Only slot numbers are shared: the BPF program passes the enum constants of
 * its vmlinux.h (they differ between kernels), userspace prints their names.
 */
#ifndef MEMCG_KFUNCS_H
#define MEMCG_KFUNCS_H

#define MK_MAGIC	0x6b636d656d000000ULL	/* + the mode: the record's type */

enum mk_mode {
	MK_MODE_READ = 1,	/* bpf_mem_cgroup_flush_stats(), then MK_FIELDS */
	MK_MODE_PROBE = 2,	/* MK_PROBES */
	MK_MODE_TARGET = 3,	/* MK_MODE_READ of target_cgid only, on a walk */
	MK_MODE_ROOT = 4,	/* MK_MODE_READ of bpf_get_root_mem_cgroup() */
};

/* the kfunc called: bpf_mem_cgroup_{page_state,vm_events,memory_events,usage,...} */
enum mk_kind { K_state, K_events, K_memev, K_usage, K_flush, K_root, K_reclaim };

/*
 * The units of MK_FIELDS' values, which decide how close two reads must be:
 * U_PAGES bytes kept in pages, U_BYTES bytes kept in bytes (slab, percpu,
 * zswap: a per-CPU stock may hold back up to a page each), U_KB kernel stacks
 * (whole stacks), U_COUNT counts.
 */
enum mk_unit { U_PAGES, U_BYTES, U_KB, U_COUNT };

/*
 * MK_MODE_READ, X(key in its file, kind, item, optional: not in every kernel's
 * file, unit); kind reclaim: item 0-7 pgscan_{kswapd,direct,khugepaged,proactive},
 * pgsteal_{...}, behind the kfunc the kernel has them (vm events up to 7.1, node
 * items from 7.2), 0 where the kernel has none; grouped by file: memory.stat; memory.events, memory.swap.events
 * ("swap_" dropped from the key); memory.current; memory.swap.current.
 */
/* vmalloc: MEMCG_VMALLOC up to 7.1, the node item NR_VMALLOC from 7.2 (resolved by CO-RE) */
#define MK_VMALLOC	(-1000)

#define MK_FIELDS(X)								\
	X(anon, state, NR_ANON_MAPPED, 0, U_PAGES)				\
	X(file, state, NR_FILE_PAGES, 0, U_PAGES)				\
	X(shmem, state, NR_SHMEM, 0, U_PAGES)					\
	X(file_mapped, state, NR_FILE_MAPPED, 0, U_PAGES)			\
	X(file_dirty, state, NR_FILE_DIRTY, 0, U_PAGES)				\
	X(file_writeback, state, NR_WRITEBACK, 0, U_PAGES)			\
	X(unevictable, state, NR_UNEVICTABLE, 0, U_PAGES)			\
	X(inactive_anon, state, NR_INACTIVE_ANON, 0, U_PAGES)			\
	X(active_anon, state, NR_ACTIVE_ANON, 0, U_PAGES)			\
	X(inactive_file, state, NR_INACTIVE_FILE, 0, U_PAGES)			\
	X(active_file, state, NR_ACTIVE_FILE, 0, U_PAGES)			\
	X(pagetables, state, NR_PAGETABLE, 0, U_PAGES)				\
	X(swapcached, state, NR_SWAPCACHE, 1, U_PAGES)				\
	X(kernel, state, MEMCG_KMEM, 1, U_PAGES)				\
	X(sock, state, MEMCG_SOCK, 0, U_PAGES)					\
	X(vmalloc, state, MK_VMALLOC, 1, U_PAGES)				\
	X(kernel_stack, state, NR_KERNEL_STACK_KB, 0, U_KB)			\
	X(percpu, state, MEMCG_PERCPU_B, 0, U_BYTES)				\
	X(slab_reclaimable, state, NR_SLAB_RECLAIMABLE_B, 0, U_BYTES)		\
	X(slab_unreclaimable, state, NR_SLAB_UNRECLAIMABLE_B, 0, U_BYTES)	\
	X(zswap, state, MEMCG_ZSWAP_B, 1, U_BYTES)				\
	X(zswapped, state, MEMCG_ZSWAPPED, 1, U_PAGES)				\
	X(workingset_refault_anon, state, WORKINGSET_REFAULT_ANON, 0, U_COUNT)	\
	X(workingset_refault_file, state, WORKINGSET_REFAULT_FILE, 0, U_COUNT)	\
	X(pgfault, events, PGFAULT, 0, U_COUNT)					\
	X(pgscan_kswapd, reclaim, 0, 1, U_COUNT)				\
	X(pgscan_direct, reclaim, 1, 1, U_COUNT)				\
	X(pgscan_khugepaged, reclaim, 2, 1, U_COUNT)				\
	X(pgscan_proactive, reclaim, 3, 1, U_COUNT)				\
	X(pgsteal_kswapd, reclaim, 4, 1, U_COUNT)				\
	X(pgsteal_direct, reclaim, 5, 1, U_COUNT)				\
	X(pgsteal_khugepaged, reclaim, 6, 1, U_COUNT)				\
	X(pgsteal_proactive, reclaim, 7, 1, U_COUNT)				\
	X(pgmajfault, events, PGMAJFAULT, 0, U_COUNT)				\
	X(pgactivate, events, PGACTIVATE, 0, U_COUNT)				\
	X(pgdeactivate, events, PGDEACTIVATE, 0, U_COUNT)			\
	X(low, memev, MEMCG_LOW, 0, U_COUNT)					\
	X(high, memev, MEMCG_HIGH, 0, U_COUNT)					\
	X(max, memev, MEMCG_MAX, 0, U_COUNT)					\
	X(oom, memev, MEMCG_OOM, 0, U_COUNT)					\
	X(oom_kill, memev, MEMCG_OOM_KILL, 0, U_COUNT)				\
	X(oom_group_kill, memev, MEMCG_OOM_GROUP_KILL, 1, U_COUNT)		\
	X(swap_high, memev, MEMCG_SWAP_HIGH, 1, U_COUNT)			\
	X(swap_max, memev, MEMCG_SWAP_MAX, 1, U_COUNT)				\
	X(swap_fail, memev, MEMCG_SWAP_FAIL, 1, U_COUNT)			\
	X(usage, usage, 0, 0, U_PAGES)						\
	X(swap, state, MEMCG_SWAP, 0, U_PAGES)

#define MK_SLOT(key, ...) F_##key,
enum mk_field { MK_FIELDS(MK_SLOT) NR_FIELDS };

/*
 * MK_MODE_PROBE, X(kind, item): the valid calls (>= 0; the flush 0) and the
 * bounds (a check one off refuses the first or last item); out of range, and
 * in range but not tracked per memcg (node items: from 6.11): -EINVAL.
 * Without a memcg none is made: -ENOENT.
 */
#define MK_VALID(X)								\
	X(flush, 0) X(usage, 0) X(root, NR_ANON_MAPPED)				\
	X(state, NR_ANON_MAPPED) X(state, MEMCG_KMEM)				\
	X(events, PGFAULT) X(memev, MEMCG_HIGH)					\
	X(state, NR_LRU_BASE) X(state, NR_VM_NODE_STAT_ITEMS) X(state, MEMCG_NR_STAT - 1)
#define MK_RANGE(X)								\
	X(state, MEMCG_NR_STAT) X(state, MEMCG_NR_STAT + 1) X(state, MEMCG_NR_STAT + 5) \
	X(state, 0x7fffffff) X(state, -1) X(state, -0x7fffffff - 1)		\
	X(memev, MEMCG_NR_MEMORY_EVENTS) X(memev, -1)				\
	X(events, NR_VM_EVENT_ITEMS) X(events, NR_VM_EVENT_ITEMS + 5)		\
	X(events, 0x7fffffff) X(events, -1)
#define MK_UNTRACKED(X)								\
	X(state, NR_ISOLATED_ANON) X(state, NR_DIRTIED) X(events, PGFREE) X(events, OOM_KILL)
/*
 * vm events memcg tracks where cgroup v1's memory.stat prints them (cgroup v2's
 * does not): before 6.11 always (PGPGIN is the first event memcg tracks there),
 * from 6.11 with CONFIG_MEMCG_V1 only.
 */
#define MK_V1EVENTS(X) X(events, PGPGIN) X(events, PGPGOUT)
#define MK_PROBES(X) MK_VALID(X) MK_RANGE(X) MK_UNTRACKED(X) MK_V1EVENTS(X)

#define MK_ONE(...) +1
enum {
	P_FIRST_RANGE = 0 MK_VALID(MK_ONE),
	P_FIRST_UNTRACKED = P_FIRST_RANGE MK_RANGE(MK_ONE),
	P_FIRST_V1 = P_FIRST_UNTRACKED MK_UNTRACKED(MK_ONE),
	NR_PROBES = P_FIRST_V1 MK_V1EVENTS(MK_ONE),
};

#define MK_N	NR_FIELDS	/* > NR_PROBES */

/* one per walk of a cgroup; val (unsigned long)-1 is -EINVAL, no memcg -ENOENT */
struct mk_rec {
	__u64 magic;		/* MK_MAGIC + mode */
	__u64 cgid;		/* cgrp->kn->id, == st_ino of the directory */
	__s64 item[MK_N];	/* the item passed */
	__s64 val[MK_N];	/* what the kfunc returned */
};

/* what the pt_* programs of memcg_kfuncs_extra.bpf.c write (their object's .bss):
 * the root memcg read from a program of another type */
struct pt_out {
	__u64 ran, got, usage, anon, pgfault, high;
};

#endif /* MEMCG_KFUNCS_H */
