// SPDX-License-Identifier: GPL-2.0
/* rstat_tree_bench.bpf.c with its per-cgroup state in cgroup local storage */
#define RS_CGRP_STORAGE
#include "rstat_tree_bench.bpf.c"
