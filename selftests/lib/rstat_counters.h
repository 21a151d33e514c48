/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The map values of rstat_counters.bpf.h, for the BPF side (through vmlinux.h)
 * and userspace (through <linux/types.h>).  RS_NR, the number of
 * counters per cgroup (a macro or an enum constant), must be known first.
 */
#ifndef SELFTESTS_LIB_RSTAT_COUNTERS_H
#define SELFTESTS_LIB_RSTAT_COUNTERS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* per cgroup and CPU */
struct rs_pcpu {
	__u64 state[RS_NR];	/* counted on this CPU (only this CPU writes) */
	__u64 prev[RS_NR];	/* state at the last flush of (cgroup, CPU) */
};

/*
 * With RS_CGRP_STORAGE one cgroup local storage value holds every CPU's
 * struct rs_pcpu, cpu[] indexed by CPU number (only that CPU writes its slot).
 */
#define RS_MAX_CPUS 64
struct rs_pcpu_all {
	struct rs_pcpu cpu[RS_MAX_CPUS];
};

/* per cgroup: written only by the flusher, under the rstat lock */
struct rs_total {
	__u64 total[RS_NR];	/* own + all descendants, as flushed */
	__u64 own[RS_NR];	/* counted in this very cgroup */
	__u64 pending[RS_NR];	/* pushed up by flushed children, not folded yet */
};

#endif /* SELFTESTS_LIB_RSTAT_COUNTERS_H */
