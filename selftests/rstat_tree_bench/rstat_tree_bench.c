// SPDX-License-Identifier: GPL-2.0
/*
 * rstat_tree_bench: what reading a subtree's hierarchical memcg-reclaim
 * statistics costs as the tree grows, through rstat versus in userspace.
 *
 * The statistics are collected by the hierarchical_stats BPF programs
 * (included, unchanged): per cgroup and CPU in a per-CPU hash map, flagged
 * to rstat with cgroup_rstat_updated(), folded and propagated to the parent
 * by the bpf_rstat_flush() program.  Three ways to get them, timed one read
 * at a time, each right after its own round of updates:
 *
 *   rstat_root  one read of a SELF_ONLY cgroup-iterator link on the subtree
 *               root: cgroup_rstat_flush() + one line (the subtree's total).
 *               rstat's claim: costs in proportion to what was updated.
 *   rstat_walk  one read of a DESCENDANTS_PRE link on the subtree root:
 *               the flush + one line per cgroup (every cgroup's total).
 *   user_walk   what userspace does without rstat: walk the subtree in
 *               cgroupfs (cgroup id = the directory's inode), look up every
 *               cgroup's per-CPU counters in the map and sum them up the
 *               tree (every cgroup's total, the subtree's among them).
 *
 * Tree of N cgroups below a bench root: N/10 (at least 1) inner cgroups,
 * the rest leaves spread over them.  "few" updates = reclaim in 1 leaf,
 * "all" = reclaim in every leaf.  An update is real memcg reclaim: a child
 * created directly in the leaf (clone3 CLONE_INTO_CGROUP) reads 64 KiB of
 * a file on $HARNESS_SCRATCH that is not in the page cache (charged to the
 * leaf) and writes 64K to the leaf's memory.reclaim, so the reclaim
 * tracepoints fire in the leaf's context.
 *
 * Checked (KTAP), not timed: after every measurement the three methods
 * agree on the subtree's total (count, time, pages), rstat_walk's line
 * for the root equals rstat_root's, and the count grew by at least one per
 * updated leaf.  Timings go to HARNESS_METRICS (median of --rounds reads),
 * with growth ratios largest/smallest tree per method and update mode.
 *
 * Usage: rstat_tree_bench [--sizes 10,100,1000] [--rounds 5]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "harness_test.h"
#include "hierarchical_stats.h"
#include "rstat_tree_bench.skel.h"

#define MAX_SIZES 8
#define MAX_ROUNDS 64
#define UPDATE_BYTES (64 * 1024)

enum method { M_ROOT, M_WALK, M_USER, NUM_METHODS };
enum mode { U_FEW, U_ALL, NUM_MODES };
static const char *const method_name[NUM_METHODS] = {
	"rstat_root", "rstat_walk", "user_walk" };
static const char *const mode_name[NUM_MODES] = { "few", "all" };

struct node {
	char path[PATH_MAX];
	int fd;			/* dir fd: CLONE_INTO_CGROUP and iterator target */
	int parent;		/* index, -1 for the bench root */
	bool leaf;
	unsigned long long id;
};

struct totals3 {
	unsigned long long count, time_ns, pages;
};

static struct rstat_tree_bench_bpf *skel;
static struct bpf_link *trace_link[3];
static char cg_mnt[PATH_MAX];
static char file_path[PATH_MAX];
static int file_fd = -1;
static struct node *nodes;
static int num_nodes;
static int ncpus;
static int test_no;

static int sizes[MAX_SIZES] = { 10, 100, 1000 };
static int num_sizes = 3;
static int rounds = 5;

/* ms per read: [size][mode][method][round]; -1: not measured */
static double ms[MAX_SIZES][NUM_MODES][NUM_METHODS][MAX_ROUNDS];
static bool walk_unsupported[MAX_SIZES];

static void remove_tree(void)
{
	int i, tries;

	for (i = num_nodes - 1; i >= 0; i--) {	/* children were created after parents */
		if (nodes[i].fd >= 0)
			close(nodes[i].fd);
		for (tries = 0; tries < 100; tries++) {
			if (!rmdir(nodes[i].path) || errno == ENOENT)
				break;
			if (errno != EBUSY)
				break;
			usleep(20000);	/* a just-reaped child keeps it busy briefly */
		}
	}
	free(nodes);
	nodes = NULL;
	num_nodes = 0;
}

static void on_signal(int sig)
{
	(void)sig;
	remove_tree();
	if (file_path[0])
		unlink(file_path);
	_exit(KSFT_FAIL);
}

static int add_node(int parent, const char *name, bool leaf, char *err, size_t len)
{
	struct node *n = &nodes[num_nodes];
	char ctl[PATH_MAX + 32];
	struct stat st;

	snprintf(n->path, sizeof(n->path), "%.3800s/%.200s",
		 parent < 0 ? cg_mnt : nodes[parent].path, name);
	n->fd = -1;
	n->parent = parent;
	n->leaf = leaf;
	if (mkdir(n->path, 0755)) {
		snprintf(err, len, "mkdir %.300s: %s", n->path, strerror(errno));
		return -1;
	}
	num_nodes++;
	n->fd = open(n->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (n->fd < 0 || fstat(n->fd, &st)) {
		snprintf(err, len, "open %.300s: %s", n->path, strerror(errno));
		return -1;
	}
	n->id = st.st_ino;	/* kernfs node id == cgroup id on 64-bit */
	if (!leaf) {
		snprintf(ctl, sizeof(ctl), "%s/cgroup.subtree_control", n->path);
		if (ht_write_file(ctl, "+memory")) {
			snprintf(err, len, "%.300s: +memory: %s", ctl, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* bench root + inner + leaves; returns the number of leaves or -1 */
static int make_tree(int size, char *err, size_t len)
{
	int inner = size / 10 > 0 ? size / 10 : 1, leaves = size - inner, i;
	char name[64];

	nodes = calloc(size + 1, sizeof(*nodes));
	if (!nodes) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	snprintf(name, sizeof(name), "rstat_tree_bench.%d.%d", getpid(), size);
	if (add_node(-1, name, false, err, len))
		return -1;
	for (i = 0; i < inner; i++) {
		snprintf(name, sizeof(name), "i%d", i);
		if (add_node(0, name, false, err, len))
			return -1;
	}
	for (i = 0; i < leaves; i++) {
		snprintf(name, sizeof(name), "l%d", i);
		if (add_node(1 + i % inner, name, true, err, len))
			return -1;
	}
	return leaves;
}

/* the child, born in the leaf: uncached file pages, then memory.reclaim */
static void update_child(const char *leaf_path, off_t off)
{
	char buf[UPDATE_BYTES], ctl[PATH_MAX + 32];

	/* the parent's handler tears the tree down: not the child's job */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	posix_fadvise(file_fd, off, UPDATE_BYTES, POSIX_FADV_DONTNEED);
	if (pread(file_fd, buf, sizeof(buf), off) != (ssize_t)sizeof(buf))
		_exit(2);
	snprintf(ctl, sizeof(ctl), "%s/memory.reclaim", leaf_path);
	/* EAGAIN (not all of it reclaimed) still ran reclaim: the tracepoints fired */
	if (ht_write_file(ctl, "64K") && errno != EAGAIN)
		_exit(3);
	_exit(0);
}

/* reclaim in `want` leaves (all if <= 0); returns the number done or -1 */
static int update_leaves(int want, int *done, char *err, size_t len)
{
	int i, status, leaf_no = 0;

	*done = 0;
	for (i = 0; i < num_nodes; i++) {
		struct clone_args args = {
			.flags = CLONE_INTO_CGROUP,
			.exit_signal = SIGCHLD,
		};
		pid_t pid;

		if (!nodes[i].leaf)
			continue;
		if (want > 0 && *done >= want)
			break;
		args.cgroup = (uint64_t)nodes[i].fd;
		pid = syscall(SYS_clone3, &args, sizeof(args));
		if (pid < 0) {
			snprintf(err, len, "clone3(CLONE_INTO_CGROUP %.300s): %s",
				 nodes[i].path, strerror(errno));
			return -1;
		}
		if (pid == 0)
			update_child(nodes[i].path, (off_t)leaf_no * UPDATE_BYTES);
		leaf_no++;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			snprintf(err, len, "update in %.300s: child status %#x", nodes[i].path, status);
			return -1;
		}
		(*done)++;
	}
	return 0;
}

static struct bpf_link *attach_iter(int cg_fd, enum bpf_cgroup_iter_order order)
{
	LIBBPF_OPTS(bpf_iter_attach_opts, opts);
	union bpf_iter_link_info linfo;

	memset(&linfo, 0, sizeof(linfo));
	linfo.cgroup.cgroup_fd = cg_fd;
	linfo.cgroup.order = order;
	opts.link_info = &linfo;
	opts.link_info_len = sizeof(linfo);
	return bpf_program__attach_iter(skel->progs.hs_dump, &opts);
}

/* read a whole iterator; returns bytes or -1; *buf grows as needed */
static ssize_t read_iter(struct bpf_link *link, char **buf, size_t *cap)
{
	size_t got = 0;
	ssize_t n;
	int fd;

	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0)
		return -1;
	for (;;) {
		if (got + 4096 > *cap) {
			char *nb = realloc(*buf, *cap * 2);

			if (!nb) {
				close(fd);
				return -1;
			}
			*buf = nb;
			*cap *= 2;
		}
		n = read(fd, *buf + got, *cap - got - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	close(fd);
	if (n < 0)
		return -1;
	(*buf)[got] = '\0';
	return got;
}

/* the totals of cgroup `id` in iterator output, or false */
static bool find_line(const char *text, unsigned long long id, struct totals3 *t)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "cgroup id=%llu ", id);
	p = strstr(text, key);
	return p && sscanf(p, "cgroup id=%*u count=%llu time_ns=%llu pages=%llu",
			   &t->count, &t->time_ns, &t->pages) == 3;
}

/*
 * user_walk: the subtree's directories (readdir, recursively), each one's
 * per-CPU counters from the map (the "state" half of each CPU's value),
 * summed up the tree: every cgroup's total is computed on the way, as a
 * monitoring agent would; the subtree's comes back in *sum.
 */
static int user_walk_dir(int parent_fd, const char *name, void *vals, size_t vsz,
			 struct totals3 *sum)
{
	struct totals3 own = {}, child;
	struct dirent *de;
	struct stat st;
	int fd, cpu, err = 0;
	__u64 id;
	DIR *d;

	fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		err = -errno;
		close(fd);
		return err;
	}
	id = st.st_ino;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.pcpu_stats), &id, vals)) {
		for (cpu = 0; cpu < ncpus; cpu++) {
			const struct hs_counters *c = (const void *)((char *)vals + cpu * vsz);

			own.count += c->count;
			own.time_ns += c->time_ns;
			own.pages += c->pages;
		}
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		memset(&child, 0, sizeof(child));
		err = user_walk_dir(dirfd(d), de->d_name, vals, vsz, &child);
		if (err)
			break;
		own.count += child.count;
		own.time_ns += child.time_ns;
		own.pages += child.pages;
	}
	closedir(d);
	*sum = own;
	return err;
}

static int user_walk(struct totals3 *sum)
{
	/* a per-CPU value: struct hs_pcpu = { state, prev }, 8-byte aligned */
	size_t vsz = (2 * sizeof(struct hs_counters) + 7) & ~(size_t)7;
	void *vals = calloc(ncpus, vsz);
	int err;

	if (!vals)
		return -ENOMEM;
	err = user_walk_dir(AT_FDCWD, nodes[0].path, vals, vsz, sum);
	free(vals);
	return err;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double tmp[MAX_ROUNDS];

	memcpy(tmp, v, n * sizeof(*v));
	qsort(tmp, n, sizeof(*tmp), cmp_double);
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static bool same(const struct totals3 *a, const struct totals3 *b)
{
	return a->count == b->count && a->time_ns == b->time_ns && a->pages == b->pages;
}

/*
 * One size: build the tree, then for each update mode and round: update,
 * time one read by each method (each after its own update), and check the
 * three agree.  Returns false on a failed check (diagnosed).
 */
static bool bench_size(int si, char **buf, size_t *cap)
{
	struct bpf_link *self = NULL, *walk = NULL;
	struct totals3 prev = {}, t[NUM_METHODS], w;
	char err[512] = "";
	unsigned long long t0;
	int leaves, mode, r, m, done;
	bool ok = true;
	ssize_t n;

	leaves = make_tree(sizes[si], err, sizeof(err));
	if (leaves < 0)
		goto fail;
	self = attach_iter(nodes[0].fd, BPF_CGROUP_ITER_SELF_ONLY);
	walk = attach_iter(nodes[0].fd, BPF_CGROUP_ITER_DESCENDANTS_PRE);
	if (!self || !walk) {
		snprintf(err, sizeof(err), "attach cgroup iterator: %s", strerror(errno));
		goto fail;
	}
	ht_diag("%d cgroups: %d inner, %d leaves", sizes[si], num_nodes - 1 - leaves, leaves);
	for (mode = 0; mode < NUM_MODES; mode++) {
		for (r = 0; r < rounds; r++) {
			for (m = 0; m < NUM_METHODS; m++) {
				if (update_leaves(mode == U_FEW ? 1 : 0, &done, err, sizeof(err)))
					goto fail;
				if (m == M_WALK && walk_unsupported[si]) {
					ms[si][mode][m][r] = -1;
					continue;
				}
				t0 = ht_now_ns();
				if (m == M_ROOT) {
					n = read_iter(self, buf, cap);
				} else if (m == M_WALK) {
					n = read_iter(walk, buf, cap);
				} else {
					n = user_walk(&t[m]) ? -1 : 0;
				}
				ms[si][mode][m][r] = (ht_now_ns() - t0) / 1e6;
				if (n < 0 && m == M_WALK && errno == EOPNOTSUPP) {
					/*
					 * cgroup_iter cannot resume a walk in a second read()
					 * (cgroup_mutex was dropped): the whole walk's output
					 * must fit in one seq buffer (8 pages here).
					 */
					ht_diag("%d cgroups: rstat_walk not possible: the walk's output (~%d lines) does not fit in one read of the iterator (EOPNOTSUPP); not measured",
						sizes[si], num_nodes);
					walk_unsupported[si] = true;
					ms[si][mode][m][r] = -1;
					continue;
				}
				if (n < 0) {
					snprintf(err, sizeof(err), "%s: %s", method_name[m],
						 strerror(errno));
					goto fail;
				}
				if (m != M_USER && !find_line(*buf, nodes[0].id, &t[m])) {
					snprintf(err, sizeof(err), "%s: no line for the subtree root (%.200s)",
						 method_name[m], *buf);
					goto fail;
				}
				if (t[m].count < prev.count + done) {
					snprintf(err, sizeof(err), "%s: count %llu after %d updated leaves, was %llu",
						 method_name[m], t[m].count, done, prev.count);
					goto fail;
				}
				prev = t[m];
			}
			/* nothing happened since the last read: all three must agree now */
			w = (struct totals3){};
			if (read_iter(self, buf, cap) < 0 || !find_line(*buf, nodes[0].id, &t[M_ROOT]) ||
			    (!walk_unsupported[si] &&
			     (read_iter(walk, buf, cap) < 0 || !find_line(*buf, nodes[0].id, &w))) ||
			    user_walk(&t[M_USER])) {
				snprintf(err, sizeof(err), "re-read failed: %s", strerror(errno));
				goto fail;
			}
			if (walk_unsupported[si])
				w = t[M_ROOT];
			if (!same(&t[M_ROOT], &w) || !same(&t[M_ROOT], &t[M_USER])) {
				snprintf(err, sizeof(err),
					 "methods disagree: rstat_root (%llu, %llu, %llu), rstat_walk (%llu, %llu, %llu), user_walk (%llu, %llu, %llu)",
					 t[M_ROOT].count, t[M_ROOT].time_ns, t[M_ROOT].pages,
					 w.count, w.time_ns, w.pages,
					 t[M_USER].count, t[M_USER].time_ns, t[M_USER].pages);
				goto fail;
			}
		}
		ht_diag("%d cgroups, %s updated: rstat_root %.3f ms, rstat_walk %.3f ms, user_walk %.3f ms (median of %d); subtree total count %llu pages %llu",
			sizes[si], mode_name[mode],
			median(ms[si][mode][M_ROOT], rounds), median(ms[si][mode][M_WALK], rounds),
			median(ms[si][mode][M_USER], rounds), rounds, prev.count, prev.pages);
	}
	goto out;
fail:
	ht_diag("%d cgroups: %s", sizes[si], err);
	ok = false;
out:
	bpf_link__destroy(self);
	bpf_link__destroy(walk);
	remove_tree();
	return ok;
}

static void write_metrics(const char *path, const bool *size_ok)
{
	int si, mode, m, last = num_sizes - 1;
	FILE *f = fopen(path, "w");

	if (!f)
		return;
	fprintf(f, "{\n  \"sizes\": [");
	for (si = 0; si < num_sizes; si++)
		fprintf(f, "%s%d", si ? ", " : "", sizes[si]);
	fprintf(f, "],\n  \"rounds\": %d,\n  \"median_ms\": {", rounds);
	for (mode = 0; mode < NUM_MODES; mode++) {
		fprintf(f, "%s\n    \"%s\": {", mode ? "," : "", mode_name[mode]);
		for (m = 0; m < NUM_METHODS; m++) {
			fprintf(f, "%s\"%s\": [", m ? ", " : "", method_name[m]);
			for (si = 0; si < num_sizes; si++)
				fprintf(f, "%s%.4f", si ? ", " : "",
					size_ok[si] && !(m == M_WALK && walk_unsupported[si]) ?
					median(ms[si][mode][m], rounds) : -1.0);
			fprintf(f, "]");
		}
		fprintf(f, "}");
	}
	fprintf(f, "\n  },\n  \"growth_largest_over_smallest\": {");
	for (mode = 0; mode < NUM_MODES; mode++) {
		fprintf(f, "%s\"%s\": {", mode ? ", " : "", mode_name[mode]);
		for (m = 0; m < NUM_METHODS; m++) {
			double a = median(ms[0][mode][m], rounds);
			double b = median(ms[last][mode][m], rounds);

			fprintf(f, "%s\"%s\": %.2f", m ? ", " : "", method_name[m],
				size_ok[0] && size_ok[last] && a > 0 && b > 0 ? b / a : -1.0);
		}
		fprintf(f, "}");
	}
	fprintf(f, "},\n  \"summary\": \"%d->%d cgroups, growth of one read: few updated: rstat_root x%.1f, user_walk x%.1f; all updated: rstat_root x%.1f, user_walk x%.1f\"\n}\n",
		sizes[0], sizes[last],
		median(ms[last][U_FEW][M_ROOT], rounds) / median(ms[0][U_FEW][M_ROOT], rounds),
		median(ms[last][U_FEW][M_USER], rounds) / median(ms[0][U_FEW][M_USER], rounds),
		median(ms[last][U_ALL][M_ROOT], rounds) / median(ms[0][U_ALL][M_ROOT], rounds),
		median(ms[last][U_ALL][M_USER], rounds) / median(ms[0][U_ALL][M_USER], rounds));
	fclose(f);
}

static bool parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sizes", required_argument, NULL, 's' },
		{ "rounds", required_argument, NULL, 'r' },
		{}
	};
	char *tok, *save, *end;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			num_sizes = 0;
			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				long v = strtol(tok, &end, 10);

				if (*end || v < 2 || v > 4000 || num_sizes == MAX_SIZES)
					return false;
				sizes[num_sizes++] = v;
			}
			if (!num_sizes)
				return false;
			break;
		case 'r':
			rounds = strtol(optarg, &end, 10);
			if (*end || rounds < 1 || rounds > MAX_ROUNDS)
				return false;
			break;
		default:
			return false;
		}
	}
	return optind == argc;
}

int main(int argc, char **argv)
{
	bool size_ok[MAX_SIZES] = {};
	size_t cap = 1 << 16;
	char *buf = malloc(cap);
	const char *scratch, *metrics;
	int si, total_leaves = 0, err;
	char root_ctl[PATH_MAX + 32];

	if (!buf || !parse_args(argc, argv)) {
		fprintf(stderr, "usage: %s [--sizes N,N,...] [--rounds R]  (2 <= N <= 4000, R <= %d)\n",
			argv[0], MAX_ROUNDS);
		return KSFT_FAIL;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	{
		/* one open directory per cgroup (clone3 and iterator target) */
		struct rlimit rl;

		if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	printf("KTAP version 1\n1..%d\n", 2 + num_sizes);
	fflush(stdout);

	/* 1: environment */
	ncpus = libbpf_num_possible_cpus();
	scratch = getenv("HARNESS_SCRATCH");
	if (!ht_cgroup2_mount(cg_mnt, sizeof(cg_mnt)) || !scratch || ncpus <= 0) {
		ht_diag("needs a writable cgroup2 mount and $HARNESS_SCRATCH on a disk-backed filesystem (test.toml needs = [\"scratch\"])");
		ht_result(++test_no, false, "environment");
		return KSFT_FAIL;
	}
	snprintf(root_ctl, sizeof(root_ctl), "%s/cgroup.subtree_control", cg_mnt);
	ht_write_file(root_ctl, "+memory");	/* may already be on */
	for (si = 0; si < num_sizes; si++)
		total_leaves = sizes[si] > total_leaves ? sizes[si] : total_leaves;
	snprintf(file_path, sizeof(file_path), "%s/rstat_tree_bench.%d", scratch, getpid());
	file_fd = open(file_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (file_fd < 0 || ftruncate(file_fd, 0) ||
	    posix_fallocate(file_fd, 0, (off_t)total_leaves * UPDATE_BYTES)) {
		ht_diag("%s: %s", file_path, strerror(errno));
		ht_result(++test_no, false, "environment");
		return KSFT_FAIL;
	}
	{
		/* real data, not a hole: reading a hole of some filesystems caches nothing */
		char block[UPDATE_BYTES];
		int i;

		memset(block, 0x5a, sizeof(block));
		for (i = 0; i < total_leaves; i++)
			if (pwrite(file_fd, block, sizeof(block), (off_t)i * UPDATE_BYTES) !=
			    (ssize_t)sizeof(block))
				break;
		fsync(file_fd);	/* clean pages: memcg reclaim does not write back */
	}
	ht_diag("cgroup2 at %s; %d possible CPUs; update = 64 KiB of %s into the page cache, then memory.reclaim 64K",
		cg_mnt, ncpus, file_path);
	ht_result(++test_no, true, "environment");

	/* 2: the hierarchical_stats BPF programs */
	skel = rstat_tree_bench_bpf__open_and_load();
	if (!skel) {
		err = -errno;
		ht_diag("open/load: %s (needs bpf_rstat_flush, cgroup_rstat_updated/flush, the cgroup iterator, mm_vmscan_memcg_reclaim_* tracepoints)",
			strerror(-err));
		printf("ok %d bpf_load_attach # SKIP kernel lacks a feature\n", ++test_no);
		for (si = 0; si < num_sizes; si++)
			printf("ok %d tree_%d_methods_agree # SKIP no BPF programs\n", ++test_no,
			       sizes[si]);
		unlink(file_path);
		return KSFT_SKIP;
	}
	trace_link[0] = bpf_program__attach(skel->progs.hs_reclaim_begin);
	trace_link[1] = bpf_program__attach(skel->progs.hs_reclaim_end);
	trace_link[2] = bpf_program__attach(skel->progs.hs_flush);
	ht_result(++test_no, trace_link[0] && trace_link[1] && trace_link[2], "bpf_load_attach");
	if (!trace_link[0] || !trace_link[1] || !trace_link[2]) {
		unlink(file_path);
		return KSFT_FAIL;
	}

	for (si = 0; si < num_sizes; si++) {
		char name[64];

		size_ok[si] = bench_size(si, &buf, &cap);
		snprintf(name, sizeof(name), "tree_%d_methods_agree", sizes[si]);
		ht_result(++test_no, size_ok[si], name);
	}

	metrics = getenv("HARNESS_METRICS");
	if (metrics)
		write_metrics(metrics, size_ok);
	for (si = 0; si < 3; si++)
		bpf_link__destroy(trace_link[si]);
	rstat_tree_bench_bpf__destroy(skel);
	unlink(file_path);
	free(buf);
	return ht_failed ? KSFT_FAIL : KSFT_PASS;
}
