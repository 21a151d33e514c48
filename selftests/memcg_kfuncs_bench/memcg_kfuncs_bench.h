/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between memcg_kfuncs_bench.bpf.c and memcg_kfuncs_bench.c: the
 * binary record the programs produce per cgroup, and the items they read.
 * Userspace fills the item list from memory.stat's own keys and the kernel's
 * BTF before the first read, so the programs read every item memory.stat
 * prints, on any kernel, in the order it prints them.
 */
#ifndef MEMCG_KFUNCS_BENCH_H
#define MEMCG_KFUNCS_BENCH_H

/* kfunc reads per record: memory.stat prints about 60 items on 6.12 (a few
 * of them, e.g. slab and pgscan, the sum of two or three counters) */
#define MB_MAX_ITEMS 128

enum mb_kind {
	MB_PAGE_STATE,		/* bpf_mem_cgroup_page_state() */
	MB_VM_EVENTS,		/* bpf_mem_cgroup_vm_events() */
};

struct mb_rec {
	__u64 id;		/* cgrp->kn->id == st_ino of the cgroup directory */
	__s64 flush_ret;	/* -2: the cgroup has no memcg */
	__s64 val[MB_MAX_ITEMS];	/* item i as the kfunc returns it */
};

/* where a program's time goes, summed over its runs while profile is set */
struct mb_prof {
	__u64 runs, get_ns, flush_ns, read_ns, put_ns;
};

enum mb_mode {
	MB_MODE_SEQ = 1,	/* one record per cgroup to the seq_file */
	MB_MODE_TREE = 2,	/* records into recs[] (a whole-tree walk) */
};

/* capacity of recs[]: the most cgroups one DESCENDANTS_PRE walk reports */
#define MB_MAX_TREE 1024

#endif /* MEMCG_KFUNCS_BENCH_H */
