/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between memcg_kfuncs_bench.bpf.c and memcg_kfuncs_bench.c: the
 * fields a monitoring agent reads from memory.stat, and the binary record
 * the iterator produces per cgroup.  Only slot numbers are shared; the BPF
 * program uses the enum constants of the kernel it is compiled against.
 */
#ifndef MEMCG_KFUNCS_BENCH_H
#define MEMCG_KFUNCS_BENCH_H

enum mb_field {
	B_ANON,			/* "anon"                     NR_ANON_MAPPED */
	B_FILE,			/* "file"                     NR_FILE_PAGES */
	B_KERNEL,		/* "kernel"                   MEMCG_KMEM */
	B_SHMEM,		/* "shmem"                    NR_SHMEM */
	B_FILE_MAPPED,		/* "file_mapped"              NR_FILE_MAPPED */
	B_WS_REFAULT_ANON,	/* "workingset_refault_anon"  WORKINGSET_REFAULT_ANON */
	B_PGFAULT,		/* "pgfault"                  PGFAULT */
	B_PGMAJFAULT,		/* "pgmajfault"               PGMAJFAULT */
	NR_BFIELDS
};

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
