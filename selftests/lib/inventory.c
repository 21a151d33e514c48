// SPDX-License-Identifier: GPL-2.0
/* The item lists of an inventory file (see inventory.h). */
#include "selftest.h"
#include <sys/utsname.h>

#include "inventory.h"

/* "6.12" of the running kernel's release */
static void this_kernel(char *buf, size_t len)
{
	struct utsname u;
	int major = 0, minor = 0;

	buf[0] = '\0';
	if (!uname(&u) && sscanf(u.release, "%d.%d", &major, &minor) == 2)
		snprintf(buf, len, "%d.%d", major, minor);
}

/* the string between the first pair of quotes after @key's '=' on @line, or NULL */
static bool value_of(const char *line, const char *key, char *buf, size_t len)
{
	const char *p = line, *q;
	size_t k = strlen(key);

	while (*p == ' ' || *p == '\t')
		p++;
	if (strncmp(p, key, k))
		return false;
	p += k;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p++ != '=' || !(p = strchr(p, '"')) || !(q = strchr(p + 1, '"')))
		return false;
	snprintf(buf, len, "%.*s", (int)(q - p - 1), p + 1);
	return true;
}

static int add(struct inv_list *l, const char *item, size_t len)
{
	char **more;

	if (inv_has(l, item) && strlen(item) == len)
		return 0;
	more = realloc(l->items, (l->n + 1) * sizeof(*more));
	if (!more)
		return -ENOMEM;
	l->items = more;
	l->items[l->n] = strndup(item, len);
	return l->items[l->n] ? (l->n++, 0) : -ENOMEM;
}

/* the quoted strings of @line into @l */
static int add_strings(struct inv_list *l, const char *line)
{
	const char *p = line, *q;
	char item[256];
	int err = 0;

	while (!err && (p = strchr(p, '"')) && (q = strchr(p + 1, '"'))) {
		snprintf(item, sizeof(item), "%.*s", (int)(q - p - 1), p + 1);
		err = add(l, item, strlen(item));
		p = q + 1;
	}
	return err;
}

/* the lists @name of @kernel (NULL: every kernel) into @out; -ENOENT if none */
static int load(const char *path, const char *name, const char *kernel, struct inv_list *out)
{
	FILE *f = fopen(path, "r");
	char line[4096], lname[128] = "", lkernel[32] = "";
	bool in_items = false, found = false;
	int err = 0;

	if (!f)
		return -errno;
	while (!err && fgets(line, sizeof(line), f)) {
		bool mine = !strcmp(lname, name) && (!kernel || !strcmp(lkernel, kernel));

		if (in_items) {
			if (mine)
				err = add_strings(out, line);
			in_items = !strchr(line, ']');
		} else if (!strncmp(line, "[[", 2) || !strncmp(line, "[", 1)) {
			lname[0] = lkernel[0] = '\0';
		} else if (value_of(line, "name", lname, sizeof(lname)) ||
			   value_of(line, "kernel", lkernel, sizeof(lkernel))) {
			continue;
		} else if (strstr(line, "items") == line + strspn(line, " \t") && strchr(line, '[')) {
			found |= mine;
			if (mine)
				err = add_strings(out, strchr(line, '['));
			in_items = !strchr(strchr(line, '['), ']');
		}
	}
	fclose(f);
	return err ?: found ? 0 : -ENOENT;
}

/*
 * The config fragments (kconfigs/NAME.config) whose kernels expose more items than
 * base's, each with what tells the running kernel has it: their lists ("6.12+thp")
 * hold the items the kernel adds with it.
 */
static const struct { const char *fragment, *sign; } fragments[] = {
	{ "thp", "/sys/kernel/mm/transparent_hugepage" },	/* TRANSPARENT_HUGEPAGE */
	{ "numa", "/sys/devices/system/node" },			/* NUMA */
};

int inv_load(const char *path, const char *name, struct inv_list *out)
{
	char kernel[32], variant[64];
	size_t i;
	int err;

	memset(out, 0, sizeof(*out));
	this_kernel(kernel, sizeof(kernel));
	err = load(path, name, kernel, out);
	out->this_kernel = !err;
	for (i = 0; !err && i < ARRAY_SIZE(fragments); i++) {
		if (access(fragments[i].sign, F_OK))
			continue;
		snprintf(variant, sizeof(variant), "%s+%s", kernel, fragments[i].fragment);
		err = load(path, name, variant, out);
		if (err == -ENOENT)
			err = 0;
	}
	if (err == -ENOENT)
		err = load(path, name, NULL, out);
	if (err == -ENOENT)
		ksft_print_msg("%s: no list %s\n", path, name);
	else if (err)
		ksft_print_msg("%s: reading the list %s: %s\n", path, name, strerror(-err));
	return err;
}

bool inv_has(const struct inv_list *l, const char *item)
{
	int i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->items[i], item))
			return true;
	return false;
}

void inv_free(struct inv_list *l)
{
	int i;

	for (i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	memset(l, 0, sizeof(*l));
}

int inv_compare(const struct inv_list *l, const char *const *found, int n, const char *what)
{
	int i, j, bad = 0;

	for (i = 0; i < n; i++) {
		if (inv_has(l, found[i]))
			continue;
		bad++;
		ksft_print_msg("%s: %s is not in the inventory (a new item: give it a row and a check)\n",
			       what, found[i]);
	}
	for (i = 0; l->this_kernel && i < l->n; i++) {
		for (j = 0; j < n && strcmp(found[j], l->items[i]); j++)
			;
		if (j < n)
			continue;
		bad++;
		ksft_print_msg("%s: %s is listed for this kernel, but the kernel has none\n",
			       what, l->items[i]);
	}
	return bad;
}

int inv_keys(const char *text, char (*keys)[64], int max)
{
	const char *p = text;
	int n = 0, len;

	while (p && *p && n < max) {
		len = strcspn(p, " \t\n");
		if (len > 0 && len < 64)
			snprintf(keys[n++], 64, "%.*s", len, p);
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	return n;
}
