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
#define RSTAT_UPDATED(cgrp, cpu)	css_rstat_updated(&(cgrp)->self, cpu)
#define RSTAT_FLUSH(cgrp)		css_rstat_flush(&(cgrp)->self)
#else
extern void cgroup_rstat_updated(struct cgroup *cgrp, int cpu) __ksym;
extern void cgroup_rstat_flush(struct cgroup *cgrp) __ksym;
#define RSTAT_UPDATED(cgrp, cpu)	cgroup_rstat_updated(cgrp, cpu)
#define RSTAT_FLUSH(cgrp)		cgroup_rstat_flush(cgrp)
#endif

#endif /* SELFTESTS_LIB_BPF_RSTAT_H */
