// SPDX-License-Identifier: GPL-2.0
/*
 * The hierarchical_stats BPF programs, unchanged, under this test's own
 * skeleton name (rstat_tree_bench_bpf): the benchmark measures exactly what
 * the selftest checks.
 */
#include "hierarchical_stats.bpf.c"
