#ifdef CONFIG_BPF_SYSCALL
/*
 * BPF kfuncs that read the statistics memory.stat reports.
 *
 * They take a struct cgroup from a BPF program and use that cgroup's own
 * memcg, the one whose memory.stat file the cgroup has.  There may be none:
 * the memory controller may not be enabled for the cgroup, the cgroup may be
 * on a hierarchy without the memory controller or already offline, or memcg
 * may be disabled with cgroup_disable=memory.  The css is looked up under
 * rcu_read_lock(); memcgs are freed only after an RCU grace period, so that
 * is enough for reading counters, and a reference is taken when the memcg is
 * used outside of the RCU read-side critical section.
 *
 * The item a program passes is arbitrary; it is validated before it gets
 * near the stat maps, which warn on (or index past the end for) items memcg
 * does not track.
 */

/* Return @cgrp's own memcg or NULL; the caller must hold rcu_read_lock(). */
static struct mem_cgroup *bpf_memcg_from_cgroup(struct cgroup *cgrp)
{
	if (!cgrp || mem_cgroup_disabled())
		return NULL;

	return mem_cgroup_from_css(rcu_dereference(cgrp->subsys[memory_cgrp_id]));
}

/* @item must have passed memcg_stat_item_valid(). */
static s64 bpf_memcg_page_state_output(struct cgroup *cgrp, int item)
{
	struct mem_cgroup *memcg;
	s64 val = -ENOENT;

	rcu_read_lock();
	memcg = bpf_memcg_from_cgroup(cgrp);
	if (memcg)
		val = memcg_page_state_output(memcg, item);
	rcu_read_unlock();

	return val;
}

__bpf_kfunc_start_defs();

/**
 * bpf_memcg_flush_stats - flush the memory statistics of a cgroup subtree
 * @cgrp: the cgroup whose memcg statistics to flush
 *
 * Fold the pending per-CPU statistics updates of the memcg of @cgrp and of
 * its descendants into the hierarchical counters that the fetch kfuncs
 * read.  This is the flush that reading @cgrp's memory.stat does, including
 * its rate limiting: it is skipped while fewer updates are pending in the
 * subtree than the memcg flush threshold, so afterwards the counters are as
 * current as memory.stat would show them.  The flush may sleep, so only
 * sleepable programs (e.g. "iter.s/cgroup") can call this kfunc.
 *
 * Return: 0 on success; -ENOENT if @cgrp is NULL or has no memcg (the memory
 * controller is not enabled for it, it is offline, or memcg is disabled).
 */
__bpf_kfunc int bpf_memcg_flush_stats(struct cgroup *cgrp)
{
	struct mem_cgroup *memcg;

	rcu_read_lock();
	memcg = bpf_memcg_from_cgroup(cgrp);
	if (memcg && !css_tryget(&memcg->css))
		memcg = NULL;
	rcu_read_unlock();

	if (!memcg)
		return -ENOENT;

	mem_cgroup_flush_stats(memcg);
	css_put(&memcg->css);

	return 0;
}

/**
 * bpf_memcg_node_stat_fetch - read a node stat item of a cgroup's memcg
 * @cgrp: the cgroup to read
 * @item: the item to read
 *
 * Read the value of @item for @cgrp as memory.stat reports it: hierarchical
 * (@cgrp and all its descendants), as of the last flush (see
 * bpf_memcg_flush_stats()), and in memory.stat's unit: in bytes for sizes
 * (also for the items counted in bytes or KiB internally, such as
 * NR_SLAB_RECLAIMABLE_B and NR_KERNEL_STACK_KB) and as a count for the
 * workingset, demotion and promotion events.  Only the items memcg tracks
 * are accepted; NR_ANON_MAPPED ("anon"), NR_FILE_PAGES ("file") and
 * NR_SHMEM ("shmem") are examples.
 *
 * Return: the value (>= 0); -EINVAL if @item is out of range or not tracked
 * by memcg; -ENOENT if @cgrp is NULL or has no memcg.  @item is checked
 * first.
 */
__bpf_kfunc s64 bpf_memcg_node_stat_fetch(struct cgroup *cgrp,
					  enum node_stat_item item)
{
	if ((unsigned int)item >= NR_VM_NODE_STAT_ITEMS ||
	    !memcg_stat_item_valid(item))
		return -EINVAL;

	return bpf_memcg_page_state_output(cgrp, item);
}

/**
 * bpf_memcg_stat_fetch - read a memcg stat item of a cgroup's memcg
 * @cgrp: the cgroup to read
 * @item: the item to read, e.g. MEMCG_KMEM ("kernel") or MEMCG_SOCK ("sock")
 *
 * Like bpf_memcg_node_stat_fetch(), for the memcg specific items: the
 * hierarchical value as of the last flush, in bytes.  Node stat items are
 * not accepted here.
 *
 * Return: the value (>= 0); -EINVAL if @item is not an enum memcg_stat_item
 * value memcg tracks; -ENOENT if @cgrp is NULL or has no memcg.  @item is
 * checked first.
 */
__bpf_kfunc s64 bpf_memcg_stat_fetch(struct cgroup *cgrp,
				     enum memcg_stat_item item)
{
	if ((unsigned int)item < NR_VM_NODE_STAT_ITEMS ||
	    !memcg_stat_item_valid(item))
		return -EINVAL;

	return bpf_memcg_page_state_output(cgrp, item);
}

/**
 * bpf_memcg_vm_event_fetch - read a vm event counter of a cgroup's memcg
 * @cgrp: the cgroup to read
 * @item: the event to read, e.g. PGFAULT ("pgfault")
 *
 * Read the number of @item events in @cgrp and all its descendants as of
 * the last flush, as memory.stat reports it.  Only the events memcg counts
 * are accepted.
 *
 * Return: the count (>= 0); -EINVAL if @item is out of range or not counted
 * by memcg; -ENOENT if @cgrp is NULL or has no memcg.  @item is checked
 * first.
 */
__bpf_kfunc s64 bpf_memcg_vm_event_fetch(struct cgroup *cgrp,
					 enum vm_event_item item)
{
	struct mem_cgroup *memcg;
	s64 val = -ENOENT;

	if (!memcg_vm_event_item_valid(item))
		return -EINVAL;

	rcu_read_lock();
	memcg = bpf_memcg_from_cgroup(cgrp);
	if (memcg)
		val = memcg_events(memcg, item);
	rcu_read_unlock();

	return val;
}

__bpf_kfunc_end_defs();

/*
 * The flush needs a trusted cgroup; the fetches also accept an RCU protected
 * one, such as task->cgroups->dfl_cgrp in an RCU read-side section, since they
 * only dereference it under their own rcu_read_lock().
 */
BTF_KFUNCS_START(bpf_memcg_kfunc_ids)
BTF_ID_FLAGS(func, bpf_memcg_flush_stats, KF_TRUSTED_ARGS | KF_SLEEPABLE)
BTF_ID_FLAGS(func, bpf_memcg_node_stat_fetch, KF_RCU)
BTF_ID_FLAGS(func, bpf_memcg_stat_fetch, KF_RCU)
BTF_ID_FLAGS(func, bpf_memcg_vm_event_fetch, KF_RCU)
BTF_KFUNCS_END(bpf_memcg_kfunc_ids)

static const struct btf_kfunc_id_set bpf_memcg_kfunc_set = {
	.owner	= THIS_MODULE,
	.set	= &bpf_memcg_kfunc_ids,
};

static int __init bpf_memcg_kfunc_init(void)
{
	return register_btf_kfunc_id_set(BPF_PROG_TYPE_TRACING,
					 &bpf_memcg_kfunc_set);
}
late_initcall(bpf_memcg_kfunc_init);
