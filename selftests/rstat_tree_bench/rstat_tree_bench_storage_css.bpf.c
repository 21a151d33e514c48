// SPDX-License-Identifier: GPL-2.0
/* rstat_tree_bench_storage.bpf.c for the css_rstat_* kfuncs (6.16+) */
#define RSTAT_API_CSS
#include "rstat_tree_bench_storage.bpf.c"
