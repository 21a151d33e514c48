// SPDX-License-Identifier: GPL-2.0
/* The table-of-checks runner and small shared utilities (see check.h). */
#include "selftest.h"
#include <fnmatch.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/utsname.h>
#include <time.h>

static char skip_why[1024];
static const struct check *table;
static size_t table_len;
static int *verdicts;	/* per check: KSFT_PASS/FAIL/SKIP, -1 not run yet */

/* "# <message>", the newline added unless the message has one */
static void say(const char *fmt, va_list ap)
{
	fputs("# ", stdout);
	vprintf(fmt, ap);
	if (!*fmt || fmt[strlen(fmt) - 1] != '\n')
		putchar('\n');
}

int check_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
	return KSFT_FAIL;
}

int check_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(skip_why, sizeof(skip_why), fmt, ap);
	va_end(ap);
	return KSFT_SKIP;
}

static int find_check(const char *name);

bool check_passed(const char *name)
{
	int i = find_check(name);

	if (i >= 0)
		return verdicts[i] == KSFT_PASS;
	ksft_print_msg("BUG: no check named %s\n", name);
	return false;
}

static void result(const struct check *c, int verdict, const char *why)
{
	switch (verdict) {
	case KSFT_PASS:
		ksft_test_result_pass("%s\n", c->name);
		break;
	case KSFT_SKIP:
		ksft_print_msg("%s: SKIP: %s\n", c->name, why[0] ? why : "(no reason given)");
		ksft_test_result_skip("%s\n", c->name);
		break;
	default:
		ksft_test_result_fail("%s\n", c->name);
	}
}

/* a clean-up check: named cleanup or *_cleanup; it runs whenever a selection runs any */
static bool is_cleanup(const char *name)
{
	size_t len = strlen(name);

	return !strcmp(name, "cleanup") ||
	       (len > 8 && !strcmp(name + len - 8, "_cleanup"));
}

static int find_check(const char *name)
{
	size_t i;

	for (i = 0; i < table_len; i++)
		if (!strcmp(table[i].name, name))
			return (int)i;
	return -1;
}

/* print "# harness-checks: KEY=a,b,..." of the checks whose @want[i] == @mark */
static void say_checks(const char *key, const char *want, char mark)
{
	const char *sep = "";
	size_t i;

	printf(" %s=", key);
	for (i = 0; i < table_len; i++) {
		if (want[i] == mark) {
			printf("%s%s", sep, table[i].name);
			sep = ",";
		}
	}
}

/*
 * $HARNESS_CHECKS, the checks to run: comma-separated fnmatch(3) globs over the
 * names ("usage_*,root_*"). Each selected check's needs come along (transitively),
 * and the checks before it made by the same function (CHECK_BY: such a function may
 * count its calls), and so do the clean-up checks; the others are not run and not printed (they are
 * not skipped: nothing in the kernel kept them from running). "-" selects none (only
 * the clean-ups: what the program does around its checks). A glob that matches no
 * check ends the program with the names it has. @run[i]: 0 not run, 's' selected,
 * 'n' needed by a selected one, 'c' a clean-up. Returns the number to run.
 */
static size_t select_checks(const char *spec, char *run)
{
	char *copy = strdup(spec), *save = NULL, *glob;
	size_t i, count = 0;
	bool grew = true;

	if (!copy)
		ksft_exit_fail_msg("out of memory\n");
	for (glob = strtok_r(copy, ",", &save); glob; glob = strtok_r(NULL, ",", &save)) {
		bool matched = false;

		if (!strcmp(glob, "-"))
			continue;
		for (i = 0; i < table_len; i++) {
			if (!fnmatch(glob, table[i].name, 0)) {
				run[i] = 's';
				matched = true;
			}
		}
		if (!matched) {
			printf("# HARNESS_CHECKS: no check named %s; the checks are:", glob);
			for (i = 0; i < table_len; i++)
				printf(" %s", table[i].name);
			printf("\n");
			ksft_exit_fail_msg("HARNESS_CHECKS names a check this test does not have: %s\n",
					   glob);
		}
	}
	free(copy);
	while (grew) {	/* the needs of what runs, and theirs */
		grew = false;
		for (i = 0; i < table_len; i++) {
			int need = table[i].needs && *table[i].needs ?
				   find_check(table[i].needs) : -1;
			size_t j;

			if (run[i] && need >= 0 && !run[need]) {
				run[need] = 'n';
				grew = true;
			}
			/* a function several checks share (CHECK_BY) may judge by the order
			 * it is called in: the checks before this one that it makes come too */
			for (j = 0; run[i] && j < i; j++) {
				if (table[j].run == table[i].run && !run[j]) {
					run[j] = 'n';
					grew = true;
				}
			}
		}
	}
	for (i = 0; i < table_len; i++) {
		if (!run[i] && is_cleanup(table[i].name))
			run[i] = 'c';
		count += run[i] != 0;
	}
	/* one line the harness reads: what was asked for and what came along */
	printf("# harness-checks: asked=%s", spec);
	say_checks("selected", run, 's');
	say_checks("needed", run, 'n');
	say_checks("cleanup", run, 'c');
	say_checks("not_run", run, 0);
	printf("\n");
	return count;
}

int checks_run(const struct check *checks, size_t n, const char *skip_all)
{
	const char *spec = getenv("HARNESS_CHECKS");
	size_t i, planned = n;
	char *run;

	/* line-buffered: a test killed by its timeout still shows how far it got */
	setvbuf(stdout, NULL, _IOLBF, 0);
	table = checks;
	table_len = n;
	verdicts = malloc(n * sizeof(*verdicts));
	run = malloc(n ? n : 1);
	if (!verdicts || !run)
		ksft_exit_fail_msg("out of memory\n");
	memset(verdicts, 0xff, n * sizeof(*verdicts));	/* -1: not run yet */
	memset(run, 1, n);
	ksft_print_header();
	if (spec && *spec) {
		memset(run, 0, n);
		planned = select_checks(spec, run);
	}
	ksft_set_plan(planned);
	for (i = 0; i < n; i++) {
		const struct check *c = &checks[i];

		if (!run[i])
			continue;
		skip_why[0] = '\0';
		if (skip_all)
			verdicts[i] = check_skip("%s", skip_all);
		else if (c->needs && *c->needs && !check_passed(c->needs))
			verdicts[i] = check_skip("needs %s, which did not pass", c->needs);
		else
			verdicts[i] = c->run();
		result(c, verdicts[i], skip_why);
	}
	free(run);
	ksft_print_cnts();
	if (ksft_get_fail_cnt())
		return KSFT_FAIL;
	if (!ksft_get_pass_cnt())
		return KSFT_SKIP;
	return KSFT_PASS;
}

bool expect(bool *ok, bool cond, const char *fmt, ...)
{
	va_list ap;

	if (cond)
		return true;
	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
	if (ok)
		*ok = false;
	return false;
}

void print_block(const char *prefix, const char *text)
{
	const char *p = text, *nl;

	while (p && *p) {
		nl = strchr(p, '\n');
		ksft_print_msg("%s%.*s\n", prefix, (int)(nl ? nl - p : (long)strlen(p)), p);
		p = nl ? nl + 1 : NULL;
	}
}

int write_file(const char *path, long long bytes, int fill, bool sync_each)
{
	static char chunk[256 * 1024];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	long long done;

	if (fd < 0)
		return 2;
	memset(chunk, fill, sizeof(chunk));
	for (done = 0; done < bytes; done += sizeof(chunk))
		if (write(fd, chunk, sizeof(chunk)) != sizeof(chunk) ||
		    (sync_each && fdatasync(fd))) {
			close(fd);
			return 1;
		}
	return close(fd) ? 3 : 0;
}

ssize_t read_close(int fd, void *buf, size_t len)
{
	size_t got = 0;
	ssize_t n = 0;

	if (fd < 0)
		return -errno;
	while (got < len && (n = read(fd, (char *)buf + got, len - got)) > 0)
		got += n;
	n = n < 0 ? -errno : (ssize_t)got;
	close(fd);
	return n;
}

unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int kernel_version(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return 0;
	return major * 100 + minor;
}

void pin_cpu(int n)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(n % sysconf(_SC_NPROCESSORS_ONLN), &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static volatile sig_atomic_t offlined[64];	/* by cpu_set_online(), not yet back */

/* /sys/devices/system/cpu/cpu@cpu/online into @buf (48 bytes); async-signal-safe */
static void cpu_online_path(char *buf, int cpu)
{
	static const char pre[] = "/sys/devices/system/cpu/cpu", post[] = "/online";
	char *p = buf + sizeof(pre) - 1;

	memcpy(buf, pre, sizeof(pre) - 1);
	if (cpu >= 10)
		*p++ = '0' + cpu / 10;
	*p++ = '0' + cpu % 10;
	memcpy(p, post, sizeof(post));
}

/* write "1" or "0" to @cpu's online file; 0 or -errno; async-signal-safe */
static int cpu_write_online(int cpu, bool online)
{
	char path[48];
	int fd, err = 0;

	cpu_online_path(path, cpu);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, online ? "1" : "0", 1) != 1)
		err = -errno;
	if (fd >= 0)
		close(fd);
	return err;
}

int cpu_set_online(int cpu, bool online)
{
	int err;

	if (cpu < 0 || cpu >= (int)ARRAY_SIZE(offlined))
		return -EINVAL;
	err = cpu_write_online(cpu, online);
	if (!err)
		offlined[cpu] = !online;
	return err;
}

void cpu_restore_online(void)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(offlined); i++)
		if (offlined[i] && !cpu_write_online(i, true))
			offlined[i] = 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void stats_of(const double *v, int n, struct stats *st)
{
	double *s = n > 0 ? malloc(n * sizeof(*v)) : NULL;
	int i;

	*st = (struct stats){};
	if (!s)
		return;
	memcpy(s, v, n * sizeof(*v));
	qsort(s, n, sizeof(*s), cmp_double);
	for (i = 0; i < n; i++)
		st->mean += v[i];
	st->mean /= n;
	st->median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	st->min = s[0];
	st->q1 = s[n / 4];
	st->q3 = s[3 * n / 4];
	st->max = s[n - 1];
	free(s);
}

/* $HARNESS_METRICS */

static FILE *mf;
static char mpath[PATH_MAX], mtmp[PATH_MAX + 8];
static bool mfirst = true;	/* no member written yet at this level */
static char closers[16];	/* what metrics_end() writes, the innermost last */
static int depth;

/* the separator and "key": before a member; false without a metrics file */
static bool member(const char *key)
{
	if (!mf)
		return false;
	fputs(mfirst ? "" : ", ", mf);
	mfirst = false;
	if (key)
		fprintf(mf, "\"%s\": ", key);
	return true;
}

void metrics_open(void)
{
	const char *path = getenv("HARNESS_METRICS");

	if (!path || !*path)
		return;
	snprintf(mpath, sizeof(mpath), "%s", path);
	snprintf(mtmp, sizeof(mtmp), "%s.tmp", mpath);
	mf = fopen(mtmp, "w");
	if (!mf)
		ksft_print_msg("cannot write %s: %s\n", mtmp, strerror(errno));
	else
		fputc('{', mf);
	mfirst = true;
	depth = 0;
}

void metrics_num(const char *key, double v)
{
	/* JSON has no NaN or infinity */
	if (member(key))
		fprintf(mf, v != v || v > 1e300 || v < -1e300 ? "null" : "%.6g", v);
}

void metrics_int(const char *key, long long v)
{
	if (member(key))
		fprintf(mf, "%lld", v);
}

void metrics_bool(const char *key, bool v)
{
	if (member(key))
		fputs(v ? "true" : "false", mf);
}

void metrics_str(const char *key, const char *v)
{
	if (!member(key))
		return;
	fputc('"', mf);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			fputc('\\', mf);
		if ((unsigned char)*v >= 0x20)
			fputc(*v, mf);
	}
	fputc('"', mf);
}

static void nest(const char *key, char open, char close)
{
	if (depth == (int)sizeof(closers) || !member(key))
		return;
	fputc(open, mf);
	closers[depth++] = close;
	mfirst = true;
}

void metrics_obj(const char *key)
{
	nest(key, '{', '}');
}

void metrics_arr(const char *key)
{
	nest(key, '[', ']');
}

void metrics_end(void)
{
	if (mf && depth)
		fputc(closers[--depth], mf);
	mfirst = false;
}

void metrics_measure(const char *key, const double *v, int n, const char *unit,
		     const char *direction)
{
	struct stats st;
	int i;

	if (n <= 0)
		return;
	stats_of(v, n, &st);
	if (key)
		metrics_obj(key);
	metrics_num("median", st.median);
	metrics_num("mean", st.mean);
	metrics_num("min", st.min);
	metrics_num("q1", st.q1);	/* the spread a comparison judges by */
	metrics_num("q3", st.q3);
	metrics_num("max", st.max);
	metrics_int("n", n);
	metrics_str("unit", unit);
	metrics_str("direction", direction);
	metrics_arr("samples");
	for (i = 0; n <= 2000 && i < n; i++)
		metrics_num(NULL, v[i]);
	metrics_end();
	if (key)
		metrics_end();
}

void metrics_close(void)
{
	if (!mf)
		return;
	fputs("}\n", mf);
	fclose(mf);
	mf = NULL;
	if (rename(mtmp, mpath))
		ksft_print_msg("rename %s: %s\n", mtmp, strerror(errno));
}
