// SPDX-License-Identifier: GPL-2.0
/* cgroup_iter_rstat_neg.bpf.c for the css_rstat_* kfuncs (6.16+) */
#define RSTAT_API_CSS
#include "cgroup_iter_rstat_neg.bpf.c"
