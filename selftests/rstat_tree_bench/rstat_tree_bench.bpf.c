// SPDX-License-Identifier: GPL-2.0
/* Memcg-reclaim statistics summed up the tree by rstat: lib/reclaim_stats.bpf.h. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "reclaim_stats.bpf.h"
