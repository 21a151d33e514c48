/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The item lists of an inventory (selftests/inventory/FEATURE.toml, shipped next
 * to a test's program through its test.toml "files"): what each kernel exposes,
 * one [[list]] per list name and kernel.  A test reads what the running kernel
 * exposes (a file's keys, an enum in the kernel's BTF, the indexes a kfunc
 * accepts) and fails on each item no list names: a kernel with a new item fails
 * until the inventory has a row for it.
 *
 *	[[list]]
 *	name = "memory.stat.leaf"
 *	kernel = "6.12"
 *	items = [
 *		"anon", "file", ...
 *	]
 */
#ifndef SELFTESTS_LIB_INVENTORY_H
#define SELFTESTS_LIB_INVENTORY_H

#include <stdbool.h>

struct inv_list {
	int n;
	char **items;
	bool this_kernel;	/* the running kernel's own list was found */
};

/*
 * The items of the lists @name in the inventory @path: the running kernel's
 * ("6.12" of 6.12.117) if the inventory has one (->this_kernel), with those of
 * its config variants the kernel has ("6.12+thp": what a kernel built with
 * kconfigs/thp.config adds), else those of every kernel together; 0, or -errno
 * (-ENOENT: no list of that name).
 */
int inv_load(const char *path, const char *name, struct inv_list *out);
bool inv_has(const struct inv_list *l, const char *item);
void inv_free(struct inv_list *l);

/*
 * Each of the @n @found items (what the running kernel exposes) that @l does
 * not list, printed as "@what: ITEM is not in the inventory"; with
 * l->this_kernel also each item of @l not found ("... is listed but the kernel
 * has none").  The number of such items.
 */
int inv_compare(const struct inv_list *l, const char *const *found, int n, const char *what);

/* the first word of each line of @text (a "key value" file), at most @max; count */
int inv_keys(const char *text, char (*keys)[64], int max);

#endif /* SELFTESTS_LIB_INVENTORY_H */
