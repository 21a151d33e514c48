/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small helpers shared by the harness's userspace selftests: KTAP output
 * (flushed line by line, so a test killed by its timeout still shows how far
 * it got), small cgroupfs file I/O and the cgroup2 mount lookup.
 * Header-only (static functions): a test includes it and lists ../lib in
 * its test.toml [build] include.
 */
#ifndef HARNESS_TEST_H
#define HARNESS_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <mntent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KSFT_PASS 0
#define KSFT_FAIL 1
#define KSFT_SKIP 4

static __attribute__((unused)) int ht_failed;

static __attribute__((unused)) void ht_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static __attribute__((unused)) void ht_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* "ok N name" or "not ok N name"; a failure is remembered for the exit code */
static __attribute__((unused)) void ht_result(int n, bool ok, const char *name)
{
	if (!ok)
		ht_failed++;
	printf("%sok %d %s\n", ok ? "" : "not ", n, name);
	fflush(stdout);
}

static __attribute__((unused)) void ht_skip(int n, const char *name, const char *why)
{
	printf("ok %d %s # SKIP %s\n", n, name, why);
	fflush(stdout);
}

static __attribute__((unused)) int ht_write_file(const char *path, const char *s)
{
	ssize_t n;
	int fd, err = 0;

	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, s, strlen(s));
	if (n < 0)
		err = -errno;
	else if ((size_t)n != strlen(s))
		err = -EIO;
	close(fd);
	return err;
}

static __attribute__((unused)) bool ht_cgroup2_mount(char *buf, size_t len)
{
	struct mntent *ent;
	bool found = false;
	FILE *f;

	f = setmntent("/proc/self/mounts", "r");
	if (!f)
		return false;
	while ((ent = getmntent(f))) {
		if (strcmp(ent->mnt_type, "cgroup2") || hasmntopt(ent, "ro"))
			continue;
		snprintf(buf, len, "%s", ent->mnt_dir);
		found = true;
		break;
	}
	endmntent(f);
	return found;
}

static __attribute__((unused)) unsigned long long ht_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

#endif /* HARNESS_TEST_H */
