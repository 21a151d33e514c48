// SPDX-License-Identifier: GPL-2.0
/*
 * memcg_kfuncs_bench: the cost of reading every item memory.stat prints for 1,
 * 100, 1000 cgroups through memory.stat (opened once, pread per read, with and
 * without parsing) against the memcg kfuncs from a sleepable cgroup iterator
 * and a syscall program (6.2+), side by side in one run.  The items are
 * memory.stat's own keys, mapped to the kernel's enums through its BTF; a key
 * that maps to no counter fails the run.  Before measuring, every method must
 * agree with memory.stat for every cgroup and item (within what one flush may
 * fold in) and show the charged shmem exactly.  After measuring, a profiled
 * pass tells where a kfunc read's time goes: the iterator's create, read and
 * close, and inside the program get, flush, the kfunc reads and put.
 */
#include "selftest.h"
#include <ctype.h>
#include <math.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include "memcg_kfuncs_bench.h"
#include "memcg_kfuncs_bench.skel.h"

#define MAX_CONFIGS 8
#define MEMSTAT_BUF 16384
#define HOLDER_ANON (1024 * 1024)

#define MAX_KEYS 96
#define PROFILE_READS 1000

/* memory.stat's items, in its order: item[first .. first + count) sum to it */
static struct key {
	char name[48];
	size_t len;
	int first, count;
	bool count_unit;	/* a count (events, workingset, pgdemote...), not bytes */
	bool kib_unit;		/* kernel_stack: KiB */
} keys[MAX_KEYS];
static int nkeys, nitems, k_anon = -1, k_shmem = -1, k_pgfault = -1;
static bool unmapped;	/* memory.stat's items could not be mapped: nothing to measure */

/* memory.stat keys whose counter is not NR_<KEY> or <KEY> (mm/memcontrol.c's
 * memory_stats[] and vm_event_name()); a sum where the kernel prints one, or the names a
 * counter had in different kernels (vmalloc: MEMCG_VMALLOC up to 7.1, NR_VMALLOC from 7.2);
 * an item a kernel lacks is skipped (PGSCAN_PROACTIVE is in 7.2's sum, not 6.12's) */
static const struct {
	const char *key, *items[4];
} named[] = {
	{ "anon", { "NR_ANON_MAPPED" } }, { "file", { "NR_FILE_PAGES" } },
	{ "kernel", { "MEMCG_KMEM" } }, { "kernel_stack", { "NR_KERNEL_STACK_KB" } },
	{ "pagetables", { "NR_PAGETABLE" } },
	{ "sec_pagetables", { "NR_SECONDARY_PAGETABLE" } },
	{ "percpu", { "MEMCG_PERCPU_B" } }, { "sock", { "MEMCG_SOCK" } },
	{ "vmalloc", { "MEMCG_VMALLOC", "NR_VMALLOC" } }, { "zswap", { "MEMCG_ZSWAP_B" } },
	{ "zswapped", { "MEMCG_ZSWAPPED" } }, { "file_writeback", { "NR_WRITEBACK" } },
	{ "swapcached", { "NR_SWAPCACHE" } }, { "anon_thp", { "NR_ANON_THPS" } },
	{ "file_thp", { "NR_FILE_THPS" } }, { "shmem_thp", { "NR_SHMEM_THPS" } },
	{ "slab_reclaimable", { "NR_SLAB_RECLAIMABLE_B" } },
	{ "slab_unreclaimable", { "NR_SLAB_UNRECLAIMABLE_B" } },
	{ "slab", { "NR_SLAB_RECLAIMABLE_B", "NR_SLAB_UNRECLAIMABLE_B" } },
	{ "pgscan", { "PGSCAN_KSWAPD", "PGSCAN_DIRECT", "PGSCAN_KHUGEPAGED",
		      "PGSCAN_PROACTIVE" } },
	{ "pgsteal", { "PGSTEAL_KSWAPD", "PGSTEAL_DIRECT", "PGSTEAL_KHUGEPAGED",
		       "PGSTEAL_PROACTIVE" } },
	{ "numa_pages_migrated", { "NUMA_PAGE_MIGRATE" } },
};

enum method { M_READ, M_PARSE, M_ITER_SELF, M_ITER_TREE, M_SYSCALL, NR_METHODS };
/* each method's metrics name and what it does */
static const struct {
	const char *name, *desc;
} method[NR_METHODS] = {
	{ "memstat_read", "memory.stat pread, no parsing" },
	{ "memstat_parse", "memory.stat pread + parse every item" },
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
	__s64 *vals;			/* n x MAX_KEYS, as memory.stat shows them */
	struct mb_rec *recs;
	struct meas m[NR_METHODS];
	/* the profiled pass, us per read: iterator create, read, close; BPF_PROG_RUN;
	 * inside the program (iterator) get, flush, the kfunc reads, put */
	double p_create, p_read, p_close, p_run, p_get, p_flush, p_kfuncs, p_put;
	bool profiled;
};

static struct memcg_kfuncs_bench_bpf *skel;
static struct config configs[MAX_CONFIGS], *cur;
static int nconfigs, reads_n = 2000;
static bool use_sscanf, with_syscall;
static char tmpfs[64] = "/tmp/memcg_kfuncs_bench.XXXXXX";
static char membuf[MEMSTAT_BUF], page_data[8 * 4096];
static long page_size;
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

static bool key_is(const struct key *k, const char *p, size_t len)
{
	return k->len == len && !memcmp(p, k->name, len);
}

/* memory.stat -> vals; the number of its items found.  Its lines come in the
 * order of keys[]: each is tried at its place first, then by search. */
static int parse(char *buf, size_t len, __s64 *vals)
{
	const char *p = buf, *end = buf + len, *sp, *nl;
	char key[64];
	long long v;
	int f, line, found = 0;

	for (line = 0; p < end && (sp = memchr(p, ' ', end - p)); p = nl + 1, line++) {
		nl = memchr(sp, '\n', end - sp) ?: end;
		if (use_sscanf) {	/* the naive way: sscanf and strcmp per key */
			if (sscanf(p, "%63s %lld", key, &v) != 2)
				continue;
			for (f = 0; f < nkeys && strcmp(key, keys[f].name); f++)
				;
		} else {		/* split, compare in place, strtoll */
			f = line;
			if (f >= nkeys || !key_is(&keys[f], p, sp - p))
				for (f = 0; f < nkeys && !key_is(&keys[f], p, sp - p); f++)
					;
			if (f < nkeys)
				v = strtoll(sp + 1, NULL, 10);
		}
		if (f < nkeys) {
			vals[f] = v;
			found++;
		}
	}
	return found;
}

/* memory.stat's items: the enumerator of each key (or of its sum) in the
 * kernel's BTF, into the programs' item list */
static int map_items(const char *stat, size_t len)
{
	static const char *const page_enums[] = { "node_stat_item", "memcg_stat_item" };
	const char *p = stat, *end = stat + len, *sp, *nl;
	char upper[64], nr[72], memcg[72];
	const char *const *want;
	const char *one[4] = {};
	long long v;
	int i, j, e;

	for (; p < end && (sp = memchr(p, ' ', end - p)); p = nl + 1) {
		struct key *k = &keys[nkeys];

		nl = memchr(sp, '\n', end - sp) ?: end;
		if (nkeys == MAX_KEYS || sp - p >= (long)sizeof(k->name))
			return check_fail("memory.stat: more than %d items, or a long key",
					  MAX_KEYS);
		memcpy(k->name, p, sp - p);
		k->name[sp - p] = '\0';
		k->len = sp - p;
		k->first = nitems;
		for (i = 0; k->name[i]; i++)
			upper[i] = toupper((unsigned char)k->name[i]);
		upper[i] = '\0';
		snprintf(nr, sizeof(nr), "NR_%s", upper);
		snprintf(memcg, sizeof(memcg), "MEMCG_%s", upper);
		want = NULL;
		for (i = 0; i < (int)ARRAY_SIZE(named) && !want; i++)
			if (!strcmp(named[i].key, k->name))
				want = named[i].items;
		/* NR_<KEY>, MEMCG_<KEY> (7.2's zswap_incomp) or <KEY> as a page state, else
		 * <KEY> as an event */
		for (e = 0; e < 3 && !k->count; e++) {
			one[0] = e == 0 ? nr : upper;
			one[1] = e == 0 ? memcg : NULL;
			for (j = 0; j < 4 && (want ? want[j] : one[j]); j++) {
				const char *name = want ? want[j] : one[j];

				if (e < 2) {
					v = bu_enum_value(page_enums[0], name);
					if (v < 0)
						v = bu_enum_value(page_enums[1], name);
				} else {
					v = bu_enum_value("vm_event_item", name);
				}
				if (v < 0)
					continue;
				if (nitems == MB_MAX_ITEMS)
					return check_fail("memory.stat: more counters than the %d a record holds",
							  MB_MAX_ITEMS);
				skel->bss->kind[nitems] = e < 2 ? MB_PAGE_STATE : MB_VM_EVENTS;
				skel->bss->item[nitems++] = v;
				k->count++;
				/* memory.stat prints bytes for most page states; these are counts
				 * (7.2 keeps pgscan and pgsteal as node states, printed as counts) */
				k->count_unit = e == 2 || !strncmp(name, "WORKINGSET_", 11) ||
						!strncmp(name, "PGDEMOTE_", 9) ||
						!strncmp(name, "PGPROMOTE_", 10) ||
						!strncmp(name, "PGSCAN_", 7) ||
						!strncmp(name, "PGSTEAL_", 8);
				k->kib_unit = !strcmp(name, "NR_KERNEL_STACK_KB");
			}
		}
		if (!k->count)
			return check_fail("memory.stat item %s: no counter of that name in the "
					  "kernel's BTF (a kfunc cannot read it)", k->name);
		nkeys++;
	}
	skel->bss->nitems = nitems;
	for (i = 0; i < nkeys; i++) {
		if (!strcmp(keys[i].name, "anon"))
			k_anon = i;
		else if (!strcmp(keys[i].name, "shmem"))
			k_shmem = i;
		else if (!strcmp(keys[i].name, "pgfault"))
			k_pgfault = i;
	}
	if (k_anon < 0 || k_shmem < 0 || k_pgfault < 0)
		return check_fail("memory.stat has no anon, shmem or pgfault");
	ksft_print_msg("memory.stat prints %d items; the programs read them with %d kfunc calls\n",
		       nkeys, nitems);
	return KSFT_PASS;
}

/* a record's value of memory.stat item f (the sum of its counters) */
static __s64 rec_val(const struct mb_rec *r, int f)
{
	__s64 sum = 0;
	int i;

	for (i = keys[f].first; i < keys[f].first + keys[f].count; i++) {
		if (r->val[i] < 0)
			return r->val[i];
		sum += r->val[i];
	}
	return sum;
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
			if (m == M_PARSE &&
			    parse(membuf, n, c->vals + (size_t)i * MAX_KEYS) != nkeys)
				return !check_fail("%s/memory.stat: items missing", c->cg[i].path);
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
	if (unmapped)
		return check_fail("memory.stat's items were not mapped (see the first setup)");
	if (!nkeys) {	/* the items memory.stat prints: the same for every cgroup */
		ssize_t n = cg_read(c->cg[0].path, "memory.stat", membuf, sizeof(membuf));

		err = n > 0 ? map_items(membuf, n) :
			      check_fail("%s/memory.stat: %zd", c->cg[0].path, n);
		if (err) {
			unmapped = true;
			nkeys = nitems = 0;
			return err;
		}
	}
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
		for (i = 0; i < c->n; i++) {
			const __s64 *v = c->vals + (size_t)i * MAX_KEYS;

			if (v[k_shmem] != (__s64)file_pages(i) * page_size ||
			    v[k_pgfault] < anon_pages(i) || (!i && v[k_anon] < HOLDER_ANON))
				break;
		}
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
		const __s64 *ms = c->vals + (size_t)i * MAX_KEYS;

		for (m = M_ITER_SELF; m < NR_METHODS; m++) {
			const struct mb_rec *r = &kf[(size_t)i * NR_METHODS + m];

			if (m == M_SYSCALL && !with_syscall)
				continue;
			expect(&ok, rec_val(r, k_shmem) == (__s64)file_pages(i) * page_size,
			       "%s %s: shmem %lld, charged %lld", c->cg[i].path, method[m].name,
			       (long long)rec_val(r, k_shmem),
			       (long long)file_pages(i) * page_size);
			for (f = 0; f < nkeys; f++) {
				/* tol_units pages, in the item's unit */
				long long tol = keys[f].count_unit ? tol_units :
						keys[f].kib_unit ? tol_units * page_size / 1024 :
						tol_units * page_size;
				long long d = rec_val(r, f) - ms[f];

				compared++;
				exact += !d;
				expect(&ok, rec_val(r, f) >= 0 && llabs(d) <= tol,
				       "%s %s: %s %lld, memory.stat %lld (tolerance %lld)",
				       c->cg[i].path, method[m].name, keys[f].name,
				       (long long)rec_val(r, f), (long long)ms[f], tol);
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

/* time in us per read of one part, summed in ns over reads */
static double per_read(unsigned long long ns, int reads)
{
	return reads ? ns / 1e3 / reads : NAN;
}

/*
 * Where a kfunc read's time goes, in a pass of its own after the timed rounds
 * (its clock reads would slow them): the iterator route's create, read and
 * close from here, and inside the program (both routes) get, flush, the kfunc
 * reads and put from bpf_ktime_get_ns().
 */
static bool profile(struct config *c)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	unsigned long long t0, t1, t2, create = 0, rd = 0, cl = 0, run = 0;
	int rounds = PROFILE_READS / c->n > 0 ? PROFILE_READS / c->n : 1, r, i, fd;
	struct mb_prof *p = &skel->bss->prof;

	skel->bss->mode = MB_MODE_SEQ;
	memset(p, 0, sizeof(*p));
	skel->bss->profile = 1;
	for (r = 0; r < rounds; r++) {
		for (i = 0; i < c->n; i++) {
			t0 = now_ns();
			fd = bpf_iter_create(bpf_link__fd(c->link[i]));
			t1 = now_ns();
			if (fd < 0 || read(fd, &c->recs[i], sizeof(c->recs[i])) !=
				      sizeof(c->recs[i])) {
				if (fd >= 0)
					close(fd);
				skel->bss->profile = 0;
				return !check_fail("iterator on %s: no record", c->cg[i].path);
			}
			t2 = now_ns();
			close(fd);
			create += t1 - t0;
			rd += t2 - t1;
			cl += now_ns() - t2;
		}
	}
	c->p_create = per_read(create, rounds * c->n);
	c->p_read = per_read(rd, rounds * c->n);
	c->p_close = per_read(cl, rounds * c->n);
	c->p_get = per_read(p->get_ns, p->runs);
	c->p_flush = per_read(p->flush_ns, p->runs);
	c->p_kfuncs = per_read(p->read_ns, p->runs);
	c->p_put = per_read(p->put_ns, p->runs);
	for (r = 0; with_syscall && r < rounds; r++) {
		for (i = 0; i < c->n; i++) {
			skel->bss->sys_id = c->cg[i].id;
			t0 = now_ns();
			if (bpf_prog_test_run_opts(
				    bpf_program__fd(skel->progs.memcg_bench_syscall), &opts)) {
				skel->bss->profile = 0;
				return !check_fail("BPF_PROG_RUN: %s", strerror(errno));
			}
			run += now_ns() - t0;
		}
	}
	skel->bss->profile = 0;
	c->p_run = with_syscall ? per_read(run, rounds * c->n) : NAN;
	c->profiled = true;
	ksft_print_msg("profile %d cgroups, us per read: iter_self = create %.2f + read %.2f + close %.2f; syscall_run = BPF_PROG_RUN %.2f; in the program: get %.2f, flush %.2f, %d kfunc reads %.2f (%.3f each), put %.2f\n",
		       c->n, c->p_create, c->p_read, c->p_close, c->p_run, c->p_get, c->p_flush,
		       nitems, c->p_kfuncs, c->p_kfuncs / nitems, c->p_put);
	return true;
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
	return ok && profile(c) ? KSFT_PASS : KSFT_FAIL;
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
			if (!cpu && p != 1 && x == x)
				snprintf(summary + strlen(summary), len - strlen(summary),
					 " %s %.1fx;", key, x);
		}
	}
	metrics_end();
}

static void write_metrics(void)
{
	char summary[1024], key[64];
	struct utsname u;
	int k, m;

	snprintf(summary, sizeof(summary),
		 "elapsed, memory.stat (read only; read + %s parse) vs kfuncs, %d items:",
		 use_sscanf ? "sscanf" : "fast", nkeys);
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
	metrics_int("items", nkeys);
	metrics_int("kfunc_calls_per_read", nitems);
	metrics_obj("profile_us_per_read");
	for (k = 0; k < nconfigs; k++) {
		const struct config *c = &configs[k];

		if (!c->profiled)
			continue;
		snprintf(key, sizeof(key), "%d", c->n);
		metrics_obj(key);
		metrics_num("iter_create", c->p_create);
		metrics_num("iter_read", c->p_read);
		metrics_num("iter_close", c->p_close);
		metrics_num("syscall_prog_run", c->p_run);
		metrics_num("prog_get", c->p_get);
		metrics_num("prog_flush", c->p_flush);
		metrics_num("prog_kfunc_reads", c->p_kfuncs);
		metrics_num("prog_put", c->p_put);
		metrics_end();
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
		c->vals = calloc((size_t)c->n * MAX_KEYS, sizeof(*c->vals));
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
	if (!mkdtemp(tmpfs) || mount("tmpfs", tmpfs, "tmpfs", 0, "size=512m,mode=0700"))
		ksft_exit_fail_msg("tmpfs at %s: %s\n", tmpfs, strerror(errno));
	cg_on_signal(on_signal);
	ret = checks_run(checks, n, NULL);
	write_metrics();
	return ret;
}
