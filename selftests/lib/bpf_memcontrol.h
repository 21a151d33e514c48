/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Mainline's memcg kfuncs (mm/bpf_memcontrol.c; patches/memcg-kfuncs backports
 * them to 6.12 and 6.1), declared once for every BPF program that calls them.
 * Include after vmlinux.h and <bpf/bpf_helpers.h>.
 */
#ifndef HARNESS_BPF_MEMCONTROL_H
#define HARNESS_BPF_MEMCONTROL_H

extern struct mem_cgroup *bpf_get_mem_cgroup(struct cgroup_subsys_state *css) __ksym;
extern struct mem_cgroup *bpf_get_root_mem_cgroup(void) __ksym;
extern void bpf_put_mem_cgroup(struct mem_cgroup *memcg) __ksym;
extern void bpf_mem_cgroup_flush_stats(struct mem_cgroup *memcg) __ksym;
extern unsigned long bpf_mem_cgroup_page_state(struct mem_cgroup *memcg,
					       int idx) __ksym;
extern unsigned long bpf_mem_cgroup_vm_events(struct mem_cgroup *memcg,
					      enum vm_event_item event) __ksym;
extern unsigned long bpf_mem_cgroup_memory_events(struct mem_cgroup *memcg,
						  enum memcg_memory_event event) __ksym;
extern unsigned long bpf_mem_cgroup_usage(struct mem_cgroup *memcg) __ksym;

/* the memcg of a cgroup iterator's cgroup, referenced; NULL at the walk's end or
 * without one */
static __always_inline struct mem_cgroup *iter_memcg(struct bpf_iter__cgroup *ctx)
{
	struct cgroup *cgrp = ctx->cgroup;	/* one load: the one NULL-checked */

	return cgrp ? bpf_get_mem_cgroup(&cgrp->self) : NULL;
}

#endif /* HARNESS_BPF_MEMCONTROL_H */
