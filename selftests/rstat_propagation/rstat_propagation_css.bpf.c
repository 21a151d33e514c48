// SPDX-License-Identifier: GPL-2.0
/* rstat_propagation.bpf.c with mainline's (6.16+) css_rstat_updated/flush kfuncs */
#define RSTAT_API_CSS
#include "rstat_propagation.bpf.c"
