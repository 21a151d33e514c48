// SPDX-License-Identifier: GPL-2.0
/*
 * Programs the verifier must refuse for what the kfuncs' flags forbid, each
 * loaded alone by memcg_kfuncs.c (its table names the message expected): the
 * flush from a non-sleepable program (KF_SLEEPABLE), a css the verifier knows
 * nothing about (KF_RCU), a memcg walked from the referenced one to a reader
 * or the flush (KF_TRUSTED_ARGS) or to a put (KF_RELEASE), a reference never
 * put (KF_ACQUIRE), a reference used before its NULL check (KF_RET_NULL).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "bpf_memcontrol.h"

char _license[] SEC("license") = "GPL";

unsigned long sink;

/* weak: 6.1 has no bpf_rdonly_cast, and loads the programs that do not call it */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/*
 * A memcg the verifier cannot vouch for: the referenced one cast read-only, untrusted
 * as a pointer walked from it is. No field walk serves every kernel: 7.x moved objcg
 * and orig_objcg into the per-node info, an array of pointers the verifier does not walk.
 */
#define WALKED(memcg)								\
	((struct mem_cgroup *)bpf_rdonly_cast(memcg, bpf_core_type_id_kernel(struct mem_cgroup)))

/* a program that gets the iterator's memcg, does @call with it, puts it */
#define NEG(name, sec, call)						\
SEC(sec)								\
int name(struct bpf_iter__cgroup *ctx)					\
{									\
	struct mem_cgroup *memcg = iter_memcg(ctx);			\
									\
	if (!memcg)							\
		return 0;						\
	call;								\
	bpf_put_mem_cgroup(memcg);					\
	return 0;							\
}

NEG(memcg_flush_in_plain_iter, "iter/cgroup", bpf_mem_cgroup_flush_stats(memcg))
NEG(read_untrusted, "iter/cgroup",
	sink = bpf_mem_cgroup_page_state(WALKED(memcg), NR_ANON_MAPPED))
NEG(vm_events_untrusted, "iter/cgroup",
	sink = bpf_mem_cgroup_vm_events(WALKED(memcg), PGFAULT))
NEG(memory_events_untrusted, "iter/cgroup",
	sink = bpf_mem_cgroup_memory_events(WALKED(memcg), MEMCG_HIGH))
NEG(usage_untrusted, "iter/cgroup", sink = bpf_mem_cgroup_usage(WALKED(memcg)))
NEG(flush_untrusted, "iter.s/cgroup", bpf_mem_cgroup_flush_stats(WALKED(memcg)))
NEG(put_unreferenced, "iter/cgroup", bpf_put_mem_cgroup(WALKED(memcg)))

/* a program that gets the memcg of @css (of the iterator's cgroup), then does @use */
#define NEG_GET(name, css, use)						\
SEC("iter/cgroup")							\
int name(struct bpf_iter__cgroup *ctx)					\
{									\
	struct cgroup *cgrp = ctx->cgroup;				\
	struct mem_cgroup *memcg;					\
									\
	if (!cgrp)							\
		return 0;						\
	memcg = bpf_get_mem_cgroup(css);				\
	use;								\
	return 0;							\
}

/* the parent's css: a plain pointer walk, not RCU-protected */
NEG_GET(get_untrusted, cgrp->self.parent, if (memcg) bpf_put_mem_cgroup(memcg))

SEC("iter/cgroup")
int leak(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = iter_memcg(ctx);

	if (memcg)
		sink = bpf_mem_cgroup_page_state(memcg, NR_ANON_MAPPED);
	return 0;
}

/* the root memcg's reference is one too (KF_ACQUIRE), though the root is never freed */
SEC("iter/cgroup")
int leak_root(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = bpf_get_root_mem_cgroup();

	if (memcg)
		sink = bpf_mem_cgroup_usage(memcg);
	return 0;
}

/* bpf_get_mem_cgroup() and bpf_get_root_mem_cgroup() may return NULL: used unchecked */
NEG_GET(get_unchecked, &cgrp->self,
	sink = bpf_mem_cgroup_usage(memcg); bpf_put_mem_cgroup(memcg))

SEC("iter/cgroup")
int get_root_unchecked(struct bpf_iter__cgroup *ctx)
{
	struct mem_cgroup *memcg = bpf_get_root_mem_cgroup();

	sink = bpf_mem_cgroup_usage(memcg);
	bpf_put_mem_cgroup(memcg);
	return 0;
}

/*
 * css_walk_*: the css iterator (6.7+) broken as its flags forbid, from the
 * iterator's cgroup's own css: a walk outside an RCU section, in a sleepable
 * program (KF_RCU_PROTECTED), a start css walked from a pointer (trusted
 * arguments), a next() used before its NULL check (KF_RET_NULL), a walk never
 * destroyed (KF_ITER_NEW's reference).  The state is a 3-word stack slot whose
 * type only the kernel's BTF needs to know (6.1's vmlinux.h has none).
 */
struct bpf_iter_css;
extern int bpf_iter_css_new(struct bpf_iter_css *it, struct cgroup_subsys_state *start,
			    unsigned int flags) __weak __ksym;
extern struct cgroup_subsys_state *bpf_iter_css_next(struct bpf_iter_css *it) __weak __ksym;
extern void bpf_iter_css_destroy(struct bpf_iter_css *it) __weak __ksym;

#define CSS_WALK_NEG(name, sec, start, body, destroy)				\
SEC(sec)									\
int name(struct bpf_iter__cgroup *ctx)						\
{										\
	struct cgroup *cgrp = ctx->cgroup;					\
	struct cgroup_subsys_state *pos;					\
	__u64 it[3] = {};							\
										\
	if (!cgrp)								\
		return 0;							\
	bpf_iter_css_new((struct bpf_iter_css *)it, start,			\
			 BPF_CGROUP_ITER_DESCENDANTS_PRE);			\
	body;									\
	if (destroy)								\
		bpf_iter_css_destroy((struct bpf_iter_css *)it);		\
	return 0;								\
}

CSS_WALK_NEG(css_walk_sleepable, "iter.s/cgroup", &cgrp->self,
	     while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it))) sink++, 1)
CSS_WALK_NEG(css_walk_untrusted_start, "iter/cgroup", cgrp->self.parent,
	     while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it))) sink++, 1)
CSS_WALK_NEG(css_walk_next_unchecked, "iter/cgroup", &cgrp->self,
	     pos = bpf_iter_css_next((struct bpf_iter_css *)it); sink = pos->flags, 1)
CSS_WALK_NEG(css_walk_not_destroyed, "iter/cgroup", &cgrp->self,
	     while ((pos = bpf_iter_css_next((struct bpf_iter_css *)it))) sink++, 0)
