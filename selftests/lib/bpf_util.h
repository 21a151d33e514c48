/* SPDX-License-Identifier: GPL-2.0 */
/*
 * libbpf helpers for the selftests: the libbpf log captured (and shown
 * under the check that failed), kernel functions looked up in the vmlinux
 * BTF, cgroup iterators attached and read, and a program the verifier must
 * refuse, checked by its message.
 */
#ifndef SELFTESTS_LIB_BPF_UTIL_H
#define SELFTESTS_LIB_BPF_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

/*
 * libbpf's warnings (debug lines too with $BPF_UTIL_DEBUG) are captured, from
 * before main() on, into a buffer: bu_log_reset() empties it, bu_print_log()
 * prints it as diagnostics.
 */
void bu_log_reset(void);
void bu_print_log(void);

/* NULL when the vmlinux BTF has every function of the NULL-terminated @names;
 * else a reason naming the first one missing, valid until the next call */
const char *bu_missing_funcs(const char *const *names);
bool bu_has_func(const char *name);
/* the value of enumerator @name of enum @type in the kernel's BTF; -1 if absent */
long long bu_enum_value(const char *type, const char *name);
/* the size of struct @type in the kernel's BTF; -1 if absent */
long long bu_struct_size(const char *type);
/* the type struct @type's member @name is declared with, by its own name (a typedef's, not
 * what it stands for: rqspinlock_t, raw_spinlock_t); NULL without BTF or such a member */
const char *bu_member_type_name(const char *type, const char *name);
/*
 * The enumerators of enum @type in the kernel's BTF: up to @max names (valid
 * while the program runs) and values; how many (all of them, even beyond @max),
 * -1 if there is no such enum
 */
int bu_enum_names(const char *type, const char **names, long long *vals, int max);
/*
 * The member names of the struct @type's member at @path ("iter.cgroup": the
 * member cgroup of its member iter; "" the struct itself), members of anonymous
 * structs and unions included as their own: up to @max, "a.b" style names with
 * @path's prefix; how many, -1 if the path does not exist
 */
int bu_member_names(const char *type, const char *path, char (*names)[64], int max);
/* the functions of the kernel's BTF whose names begin with @prefix and contain
 * @part: up to @max names; how many (all of them) */
int bu_func_names(const char *prefix, const char *part, const char **names, int max);
/* does the kernel's BTF have the tracepoint @name (for tp_btf programs) */
bool bu_has_tracepoint(const char *name);
/*
 * does the kernel's BTF carry type tags (__rcu, __user, __percpu): clang builds
 * with a pahole that encodes them; gcc up to 13 emits none.  The verifier then
 * knows an __rcu pointer as an RCU pointer where a gcc build's is untrusted.
 */
bool bu_btf_has_type_tags(void);

/* a cgroup iterator link of @prog on the cgroup @cg (its path); NULL, errno set */
struct bpf_link *bu_attach_cgroup_iter(struct bpf_program *prog, const char *cg,
				       enum bpf_cgroup_iter_order order);

/* the same with the link info as given: cgroup @fd (0: none), cgroup @id (0: none),
 * @order as a raw number (invalid ones included) */
struct bpf_link *bu_attach_cgroup_iter_raw(struct bpf_program *prog, int fd,
					   unsigned long long id, unsigned int order);

/* everything a fresh iterator instance prints, into @buf (NUL-terminated when
 * there is room); bytes read, or -errno */
ssize_t bu_read_iter(struct bpf_link *link, void *buf, size_t len);

/*
 * The object in @elf (a skeleton's X__elf_bytes()) with only its program @prog
 * loaded: the object (bpf_object__close() it), or NULL with errno set and the
 * verifier's log in @vlog.
 */
struct bpf_object *bu_load_one(const void *elf, size_t size, const char *prog, char *vlog,
			       size_t vlog_size);

/*
 * The program @prog of the object in @elf (a skeleton's X__elf_bytes()),
 * loaded alone, must be refused with a verifier line containing @needle
 * (case-insensitive; "a|b": either, for a rule whose message changed).  The matching lines, or the whole log when none
 * matches, are printed.  true when refused as expected.
 */
bool bu_refused(const void *elf, size_t size, const char *prog, const char *needle);

/*
 * The rstat kfuncs have two names: cgroup_rstat_{updated,flush}(cgrp) up to
 * 6.15, css_rstat_{updated,flush}(css) from 6.16.  Libbpf 1.1 has no
 * bpf_ksym_exists() and 6.1 refuses an unresolved weak kfunc, so a test
 * builds one object per API (X.bpf.c, and X_css.bpf.c defining RSTAT_API_CSS:
 * the same programs, maps and globals) and opens the one the kernel's BTF
 * names, saying which; loads it but for the program @skip (NULL: none; "x*":
 * the programs whose names begin with x) and
 * attaches it but for its iterators (attached per cgroup), the libbpf log
 * printed when that fails; 0 or -errno.  BU_LOAD_RSTAT(skel, X, skip)
 * allocates *@skel, the skeleton X_bpf (X_css_bpf's object when the kernel
 * has the css API); X_bpf__destroy(skel) undoes it, loaded or not.
 */
#define BU_LOAD_RSTAT(skel, x, skip)						\
	(((skel) = calloc(1, sizeof(*(skel)))) ?				\
	 x##_bpf__create_skeleton(skel) ?:					\
	 bu_load_rstat((skel)->skeleton, NULL, x##_css_bpf__elf_bytes, skip) : -ENOMEM)
/*
 * The same, and with @storage true the objects built with RS_CGRP_STORAGE
 * (X_storage.bpf.c, X_storage_css.bpf.c: per-cgroup state in cgroup local
 * storage, same programs, maps and globals) instead of X.bpf.c and X_css.bpf.c.
 */
#define BU_LOAD_RSTAT_STORE(skel, x, skip, storage)				\
	(((skel) = calloc(1, sizeof(*(skel)))) ?				\
	 x##_bpf__create_skeleton(skel) ?:					\
	 bu_load_rstat((skel)->skeleton, (storage) ? x##_storage_bpf__elf_bytes : NULL, \
		       (storage) ? x##_storage_css_bpf__elf_bytes : x##_css_bpf__elf_bytes, \
		       skip) : -ENOMEM)
int bu_load_rstat(struct bpf_object_skeleton *s, const void *(*elf)(size_t *size),
		  const void *(*css_elf)(size_t *size), const char *skip);

#endif /* SELFTESTS_LIB_BPF_UTIL_H */
