// SPDX-License-Identifier: GPL-2.0
/*
 * Deliberately broken build of hierarchical_stats.bpf.c: the rstat flush
 * program does not push a cgroup's delta into its parent, so every parent
 * stays at its own (zero) statistics.  Selected with "hierarchical_stats
 * --broken" ([variants.broken_propagation] in test.toml), where the
 * parent-equals-sum checks must FAIL: that proves they can.
 */
#define BROKEN_NO_PROPAGATE
#include "hierarchical_stats.bpf.c"
