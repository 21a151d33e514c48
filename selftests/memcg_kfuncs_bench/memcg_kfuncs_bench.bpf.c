// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF side of memcg_kfuncs_bench: for each cgroup, the work a read of
 * memory.stat does for the fields an agent wants (get its memcg, flush, one
 * read per field, put), the values in binary.  MB_MODE_SEQ: one struct mb_rec
 * to the seq_file.  MB_MODE_TREE: a record per descendant into recs[] (the
 * walk's root, skip_id, skipped), not to the seq_file: a cgroup iterator
 * cannot continue a walk in a second read() (-EOPNOTSUPP), and 1000 records
 * of 80 bytes do not fit its 32 KiB buffer.  memcg_bench_syscall: the cgroup
 * sys_id into sysrec, one BPF_PROG_RUN per sample.
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

__u32 mode, nrec, overflow;
__u64 skip_id, sys_id;
struct mb_rec recs[MB_MAX_TREE] = {}, sysrec = {};

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
