/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A selftest's main as a table of named checks, printed as KTAP through the
 * kernel tree's own tools/testing/selftests/kselftest.h (the harness puts
 * the tree's copy on the include path: see test.toml and lib/selftest.mk).
 *
 *	static const struct check checks[] = {
 *		CHECK(load),				// runs check_load()
 *		CHECK(setup, load),			// SKIP unless "load" passed
 *		CHECK_BY(values_a, check_values, setup),	// one function, several checks
 *		CHECK(cleanup),				// always runs
 *	};
 *	int main(void) { return checks_run(checks, ARRAY_SIZE(checks), NULL); }
 *
 * A check returns KSFT_PASS, KSFT_FAIL or KSFT_SKIP (after check_skip_why());
 * what it prints with ksft_print_msg() goes out before its result line, so
 * the harness attaches it to that check.
 */
#ifndef SELFTESTS_LIB_CHECK_H
#define SELFTESTS_LIB_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "kselftest.h"

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

#define MiB (1024LL * 1024)

struct check {
	const char *name;
	int (*run)(void);
	const char *needs;	/* an earlier check that must have passed; NULL or "": none */
};

/* the check "name" run by check_<name>() (or @fn), needing the check named by the
 * optional last argument */
#define CHECK(name, ...)	CHECK_BY(name, check_##name, __VA_ARGS__)
#define CHECK_BY(name, fn, ...)	{ #name, fn, #__VA_ARGS__ }

/* return check_fail("why %d", x): print "# why ..." and give KSFT_FAIL */
int check_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* return check_skip("why"): the reason printed with the SKIP, and KSFT_SKIP */
int check_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Print the plan, run every check in order and print its result; returns
 * the exit code (kselftest's: KSFT_FAIL if any failed, KSFT_SKIP if all
 * skipped).  A non-NULL @skip_all (the kernel lacks what the test needs)
 * skips every check, each under its name.
 */
int checks_run(const struct check *checks, size_t n, const char *skip_all);

bool check_passed(const char *name);	/* of a check run earlier */

/*
 * @cond, or (when false) print "# <message>" and clear *@ok (if not NULL): for
 * checks that compare many values and report every mismatch, not only the first.
 */
bool expect(bool *ok, bool cond, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ksft_print_msg() of every line of @text, each prefixed with @prefix */
void print_block(const char *prefix, const char *text);

/* read(2) @fd until EOF or @len bytes, then close it; bytes read, or -errno (also
 * for @fd < 0: the open that gave it failed) */
ssize_t read_close(int fd, void *buf, size_t len);
/* @bytes of the byte @fill written to a new (truncated) file @path, in 256 KiB writes,
 * each followed by fdatasync() when @sync_each; 0, or 1 (a write or sync), 2 (the open)
 * or 3 (the close) failed: an exit code for a child of cg_run() */
int write_file(const char *path, long long bytes, int fill, bool sync_each);

unsigned long long now_ns(void);	/* CLOCK_MONOTONIC */
/* the running kernel's version as major * 100 + minor (611 for 6.11), 0 if unknown */
int kernel_version(void);
void pin_cpu(int n);	/* run on CPU @n modulo the CPUs online (best effort) */

/*
 * CPU hotplug through /sys/devices/system/cpu/cpu@cpu/online: 0 or -errno (-ENOENT:
 * this CPU cannot be taken offline here, e.g. no CONFIG_HOTPLUG_CPU).  Every CPU taken
 * offline with it is put back online by cpu_restore_online(), which is
 * async-signal-safe (call it from a cg_on_signal() function too).
 */
int cpu_set_online(int cpu, bool online);
void cpu_restore_online(void);

/* of @n samples (all 0 when n <= 0); q1 and q3 are the quartiles (the spread) */
struct stats {
	double median, mean, min, q1, q3, max;
};
void stats_of(const double *v, int n, struct stats *st);

/*
 * $HARNESS_METRICS: a JSON object written atomically (to a .tmp, renamed by
 * metrics_close()).  Keys in order; metrics_obj()/metrics_arr() open a
 * nested object/array, metrics_end() closes the last one opened.  Without
 * $HARNESS_METRICS every call does nothing.
 */
void metrics_open(void);
void metrics_num(const char *key, double v);
void metrics_int(const char *key, long long v);
void metrics_str(const char *key, const char *v);
void metrics_bool(const char *key, bool v);
void metrics_obj(const char *key);
void metrics_arr(const char *key);	/* then metrics_num/int/str with key NULL */
void metrics_end(void);
void metrics_close(void);

/*
 * A measurement: "median", "mean", "min", "q1", "q3" (quartiles: the spread),
 * "max", "n", "unit", "direction" ("lower" or "higher" is better) and the
 * "samples" when n <= 2000, as members of the object @key (NULL: of the
 * object open); the harness compares runs by these.  @v (@n values, n > 0)
 * is left as it is.
 */
void metrics_measure(const char *key, const double *v, int n, const char *unit,
		     const char *direction);

#endif /* SELFTESTS_LIB_CHECK_H */
