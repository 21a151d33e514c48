// SPDX-License-Identifier: GPL-2.0
/* memcg_kfuncs.bpf.c with mainline's (6.16+) css_rstat_flush kfunc */
#define RSTAT_API_CSS
#include "memcg_kfuncs.bpf.c"
