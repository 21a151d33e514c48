// SPDX-License-Identifier: GPL-2.0
/* cgrp_storage.bpf.c with mainline's (6.16+) css_rstat_updated kfunc */
#define RSTAT_API_CSS
#include "cgrp_storage.bpf.c"
