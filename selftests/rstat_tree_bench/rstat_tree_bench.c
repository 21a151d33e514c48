// SPDX-License-Identifier: GPL-2.0
/*
 * rstat_tree_bench: the cost of one read of a subtree's memcg-reclaim totals
 * (lib/reclaim_stats.bpf.h, as hierarchical_stats) as the tree grows: rstat_root (flush + SELF_ONLY
 * iterator read), rstat_walk (flush + DESCENDANTS_PRE read), user_walk
 * (cgroupfs walk summing the per-CPU map).  Before each timed read, real
 * reclaim in one leaf ("few") or every leaf ("all"); the count must grow by
 * that, and then the three agree.  Usage: --sizes 10,100 --rounds 5
 */
#include "selftest.h"
#include <dirent.h>

#include "reclaim_stats.h"
#include "rstat_tree_bench.skel.h"
#include "rstat_tree_bench_css.skel.h"

#define MAX_SIZES 8
#define MAX_ROUNDS 64
#define UPDATE_BYTES (64 * 1024)

enum method { M_ROOT, M_WALK, M_USER, NUM_METHODS };
enum mode { U_FEW, U_ALL, NUM_MODES };
static const char *const method_name[] = { "rstat_root", "rstat_walk", "user_walk" };
static const char *const mode_name[] = { "few", "all" };

/* the tree: [0] the bench root, [1..inner] inner cgroups, then the leaves */
static struct cg_node *nodes;
static int num_nodes, inner, next_size, ncpus, file_fd = -1;
static struct rstat_tree_bench_bpf *skel;
static struct rs_pcpu *vals;	/* one per CPU */
struct counts { unsigned long long v[RS_NR]; };	/* count, time_ns, pages */
static char file_path[CG_PATH_MAX], buf[1 << 20];
static const char *mnt;
static int sizes[MAX_SIZES], num_sizes, rounds;
static bool size_ok[MAX_SIZES], walk_unsupported[MAX_SIZES];
/* ms per read: [size][mode][method][round]; < 0: not measured */
static double ms[MAX_SIZES][NUM_MODES][NUM_METHODS][MAX_ROUNDS];

/* size/10 (at least 1) inner cgroups, the leaves spread over them; the leaves, or -1 */
static int make_tree(int size)
{
	char name[64];
	int i;

	inner = size / 10 > 0 ? size / 10 : 1;
	num_nodes = size + 1;
	nodes = calloc(num_nodes, sizeof(*nodes));
	for (i = 0; nodes && i < num_nodes; i++) {
		nodes[i].parent = !i ? -1 : i <= inner ? 0 : 1 + (i - 1 - inner) % inner;
		nodes[i].enable = i <= inner ? "+memory" : NULL;
		if (nodes[i].parent > 0)	/* a leaf, below its inner cgroup */
			snprintf(nodes[i].rel, sizeof(nodes[i].rel), "i%d/l%d", nodes[i].parent, i);
		else
			snprintf(nodes[i].rel, sizeof(nodes[i].rel), "i%d", i);
	}
	snprintf(name, sizeof(name), "rstat_tree_bench.%d", size);
	return nodes && !cg_tree_create(mnt, name, nodes, num_nodes) ? size - inner : -1;
}

/* in leaf @arg: uncached file pages charged to it, then memory.reclaim */
static int update_child(void *arg)
{
	off_t off = (long)arg * (off_t)UPDATE_BYTES;
	int err;

	posix_fadvise(file_fd, off, UPDATE_BYTES, POSIX_FADV_DONTNEED);
	if (pread(file_fd, buf, UPDATE_BYTES, off) != UPDATE_BYTES)
		return 2;
	/* EAGAIN (not all of it reclaimed) still ran reclaim: the tracepoints fired */
	err = cg_write(nodes[(long)arg].path, "memory.reclaim", "64K");
	return err && err != -EAGAIN ? 3 : 0;
}

/* reclaim in the first @want leaves; the number done, or -1 */
static int update_leaves(int want)
{
	long i, status = 0;

	for (i = inner + 1; i < num_nodes && i <= inner + want && !status; i++)
		status = cg_run(nodes[i].path, update_child, (void *)i);
	if (status)
		ksft_print_msg("update in %s: child status %ld\n", nodes[i - 1].path, status);
	return status ? -1 : i - inner - 1;
}

/* the subtree's sum of the per-CPU counters, recursively through cgroupfs */
static int user_walk_dir(int parent_fd, const char *name, struct counts *sum)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC), cpu, i, err = 0;
	struct dirent *de;
	struct stat st;
	__u64 id;
	DIR *d;

	if (fd < 0 || fstat(fd, &st) || !(d = fdopendir(fd))) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	id = st.st_ino;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.rs_pcpu), &id, vals))
		for (cpu = 0; cpu < ncpus; cpu++)
			for (i = 0; i < RS_NR; i++)
				sum->v[i] += vals[cpu].state[i];
	while (!err && (de = readdir(d)))
		if (de->d_type == DT_DIR && de->d_name[0] != '.')
			err = user_walk_dir(dirfd(d), de->d_name, sum);
	closedir(d);
	return err;
}

/* one read by @m into @t; -errno, or -ENOENT when the first line is not the root's */
static int read_totals(enum method m, struct bpf_link *link, struct counts *t,
		       double *ms_out)
{
	unsigned long long id = nodes[0].id, t0 = now_ns(), first;
	ssize_t n;

	*t = (struct counts){};
	n = m == M_USER ? user_walk_dir(AT_FDCWD, nodes[0].path, t) :
			  bu_read_iter(link, buf, sizeof(buf) - 1);
	if (n >= 0 && ms_out)
		*ms_out = (now_ns() - t0) / 1e6;
	if (n < 0 || m == M_USER)
		return n < 0 ? n : 0;
	buf[n] = '\0';	/* the root's line is the first of both walks */
	return sscanf(buf, "cgroup id=%llu count=%llu time_ns=%llu pages=%llu", &first, &t->v[0],
		      &t->v[1], &t->v[2]) == 4 && first == id ? 0 : -ENOENT;
}

/* per method: update, one timed read, the count grown; then the three agree */
static int run_round(int si, int mode, int r, struct bpf_link **links, int leaves,
		     struct counts *prev)
{
	struct counts t[NUM_METHODS];
	int m, done, err;

	for (m = 0; m < NUM_METHODS; m++) {
		done = update_leaves(mode == U_FEW ? 1 : leaves);
		ms[si][mode][m][r] = -1;
		if (done < 0)
			return KSFT_FAIL;
		if (m == M_WALK && walk_unsupported[si])
			continue;
		err = read_totals(m, links[m], &t[m], &ms[si][mode][m][r]);
		/* a cgroup iterator cannot resume a walk in a second read(): -1 in the metrics */
		walk_unsupported[si] |= m == M_WALK && err == -EOPNOTSUPP;
		if (m == M_WALK && walk_unsupported[si])
			continue;
		if (err)
			return check_fail("%s: %s", method_name[m], err == -ENOENT ?
					  "the first line is not the subtree root's" : strerror(-err));
		if (t[m].v[RC_COUNT] < prev->v[RC_COUNT] + done)
			return check_fail("%s: count %llu after %d updated leaves, was %llu",
					  method_name[m], t[m].v[RC_COUNT], done, prev->v[RC_COUNT]);
		*prev = t[m];
	}
	for (m = 0; m < NUM_METHODS; m++) {	/* nothing new: all equal rstat_root */
		if (m == M_WALK && walk_unsupported[si])
			continue;
		err = read_totals(m, links[m], &t[m], NULL);
		if (err || memcmp(&t[m], &t[M_ROOT], sizeof(*t)))
			return check_fail("methods disagree: %s (%llu, %llu, %llu) %s, rstat_root (%llu, %llu, %llu)",
					  method_name[m], t[m].v[0], t[m].v[1], t[m].v[2],
					  err ? strerror(-err) : "", t[M_ROOT].v[0],
					  t[M_ROOT].v[1], t[M_ROOT].v[2]);
	}
	return KSFT_PASS;
}

/* the rounds measured of a size that passed, into @v; how many */
static int samples(int si, int mode, int m, double *v)
{
	int r, n = 0;

	for (r = 0; size_ok[si] && r < rounds; r++)
		if (ms[si][mode][m][r] >= 0)
			v[n++] = ms[si][mode][m][r];
	return n;
}

/* one size (sizes[] in check order): build, measure, check, remove */
static int check_tree(void)
{
	struct bpf_link *links[NUM_METHODS] = {};
	int si = next_size++, leaves = make_tree(sizes[si]), mode, r, ret;
	struct counts prev = {};

	if (leaves >= 0) {
		links[M_ROOT] = bu_attach_cgroup_iter(skel->progs.rc_dump, nodes[0].path,
						      BPF_CGROUP_ITER_SELF_ONLY);
		links[M_WALK] = bu_attach_cgroup_iter(skel->progs.rc_dump, nodes[0].path,
						      BPF_CGROUP_ITER_DESCENDANTS_PRE);
	}
	ret = links[M_ROOT] && links[M_WALK] ? KSFT_PASS :
	      check_fail("tree or cgroup iterator: %s", strerror(errno));
	for (mode = 0; ret == KSFT_PASS && mode < NUM_MODES; mode++)
		for (r = 0; ret == KSFT_PASS && r < rounds; r++)
			ret = run_round(si, mode, r, links, leaves, &prev);
	size_ok[si] = ret == KSFT_PASS;	/* the medians: in $HARNESS_METRICS */
	bpf_link__destroy(links[M_ROOT]);
	bpf_link__destroy(links[M_WALK]);
	free(nodes);
	num_nodes = 0;
	cg_destroy_all();
	return ret;
}

/* the median of the last size's reads over the first's; -1 when one is missing */
static double growth(int mode, int m)
{
	double a[MAX_ROUNDS], b[MAX_ROUNDS];
	int na = samples(0, mode, m, a), nb = samples(num_sizes - 1, mode, m, b);
	struct stats sa, sb;

	stats_of(a, na, &sa);
	stats_of(b, nb, &sb);
	return na && nb && sa.median > 0 ? sb.median / sa.median : -1;
}

/* sizes; reads."<mode>/<method>@<size>": a measurement in ms; the summary */
static void write_metrics(void)
{
	char key[64], summary[256];
	double v[MAX_ROUNDS];
	int mode, m, si, n;

	metrics_open();
	metrics_arr("sizes");
	for (si = 0; si < num_sizes; si++)
		metrics_int(NULL, sizes[si]);
	metrics_end();
	metrics_obj("reads");
	for (si = 0; si < num_sizes; si++) {
		for (mode = 0; mode < NUM_MODES; mode++) {
			for (m = 0; m < NUM_METHODS; m++) {
				/* none: walk unsupported, or the size failed */
				n = samples(si, mode, m, v);
				snprintf(key, sizeof(key), "%s/%s@%d", mode_name[mode],
					 method_name[m], sizes[si]);
				metrics_measure(key, v, n, "ms", "lower");
			}
		}
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
	int i = cg_find_root(&mnt, "memory"), blocks = 0;

	ncpus = libbpf_num_possible_cpus();
	vals = ncpus > 0 ? calloc(ncpus, sizeof(*vals)) : NULL;
	if (i != KSFT_PASS)
		return i;
	if (!scratch || !vals)
		return check_fail("needs $HARNESS_SCRATCH (a disk file system)");
	for (i = 0; i < num_sizes; i++)	/* a block per node: a leaf's offset is its index */
		blocks = sizes[i] + 1 > blocks ? sizes[i] + 1 : blocks;
	snprintf(file_path, sizeof(file_path), "%s/rstat_tree_bench.%d", scratch, getpid());
	cg_on_signal(on_signal);
	file_fd = open(file_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	/* real data, not a hole: reading a hole of some filesystems caches nothing */
	memset(buf, 0x5a, UPDATE_BYTES);
	for (i = 0; file_fd >= 0 && i < blocks; i++)
		if (pwrite(file_fd, buf, UPDATE_BYTES, (off_t)i * UPDATE_BYTES) != UPDATE_BYTES)
			break;
	if (file_fd < 0 || i < blocks || fsync(file_fd))	/* clean: reclaim needs no writeback */
		return check_fail("%s: %s", file_path, strerror(errno));
	return KSFT_PASS;
}

static int check_load_attach(void)
{
	int err = BU_LOAD_RSTAT(skel, rstat_tree_bench, NULL);

	return err ? check_fail("open/load/attach: %s", strerror(-err)) : KSFT_PASS;
}

/* test.toml's "--sizes N,N,... --rounds R" (N in 2..4000, R in 1..MAX_ROUNDS) */
static bool parse_args(int argc, char **argv)
{
	char *tok;
	int n;

	if (argc != 5 || strcmp(argv[1], "--sizes") || strcmp(argv[3], "--rounds"))
		return false;
	rounds = atoi(argv[4]);
	for (tok = strtok(argv[2], ","); tok && num_sizes < MAX_SIZES; tok = strtok(NULL, ","))
		sizes[num_sizes++] = atoi(tok);
	for (n = 0; n < num_sizes; n++)
		if (sizes[n] < 2 || sizes[n] > 4000)
			return false;
	return !tok && num_sizes && rounds >= 1 && rounds <= MAX_ROUNDS;
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
		fprintf(stderr, "usage: %s --sizes N,N,... --rounds R\n", argv[0]);
		return KSFT_FAIL;
	}
	for (si = 0; si < num_sizes; si++) {
		snprintf(names[si], sizeof(names[si]), "tree_%d_methods_agree", sizes[si]);
		checks[2 + si] = (struct check){ names[si], check_tree, "bpf_load_attach" };
	}
	ret = checks_run(checks, 2 + num_sizes, NULL);
	if (next_size)	/* a tree was measured */
		write_metrics();
	rstat_tree_bench_bpf__destroy(skel);
	on_signal();
	cg_cleanup();
	return ret;
}
