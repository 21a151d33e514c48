// SPDX-License-Identifier: GPL-2.0
/*
 * The rstat kfuncs from program types they are not registered for: mainline
 * registers them for tracing programs alone (the tracing hook, which LSM,
 * tracepoint and perf_event programs share), so a program of any other hook
 * calling them must be refused for that ("calling kernel function ... is not
 * allowed"), before any of its arguments is looked at: syscall, tc and XDP
 * programs (each a kfunc hook of its own) and a socket filter (of none).
 * Built twice, like cgroup_iter_rstat.bpf.c: cgroup_iter_rstat_neg_css.bpf.c
 * for css_rstat_*.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#include "bpf_rstat.h"

#ifdef RSTAT_API_CSS
#define CALL_RSTAT_KFUNCS()						\
	do {								\
		css_rstat_updated((struct cgroup_subsys_state *)0, 0);	\
		css_rstat_flush((struct cgroup_subsys_state *)0);	\
	} while (0)
#else
#define CALL_RSTAT_KFUNCS()					\
	do {							\
		cgroup_rstat_updated((struct cgroup *)0, 0);	\
		cgroup_rstat_flush((struct cgroup *)0);		\
	} while (0)
#endif

SEC("syscall")
int rstat_kfuncs_in_syscall(void *ctx)
{
	CALL_RSTAT_KFUNCS();
	return 0;
}

SEC("tc")
int rstat_kfuncs_in_tc(struct __sk_buff *skb)
{
	CALL_RSTAT_KFUNCS();
	return 0;
}

SEC("xdp")
int rstat_kfuncs_in_xdp(struct xdp_md *ctx)
{
	CALL_RSTAT_KFUNCS();
	return XDP_PASS;
}

SEC("socket")
int rstat_kfuncs_in_socket(struct __sk_buff *skb)
{
	CALL_RSTAT_KFUNCS();
	return 0;
}
