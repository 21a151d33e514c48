// SPDX-License-Identifier: GPL-2.0-only
/*
 * BPF kfuncs to access memory cgroups
 *
 * A BPF program gets a reference on a memcg with bpf_get_mem_cgroup() or
 * bpf_get_root_mem_cgroup() and drops it with bpf_put_mem_cgroup(); the
 * verifier makes sure that every reference taken is dropped.  In between,
 * it can read the memcg's counters as memory.stat, memory.events and
 * memory.current show them, without formatting and parsing those files.
 */

#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/memcontrol.h>

#include "memcontrol-v1.h"

__bpf_kfunc_start_defs();

/**
 * bpf_get_root_mem_cgroup - get the root memory cgroup
 *
 * The root memcg is never freed, so no reference is taken, but the result
 * may be passed to bpf_put_mem_cgroup() like any other.
 *
 * Return: the root memcg, or NULL if the memory controller is disabled.
 */
__bpf_kfunc struct mem_cgroup *bpf_get_root_mem_cgroup(void)
{
	if (mem_cgroup_disabled())
		return NULL;

	/* the root css is CSS_NO_REF: css_get() and css_put() do nothing */
	return root_mem_cgroup;
}

/**
 * bpf_get_mem_cgroup - get the memory cgroup of a cgroup
 * @css: a css of the cgroup, of any controller or its cgroup's ->self
 *
 * Return: the memcg of @css's cgroup with a reference taken, which the
 * caller must drop with bpf_put_mem_cgroup(); NULL if the cgroup has no
 * memcg (the controller is not enabled for it, or its memcg is already
 * being freed) or the memory controller is disabled.  A memcg that is
 * offline but still referenced, by the page cache of a removed cgroup for
 * example, is returned for its own css: css_tryget() succeeds until the
 * last reference is gone.
 */
__bpf_kfunc struct mem_cgroup *
bpf_get_mem_cgroup(struct cgroup_subsys_state *css)
{
	struct mem_cgroup *memcg = NULL;

	if (mem_cgroup_disabled() || !root_mem_cgroup)
		return NULL;

	rcu_read_lock();
	if (css->ss != &memory_cgrp_subsys)
		css = rcu_dereference(css->cgroup->subsys[memory_cgrp_id]);
	if (css && css_tryget(css))
		memcg = mem_cgroup_from_css(css);
	rcu_read_unlock();

	return memcg;
}

/**
 * bpf_put_mem_cgroup - drop a reference on a memory cgroup
 * @memcg: a memcg from bpf_get_mem_cgroup() or bpf_get_root_mem_cgroup()
 */
__bpf_kfunc void bpf_put_mem_cgroup(struct mem_cgroup *memcg)
{
	css_put(&memcg->css);
}

/**
 * bpf_mem_cgroup_flush_stats - flush the statistics of a memory cgroup
 * @memcg: the memcg
 *
 * Fold the pending per-CPU updates of @memcg's subtree into the counters
 * that bpf_mem_cgroup_page_state() and bpf_mem_cgroup_vm_events() read, as
 * reading memory.stat does (with the same rate limiting).  May sleep.
 */
__bpf_kfunc void bpf_mem_cgroup_flush_stats(struct mem_cgroup *memcg)
{
	mem_cgroup_flush_stats(memcg);
}

/**
 * bpf_mem_cgroup_page_state - read a memory statistic of a memory cgroup
 * @memcg: the memcg
 * @idx: an enum node_stat_item or enum memcg_stat_item value
 *
 * Return: the value memory.stat shows for @idx (hierarchical, as of the
 * last flush, in bytes for sizes and as a count for events), or
 * (unsigned long)-1 if @idx is out of range or memcg does not track it.
 */
__bpf_kfunc unsigned long bpf_mem_cgroup_page_state(struct mem_cgroup *memcg,
						    int idx)
{
	if (!memcg_stat_item_valid(idx))
		return (unsigned long)-1;

	return memcg_page_state_output(memcg, idx);
}

/**
 * bpf_mem_cgroup_vm_events - read a vm event counter of a memory cgroup
 * @memcg: the memcg
 * @event: the event
 *
 * Return: the hierarchical count of @event as of the last flush, or
 * (unsigned long)-1 if @event is out of range or memcg does not count it.
 */
__bpf_kfunc unsigned long bpf_mem_cgroup_vm_events(struct mem_cgroup *memcg,
						   enum vm_event_item event)
{
	if (!memcg_vm_event_item_valid(event))
		return (unsigned long)-1;

	return memcg_events(memcg, event);
}

/**
 * bpf_mem_cgroup_memory_events - read a memory.events counter
 * @memcg: the memcg
 * @event: the event (MEMCG_LOW ... MEMCG_SWAP_FAIL)
 *
 * Return: the count memory.events shows for @event, or (unsigned long)-1
 * if @event is out of range.
 */
__bpf_kfunc unsigned long
bpf_mem_cgroup_memory_events(struct mem_cgroup *memcg,
			     enum memcg_memory_event event)
{
	if ((u32)event >= MEMCG_NR_MEMORY_EVENTS)
		return (unsigned long)-1;

	return atomic_long_read(&memcg->memory_events[event]);
}

/**
 * bpf_mem_cgroup_usage - read the memory usage of a memory cgroup
 * @memcg: the memcg
 *
 * Return: the usage in bytes, as memory.current shows it.  The root memcg
 * does not charge its own pages: its usage is that of its children.
 */
__bpf_kfunc unsigned long bpf_mem_cgroup_usage(struct mem_cgroup *memcg)
{
	return page_counter_read(&memcg->memory) * PAGE_SIZE;
}

__bpf_kfunc_end_defs();

BTF_KFUNCS_START(bpf_memcontrol_kfuncs)
BTF_ID_FLAGS(func, bpf_get_root_mem_cgroup, KF_ACQUIRE | KF_RET_NULL)
BTF_ID_FLAGS(func, bpf_get_mem_cgroup, KF_ACQUIRE | KF_RET_NULL | KF_RCU)
BTF_ID_FLAGS(func, bpf_put_mem_cgroup, KF_RELEASE)
BTF_ID_FLAGS(func, bpf_mem_cgroup_flush_stats, KF_TRUSTED_ARGS | KF_SLEEPABLE)
BTF_ID_FLAGS(func, bpf_mem_cgroup_page_state, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_mem_cgroup_vm_events, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_mem_cgroup_memory_events, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_mem_cgroup_usage, KF_TRUSTED_ARGS)
BTF_KFUNCS_END(bpf_memcontrol_kfuncs)

static const struct btf_kfunc_id_set bpf_memcontrol_kfunc_set = {
	.owner	= THIS_MODULE,
	.set	= &bpf_memcontrol_kfuncs,
};

static int __init bpf_memcontrol_init(void)
{
	int err;

	/* BPF_PROG_TYPE_UNSPEC: every program type may call them */
	err = register_btf_kfunc_id_set(BPF_PROG_TYPE_UNSPEC,
					&bpf_memcontrol_kfunc_set);
	if (err)
		pr_warn("error while registering the memcg kfuncs: %d\n", err);

	return err;
}
late_initcall(bpf_memcontrol_init);
