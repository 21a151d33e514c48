/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The rstat kfuncs for BPF programs, under the names the kernel has:
 * cgroup_rstat_{updated,flush}(cgrp) up to 6.15, css_rstat_{updated,flush}(css)
 * from 6.16 (the 2025 rstat rework), when built with -DRSTAT_API_CSS.  A test
 * has X_css.bpf.c define RSTAT_API_CSS and include X.bpf.c; BU_LOAD_RSTAT()
 * (bpf_util.h) loads the object the kernel can run.
 */
#ifndef SELFTESTS_LIB_BPF_RSTAT_H
#define SELFTESTS_LIB_BPF_RSTAT_H

#ifdef RSTAT_API_CSS
extern void css_rstat_updated(struct cgroup_subsys_state *css, int cpu) __ksym;
extern void css_rstat_flush(struct cgroup_subsys_state *css) __ksym;
extern struct cgroup *bpf_cgroup_from_id(u64 cgid) __ksym;
extern void bpf_cgroup_release(struct cgroup *cgrp) __ksym;

/*
 * The kernels with this API take trusted arguments only (7.x: every kfunc's default),
 * and a cgroup walked to from a task or given to an fentry program is not one: the
 * cgroup looked up by its id, referenced, is.  false when it cannot be (a cgroup being
 * freed has no id to look up any more).
 */
static __always_inline bool rstat_updated(struct cgroup *cgrp, int cpu)
{
	struct cgroup *t = bpf_cgroup_from_id(cgrp->kn->id);

	if (!t)
		return false;
	css_rstat_updated(&t->self, cpu);
	bpf_cgroup_release(t);
	return true;
}
#define RSTAT_FLUSH(cgrp)		css_rstat_flush(&(cgrp)->self)
#else
extern void cgroup_rstat_updated(struct cgroup *cgrp, int cpu) __ksym;
extern void cgroup_rstat_flush(struct cgroup *cgrp) __ksym;

static __always_inline bool rstat_updated(struct cgroup *cgrp, int cpu)
{
	cgroup_rstat_updated(cgrp, cpu);
	return true;
}
#define RSTAT_FLUSH(cgrp)		cgroup_rstat_flush(cgrp)
#endif
/* tell rstat @cgrp has something to flush on @cpu; true if it could */
#define RSTAT_UPDATED(cgrp, cpu)	rstat_updated(cgrp, cpu)

#endif /* SELFTESTS_LIB_BPF_RSTAT_H */
