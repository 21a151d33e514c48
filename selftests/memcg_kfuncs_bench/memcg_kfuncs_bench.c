// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs_bench: the cost of reading 8 memory.stat fields of 1, 100, 1000
 * cgroups through memory.stat (opened once, pread per read, with and without
 * parsing) against the memcg kfuncs from a sleepable cgroup iterator and a
 * syscall program (6.2+), side by side in one run.  Before measuring, every
 * method must agree with memory.stat for every cgroup and field (within what
 * one flush may fold in) and show the charged shmem exactly.
 */
#include "selftest.h"
#include <math.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include "memcg_kfuncs_bench.h"
#include "memcg_kfuncs_bench.skel.h"

#define MAX_CONFIGS 8
#define MEMSTAT_BUF 16384
#define HOLDER_ANON (1024 * 1024)

#define MB_KEY(key, ...) #key,
static const char *const field_key[NR_BFIELDS] = { MB_FIELDS(MB_KEY) };

enum method { M_READ, M_PARSE, M_ITER_SELF, M_ITER_TREE, M_SYSCALL, NR_METHODS };
/* each method's metrics name and what it does */
static const struct {
	const char *name, *desc;
} method[NR_METHODS] = {
	{ "memstat_read", "memory.stat pread, no parsing" },
	{ "memstat_parse", "memory.stat pread + parse 8 fields" },
	{ "iter_self", "iter.s/cgroup, SELF_ONLY link per cgroup" },
	{ "iter_tree", "iter.s/cgroup, one DESCENDANTS_PRE link" },
	{ "syscall_run", "syscall program, one BPF_PROG_RUN per read" },
};

struct meas {
	bool done, valid;
	int n;				/* rounds timed */
	double elapsed, user, sys, *us;	/* us: per read, per round */
	struct stats st;		/* of us */
};

/* one cgroup count: the cgroups, what an agent keeps open, the results */
struct config {
	int n, rounds;
	struct cg_node *tree, *cg;	/* tree[0]: the parent of the n cgroups cg = tree + 1 */
	int *msfd;
	struct bpf_link **link, *tree_link;
	__s64 (*vals)[NR_BFIELDS];
	struct mb_rec *recs;
	struct meas m[NR_METHODS];
};

static struct memcg_kfuncs_bench_bpf *skel;
static struct config configs[MAX_CONFIGS], *cur;
static int nconfigs, reads_n = 2000;
static bool use_sscanf, with_syscall;
static char tmpfs[64] = "/tmp/memcg_kfuncs_bench.XXXXXX";
static char membuf[MEMSTAT_BUF], page_data[8 * 4096];
static long page_size;
static size_t klen[NR_BFIELDS];
static long long tol_units;
static pid_t holder = -1;

static int file_pages(int i) { return 1 + i % 8; }
static int anon_pages(int i) { return 4 + i % 5; }

/* in a child inside cgroup i: a tmpfs file of file_pages(i), anon_pages(i) touched */
static int charge(void *arg)
{
	int i = (int)(long)arg, fd;
	long long bytes = (long long)file_pages(i) * page_size;
	char name[128];

	snprintf(name, sizeof(name), "%s/cg%d-%04d", tmpfs, cur->n, i);
	fd = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, page_data, bytes) != bytes ||
	    !cg_alloc_anon((long long)anon_pages(i) * page_size))
		return 10;
	if (i)
		return 0;
	/* the holder keeps 1 MiB of anon and the file mapped */
	if (!cg_alloc_anon(HOLDER_ANON) ||
	    mmap(NULL, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0) == MAP_FAILED)
		return 11;
	for (;;)
		pause();
}

/* memory.stat -> vals; the number of the 8 fields found */
static int parse(char *buf, size_t len, __s64 *vals)
{
	const char *p = buf, *end = buf + len, *sp, *nl;
	char key[64];
	long long v;
	int f, found = 0;

	for (; p < end && (sp = memchr(p, ' ', end - p)); p = nl + 1) {
		nl = memchr(sp, '\n', end - sp) ?: end;
		if (use_sscanf && sscanf(p, "%63s %lld", key, &v) != 2)	/* the naive way */
			continue;
		for (f = 0; f < NR_BFIELDS; f++) {	/* split, compare, strtoll */
			if (use_sscanf ? !strcmp(key, field_key[f]) :
			    (klen[f] == (size_t)(sp - p) && !memcmp(p, field_key[f], sp - p))) {
				vals[f] = use_sscanf ? v : strtoll(sp + 1, NULL, 10);
				found++;
				break;
			}
		}
	}
	return found;
}

static bool rec_ok(const struct config *c, const struct mb_rec *r, int i)
{
	return expect(NULL, i >= 0 && r->id == c->cg[i].id && !r->flush_ret,
		      "record of cgroup id %llu (expected %llu): flush_ret %lld",
		      (unsigned long long)r->id, i >= 0 ? c->cg[i].id : 0ULL,
		      (long long)r->flush_ret);
}

/* one round: every cgroup read once by method m; false on a bad read */
static bool run_round(struct config *c, int m)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int i, prog = with_syscall ? bpf_program__fd(skel->progs.memcg_bench_syscall) : -1;
	char buf[64];
	ssize_t n;

	skel->bss->mode = m == M_ITER_TREE ? MB_MODE_TREE : MB_MODE_SEQ;
	if (m == M_ITER_TREE) {
		skel->bss->skip_id = c->tree[0].id;
		skel->bss->nrec = skel->bss->overflow = 0;
		if (bu_read_iter(c->tree_link, buf, sizeof(buf)) < 0 ||
		    skel->bss->nrec != (unsigned int)c->n || skel->bss->overflow)
			return !check_fail("tree walk: %u records, expected %d",
					   skel->bss->nrec, c->n);
		memcpy(c->recs, skel->bss->recs, c->n * sizeof(*c->recs));
	}
	for (i = 0; i < c->n; i++) {
		if (m == M_READ || m == M_PARSE) {
			n = pread(c->msfd[i], membuf, sizeof(membuf) - 1, 0);
			if (n <= 0)
				return !check_fail("pread %s/memory.stat: %zd", c->cg[i].path, n);
			membuf[n] = '\0';
			if (m == M_PARSE && parse(membuf, n, c->vals[i]) != NR_BFIELDS)
				return !check_fail("%s/memory.stat: fields missing", c->cg[i].path);
			continue;
		}
		if (m == M_SYSCALL) {
			skel->bss->sys_id = c->cg[i].id;
			if (bpf_prog_test_run_opts(prog, &opts))
				return !check_fail("BPF_PROG_RUN: %s", strerror(errno));
			c->recs[i] = skel->bss->sysrec;
		} else if (m == M_ITER_SELF && bu_read_iter(c->link[i], &c->recs[i],
							   sizeof(c->recs[i])) != sizeof(c->recs[i])) {
			return !check_fail("iterator on %s: no record", c->cg[i].path);
		}
		/* tree records: in walk order */
		if (!rec_ok(c, &c->recs[i], m == M_ITER_TREE ?
			    cg_tree_find(c->cg, c->n, c->recs[i].id) : i))
			return false;
	}
	return true;
}

static int check_load(void)
{
	const char *const need[] = { "bpf_get_mem_cgroup", "bpf_mem_cgroup_flush_stats", NULL };
	const char *why = bu_missing_funcs(need);

	if (why)
		return check_skip("%s: memcg-kfuncs series not applied", why);
	/* the syscall program finds its cgroup by id: bpf_cgroup_from_id() is 6.2+ */
	with_syscall = bu_has_func("bpf_cgroup_from_id");
	skel = memcg_kfuncs_bench_bpf__open();
	if (skel && !with_syscall)
		bpf_program__set_autoload(skel->progs.memcg_bench_syscall, false);
	if (!skel || memcg_kfuncs_bench_bpf__load(skel)) {
		bu_print_log();
		return check_fail("loading the benchmark programs: %s", strerror(errno));
	}
	if (!with_syscall)
		ksft_print_msg("syscall_run skipped: no bpf_cgroup_from_id() (6.2+) here\n");
	return KSFT_PASS;
}

static void teardown(struct config *c)
{
	int i;

	cg_reap(&holder);
	for (i = 0; c->link && i < c->n; i++) {
		bpf_link__destroy(c->link[i]);
		if (c->msfd[i] >= 0)
			close(c->msfd[i]);
	}
	bpf_link__destroy(c->tree_link);
	c->tree_link = NULL;
	c->link = NULL;
	cg_destroy_all();	/* the config's cgroups */
}

static int check_setup(void)
{
	struct config *c;
	const char *root;
	char name[32];
	int i, err;

	if (cur)
		teardown(cur);
	c = cur = cur ? cur + 1 : configs;
	snprintf(name, sizeof(name), "memcg_kfuncs_bench.cg%d", c->n);
	err = cg_find_root(&root, "memory") ?: cg_tree_create(root, name, c->tree, c->n + 1);
	if (err)
		return err;
	for (i = 1; i < c->n; i++)
		if ((err = cg_run(c->cg[i].path, charge, (void *)(long)i)))
			return check_fail("charging %s: status %d", c->cg[i].path, err);
	holder = cg_spawn(c->cg[0].path, charge, (void *)0L);
	/* what an agent keeps open: memory.stat, a link per cgroup, one for the walk */
	c->tree_link = bu_attach_cgroup_iter(skel->progs.memcg_bench, c->tree[0].path,
					     BPF_CGROUP_ITER_DESCENDANTS_PRE);
	for (i = 0; holder > 0 && c->tree_link && i < c->n; i++) {
		c->msfd[i] = cg_open(c->cg[i].path, "memory.stat", O_RDONLY);
		c->link[i] = bu_attach_cgroup_iter(skel->progs.memcg_bench, c->cg[i].path,
						   BPF_CGROUP_ITER_SELF_ONLY);
		if (c->msfd[i] < 0 || !c->link[i])
			break;
	}
	if (i < c->n)
		return check_fail("holder or iterator links for %s: %s", c->tree[0].path,
				  strerror(errno));
	return KSFT_PASS;
}

/* memory.stat shows what was charged (the 2 s periodic flush may be needed) */
static bool charged(struct config *c)
{
	int tries, i = 0;

	for (tries = 0; tries < 5; tries++, usleep(2500000)) {
		/* reading the parent's memory.stat flushes */
		cg_read(c->tree[0].path, "memory.stat", membuf, sizeof(membuf));
		if (!run_round(c, M_PARSE))
			return false;
		for (i = 0; i < c->n; i++)
			if (c->vals[i][B_shmem] != (__s64)file_pages(i) * page_size ||
			    c->vals[i][B_pgfault] < anon_pages(i) ||
			    (!i && c->vals[i][B_anon] < HOLDER_ANON))
				break;
		if (i == c->n)
			return true;
	}
	return !check_fail("%s: memory.stat never showed the charged memory", c->cg[i].path);
}

/* one sample of every method for every cgroup: all agree with memory.stat */
static int check_agree(void)
{
	struct config *c = cur;
	struct mb_rec *kf = calloc((size_t)c->n * NR_METHODS, sizeof(*kf));
	int m, i, f, k, exact = 0, compared = 0;
	bool ok = kf && charged(c);

	for (m = M_ITER_SELF; ok && m < NR_METHODS; m++) {
		if (m == M_SYSCALL && !with_syscall)
			continue;
		ok = run_round(c, m);
		for (k = 0; ok && k < c->n; k++)	/* tree records: walk order */
			kf[(size_t)cg_tree_find(c->cg, c->n, c->recs[k].id) * NR_METHODS + m] =
				c->recs[k];
	}
	ok = ok && run_round(c, M_PARSE);
	for (i = 0; ok && i < c->n; i++) {
		for (m = M_ITER_SELF; m < NR_METHODS; m++) {
			const __s64 *v = kf[(size_t)i * NR_METHODS + m].val;

			if (m == M_SYSCALL && !with_syscall)
				continue;
			expect(&ok, v[B_shmem] == (__s64)file_pages(i) * page_size,
			       "%s %s: shmem %lld, charged %lld", c->cg[i].path, method[m].name,
			       (long long)v[B_shmem], (long long)file_pages(i) * page_size);
			for (f = 0; f < NR_BFIELDS; f++) {
				long long tol = tol_units * (f >= B_workingset_refault_anon ? 1 : page_size);
				long long d = v[f] - c->vals[i][f];

				compared++;
				exact += !d;
				expect(&ok, v[f] >= 0 && llabs(d) <= tol,
				       "%s %s: %s %lld, memory.stat %lld (tolerance %lld)",
				       c->cg[i].path, method[m].name, field_key[f],
				       (long long)v[f], (long long)c->vals[i][f], tol);
			}
		}
	}
	free(kf);
	ksft_print_msg("%d cgroups: %d of %d kfunc values equal memory.stat's\n", c->n, exact,
		       compared);
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static double seconds(const struct timeval *tv)
{
	return tv->tv_sec + tv->tv_usec / 1e6;
}

static int check_measure(void)
{
	struct config *c = cur;
	unsigned long long t0, t1 = 0, start;
	struct rusage r0, r1;
	bool ok = true;
	int m, r;

	c->rounds = reads_n / c->n > 0 ? reads_n / c->n : 1;
	for (m = 0; m < NR_METHODS; m++) {
		struct meas *me = &c->m[m];

		if (m == M_SYSCALL && !with_syscall)
			continue;
		if (!run_round(c, m))	/* warm-up (first-read allocations), not timed */
			return KSFT_FAIL;
		me->us = calloc(c->rounds, sizeof(double));
		if (!me->us)
			return check_fail("out of memory");
		getrusage(RUSAGE_SELF, &r0);
		/* a sample: one round's time per read (a clock read per round) */
		for (r = 0, start = t0 = now_ns(); r < c->rounds && run_round(c, m); r++, t0 = t1) {
			t1 = now_ns();
			me->us[r] = (t1 - t0) / 1e3 / c->n;
		}
		me->elapsed = (t0 - start) / 1e9;
		getrusage(RUSAGE_SELF, &r1);
		me->user = seconds(&r1.ru_utime) - seconds(&r0.ru_utime);
		me->sys = seconds(&r1.ru_stime) - seconds(&r0.ru_stime);
		stats_of(me->us, r, &me->st);
		me->n = r;
		me->done = true;
		me->valid = r == c->rounds && me->st.median > 0;
		ok &= me->valid;
		ksft_print_msg("%-14s %d cgroups: %8.2f us/read median of %d rounds (min %.2f, max %.2f; user %.3f s, sys %.3f s)\n",
			       method[m].name, c->n, me->st.median, r, me->st.min, me->st.max,
			       me->user, me->sys);
	}
	return ok ? KSFT_PASS : KSFT_FAIL;
}

static int check_cleanup(void)
{
	int failed;

	if (cur)
		teardown(cur);
	failed = cg_cleanup();
	umount2(tmpfs, MNT_DETACH);
	rmdir(tmpfs);
	return failed ? KSFT_FAIL : KSFT_PASS;
}

static double ratio(const struct meas *a, const struct meas *b, bool cpu)
{
	double x = cpu ? a->user + a->sys : a->st.median;
	double y = cpu ? b->user + b->sys : b->st.median;

	return a->valid && b->valid && y > 0 ? x / y : NAN;
}

static const int pairs[][2] = {
	{ M_PARSE, M_ITER_SELF }, { M_PARSE, M_ITER_TREE }, { M_READ, M_ITER_SELF },
	{ M_READ, M_ITER_TREE }, { M_READ, M_SYSCALL }, { M_PARSE, M_SYSCALL },
};

static void write_ratios(bool cpu, char *summary, size_t len)
{
	char key[64];
	int k, p;

	metrics_obj(cpu ? "cpu" : "elapsed");
	for (k = 0; k < nconfigs; k++) {
		for (p = 0; p < (int)ARRAY_SIZE(pairs); p++) {
			const struct meas *m = configs[k].m;
			double x = ratio(&m[pairs[p][0]], &m[pairs[p][1]], cpu);

			snprintf(key, sizeof(key), "%s/%s@%d", method[pairs[p][0]].name,
				 method[pairs[p][1]].name, configs[k].n);
			metrics_num(key, x);
			if (!cpu && p >= 2 && p <= 4 && x == x)
				snprintf(summary + strlen(summary), len - strlen(summary),
					 " %s %.1fx;", key, x);
		}
	}
	metrics_end();
}

static void write_metrics(void)
{
	char summary[1024] = "elapsed memory.stat read only vs kfuncs:", key[64];
	struct utsname u;
	int k, m;

	uname(&u);
	metrics_open();
	metrics_int("reads", reads_n);
	metrics_str("parser", use_sscanf ? "sscanf" : "fast");
	metrics_str("kernel", u.release);
	metrics_int("cpus", sysconf(_SC_NPROCESSORS_ONLN));
	metrics_arr("cgroups");
	for (k = 0; k < nconfigs; k++)
		metrics_int(NULL, configs[k].n);
	metrics_end();
	metrics_obj("method_descriptions");
	for (m = 0; m < NR_METHODS; m++)
		metrics_str(method[m].name, method[m].desc);
	metrics_end();
	metrics_obj("methods");
	for (k = 0; k < nconfigs; k++) {
		for (m = 0; m < NR_METHODS; m++) {
			const struct meas *me = &configs[k].m[m];

			if (!me->done)
				continue;
			snprintf(key, sizeof(key), "%s@%d", method[m].name, configs[k].n);
			metrics_obj(key);
			metrics_num("elapsed_s", me->elapsed);
			metrics_num("user_s", me->user);
			metrics_num("sys_s", me->sys);
			metrics_int("reads", (long long)me->n * configs[k].n);
			metrics_int("rounds", configs[k].rounds);
			metrics_bool("valid", me->valid);
			metrics_measure(NULL, me->us, me->n, "us_per_read", "lower");
			metrics_end();
		}
	}
	metrics_end();
	metrics_obj("ratios");
	write_ratios(false, summary, sizeof(summary));
	write_ratios(true, summary, sizeof(summary));
	metrics_end();
	metrics_str("summary", summary);
	metrics_close();
	ksft_print_msg("%s\n", summary);
}

static void on_signal(void)
{
	cg_reap(&holder);
	umount2(tmpfs, MNT_DETACH);
}

/* --reads N --cgroups 1,100[,1000] [--parser fast|sscanf] */
static bool parse_args(int argc, char **argv)
{
	char *tok, *save;
	int a;

	for (a = 1; a + 1 < argc; a += 2) {
		if (!strcmp(argv[a], "--reads"))
			reads_n = atoi(argv[a + 1]);
		else if (!strcmp(argv[a], "--parser"))
			use_sscanf = !strcmp(argv[a + 1], "sscanf");
		else if (!strcmp(argv[a], "--cgroups"))
			for (tok = strtok_r(argv[a + 1], ",", &save); tok && nconfigs < MAX_CONFIGS;
			     tok = strtok_r(NULL, ",", &save))
				configs[nconfigs++].n = atoi(tok);
		else
			return false;
	}
	return a == argc && reads_n > 0 && nconfigs > 0;
}

int main(int argc, char **argv)
{
	static struct check checks[2 + 3 * MAX_CONFIGS];
	static char names[3 * MAX_CONFIGS][32];
	struct rlimit rl = { 65536, 65536 };
	int k, i, n = 0, ret;

	if (!parse_args(argc, argv))
		ksft_exit_fail_msg("usage: %s --reads N --cgroups 1,100 [--parser sscanf]\n",
				   argv[0]);
	checks[n++] = (struct check){ "load_bench_iter", check_load, NULL };
	for (k = 0; k < nconfigs; k++) {
		struct config *c = &configs[k];

		if (c->n < 1 || c->n > MB_MAX_TREE)
			ksft_exit_fail_msg("--cgroups: counts of 1..%d\n", MB_MAX_TREE);
		c->tree = calloc(c->n + 1, sizeof(*c->tree));	/* each cgroup's parent: 0 */
		c->cg = c->tree + 1;
		c->tree[0] = (struct cg_node){ .parent = -1, .enable = "+memory" };
		for (i = 0; i < c->n; i++)
			snprintf(c->cg[i].rel, sizeof(c->cg[i].rel), "c%04d", i);
		c->msfd = malloc(c->n * sizeof(*c->msfd));
		memset(c->msfd, 0xff, c->n * sizeof(*c->msfd));	/* -1: not open */
		c->link = calloc(c->n, sizeof(*c->link));
		c->vals = calloc(c->n, sizeof(*c->vals));
		c->recs = calloc(c->n, sizeof(*c->recs));
		snprintf(names[3 * k], 32, "setup_cg%d", c->n);
		snprintf(names[3 * k + 1], 32, "methods_agree_cg%d", c->n);
		snprintf(names[3 * k + 2], 32, "measure_cg%d", c->n);
		checks[n++] = (struct check){ names[3 * k], check_setup, "load_bench_iter" };
		checks[n++] = (struct check){ names[3 * k + 1], check_agree, names[3 * k] };
		checks[n++] = (struct check){ names[3 * k + 2], check_measure, names[3 * k + 1] };
	}
	checks[n++] = (struct check){ "cleanup", check_cleanup, NULL };
	setrlimit(RLIMIT_NOFILE, &rl);	/* two fds per cgroup */
	page_size = sysconf(_SC_PAGESIZE);
	tol_units = 2LL * 64 * sysconf(_SC_NPROCESSORS_ONLN);	/* see memcg_kfuncs */
	memset(page_data, 0x5a, sizeof(page_data));
	for (k = 0; k < NR_BFIELDS; k++)
		klen[k] = strlen(field_key[k]);
	if (!mkdtemp(tmpfs) || mount("tmpfs", tmpfs, "tmpfs", 0, "size=512m,mode=0700"))
		ksft_exit_fail_msg("tmpfs at %s: %s\n", tmpfs, strerror(errno));
	cg_on_signal(on_signal);
	ret = checks_run(checks, n, NULL);
	write_metrics();
	return ret;
}
