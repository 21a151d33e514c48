// SPDX-License-Identifier: GPL-2.0
/*
 * rstat_tree_bench: what reading a subtree's hierarchical memcg-reclaim
 * statistics (rstat_tree_bench.bpf.c) costs as the tree grows, per read:
 *   rstat_root  a SELF_ONLY cgroup-iterator read of the subtree root: the
 *               rstat flush + one line (the subtree's total)
 *   rstat_walk  a DESCENDANTS_PRE read: the flush + one line per cgroup
 *   user_walk   no rstat: walk the subtree in cgroupfs, sum every cgroup's
 *               per-CPU counters from the map up the tree
 * Tree of N cgroups: N/10 (at least 1) inner, the rest leaves.  An update
 * is real reclaim in a leaf: a child there reads 64 KiB of uncached file
 * on $HARNESS_SCRATCH and writes 64K to memory.reclaim.  "few" updates 1
 * leaf, "all" every leaf, before each timed read.  Checked: after every
 * read the three agree on the subtree's totals and the count grew by one
 * per updated leaf.  Timings (median/min/max of --rounds) go to
 * $HARNESS_METRICS.  Usage: rstat_tree_bench [--sizes 10,100] [--rounds 5]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpf_util.h"
#include "cg_util.h"
#include "check.h"
#include "rstat_tree_bench.h"
#include "rstat_tree_bench.skel.h"
#include "rstat_tree_bench_css.skel.h"

#define MAX_SIZES 8
#define MAX_ROUNDS 64
#define UPDATE_BYTES (64 * 1024)

enum method { M_ROOT, M_WALK, M_USER, NUM_METHODS };
enum mode { U_FEW, U_ALL, NUM_MODES };
static const char *const method_name[] = { "rstat_root", "rstat_walk", "user_walk" };
static const char *const mode_name[] = { "few", "all" };

struct totals {
	unsigned long long count, time_ns, pages;
};

static struct node {
	char path[CG_PATH_MAX];
	bool leaf;
} *nodes;
static int num_nodes, next_size, ncpus, file_fd = -1;
static struct rstat_tree_bench_bpf *skel;
static char file_path[CG_PATH_MAX], buf[1 << 20];
static const char *mnt;
static int sizes[MAX_SIZES] = { 10, 100, 1000 }, num_sizes = 3, rounds = 5;
static bool size_ok[MAX_SIZES], walk_unsupported[MAX_SIZES];
/* ms per read: [size][mode][method][round]; < 0: not measured */
static double ms[MAX_SIZES][NUM_MODES][NUM_METHODS][MAX_ROUNDS];

static int add_node(int parent, const char *name, bool leaf)
{
	struct node *n = &nodes[num_nodes];
	int err;

	cg_name(n->path, parent < 0 ? mnt : nodes[parent].path, name);
	n->leaf = leaf;
	err = cg_create(n->path);
	if (!err && !leaf)
		err = cg_enable(n->path, "+memory");
	if (err)
		ksft_print_msg("%s: %s\n", n->path, strerror(-err));
	num_nodes++;
	return err;
}

/* bench root, inner cgroups, leaves spread over them; the number of leaves */
static int make_tree(int size)
{
	int inner = size / 10 > 0 ? size / 10 : 1, i, err;
	char name[64];

	nodes = calloc(size + 1, sizeof(*nodes));
	num_nodes = 0;
	snprintf(name, sizeof(name), "rstat_tree_bench.%d.%d", getpid(), size);
	err = !nodes ? -ENOMEM : add_node(-1, name, false);
	for (i = 0; !err && i < inner; i++) {
		snprintf(name, sizeof(name), "i%d", i);
		err = add_node(0, name, false);
	}
	for (i = 0; !err && i < size - inner; i++) {
		snprintf(name, sizeof(name), "l%d", i);
		err = add_node(1 + i % inner, name, true);
	}
	return err ? -1 : size - inner;
}

/* in the leaf: uncached file pages charged to it, then memory.reclaim */
static int update_child(void *arg)
{
	const struct node *n = arg;
	off_t off = (n - nodes) * (off_t)UPDATE_BYTES;
	static char page_buf[UPDATE_BYTES];
	int err;

	posix_fadvise(file_fd, off, UPDATE_BYTES, POSIX_FADV_DONTNEED);
	if (pread(file_fd, page_buf, UPDATE_BYTES, off) != UPDATE_BYTES)
		return 2;
	/* EAGAIN (not all of it reclaimed) still ran reclaim: the tracepoints fired */
	err = cg_write(n->path, "memory.reclaim", "64K");
	return err && err != -EAGAIN ? 3 : 0;
}

/* reclaim in @want leaves; the number done, or -1 */
static int update_leaves(int want)
{
	int i, done = 0, status;

	for (i = 0; i < num_nodes && done < want; i++) {
		if (!nodes[i].leaf)
			continue;
		status = cg_run(nodes[i].path, update_child, &nodes[i]);
		if (status) {
			ksft_print_msg("update in %s: child status %d\n", nodes[i].path, status);
			return -1;
		}
		done++;
	}
	return done;
}

/* the subtree's sum of the per-CPU counters, recursively through cgroupfs */
static int user_walk_dir(int parent_fd, const char *name, struct rtb_pcpu *vals,
			 struct totals *sum)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC), cpu, err = 0;
	struct dirent *de;
	struct stat st;
	__u64 id;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fstat(fd, &st) ? NULL : fdopendir(fd);
	if (!d) {
		err = -errno;
		close(fd);
		return err;
	}
	id = st.st_ino;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.pcpu_stats), &id, vals)) {
		for (cpu = 0; cpu < ncpus; cpu++) {
			sum->count += vals[cpu].state.count;
			sum->time_ns += vals[cpu].state.time_ns;
			sum->pages += vals[cpu].state.pages;
		}
	}
	while (!err && (de = readdir(d)))
		if (de->d_type == DT_DIR && de->d_name[0] != '.')
			err = user_walk_dir(dirfd(d), de->d_name, vals, sum);
	closedir(d);
	return err;
}

/* one read by @m into @t; -errno, or -ENOENT when there is no line for the root */
static int read_totals(enum method m, struct bpf_link *link, struct totals *t, double *ms_out)
{
	unsigned long long id = cg_id(nodes[0].path), t0;
	struct rtb_pcpu *vals = calloc(ncpus, sizeof(*vals));
	char key[64], *p;
	ssize_t n;

	*t = (struct totals){};
	if (!vals)
		return -ENOMEM;
	t0 = now_ns();
	n = m == M_USER ? user_walk_dir(AT_FDCWD, nodes[0].path, vals, t) :
			  bu_read_iter(link, buf, sizeof(buf) - 1);
	if (ms_out)
		*ms_out = (now_ns() - t0) / 1e6;
	free(vals);
	if (n < 0 || m == M_USER)
		return n < 0 ? n : 0;
	buf[n] = '\0';
	snprintf(key, sizeof(key), "cgroup id=%llu ", id);
	p = strstr(buf, key);
	if (!p || sscanf(p, "cgroup id=%*u count=%llu time_ns=%llu pages=%llu", &t->count,
			 &t->time_ns, &t->pages) != 3)
		return -ENOENT;
	return 0;
}

/*
 * One round: per method, update, then one timed read; the count must have
 * grown by the leaves updated.  Then, with nothing new, the three agree.
 */
static bool round_ok(int si, int mode, int r, struct bpf_link **links, int leaves,
		     struct totals *prev)
{
	struct totals t[NUM_METHODS];
	int m, done, err;

	for (m = 0; m < NUM_METHODS; m++) {
		done = update_leaves(mode == U_FEW ? 1 : leaves);
		if (done < 0)
			return false;
		ms[si][mode][m][r] = -1;
		if (m == M_WALK && walk_unsupported[si])
			continue;
		err = read_totals(m, links[m], &t[m], &ms[si][mode][m][r]);
		if (err == -EOPNOTSUPP && m == M_WALK) {
			/* a cgroup iterator cannot resume a walk in a second read() */
			ksft_print_msg("%d cgroups: rstat_walk not possible: the walk's output (~%d lines) does not fit in one read of the iterator (EOPNOTSUPP); not measured\n",
				       sizes[si], num_nodes);
			walk_unsupported[si] = true;
			ms[si][mode][m][r] = -1;
			continue;
		}
		if (err) {
			ksft_print_msg("%s: %s\n", method_name[m], err == -ENOENT ?
				       "no line for the subtree root" : strerror(-err));
			return false;
		}
		if (t[m].count < prev->count + done) {
			ksft_print_msg("%s: count %llu after %d updated leaves, was %llu\n",
				       method_name[m], t[m].count, done, prev->count);
			return false;
		}
		*prev = t[m];
	}
	for (m = 0; m < NUM_METHODS; m++) {	/* nothing new: all equal rstat_root */
		if (m == M_WALK && walk_unsupported[si])
			continue;
		err = read_totals(m, links[m], &t[m], NULL);
		if (err || memcmp(&t[m], &t[M_ROOT], sizeof(*t))) {
			ksft_print_msg("methods disagree: %s (%llu, %llu, %llu) %s, rstat_root (%llu, %llu, %llu)\n",
				       method_name[m], t[m].count, t[m].time_ns, t[m].pages,
				       err ? strerror(-err) : "", t[M_ROOT].count, t[M_ROOT].time_ns,
				       t[M_ROOT].pages);
			return false;
		}
	}
	return true;
}

enum stat_kind { S_MEDIAN, S_MIN, S_MAX, S_N };

/* a statistic of the rounds measured, -1 when none was */
static double stat_of(int si, int mode, int m, enum stat_kind s)
{
	double v[MAX_ROUNDS];
	int r, n = 0;

	for (r = 0; r < rounds; r++)
		if (ms[si][mode][m][r] >= 0)
			v[n++] = ms[si][mode][m][r];
	if (s == S_N)
		return n;
	if (!n)
		return -1;
	median(v, n);	/* sorts */
	return s == S_MIN ? v[0] : s == S_MAX ? v[n - 1] : median(v, n);
}

/* one size (sizes[] in check order): build, measure, check, remove */
static int check_tree(void)
{
	struct bpf_link *links[NUM_METHODS] = {};
	int si = next_size++, leaves, mode, r, fd = -1;
	struct totals prev = {};
	bool ok = false;

	leaves = make_tree(sizes[si]);
	if (leaves < 0)
		goto out;
	fd = open(nodes[0].path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	links[M_ROOT] = bu_attach_cgroup_iter(skel->progs.rtb_dump, fd, BPF_CGROUP_ITER_SELF_ONLY);
	links[M_WALK] = bu_attach_cgroup_iter(skel->progs.rtb_dump, fd,
					      BPF_CGROUP_ITER_DESCENDANTS_PRE);
	if (!links[M_ROOT] || !links[M_WALK]) {
		ksft_print_msg("attach cgroup iterator: %s\n", strerror(errno));
		goto out;
	}
	ksft_print_msg("%d cgroups: %d inner, %d leaves\n", sizes[si], num_nodes - 1 - leaves,
		       leaves);
	for (mode = 0; mode < NUM_MODES; mode++) {
		for (r = 0; r < rounds; r++)
			if (!round_ok(si, mode, r, links, leaves, &prev))
				goto out;
		ksft_print_msg("%d cgroups, %s updated: rstat_root %.3f ms, rstat_walk %.3f ms, user_walk %.3f ms (median of %d); subtree total count %llu pages %llu\n",
			       sizes[si], mode_name[mode], stat_of(si, mode, M_ROOT, S_MEDIAN),
			       stat_of(si, mode, M_WALK, S_MEDIAN),
			       stat_of(si, mode, M_USER, S_MEDIAN), rounds, prev.count, prev.pages);
	}
	ok = true;
out:
	size_ok[si] = ok;
	bpf_link__destroy(links[M_ROOT]);
	bpf_link__destroy(links[M_WALK]);
	if (fd >= 0)
		close(fd);
	free(nodes);
	cg_destroy_all();
	return ok ? KSFT_PASS : KSFT_FAIL;
}

/* per update mode, per method: one number per size (-1: not measured) */
static void metrics_table(const char *key, enum stat_kind s)
{
	int mode, m, si;

	metrics_obj(key);
	for (mode = 0; mode < NUM_MODES; mode++) {
		metrics_obj(mode_name[mode]);
		for (m = 0; m < NUM_METHODS; m++) {
			metrics_arr(method_name[m]);
			for (si = 0; si < num_sizes; si++)
				metrics_num(NULL, size_ok[si] ? stat_of(si, mode, m, s) : -1);
			metrics_arr_end();
		}
		metrics_end();
	}
	metrics_end();
}

static double growth(int mode, int m)
{
	double a = size_ok[0] ? stat_of(0, mode, m, S_MEDIAN) : -1;
	double b = size_ok[num_sizes - 1] ? stat_of(num_sizes - 1, mode, m, S_MEDIAN) : -1;

	return a > 0 && b > 0 ? b / a : -1;
}

static void write_metrics(void)
{
	char summary[256];
	int mode, m;

	metrics_open();
	metrics_arr("sizes");
	for (m = 0; m < num_sizes; m++)
		metrics_int(NULL, sizes[m]);
	metrics_arr_end();
	metrics_int("rounds", rounds);
	metrics_obj("methods");
	for (m = 0; m < NUM_METHODS; m++) {
		metrics_obj(method_name[m]);
		metrics_str("unit", "ms");
		metrics_str("direction", "lower_is_better");
		metrics_end();
	}
	metrics_end();
	metrics_table("median_ms", S_MEDIAN);
	metrics_table("min_ms", S_MIN);
	metrics_table("max_ms", S_MAX);
	metrics_table("n", S_N);
	metrics_obj("growth_largest_over_smallest");
	for (mode = 0; mode < NUM_MODES; mode++) {
		metrics_obj(mode_name[mode]);
		for (m = 0; m < NUM_METHODS; m++)
			metrics_num(method_name[m], growth(mode, m));
		metrics_end();
	}
	metrics_end();
	snprintf(summary, sizeof(summary),
		 "%d->%d cgroups, growth of one read: few updated: rstat_root x%.1f, user_walk x%.1f; all updated: rstat_root x%.1f, user_walk x%.1f",
		 sizes[0], sizes[num_sizes - 1], growth(U_FEW, M_ROOT), growth(U_FEW, M_USER),
		 growth(U_ALL, M_ROOT), growth(U_ALL, M_USER));
	metrics_str("summary", summary);
	metrics_close();
}

static void on_signal(void)
{
	if (file_path[0])
		unlink(file_path);
}

/* cgroup2 with memory, and a file of real (clean) data on the scratch disk */
static int check_environment(void)
{
	const char *scratch = getenv("HARNESS_SCRATCH");
	int i, max = 0, blocks;
	static char block[UPDATE_BYTES];
	char why[256];
	bool skip;

	ncpus = libbpf_num_possible_cpus();
	mnt = cg_root(why, sizeof(why), &skip);
	if (!mnt || !scratch || ncpus <= 0) {
		ksft_print_msg("needs a writable cgroup2 mount (%s) and $HARNESS_SCRATCH on a disk-backed filesystem (test.toml needs = [\"scratch\"])\n",
			       mnt ? "ok" : why);
		return KSFT_FAIL;
	}
	cg_enable(mnt, "+memory");	/* may already be on */
	for (i = 0; i < num_sizes; i++)
		max = sizes[i] > max ? sizes[i] : max;
	blocks = max + 1;	/* one per node: the offset of a leaf is its index */
	snprintf(file_path, sizeof(file_path), "%s/rstat_tree_bench.%d", scratch, getpid());
	cg_on_signal(on_signal);
	file_fd = open(file_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	/* real data, not a hole: reading a hole of some filesystems caches nothing */
	memset(block, 0x5a, sizeof(block));
	for (i = 0; file_fd >= 0 && i < blocks; i++)
		if (pwrite(file_fd, block, UPDATE_BYTES, (off_t)i * UPDATE_BYTES) != UPDATE_BYTES)
			break;
	if (file_fd < 0 || i < blocks || fsync(file_fd)) {	/* clean: reclaim needs no writeback */
		ksft_print_msg("%s: %s\n", file_path, strerror(errno));
		return KSFT_FAIL;
	}
	ksft_print_msg("cgroup2 at %s; %d possible CPUs; update = 64 KiB of %s into the page cache, then memory.reclaim 64K\n",
		       mnt, ncpus, file_path);
	return KSFT_PASS;
}

static int check_load_attach(void)
{
	int err;

	skel = calloc(1, sizeof(*skel));
	err = skel ? rstat_tree_bench_bpf__create_skeleton(skel) : -ENOMEM;
	err = err ?: BU_OPEN_RSTAT(skel, rstat_tree_bench_css_bpf);
	if (!err)
		err = rstat_tree_bench_bpf__load(skel);
	if (!err) {
		bpf_program__set_autoattach(skel->progs.rtb_dump, false);
		err = rstat_tree_bench_bpf__attach(skel);
	}
	if (!err)
		return KSFT_PASS;
	ksft_print_msg("open/load/attach: %s\n", strerror(-err));
	bu_print_log();
	rstat_tree_bench_bpf__destroy(skel);
	skel = NULL;
	return KSFT_FAIL;
}

static bool parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sizes", required_argument, NULL, 's' },
		{ "rounds", required_argument, NULL, 'r' },
		{}
	};
	char *tok, *save, *end = "";
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'r')
			rounds = strtol(optarg, &end, 10);
		if (c == 'r' && rounds >= 1 && rounds <= MAX_ROUNDS && !*end)
			continue;
		if (c != 's')
			return false;
		num_sizes = 0;
		for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (num_sizes == MAX_SIZES)
				return false;
			sizes[num_sizes] = strtol(tok, &end, 10);
			if (*end || sizes[num_sizes] < 2 || sizes[num_sizes++] > 4000)
				return false;
		}
	}
	return optind == argc && num_sizes;
}

int main(int argc, char **argv)
{
	static char names[MAX_SIZES][32];
	struct check checks[2 + MAX_SIZES] = {
		{ "environment", check_environment, NULL },
		{ "bpf_load_attach", check_load_attach, "environment" },
	};
	int si, ret;

	if (!parse_args(argc, argv)) {
		fprintf(stderr, "usage: %s [--sizes N,N,...] [--rounds R]  (2 <= N <= 4000, R <= %d)\n",
			argv[0], MAX_ROUNDS);
		return KSFT_FAIL;
	}
	bu_capture_log();
	for (si = 0; si < num_sizes; si++) {
		snprintf(names[si], sizeof(names[si]), "tree_%d_methods_agree", sizes[si]);
		checks[2 + si] = (struct check){ names[si], check_tree, "bpf_load_attach" };
	}
	ret = checks_run(checks, 2 + num_sizes, NULL);
	if (skel)
		write_metrics();
	rstat_tree_bench_bpf__destroy(skel);
	if (file_path[0])
		unlink(file_path);
	return ret;
}
