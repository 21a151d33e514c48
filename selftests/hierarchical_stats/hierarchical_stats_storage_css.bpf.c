// SPDX-License-Identifier: GPL-2.0
/* hierarchical_stats_storage.bpf.c for the css_rstat_* kfuncs (6.16+) */
#define RSTAT_API_CSS
#include "hierarchical_stats_storage.bpf.c"
