// SPDX-License-Identifier: GPL-2.0
/* hierarchical_stats.bpf.c with its per-cgroup state in cgroup local storage */
#define RS_CGRP_STORAGE
#include "hierarchical_stats.bpf.c"
