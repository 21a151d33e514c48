/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cgroup v2 helpers for the selftests, in the spirit of the kernel's
 * tools/testing/selftests/cgroup/cgroup_util.h.  Every cgroup made with
 * cg_tree_create() is remembered and removed by cg_cleanup(), which a SIGINT,
 * SIGTERM or SIGHUP also runs (once cg_find_root() ran): a test stopped by the
 * harness's timeout leaves no cgroup behind.
 */
#ifndef SELFTESTS_LIB_CG_UTIL_H
#define SELFTESTS_LIB_CG_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CG_PATH_MAX 512

/*
 * A check's verdict: KSFT_PASS with *@root the cgroup2 mount (mounted at
 * /sys/fs/cgroup, or a temporary directory, when none is), KSFT_SKIP when
 * this system has no cgroup2 or no @controller (NULL: none needed), else
 * KSFT_FAIL; the reason printed.  @controller is enabled in the root's
 * subtree_control if it is not yet; cg_cleanup() undoes what this did.
 */
int cg_find_root(const char **root, const char *controller);

/* cg_destroy_all(), then the root as cg_find_root() found it; the number of
 * cgroups that could not be removed */
int cg_cleanup(void);

/* mkdir @cg, remembered for cg_destroy_all() (a cgroup a check makes for itself
 * below the tree); 0 or -errno */
int cg_create(const char *cg);
/* kill what runs in @cg (cgroup.kill) and rmdir it, retrying while it is busy
 * (a task just killed leaves late); 0 or -errno */
int cg_destroy(const char *cg);
/* cg_destroy() of every cgroup cg_tree_create() made, leaves first, each once
 * its tasks are gone and what it held is reclaimed; the number that could not be
 * removed (the first reported) */
int cg_destroy_all(void);
/* also call @fn (async-signal-safe) on SIGINT/SIGTERM/SIGHUP, before the cgroups go */
void cg_on_signal(void (*fn)(void));

int cg_open(const char *cg, const char *file, int flags);
/* 0 or -errno; a short write is -EIO */
int cg_write(const char *cg, const char *file, const char *val);
/* bytes read (NUL-terminated), or -errno */
int cg_read(const char *cg, const char *file, char *buf, size_t len);
/* the value of "key value" lines (memory.stat, cgroup.stat, memory.events),
 * or -1 when the file or key is missing; key_value() of text already read */
long long cg_read_key(const char *cg, const char *file, const char *key);
long long key_value(const char *text, const char *key);
/* a single number (memory.current), or -1 */
long long cg_read_long(const char *cg, const char *file);

/* is @word one of the space-separated words of @cg's @file (cgroup.controllers,
 * cgroup.subtree_control) */
bool cg_has_word(const char *cg, const char *file, const char *word);

/*
 * A named cgroup v1 hierarchy of @name (no controller) mounted at a fresh directory
 * under /tmp, with one cgroup "t" in it, open: a check's verdict (KSFT_SKIP where no
 * v1 hierarchy can be mounted); cg_v1_remove() undoes it, whatever was made.
 */
struct cg_v1 {
	char mnt[64];
	char dir[80];	/* mnt/t */
	int fd;		/* dir's, or -1 */
};
int cg_v1_make(struct cg_v1 *v, const char *name);
void cg_v1_remove(struct cg_v1 *v);

/* the cgroup's id as BPF sees it (its inode number), 0 on error */
unsigned long long cg_id(const char *cg);

/*
 * A test's cgroup tree, parents before children: the first node is
 * <root>/<name>.<pid> (its rel only a name for messages), the others
 * <root>/<name>.<pid>/<rel>.
 */
struct cg_node {
	char rel[32];		/* below the test's cgroup */
	int parent;		/* its parent's node; -1 for the first */
	const char *enable;	/* for its cgroup.subtree_control ("+memory"), or NULL */
	char path[CG_PATH_MAX];	/* set by cg_tree_create() */
	unsigned long long id;	/* cg_id(path); 0 while it is not made */
};

/* mkdir every node and enable its controllers, setting path and id; a check's verdict */
int cg_tree_create(const char *root, const char *name, struct cg_node *nodes, int n);
/* the node of the cgroup with id @id, or -1 */
int cg_tree_find(const struct cg_node *nodes, int n, unsigned long long id);
/* is node @i node @anc or below it */
bool cg_tree_under(const struct cg_node *nodes, int i, int anc);

/* move @pid (0: the caller) into @cg */
int cg_enter(const char *cg, pid_t pid);

/*
 * fork a child that enters @cg and returns fn(arg) as its exit status (@fn NULL:
 * sleeps until killed); the child's pid, or -errno.  cg_wait(): a child's exit
 * status, -1 if it did not exit; cg_run(): both.
 */
pid_t cg_spawn(const char *cg, int (*fn)(void *), void *arg);
int cg_wait(pid_t pid);
int cg_run(const char *cg, int (*fn)(void *), void *arg);
/* SIGKILL to the child *@pid (if > 0), reaped; *@pid = -1.  Async-signal-safe. */
void cg_reap(volatile pid_t *pid);

/* touch @bytes of fresh anonymous memory (charged to the caller's cgroup);
 * the mapping, or NULL */
char *cg_alloc_anon(long long bytes);

#endif /* SELFTESTS_LIB_CG_UTIL_H */
