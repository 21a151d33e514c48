// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF side of memcg_kfuncs_bench: for each cgroup, the same work a read
 * of memory.stat does for the fields an agent wants -- get its memcg,
 * bpf_mem_cgroup_flush_stats() (the flush memory.stat does), one read per
 * field, put -- and the values in binary.
 *
 *   MB_MODE_SEQ   (one SELF_ONLY link per cgroup): one struct mb_rec to the
 *                 seq_file, read() by userspace.
 *   MB_MODE_TREE  (one DESCENDANTS_PRE link over the parent): a record per
 *                 descendant into recs[] (global data, mmapped by
 *                 userspace); the walk's root, skip_id, is skipped without
 *                 flushing or fetching.  Not the seq_file: a cgroup
 *                 iterator cannot continue a walk in a second read() (it
 *                 returns -EOPNOTSUPP), so one walk's output must fit in
 *                 its 32 KiB buffer, which 1000 records of 80 bytes do not.
 *   memcg_bench_syscall  (BPF_PROG_TYPE_SYSCALL, one BPF_PROG_RUN per sample):
 *                 the cgroup sys_id, found with bpf_cgroup_from_id(), into
 *                 sysrec (global data, mmapped by userspace).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "memcg_kfuncs_bench.h"
#include "bpf_memcontrol.h"

char _license[] SEC("license") = "GPL";

/* 6.2+: weak, and the syscall program is not loaded where they are absent */
extern struct cgroup *bpf_cgroup_from_id(u64 cgid) __ksym __weak;
extern void bpf_cgroup_release(struct cgroup *cgrp) __ksym __weak;

__u32 mode = 0;
__u64 skip_id = 0;
__u32 nrec = 0;
__u32 overflow = 0;
struct mb_rec recs[MB_MAX_TREE] = {};
/* the syscall program: the cgroup to read, and its record */
__u64 sys_id = 0;
struct mb_rec sysrec = {};

/* (unsigned long)-1 ("no such counter") becomes -1, no memcg -ENOENT (-2) */
static __always_inline void fill(struct mb_rec *r, struct cgroup *cgrp, __u64 id)
{
	struct mem_cgroup *memcg = bpf_get_mem_cgroup(&cgrp->self);
	int f;

	r->id = id;
	if (!memcg) {
		r->flush_ret = -2;
		for (f = 0; f < NR_BFIELDS; f++)
			r->val[f] = -2;
		return;
	}
	bpf_mem_cgroup_flush_stats(memcg);
	r->flush_ret = 0;
#define MB_READ(key, kfunc, item) r->val[B_##key] = bpf_mem_cgroup_##kfunc(memcg, item);
	MB_FIELDS(MB_READ)
	bpf_put_mem_cgroup(memcg);
}

/* one BPF_PROG_RUN per sample: the cgroup by id, read as the iterators do */
SEC("syscall")
int memcg_bench_syscall(void *ctx)
{
	struct cgroup *cgrp = bpf_cgroup_from_id(sys_id);

	if (!cgrp) {
		sysrec.id = sys_id;
		sysrec.flush_ret = -2;
		return 0;
	}
	fill(&sysrec, cgrp, sys_id);
	bpf_cgroup_release(cgrp);
	return 0;
}

SEC("iter.s/cgroup")
int memcg_bench(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct mb_rec rec;
	__u64 id;
	__u32 i;

	if (!cgrp)
		return 0;
	id = cgrp->kn->id;

	if (mode == MB_MODE_TREE) {
		if (id == skip_id)
			return 0;
		i = nrec;
		if (i >= MB_MAX_TREE) {
			overflow++;
			return 0;
		}
		fill(&recs[i], cgrp, id);
		nrec = i + 1;
		return 0;
	}

	fill(&rec, cgrp, id);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
