// SPDX-License-Identifier: GPL-2.0
/*
 * The rstat kfuncs from a program type they are not registered for: mainline
 * registers them for tracing programs alone, so a syscall program calling them
 * must be refused for that ("calling kernel function ... is not allowed"),
 * before any of its arguments is looked at.  Built twice, like
 * cgroup_iter_rstat.bpf.c: cgroup_iter_rstat_neg_css.bpf.c for css_rstat_*.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

SEC("syscall")
int rstat_kfuncs_in_syscall(void *ctx)
{
#ifdef RSTAT_API_CSS
	css_rstat_updated((struct cgroup_subsys_state *)0, 0);
	css_rstat_flush((struct cgroup_subsys_state *)0);
#else
	cgroup_rstat_updated((struct cgroup *)0, 0);
	cgroup_rstat_flush((struct cgroup *)0);
#endif
	return 0;
}
