// SPDX-License-Identifier: GPL-2.0
/*
 * Programs memcg_kfuncs.c loads one at a time, where the kernel can run them:
 *
 * zombie_walk (6.7+: the css iterator kfuncs): on a cgroup with a memcg, walk
 *	its memcg's descendant csses (offline ones included, as long as they are
 *	not released: a removed cgroup whose page cache keeps its memcg) and get,
 *	read and put the memcg of each, a line per css.
 * null_css_get: bpf_get_mem_cgroup() given cgrp->subsys[memory_cgrp_id], NULL
 *	for a cgroup without the memory controller.  6.1 has no KF_RCU and takes
 *	that pointer; 6.2+ refuses it unless the kernel's BTF marks it RCU (clang
 *	builds).  The kfunc must return NULL for it, not dereference it.
 *
 * self_css_get, foreign_css_get: bpf_get_mem_cgroup() given the cgroup's own
 *	css and another controller's (pids), printing whose memcg it got.
 *
 * zombie_flush (fexit of memcg's rstat flush callback, once per CPU flushed):
 *	for the css of the cgroup userspace names in zombie (a removed one whose
 *	page cache keeps its memcg), whether it is online, whether
 *	bpf_get_mem_cgroup() hands the memcg out, and its file pages as that CPU's
 *	flush left them (the last call: every CPU's); the route to an offline
 *	memcg on kernels without the css iterator (6.1).
 *
 * The iterators print lines for userspace.  The css iterator's state is a 3-word
 * stack slot whose type only the kernel's BTF needs to know: this object also
 * compiles against a vmlinux.h without struct bpf_iter_css (6.1).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf_memcontrol.h"
#include "memcg_kfuncs.h"

char _license[] SEC("license") = "GPL";

struct bpf_iter_css;
extern int bpf_iter_css_new(struct bpf_iter_css *it, struct cgroup_subsys_state *start,
			    unsigned int flags) __weak __ksym;
extern struct cgroup_subsys_state *bpf_iter_css_next(struct bpf_iter_css *it) __weak __ksym;
extern void bpf_iter_css_destroy(struct bpf_iter_css *it) __weak __ksym;

SEC("iter/cgroup")
int zombie_walk(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct cgroup_subsys_state *pos;
	struct mem_cgroup *memcg, *m;
	__u64 it[3] = {};

	if (!cgrp)
		return 0;
	memcg = bpf_get_mem_cgroup(&cgrp->self);
	if (!memcg)
		return 0;
	bpf_iter_css_new((struct bpf_iter_css *)it, &memcg->css, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it))) {
		unsigned long file = 0, usage = 0;

		m = bpf_get_mem_cgroup(pos);
		if (m) {
			file = bpf_mem_cgroup_page_state(m, NR_FILE_PAGES);
			usage = bpf_mem_cgroup_usage(m);
			bpf_put_mem_cgroup(m);
		}
		BPF_SEQ_PRINTF(seq, "id=%llu online=%d got=%d file=%lu usage=%lu\n",
			       pos->cgroup->kn->id, pos->flags & CSS_ONLINE ? 1 : 0, m ? 1 : 0,
			       file, usage);
	}
	bpf_iter_css_destroy((struct bpf_iter_css *)it);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

SEC("iter/cgroup")
int null_css_get(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;
	int got = 0;

	if (!cgrp)
		return 0;
	memcg = bpf_get_mem_cgroup(cgrp->subsys[memory_cgrp_id]);
	/* one NULL check, one put: the 6.1 verifier forgets a tested pointer */
	if (memcg) {
		bpf_put_mem_cgroup(memcg);
		got = 1;
	}
	BPF_SEQ_PRINTF(ctx->meta->seq, "memcg=%d\n", got);
	return 0;
}

/*
 * NAME: bpf_get_mem_cgroup() of the css CSS, NULL-checked first; "memcg_of=ID" of the
 * cgroup whose memcg it got (0: none), so that another cgroup's memcg cannot pass for
 * its own.
 * checked_css_get: cgrp->subsys[memory_cgrp_id], what a build whose BTF tags the css
 *	__rcu accepts (an RCU pointer, now not NULL).
 * self_css_get: the cgroup's own css (->self), which every kernel with the kfunc
 *	takes.  With the memory controller disabled there is no memcg to give, even for
 *	the root cgroup, whose subsys[] still holds the memcg allocated at boot.
 */
#define MEMCG_OF(name, css_expr)					\
SEC("iter/cgroup")							\
int name(struct bpf_iter__cgroup *ctx)					\
{									\
	struct cgroup *cgrp = ctx->cgroup;				\
	struct cgroup_subsys_state *css;				\
	struct mem_cgroup *memcg = NULL;				\
	__u64 id = 0;							\
									\
	if (!cgrp)							\
		return 0;						\
	css = css_expr;							\
	if (css)							\
		memcg = bpf_get_mem_cgroup(css);			\
	if (memcg) {							\
		id = memcg->css.cgroup->kn->id;				\
		bpf_put_mem_cgroup(memcg);				\
	}								\
	BPF_SEQ_PRINTF(ctx->meta->seq, "memcg_of=%llu\n", id);		\
	return 0;							\
}

MEMCG_OF(checked_css_get, cgrp->subsys[memory_cgrp_id])
MEMCG_OF(self_css_get, &cgrp->self)

/*
 * foreign_css_get: bpf_get_mem_cgroup() given another controller's css, the pids
 * css of the iterator's cgroup (the root's always exists): the kfunc must go from
 * it to the same cgroup's memcg, not take it for a memcg.  Prints the controller of
 * the css given and of the css it got (the memcg's css.ss), and the memcg's cgroup.
 * 6.1 takes the pointer as it is; 6.2+ only where the kernel's BTF tags subsys[]
 * __rcu (clang builds), and then only NULL-checked.
 */
SEC("iter/cgroup")
int foreign_css_get(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;
	struct cgroup_subsys_state *css;
	struct mem_cgroup *memcg = NULL;
	int given = -1, got = -1;
	__u64 id = 0;

	if (!cgrp)
		return 0;
	css = cgrp->subsys[pids_cgrp_id];
	if (css) {
		given = css->ss->id;
		memcg = bpf_get_mem_cgroup(css);
	}
	if (memcg) {
		got = memcg->css.ss->id;
		id = memcg->css.cgroup->kn->id;
		bpf_put_mem_cgroup(memcg);
	}
	BPF_SEQ_PRINTF(ctx->meta->seq, "given=%d got=%d memcg_of=%llu want=%d,%d\n", given, got,
		       id, pids_cgrp_id, memory_cgrp_id);
	return 0;
}

/* zombie_flush's: userspace sets id; the program counts */
struct zombie_seen {
	__u64 id, calls, online, got, file;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct zombie_seen);
} zombie SEC(".maps");

SEC("fexit/mem_cgroup_css_rstat_flush")
int BPF_PROG(zombie_flush, struct cgroup_subsys_state *css, int cpu)
{
	struct zombie_seen *z = bpf_map_lookup_elem(&zombie, &(__u32){ 0 });
	struct mem_cgroup *memcg;

	if (!z || !z->id || css->cgroup->kn->id != z->id)
		return 0;
	__sync_fetch_and_add(&z->calls, 1);
	if (css->flags & CSS_ONLINE) {
		__sync_fetch_and_add(&z->online, 1);
		return 0;
	}
	memcg = bpf_get_mem_cgroup(css);
	if (!memcg)
		return 0;
	__sync_fetch_and_add(&z->got, 1);
	z->file = bpf_mem_cgroup_page_state(memcg, NR_FILE_PAGES);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

/*
 * scan_*: on the iterator's cgroup, every index of a kfunc's enum and a few past
 * its end, one line "IDX VALUE" per index the kfunc accepts (not (unsigned
 * long)-1): which items the kernel under test exposes through it.
 */
#define SCAN(name, last, call)						\
SEC("iter/cgroup")							\
int name(struct bpf_iter__cgroup *ctx)					\
{									\
	struct mem_cgroup *memcg = iter_memcg(ctx);			\
	unsigned long v;						\
	int i;								\
									\
	if (!memcg)							\
		return 0;						\
	for (i = 0; i < (last) + 8; i++) {				\
		v = call;						\
		if (v != (unsigned long)-1)				\
			BPF_SEQ_PRINTF(ctx->meta->seq, "%d %lu\n", i, v); \
	}								\
	bpf_put_mem_cgroup(memcg);					\
	return 0;							\
}

SCAN(scan_page_state, MEMCG_NR_STAT, bpf_mem_cgroup_page_state(memcg, i))
SCAN(scan_vm_events, NR_VM_EVENT_ITEMS, bpf_mem_cgroup_vm_events(memcg, i))
SCAN(scan_memory_events, MEMCG_NR_MEMORY_EVENTS, bpf_mem_cgroup_memory_events(memcg, i))

/*
 * pt_*: the same reads of the root memcg from programs of other types than the
 * iterators (tracing), each run by BPF_PROG_RUN: a kernel that registers the
 * kfuncs for fewer program types than its registration says refuses them.  The
 * syscall program (sleepable) flushes too.
 */
struct pt_out pt_out;

static __always_inline void pt_read(bool flush)
{
	struct mem_cgroup *memcg = bpf_get_root_mem_cgroup();

	pt_out.ran++;
	if (!memcg)
		return;
	if (flush)
		bpf_mem_cgroup_flush_stats(memcg);
	pt_out.got = 1;
	pt_out.usage = bpf_mem_cgroup_usage(memcg);
	pt_out.anon = bpf_mem_cgroup_page_state(memcg, NR_ANON_MAPPED);
	pt_out.pgfault = bpf_mem_cgroup_vm_events(memcg, PGFAULT);
	pt_out.high = bpf_mem_cgroup_memory_events(memcg, MEMCG_HIGH);
	bpf_put_mem_cgroup(memcg);
}

SEC("syscall")
int pt_syscall(void *ctx)
{
	pt_read(true);
	return 0;
}

SEC("tc")
int pt_sched_cls(struct __sk_buff *skb)
{
	pt_read(false);
	return 0;
}

SEC("xdp")
int pt_xdp(struct xdp_md *xdp)
{
	pt_read(false);
	return XDP_PASS;
}

SEC("socket")
int pt_socket_filter(struct __sk_buff *skb)
{
	pt_read(false);
	return 0;
}

/*
 * css_walks (6.7+): from the iterator's cgroup's memcg css, one open-coded css walk per
 * order userspace may name (DESCENDANTS_PRE, DESCENDANTS_POST, ANCESTORS_UP, and an
 * invalid 0 and 99, and SELF_ONLY, which only the cgroup iterator takes): "order=N
 * ret=R" from bpf_iter_css_new(), then "id=I" per css the walk gives, in order. Last,
 * an order 99 on an iterator that walked before: a refused walk must not resume the
 * earlier one from what its slot still holds; and a pre-order walk in a slot where
 * another stopped after two csses: it must start over.
 */
#define CSS_WALK(seq, start, order)						\
do {									\
	struct cgroup_subsys_state *pos;				\
	__u64 it[3] = {};						\
	int ret = bpf_iter_css_new((struct bpf_iter_css *)it, start, order); \
									\
	BPF_SEQ_PRINTF(seq, "order=%d ret=%d\n", order, ret);		\
	while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it)))	\
		BPF_SEQ_PRINTF(seq, "id=%llu\n", pos->cgroup->kn->id);	\
	bpf_iter_css_destroy((struct bpf_iter_css *)it);		\
} while (0)

SEC("iter/cgroup")
int css_walks(struct bpf_iter__cgroup *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct cgroup *cgrp = ctx->cgroup;
	struct mem_cgroup *memcg;

	if (!cgrp)
		return 0;
	memcg = bpf_get_mem_cgroup(&cgrp->self);
	if (!memcg)
		return 0;
	CSS_WALK(seq, &memcg->css, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	CSS_WALK(seq, &memcg->css, BPF_CGROUP_ITER_DESCENDANTS_POST);
	CSS_WALK(seq, &memcg->css, BPF_CGROUP_ITER_ANCESTORS_UP);
	CSS_WALK(seq, &memcg->css, 0);
	CSS_WALK(seq, &memcg->css, 99);
	CSS_WALK(seq, &memcg->css, BPF_CGROUP_ITER_SELF_ONLY);
	{
		struct cgroup_subsys_state *pos;
		__u64 it[3] = {};
		int ret;

		bpf_iter_css_new((struct bpf_iter_css *)it, &memcg->css,
				 BPF_CGROUP_ITER_DESCENDANTS_PRE);
		bpf_iter_css_next((struct bpf_iter_css *)it);
		bpf_iter_css_destroy((struct bpf_iter_css *)it);
		ret = bpf_iter_css_new((struct bpf_iter_css *)it, &memcg->css, 99);
		BPF_SEQ_PRINTF(seq, "order=%d ret=%d\n", 99, ret);
		while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it)))
			BPF_SEQ_PRINTF(seq, "id=%llu\n", pos->cgroup->kn->id);
		bpf_iter_css_destroy((struct bpf_iter_css *)it);
		/* a walk left after two csses, then a new one in the same slot: it
		 * starts at its start, not where the other stopped */
		bpf_iter_css_new((struct bpf_iter_css *)it, &memcg->css,
				 BPF_CGROUP_ITER_DESCENDANTS_PRE);
		bpf_iter_css_next((struct bpf_iter_css *)it);
		bpf_iter_css_next((struct bpf_iter_css *)it);
		bpf_iter_css_destroy((struct bpf_iter_css *)it);
		ret = bpf_iter_css_new((struct bpf_iter_css *)it, &memcg->css,
				       BPF_CGROUP_ITER_DESCENDANTS_PRE);
		BPF_SEQ_PRINTF(seq, "order=%d ret=%d\n", BPF_CGROUP_ITER_DESCENDANTS_PRE, ret);
		while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it)))
			BPF_SEQ_PRINTF(seq, "id=%llu\n", pos->cgroup->kn->id);
		bpf_iter_css_destroy((struct bpf_iter_css *)it);
	}
	bpf_put_mem_cgroup(memcg);
	return 0;
}
