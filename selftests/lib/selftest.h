/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every selftest's userspace includes first: the libc headers they all
 * use (with _GNU_SOURCE, so before any other header), the table of checks,
 * the cgroup and the libbpf helpers.
 */
#ifndef SELFTESTS_LIB_SELFTEST_H
#define SELFTESTS_LIB_SELFTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cg_util.h"
#include "bpf_util.h"

#endif /* SELFTESTS_LIB_SELFTEST_H */
