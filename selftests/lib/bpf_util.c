// SPDX-License-Identifier: GPL-2.0
/* libbpf helpers (see bpf_util.h). */
#include "selftest.h"
#include <stdarg.h>
#include <bpf/btf.h>

static char log_buf[32768];
static size_t log_len;

/* @msg's last bytes after what is kept: the oldest go first, and a message longer than half
 * the buffer keeps its end (a verifier's log, one message, says why at its end) */
static void keep(const char *msg, size_t n)
{
	const size_t cap = sizeof(log_buf) - 1;

	if (n > cap / 2) {
		msg += n - cap / 2;
		n = cap / 2;
	}
	if (log_len + n > cap) {
		size_t drop = log_len + n - cap;

		memmove(log_buf, log_buf + drop, log_len - drop);
		log_len -= drop;
	}
	memcpy(log_buf + log_len, msg, n);
	log_len += n;
	log_buf[log_len] = '\0';
}

static int capture(enum libbpf_print_level level, const char *fmt, va_list args)
{
	va_list again;
	char *msg;
	int n;

	if (level == LIBBPF_DEBUG && !getenv("BPF_UTIL_DEBUG"))
		return 0;
	va_copy(again, args);
	n = vsnprintf(NULL, 0, fmt, again);
	va_end(again);
	msg = n > 0 ? malloc(n + 1) : NULL;
	if (msg && vsnprintf(msg, n + 1, fmt, args) == n)
		keep(msg, n);
	free(msg);
	return 0;
}

/* every program linking this file: no test has to remember it */
__attribute__((constructor)) static void capture_log(void)
{
	libbpf_set_print(capture);
}

void bu_log_reset(void)
{
	log_len = 0;
	log_buf[0] = '\0';
}

void bu_print_log(void)
{
	print_block("libbpf: ", log_buf);
}

static struct btf *vmlinux_btf(void)
{
	static struct btf *btf;

	if (!btf)
		btf = btf__load_vmlinux_btf();
	return btf;
}

bool bu_has_func(const char *name)
{
	struct btf *btf = vmlinux_btf();

	return btf && btf__find_by_name_kind(btf, name, BTF_KIND_FUNC) >= 0;
}

long long bu_enum_value(const char *type, const char *name)
{
	struct btf *btf = vmlinux_btf();
	int id = btf ? btf__find_by_name_kind(btf, type, BTF_KIND_ENUM) : -1;
	const struct btf_type *t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	const struct btf_enum *e = t ? btf_enum(t) : NULL;
	int i;

	for (i = 0; e && i < btf_vlen(t); i++, e++)
		if (!strcmp(btf__name_by_offset(btf, e->name_off), name))
			return e->val;
	return -1;
}

long long bu_struct_size(const char *type)
{
	struct btf *btf = vmlinux_btf();
	int id = btf ? btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT) : -1;

	return id > 0 ? (long long)btf__type_by_id(btf, id)->size : -1;
}

const char *bu_member_type_name(const char *type, const char *name)
{
	struct btf *btf = vmlinux_btf();
	int id = btf ? btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT) : -1;
	const struct btf_type *t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	const struct btf_member *m = t ? btf_members(t) : NULL;
	const struct btf_type *mt;
	int i;

	for (i = 0; m && i < btf_vlen(t); i++, m++) {
		if (strcmp(btf__name_by_offset(btf, m->name_off), name))
			continue;
		mt = btf__type_by_id(btf, m->type);
		while (mt && btf_is_mod(mt))
			mt = btf__type_by_id(btf, mt->type);
		return mt ? btf__name_by_offset(btf, mt->name_off) : NULL;
	}
	return NULL;
}

int bu_enum_names(const char *type, const char **names, long long *vals, int max)
{
	struct btf *btf = vmlinux_btf();
	int id = btf ? btf__find_by_name_kind(btf, type, BTF_KIND_ENUM) : -1;
	const struct btf_type *t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	const struct btf_enum *e = t ? btf_enum(t) : NULL;
	int i;

	if (!t)
		return -1;
	for (i = 0; i < btf_vlen(t) && i < max; i++, e++) {
		names[i] = btf__name_by_offset(btf, e->name_off);
		vals[i] = e->val;
	}
	return btf_vlen(t);
}

/* the type @id resolves to through typedefs and qualifiers */
static const struct btf_type *resolved(const struct btf *btf, __u32 id)
{
	const struct btf_type *t = btf__type_by_id(btf, id);

	while (t && (btf_is_typedef(t) || btf_is_mod(t)))
		t = btf__type_by_id(btf, t->type);
	return t;
}

/* the member @name of the struct or union @t, looked for inside its anonymous members too */
static const struct btf_type *member(const struct btf *btf, const struct btf_type *t,
				     const char *name)
{
	const struct btf_member *m = btf_members(t);
	const struct btf_type *mt, *found;
	int i;

	for (i = 0; i < btf_vlen(t); i++, m++) {
		const char *mn = btf__name_by_offset(btf, m->name_off);

		mt = resolved(btf, m->type);
		if (mn && *mn && !strcmp(mn, name))
			return mt;
		if ((!mn || !*mn) && mt && btf_is_composite(mt) && (found = member(btf, mt, name)))
			return found;
	}
	return NULL;
}

/* the names of @t's members (anonymous ones flattened) after @n of @max, prefixed */
static int list_members(const struct btf *btf, const struct btf_type *t, const char *prefix,
			char (*names)[64], int n, int max)
{
	const struct btf_member *m = btf_members(t);
	const struct btf_type *mt;
	int i;

	for (i = 0; i < btf_vlen(t); i++, m++) {
		const char *mn = btf__name_by_offset(btf, m->name_off);

		mt = resolved(btf, m->type);
		if ((!mn || !*mn) && mt && btf_is_composite(mt)) {
			n = list_members(btf, mt, prefix, names, n, max);
		} else {
			if (n < max)
				snprintf(names[n], 64, "%s%s", prefix, mn ?: "?");
			n++;
		}
	}
	return n;
}

int bu_member_names(const char *type, const char *path, char (*names)[64], int max)
{
	struct btf *btf = vmlinux_btf();
	int id = btf ? btf__find_by_name_kind(btf, type, BTF_KIND_STRUCT) : -1;
	const struct btf_type *t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	char part[64], prefix[256] = "";
	const char *p = path;
	size_t len;

	while (t && *p) {
		len = strcspn(p, ".");
		snprintf(part, sizeof(part), "%.*s", (int)len, p);
		t = btf_is_composite(t) ? member(btf, t, part) : NULL;
		snprintf(prefix + strlen(prefix), sizeof(prefix) - strlen(prefix), "%s.", part);
		p += len + (p[len] == '.');
	}
	return t && btf_is_composite(t) ? list_members(btf, t, prefix, names, 0, max) : -1;
}

int bu_func_names(const char *prefix, const char *part, const char **names, int max)
{
	struct btf *btf = vmlinux_btf();
	__u32 id, cnt = btf ? btf__type_cnt(btf) : 0;
	int n = 0;

	for (id = 1; id < cnt; id++) {
		const struct btf_type *t = btf__type_by_id(btf, id);
		const char *name = btf_is_func(t) ? btf__name_by_offset(btf, t->name_off) : NULL;

		if (!name || strncmp(name, prefix, strlen(prefix)) || !strstr(name, part))
			continue;
		if (n < max)
			names[n] = name;
		n++;
	}
	return n;
}

bool bu_has_tracepoint(const char *name)
{
	struct btf *btf = vmlinux_btf();
	char type[128];

	snprintf(type, sizeof(type), "btf_trace_%s", name);
	return btf && btf__find_by_name_kind(btf, type, BTF_KIND_TYPEDEF) >= 0;
}

bool bu_btf_has_type_tags(void)
{
	struct btf *btf = vmlinux_btf();
	__u32 id, n = btf ? btf__type_cnt(btf) : 0;

	for (id = 1; id < n; id++)
		if (btf_kind(btf__type_by_id(btf, id)) == BTF_KIND_TYPE_TAG)
			return true;
	return false;
}

/* @skip names a program, or the programs it prefixes when it ends with '*' */
static bool skipped(const char *name, const char *skip)
{
	size_t n = skip ? strlen(skip) : 0;

	if (n && skip[n - 1] == '*')
		return !strncmp(name, skip, n - 1);
	return skip && !strcmp(name, skip);
}

const char *bu_missing_funcs(const char *const *names)
{
	static char why[256];

	if (!vmlinux_btf()) {
		snprintf(why, sizeof(why), "the kernel's BTF is not readable");
		return why;
	}
	for (; *names; names++) {
		if (!bu_has_func(*names)) {
			snprintf(why, sizeof(why), "%s is not in the kernel's BTF", *names);
			return why;
		}
	}
	return NULL;
}

int bu_load_rstat(struct bpf_object_skeleton *s, const void *(*elf)(size_t *size),
		  const void *(*css_elf)(size_t *size), const char *skip)
{
	bool css = bu_has_func("css_rstat_flush");
	struct bpf_program *p;
	int err;

	ksft_print_msg("rstat API: %s%s\n", css ? "css_rstat_* (6.16+)" : "cgroup_rstat_* (pre-6.16)",
		       elf ? ", per-cgroup state in cgroup local storage" : "");
	if (css || elf)
		s->data = (void *)(css ? css_elf : elf)(&s->data_sz);
	err = bpf_object__open_skeleton(s, NULL);
	if (!err) {
		bpf_object__for_each_program(p, *s->obj) {
			/* the iterators are attached per cgroup */
			bpf_program__set_autoattach(p, bpf_program__expected_attach_type(p) !=
						       BPF_TRACE_ITER);
			if (skipped(bpf_program__name(p), skip))
				bpf_program__set_autoload(p, false);
		}
	}
	err = err ?: bpf_object__load_skeleton(s) ?: bpf_object__attach_skeleton(s);
	if (err)
		bu_print_log();
	return err;
}

struct bpf_link *bu_attach_cgroup_iter(struct bpf_program *prog, const char *cg,
				       enum bpf_cgroup_iter_order order)
{
	union bpf_iter_link_info info = { .cgroup.order = order };
	LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &info, .link_info_len = sizeof(info));
	/* the link holds the cgroup: the fd is needed only to name it */
	int err, fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct bpf_link *link;

	if (fd < 0)
		return NULL;
	info.cgroup.cgroup_fd = fd;
	link = bpf_program__attach_iter(prog, &opts);
	err = errno;
	close(fd);
	errno = err;
	return link;
}

struct bpf_link *bu_attach_cgroup_iter_raw(struct bpf_program *prog, int fd,
					   unsigned long long id, unsigned int order)
{
	union bpf_iter_link_info info = {};
	LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &info, .link_info_len = sizeof(info));

	info.cgroup.order = order;
	info.cgroup.cgroup_fd = fd;
	info.cgroup.cgroup_id = id;
	return bpf_program__attach_iter(prog, &opts);
}

ssize_t bu_read_iter(struct bpf_link *link, void *buf, size_t len)
{
	ssize_t n = read_close(bpf_iter_create(bpf_link__fd(link)), buf, len);

	if (n >= 0 && (size_t)n < len)
		((char *)buf)[n] = '\0';
	return n;
}

/* verifier messages, not the instruction dump (";", numbered lines) */
/* whether @line holds one of the '|'-separated alternatives of @needle */
static bool has_needle(const char *line, const char *needle)
{
	char alt[256];
	const char *p, *bar;

	for (p = needle; p; p = bar ? bar + 1 : NULL) {
		bar = strchr(p, '|');
		snprintf(alt, sizeof(alt), "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
		if (alt[0] && strcasestr(line, alt))
			return true;
	}
	return false;
}

static int print_matching(const char *log, const char *needle, bool print)
{
	const char *p = log, *nl;
	int matches = 0, l;
	char line[512];

	for (; p && *p; p = nl ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		l = nl ? nl - p : (int)strlen(p);
		snprintf(line, sizeof(line), "%.*s", l, p);
		if (!line[0] || line[0] == ';' || (line[0] >= '0' && line[0] <= '9'))
			continue;
		if (has_needle(line, needle) && ++matches && print)
			ksft_print_msg("verifier: %s\n", line);
	}
	return matches;
}

struct bpf_object *bu_load_one(const void *elf, size_t size, const char *prog, char *vlog,
			       size_t vlog_size)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts,
		.kernel_log_buf = vlog,
		.kernel_log_size = vlog_size,
	);
	struct bpf_program *p;
	struct bpf_object *obj;
	int err;

	vlog[0] = '\0';
	bu_log_reset();
	obj = bpf_object__open_mem(elf, size, &opts);
	if (!obj) {
		ksft_print_msg("%s: opening its object failed: %s\n", prog, strerror(errno));
		bu_print_log();
		return NULL;
	}
	bpf_object__for_each_program(p, obj)
		bpf_program__set_autoload(p, !strcmp(bpf_program__name(p), prog));
	err = bpf_object__load(obj);
	if (!err)
		return obj;
	bpf_object__close(obj);
	errno = -err;
	return NULL;
}

bool bu_refused(const void *elf, size_t size, const char *prog, const char *needle)
{
	static char vlog[65536];
	struct bpf_object *obj = bu_load_one(elf, size, prog, vlog, sizeof(vlog));
	int err = errno;

	if (obj) {
		bpf_object__close(obj);
		ksft_print_msg("%s loaded; the verifier should have refused it (\"%s\")\n",
			       prog, needle);
		return false;
	}
	if (!print_matching(vlog, needle, false)) {
		ksft_print_msg("%s refused (%s), but no verifier line says \"%s\":\n", prog,
			       strerror(err), needle);
		print_block("verifier: ", vlog[0] ? vlog : log_buf);
		return false;
	}
	ksft_print_msg("%s refused as expected:\n", prog);
	print_matching(vlog, needle, true);
	return true;
}
