// SPDX-License-Identifier: GPL-2.0
/*
 * rstat_tree_bench: the cost of one read of a subtree's memcg-reclaim totals
 * (lib/reclaim_stats.bpf.h, as hierarchical_stats) as the tree grows: rstat_root (flush + SELF_ONLY
 * iterator read), rstat_walk (flush + DESCENDANTS_PRE read), user_walk
 * (cgroupfs walk summing the per-CPU map).  Before each timed read, real
 * reclaim in one leaf ("few") or every leaf ("all"); the count must grow by
 * that, and then the three agree.  With --stores maps,storage all of it
 * twice, the per-cgroup state first in maps keyed by cgroup id, then in
 * cgroup local storage (rstat_tree_bench_storage.bpf.c), and the ratios of
 * the medians, storage over maps.  Usage: --sizes 10,100 --rounds 5
 * [--stores maps,storage]
 */
#include "selftest.h"
#include <dirent.h>

#include "reclaim_stats.h"
#include "rstat_tree_bench.skel.h"
#include "rstat_tree_bench_css.skel.h"
#include "rstat_tree_bench_storage.skel.h"
#include "rstat_tree_bench_storage_css.skel.h"

#define MAX_SIZES 8
#define MAX_ROUNDS 64
#define UPDATE_BYTES (64 * 1024)

enum method { M_ROOT, M_WALK, M_USER, NUM_METHODS };
enum mode { U_FEW, U_ALL, NUM_MODES };
enum store { S_MAPS, S_STORAGE, NUM_STORES };
static const char *const method_name[] = { "rstat_root", "rstat_walk", "user_walk" };
static const char *const mode_name[] = { "few", "all" };
static const char *const store_name[] = { "maps", "storage" };

/* the tree: [0] the bench root, [1..inner] inner cgroups, then the leaves */
static struct cg_node *nodes;
static int num_nodes, inner, next_size, ncpus, file_fd = -1;
static bool measured;	/* a tree was measured */
static struct rstat_tree_bench_bpf *skel;
static struct rs_pcpu *vals;	/* one per CPU */
struct counts { unsigned long long v[RS_NR]; };	/* count, time_ns, pages */
static char file_path[CG_PATH_MAX], buf[1 << 20];
static const char *mnt;
static int sizes[MAX_SIZES], num_sizes, rounds, store = -1;
static bool stores[NUM_STORES] = { [S_MAPS] = true };	/* which to measure */
static bool size_ok[NUM_STORES][MAX_SIZES], walk_unsupported[NUM_STORES][MAX_SIZES];
/* ms per read: [store][size][mode][method][round]; < 0: not measured */
static double ms[NUM_STORES][MAX_SIZES][NUM_MODES][NUM_METHODS][MAX_ROUNDS];

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
	/* cgroup local storage is looked up by a cgroup fd, the map by the id */
	void *key = store == S_STORAGE ? (void *)&fd : (void *)&id;
	DIR *d;

	if (fd < 0 || fstat(fd, &st) || !(d = fdopendir(fd))) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		return err;
	}
	id = st.st_ino;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.rs_pcpu), key, vals))
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
		ms[store][si][mode][m][r] = -1;
		if (done < 0)
			return KSFT_FAIL;
		if (m == M_WALK && walk_unsupported[store][si])
			continue;
		err = read_totals(m, links[m], &t[m], &ms[store][si][mode][m][r]);
		/* a cgroup iterator cannot resume a walk in a second read(): -1 in the metrics */
		walk_unsupported[store][si] |= m == M_WALK && err == -EOPNOTSUPP;
		if (m == M_WALK && walk_unsupported[store][si])
			continue;
		if (err)
			return check_fail("%s: %s", method_name[m], err == -ENOENT ?
					  "the first line is not the subtree root's" : strerror(-err));
		if (t[m].v[RC_COUNT] < prev->v[RC_COUNT] + done)
			return check_fail("%s: count %llu after %d updated leaves, was %llu (BPF: %llu map or storage errors)",
					  method_name[m], t[m].v[RC_COUNT], done, prev->v[RC_COUNT],
					  (unsigned long long)skel->bss->rs_map_errors);
		*prev = t[m];
	}
	for (m = 0; m < NUM_METHODS; m++) {	/* nothing new: all equal rstat_root */
		if (m == M_WALK && walk_unsupported[store][si])
			continue;
		err = read_totals(m, links[m], &t[m], NULL);
		/* what every method reports: the iterators print count, time and pages, not
		 * the LRU pages (RC_LRU) the per-CPU counters user_walk sums also hold */
		if (err || t[m].v[RC_COUNT] != t[M_ROOT].v[RC_COUNT] ||
		    t[m].v[RC_TIME_NS] != t[M_ROOT].v[RC_TIME_NS] ||
		    t[m].v[RC_PAGES] != t[M_ROOT].v[RC_PAGES])
			return check_fail("methods disagree: %s (%llu, %llu, %llu) %s, rstat_root (%llu, %llu, %llu)",
					  method_name[m], t[m].v[0], t[m].v[1], t[m].v[2],
					  err ? strerror(-err) : "", t[M_ROOT].v[0],
					  t[M_ROOT].v[1], t[M_ROOT].v[2]);
	}
	return KSFT_PASS;
}

/* the rounds measured of a size that passed, into @v; how many */
static int samples(int s, int si, int mode, int m, double *v)
{
	int r, n = 0;

	for (r = 0; size_ok[s][si] && r < rounds; r++)
		if (ms[s][si][mode][m][r] >= 0)
			v[n++] = ms[s][si][mode][m][r];
	return n;
}

/* the median of the reads of (store, size, mode, method); -1 when none */
static double median(int s, int si, int mode, int m)
{
	double v[MAX_ROUNDS];
	int n = samples(s, si, mode, m, v);
	struct stats st;

	if (!n)
		return -1;
	stats_of(v, n, &st);
	return st.median;
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
	size_ok[store][si] = ret == KSFT_PASS;	/* the medians: in $HARNESS_METRICS */
	measured = true;
	bpf_link__destroy(links[M_ROOT]);
	bpf_link__destroy(links[M_WALK]);
	free(nodes);
	num_nodes = 0;
	cg_destroy_all();
	return ret;
}

/* @a over @b, medians; -1 when one is missing */
static double ratio(double a, double b)
{
	return a >= 0 && b > 0 ? a / b : -1;
}

/* the median of the last size's reads over the first's */
static double growth(int s, int mode, int m)
{
	return ratio(median(s, num_sizes - 1, mode, m), median(s, 0, mode, m));
}

/*
 * Object @obj: "<mode>/<method>@<size>" -> the reads of store @s (a measurement
 * in ms; none: walk unsupported, or the size failed) or, for s == NUM_STORES,
 * the ratio of the medians, storage over maps (< 1: storage is faster)
 */
static void write_reads(const char *obj, int s)
{
	double v[MAX_ROUNDS];
	int si, mode, m;
	char key[64];

	metrics_obj(obj);
	for (si = 0; si < num_sizes; si++) {
		for (mode = 0; mode < NUM_MODES; mode++) {
			for (m = 0; m < NUM_METHODS; m++) {
				snprintf(key, sizeof(key), "%s/%s@%d", mode_name[mode],
					 method_name[m], sizes[si]);
				if (s == NUM_STORES)
					metrics_num(key, ratio(median(S_STORAGE, si, mode, m),
							       median(S_MAPS, si, mode, m)));
				else
					metrics_measure(key, v, samples(s, si, mode, m, v), "ms",
							"lower");
			}
		}
	}
	metrics_end();
}

/* sizes; reads (maps), reads_storage, storage_vs_maps (write_reads()); the summary */
static void write_metrics(void)
{
	int s = stores[S_MAPS] ? S_MAPS : S_STORAGE, last = num_sizes - 1, len;
	bool both = stores[S_MAPS] && stores[S_STORAGE];
	char summary[384];

	metrics_open();
	metrics_arr("sizes");
	for (len = 0; len < num_sizes; len++)
		metrics_int(NULL, sizes[len]);
	metrics_end();
	if (stores[S_MAPS])
		write_reads("reads", S_MAPS);
	if (stores[S_STORAGE])
		write_reads("reads_storage", S_STORAGE);
	if (both)
		write_reads("storage_vs_maps", NUM_STORES);
	len = snprintf(summary, sizeof(summary),
		       "%d->%d cgroups, growth of one read: few updated: rstat_root x%.1f, user_walk x%.1f; all updated: rstat_root x%.1f, user_walk x%.1f",
		       sizes[0], sizes[last], growth(s, U_FEW, M_ROOT), growth(s, U_FEW, M_USER),
		       growth(s, U_ALL, M_ROOT), growth(s, U_ALL, M_USER));
	if (both)
		snprintf(summary + len, sizeof(summary) - len,
			 "; storage/maps at %d: rstat_root few x%.2f, all x%.2f", sizes[last],
			 ratio(median(S_STORAGE, last, U_FEW, M_ROOT), median(S_MAPS, last, U_FEW, M_ROOT)),
			 ratio(median(S_STORAGE, last, U_ALL, M_ROOT), median(S_MAPS, last, U_ALL, M_ROOT)));
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
	/* a per-CPU map value has ncpus slots, a storage value RS_MAX_CPUS */
	vals = ncpus > 0 ? calloc(ncpus > RS_MAX_CPUS ? ncpus : RS_MAX_CPUS, sizeof(*vals)) : NULL;
	if (i != KSFT_PASS)
		return i;
	if (!scratch || !vals)
		return check_fail("needs $HARNESS_SCRATCH (a disk file system)");
	if (stores[S_STORAGE] && ncpus > RS_MAX_CPUS)
		return check_fail("%d CPUs: the storage value has slots for %d", ncpus, RS_MAX_CPUS);
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

/* the next store's objects, the previous store's gone: its sizes follow */
static int check_load_attach(void)
{
	int err;

	rstat_tree_bench_bpf__destroy(skel);
	while (!stores[++store])
		;
	next_size = 0;
	err = BU_LOAD_RSTAT_STORE(skel, rstat_tree_bench, NULL, store == S_STORAGE);
	return err ? check_fail("open/load/attach: %s", strerror(-err)) : KSFT_PASS;
}

/* --stores maps,storage: which to measure (maps always first); false on an unknown name */
static bool parse_stores(char *list)
{
	char *tok;
	int s;

	stores[S_MAPS] = false;
	for (tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		for (s = 0; s < NUM_STORES && strcmp(tok, store_name[s]); s++)
			;
		if (s == NUM_STORES)
			return false;
		stores[s] = true;
	}
	return stores[S_MAPS] || stores[S_STORAGE];
}

/*
 * test.toml's "--sizes N,N,... --rounds R [--stores maps,storage]" (N in
 * 2..4000, R in 1..MAX_ROUNDS)
 */
static bool parse_args(int argc, char **argv)
{
	char *tok;
	int n;

	if ((argc != 5 && argc != 7) || strcmp(argv[1], "--sizes") || strcmp(argv[3], "--rounds") ||
	    (argc == 7 && (strcmp(argv[5], "--stores") || !parse_stores(argv[6]))))
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
	/* per store: its load, then its sizes; the storage's names prefixed storage_ */
	static char names[NUM_STORES][1 + MAX_SIZES][48];
	struct check checks[1 + NUM_STORES * (1 + MAX_SIZES)] = {
		{ "environment", check_environment, NULL },
	};
	int s, si, n = 1, ret;

	if (!parse_args(argc, argv)) {
		fprintf(stderr, "usage: %s --sizes N,N,... --rounds R [--stores maps,storage]\n",
			argv[0]);
		return KSFT_FAIL;
	}
	for (s = 0; s < NUM_STORES; s++) {
		if (!stores[s])
			continue;
		snprintf(names[s][0], sizeof(names[s][0]), "%sbpf_load_attach",
			 s == S_STORAGE ? "storage_" : "");
		checks[n++] = (struct check){ names[s][0], check_load_attach, "environment" };
		for (si = 0; si < num_sizes; si++) {
			snprintf(names[s][1 + si], sizeof(names[s][1 + si]), "%stree_%d_methods_agree",
				 s == S_STORAGE ? "storage_" : "", sizes[si]);
			checks[n++] = (struct check){ names[s][1 + si], check_tree, names[s][0] };
		}
	}
	ret = checks_run(checks, n, NULL);
	if (measured)
		write_metrics();
	rstat_tree_bench_bpf__destroy(skel);
	on_signal();
	cg_cleanup();
	return ret;
}
