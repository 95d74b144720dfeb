/* link.h - the link layer: an ELF object in memory -> a shared object in
 * memory. It knows nothing of the compiler (only common/): a backend hands
 * it bytes and a triple.
 *
 * Threads: reentrant; the system linker runs in a child process of its
 * own (posix_spawn) in a private temporary directory.
 */
#ifndef KCS_LINK_H
#define KCS_LINK_H

#include "common.h"

/* Runs the system linker on obj somewhere else (kcsd-worker: in its link
 * helper process, because the worker itself may not start programs); the
 * contract of link_system, with LinkOptions spelled out. */
typedef KcStatus (*LinkSystemFn)(void *ctx, const unsigned char *obj, size_t obj_len,
                                 const char *triple, const char *linker, const char *tmpdir,
                                 unsigned char **out, size_t *out_len, KcErr *err);

typedef struct LinkOptions {
	const char *triple;  /* the object's target triple: "x86_64-..." or "aarch64-..." */
	const char *linker;  /* NULL or "": in-process, falling back to ld; "internal":
	                      * in-process only; anything else: that system linker */
	const char *tmpdir;  /* scratch directory (NULL: $TMPDIR or /tmp) */
	LinkSystemFn system; /* NULL: link_system, a child of this process */
	void *system_ctx;
} LinkOptions;

/* Link an ELF object into a shared object (malloc'd): o->linker NULL or
 * "" tries link_elf first and falls back to the system linker, "internal"
 * is link_elf only, anything else is that system linker. aarch64 objects
 * are linked with ld.lld without libm. */
KcStatus link_shared(const unsigned char *obj, size_t obj_len, const LinkOptions *o,
                     unsigned char **out, size_t *out_len, KcErr *err);
/* The system linker alone: spawns it (ld.lld-19 for aarch64, else o->linker
 * or "ld") on obj in a fresh directory under o->tmpdir; o->system is
 * ignored. */
KcStatus link_system(const unsigned char *obj, size_t obj_len, const LinkOptions *o,
                     unsigned char **out, size_t *out_len, KcErr *err);
/* link_elf.c: in-process linker for x86-64 objects; KC_UNSUPPORTED when the
 * object needs what it does not handle, KC_CODEGEN when it is malformed. */
KcStatus link_elf(const unsigned char *obj, size_t obj_len, unsigned char **out, size_t *out_len,
                  KcErr *err);

#endif /* KCS_LINK_H */
