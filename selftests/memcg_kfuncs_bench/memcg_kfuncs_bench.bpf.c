// SPDX-License-Identifier: GPL-2.0
/*
 * The BPF side of memcg_kfuncs_bench: for each cgroup, the work a read of
 * memory.stat does (get its memcg, flush, one kfunc call per item memory.stat
 * prints, put), the values in binary.  The items (kind[], item[], nitems) are
 * set by userspace from memory.stat's keys before the first read.
 * MB_MODE_SEQ: one struct mb_rec to the seq_file.  MB_MODE_TREE: a record per
 * descendant into recs[] (the walk's root, skip_id, skipped), not to the
 * seq_file: a cgroup iterator cannot continue a walk in a second read()
 * (-EOPNOTSUPP), and 1000 records do not fit its buffer.
 * memcg_bench_syscall: the cgroup sys_id into sysrec, one BPF_PROG_RUN per
 * sample.  With profile set, each part's time is summed into prof (a clock
 * read per part: the timed rounds run with it clear).
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

__u32 mode, nrec, overflow, nitems, profile;
__u32 kind[MB_MAX_ITEMS];
__s32 item[MB_MAX_ITEMS];
__u64 skip_id, sys_id;
struct mb_prof prof;
/*
 * Records live in global data (one reader at a time: the benchmark's): a
 * record is larger than the BPF stack.
 */
struct mb_rec recs[MB_MAX_TREE] = {}, sysrec = {}, seqrec = {};

static __always_inline __u64 prof_clock(void)
{
	return profile ? bpf_ktime_get_ns() : 0;
}

/* (unsigned long)-1 ("no such counter") becomes -1; no memcg: flush_ret -2 */
static __always_inline void fill(struct mb_rec *r, struct cgroup *cgrp, __u64 id)
{
	__u64 t0 = prof_clock(), t1, t2, t3;
	struct mem_cgroup *memcg = bpf_get_mem_cgroup(&cgrp->self);
	__u32 i;

	r->id = id;
	if (!memcg) {
		r->flush_ret = -2;
		return;
	}
	t1 = prof_clock();
	bpf_mem_cgroup_flush_stats(memcg);
	r->flush_ret = 0;
	t2 = prof_clock();
	for (i = 0; i < MB_MAX_ITEMS && i < nitems; i++)
		r->val[i] = kind[i] == MB_VM_EVENTS ?
			bpf_mem_cgroup_vm_events(memcg, (enum vm_event_item)item[i]) :
			bpf_mem_cgroup_page_state(memcg, item[i]);
	t3 = prof_clock();
	bpf_put_mem_cgroup(memcg);
	if (profile) {
		prof.runs++;
		prof.get_ns += t1 - t0;
		prof.flush_ns += t2 - t1;
		prof.read_ns += t3 - t2;
		prof.put_ns += bpf_ktime_get_ns() - t3;
	}
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
	fill(&seqrec, cgrp, id);
	bpf_seq_write(ctx->meta->seq, &seqrec, sizeof(seqrec));
	return 0;
}
