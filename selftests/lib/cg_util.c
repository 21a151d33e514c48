// SPDX-License-Identifier: GPL-2.0
/* cgroup v2 helpers (see cg_util.h). */
#include "selftest.h"
#include <mntent.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>

static char root[CG_PATH_MAX];
static char own_mount[CG_PATH_MAX];	/* set when we mounted cgroup2 */
static char root_enabled[64];		/* "-memory" when we enabled +memory there */
static char **made;			/* cg_create()d, in creation order */
static int n_made;
static void (*signal_fn)(void);

static void on_signal(int sig)
{
	(void)sig;
	if (signal_fn)
		signal_fn();
	cg_cleanup();
	_exit(KSFT_FAIL);
}

void cg_on_signal(void (*fn)(void))
{
	signal_fn = fn;
}

static bool find_mount(void)
{
	struct mntent *ent;
	FILE *f = setmntent("/proc/self/mounts", "r");

	if (!f)
		return false;
	while ((ent = getmntent(f))) {
		if (!strcmp(ent->mnt_type, "cgroup2") && !hasmntopt(ent, "ro")) {
			snprintf(root, sizeof(root), "%s", ent->mnt_dir);
			break;
		}
	}
	endmntent(f);
	return root[0];
}

/* nothing mounted: /sys/fs/cgroup if it is free, else a fresh directory */
static int mount_own(void)
{
	snprintf(own_mount, sizeof(own_mount), "/sys/fs/cgroup");
	if (mount("cgroup2", own_mount, "cgroup2", 0, NULL)) {
		snprintf(own_mount, sizeof(own_mount), "/tmp/cgroup2.XXXXXX");
		if (!mkdtemp(own_mount) || mount("cgroup2", own_mount, "cgroup2", 0, NULL)) {
			int err = errno;

			ksft_print_msg("no cgroup2 mount, and mounting one at %s failed: %s\n",
				       own_mount, strerror(err));
			own_mount[0] = '\0';
			return err == ENODEV || err == EPERM || err == EACCES ? KSFT_SKIP : KSFT_FAIL;
		}
	}
	ksft_print_msg("no cgroup2 mount found; mounted one at %s\n", own_mount);
	snprintf(root, sizeof(root), "%s", own_mount);
	return KSFT_PASS;
}

#define SUBTREE "cgroup.subtree_control"	/* "+memory" enables, "-memory" disables */

bool cg_has_word(const char *cg, const char *file, const char *word)
{
	char buf[1024], *tok, *save;

	if (cg_read(cg, file, buf, sizeof(buf)) < 0)
		return false;
	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strcmp(tok, word))
			return true;
	return false;
}

int cg_find_root(const char **out, const char *controller)
{
	struct sigaction sa = { .sa_handler = on_signal };
	char change[64];
	int err;

	*out = NULL;
	if (!root[0] && !find_mount() && (err = mount_own()))
		return err == KSFT_SKIP ? check_skip("no cgroup2 here") : KSFT_FAIL;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (controller && !cg_has_word(root, "cgroup.controllers", controller))
		return check_skip("no %s controller in %s", controller, root);
	if (controller && !cg_has_word(root, SUBTREE, controller)) {
		snprintf(change, sizeof(change), "+%s", controller);
		err = cg_write(root, SUBTREE, change);
		if (err)
			return check_fail("enabling %s in %s: %s", change, root, strerror(-err));
		snprintf(root_enabled, sizeof(root_enabled), "-%s", controller);
	}
	*out = root;
	return KSFT_PASS;
}

int cg_cleanup(void)
{
	int failed = cg_destroy_all();

	if (root_enabled[0] && !failed)	/* best effort: as cg_find_root() found it */
		cg_write(root, SUBTREE, root_enabled);
	if (own_mount[0] && !failed && !umount2(own_mount, MNT_DETACH))
		own_mount[0] = root[0] = '\0';
	return failed;
}

int cg_create(const char *cg)
{
	char **m = realloc(made, (n_made + 1) * sizeof(*made));

	if (!m)
		return -ENOMEM;
	made = m;
	if (mkdir(cg, 0755))
		return -errno;
	made[n_made] = strdup(cg);
	return made[n_made++] ? 0 : -ENOMEM;
}

int cg_destroy(const char *cg)
{
	int tries, i;

	cg_write(cg, "cgroup.kill", "1");
	/* 10 s: a killed task leaves its cgroup only once it is reaped */
	for (tries = 0; rmdir(cg) && errno != ENOENT; tries++) {
		if (errno != EBUSY || tries == 500)
			return -errno;
		usleep(20000);
	}
	for (i = 0; i < n_made; i++) {
		if (made[i] && !strcmp(made[i], cg)) {
			free(made[i]);
			made[i] = NULL;
		}
	}
	return 0;
}

/*
 * Before a cgroup of ours is removed at the end, what it and its removed children
 * still hold is reclaimed (best effort: memory.reclaim needs 5.19 and the memory
 * controller): page cache left charged to a removed cgroup keeps it dying, and the
 * root's usage then holds pages no live cgroup shows, for every later test of the
 * boot.  Its tasks are killed and gone first, or their pages would be swapped.
 */
static void reclaim_all(const char *cg)
{
	int tries;

	cg_write(cg, "cgroup.kill", "1");
	for (tries = 0; tries < 500 && cg_read_key(cg, "cgroup.events", "populated") > 0; tries++)
		usleep(20000);
	cg_write(cg, "memory.reclaim", "4G");
}

int cg_destroy_all(void)
{
	int i, err, failed = 0;

	for (i = n_made - 1; i >= 0; i--) {
		if (!made[i])
			continue;
		reclaim_all(made[i]);
		err = cg_destroy(made[i]);
		if (err && !failed++)
			ksft_print_msg("rmdir %s: %s\n", made[i], strerror(-err));
	}
	if (!failed)
		n_made = 0;
	return failed;
}

int cg_open(const char *cg, const char *file, int flags)
{
	char path[CG_PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", cg, file);
	return open(path, flags | O_CLOEXEC);
}

int cg_write(const char *cg, const char *file, const char *val)
{
	ssize_t len = strlen(val), n;
	int fd = cg_open(cg, file, O_WRONLY), err = 0;

	if (fd < 0)
		return -errno;
	n = write(fd, val, len);
	if (n != len)
		err = n < 0 ? -errno : -EIO;
	close(fd);
	return err;
}

int cg_read(const char *cg, const char *file, char *buf, size_t len)
{
	ssize_t n = read_close(cg_open(cg, file, O_RDONLY), buf, len - 1);

	buf[n > 0 ? n : 0] = '\0';
	return n;
}

long long key_value(const char *text, const char *key)
{
	size_t kl = strlen(key);
	const char *p;

	for (p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoll(p + kl + 1, NULL, 10);
	return -1;
}

long long cg_read_key(const char *cg, const char *file, const char *key)
{
	char buf[16384];

	if (cg_read(cg, file, buf, sizeof(buf)) < 0)
		return -1;
	return key_value(buf, key);
}

long long cg_read_long(const char *cg, const char *file)
{
	char buf[64];

	if (cg_read(cg, file, buf, sizeof(buf)) <= 0)
		return -1;
	return strtoll(buf, NULL, 10);
}

unsigned long long cg_id(const char *cg)
{
	struct stat st;

	return stat(cg, &st) ? 0 : st.st_ino;
}

int cg_tree_create(const char *root, const char *name, struct cg_node *nodes, int n)
{
	char top[CG_PATH_MAX - sizeof(nodes->rel)];	/* room for "/<rel>" */
	int i, err;

	snprintf(top, sizeof(top), "%s/%s.%d", root, name, (int)getpid());
	for (i = 0; i < n; i++) {
		snprintf(nodes[i].path, CG_PATH_MAX, "%s/%s", top, nodes[i].rel);
		if (!i)	/* the test's cgroup: its rel only a name */
			nodes[i].path[strlen(top)] = '\0';
		err = cg_create(nodes[i].path);
		nodes[i].id = err ? 0 : cg_id(nodes[i].path);
		if (!err && nodes[i].enable)
			err = cg_write(nodes[i].path, SUBTREE, nodes[i].enable);
		if (err || !nodes[i].id)
			return check_fail("creating %s: %s", nodes[i].path,
					  strerror(err ? -err : errno));
	}
	return KSFT_PASS;
}

int cg_tree_find(const struct cg_node *nodes, int n, unsigned long long id)
{
	int i;

	for (i = 0; i < n; i++)
		if (nodes[i].id == id)
			return i;
	return -1;
}

bool cg_tree_under(const struct cg_node *nodes, int i, int anc)
{
	for (; i >= 0; i = nodes[i].parent)
		if (i == anc)
			return true;
	return false;
}

int cg_enter(const char *cg, pid_t pid)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%d", pid ? pid : getpid());
	return cg_write(cg, "cgroup.procs", buf);
}

pid_t cg_spawn(const char *cg, int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		n_made = 0;	/* the parent cleans up, not the child */
		if (cg_enter(cg, 0))
			_exit(125);
		while (!fn)
			pause();
		_exit(fn(arg));
	}
	return pid;
}

int cg_wait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int cg_run(const char *cg, int (*fn)(void *), void *arg)
{
	pid_t pid = cg_spawn(cg, fn, arg);

	return pid < 0 ? pid : cg_wait(pid);
}

void cg_reap(volatile pid_t *pid)
{
	if (*pid > 0 && !kill(*pid, SIGKILL))
		waitpid(*pid, NULL, 0);
	*pid = -1;
}

char *cg_alloc_anon(long long bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long long off;

	if (p == MAP_FAILED)
		return NULL;
	for (off = 0; off < bytes; off += page)
		p[off] = (char)(off / page + 1);
	return p;
}

int cg_v1_make(struct cg_v1 *v, const char *name)
{
	char opts[96];

	v->fd = -1;
	v->dir[0] = '\0';
	snprintf(v->mnt, sizeof(v->mnt), "/tmp/%s.XXXXXX", name);
	if (!mkdtemp(v->mnt)) {
		v->mnt[0] = '\0';
		return check_fail("mkdtemp: %s", strerror(errno));
	}
	snprintf(opts, sizeof(opts), "none,name=%s", name);
	if (mount("none", v->mnt, "cgroup", 0, opts)) {
		int err = errno;

		rmdir(v->mnt);
		v->mnt[0] = '\0';
		return check_skip("no cgroup v1 hierarchy to mount here: %s", strerror(err));
	}
	snprintf(v->dir, sizeof(v->dir), "%s/t", v->mnt);
	if (mkdir(v->dir, 0755) || (v->fd = open(v->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return check_fail("%s: %s", v->dir, strerror(errno));
	return KSFT_PASS;
}

void cg_v1_remove(struct cg_v1 *v)
{
	if (v->fd >= 0)
		close(v->fd);
	v->fd = -1;
	if (v->dir[0])
		rmdir(v->dir);
	if (v->mnt[0]) {
		umount2(v->mnt, MNT_DETACH);
		rmdir(v->mnt);
	}
	v->mnt[0] = v->dir[0] = '\0';
}
