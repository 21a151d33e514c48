/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between memcg_kfuncs_bench.bpf.c and memcg_kfuncs_bench.c: the
 * fields a monitoring agent reads from memory.stat, and the binary record
 * the iterator produces per cgroup.  Only slot numbers are shared; the BPF
 * program uses the enum constants of the kernel it is compiled against.
 */
#ifndef MEMCG_KFUNCS_BENCH_H
#define MEMCG_KFUNCS_BENCH_H

/* X(key in memory.stat, the bpf_mem_cgroup_* kfunc reading it, its item) */
#define MB_FIELDS(X)								\
	X(anon, page_state, NR_ANON_MAPPED) X(file, page_state, NR_FILE_PAGES)	\
	X(kernel, page_state, MEMCG_KMEM) X(shmem, page_state, NR_SHMEM)	\
	X(file_mapped, page_state, NR_FILE_MAPPED)				\
	X(workingset_refault_anon, page_state, WORKINGSET_REFAULT_ANON)	\
	X(pgfault, vm_events, PGFAULT) X(pgmajfault, vm_events, PGMAJFAULT)
#define MB_SLOT(key, ...) B_##key,
enum mb_field { MB_FIELDS(MB_SLOT) NR_BFIELDS };

struct mb_rec {
	__u64 id;		/* cgrp->kn->id == st_ino of the cgroup directory */
	__s64 flush_ret;	/* bpf_memcg_flush_stats() */
	__s64 val[NR_BFIELDS];	/* as memory.stat shows them */
};

enum mb_mode {
	MB_MODE_SEQ = 1,	/* one record per cgroup to the seq_file */
	MB_MODE_TREE = 2,	/* records into recs[] (a whole-tree walk) */
};

/* capacity of recs[]: the most cgroups one DESCENDANTS_PRE walk reports */
#define MB_MAX_TREE 4096

#endif /* MEMCG_KFUNCS_BENCH_H */
