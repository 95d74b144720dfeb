/* link_helper.c - the system linker behind a socket: kcsd-worker's link
 * helper (kc_link_helper_serve) and the worker's side of it
 * (kc_link_via_helper, a KcSystemLinkFn).
 *
 * Why a second process: the worker runs LLVM on requests no one has
 * vetted, so its sandbox allows no new processes at all (RLIMIT_NPROC 0,
 * no fork or exec in its seccomp filter). AArch64 objects, and the rare
 * x86-64 object the in-process linker refuses, still need ld. The helper
 * is forked before the worker touches LLVM or a request; its own sandbox
 * lets it start the linker and nothing else new. It reads an object and
 * writes back a shared object or an error, one at a time.
 *
 * Frames are worker.h's: WIRE_LINK carries T_NAME (the triple), T_LINKER
 * (absent: the default) and T_OBJECT; WIRE_LINKED carries T_STATUS, then
 * T_WHERE and T_MSG on failure, T_OBJECT on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int
kc_link_helper_serve(int fd)
{
	KcBuf in = {0};
	int rc = 0;
	for (;;) {
		uint32_t kind = 0;
		WireRead r = wire_read(fd, -1, &kind, &in);
		if (r == WIRE_EOF)
			break;
		const char *triple = NULL, *linker = NULL;
		const unsigned char *obj = NULL;
		size_t obj_len = 0, off = 0;
		bool bad = r != WIRE_OK || kind != WIRE_LINK;
		WireField f;
		while (!bad && wire_next(in.data, in.len, &off, &f, &bad)) {
			if (f.tag == T_NAME)
				triple = f.p;
			else if (f.tag == T_LINKER)
				linker = f.p;
			else if (f.tag == T_OBJECT) {
				obj = (const unsigned char *)f.p;
				obj_len = f.n;
			}
		}
		if (bad || !triple || !obj) {
			rc = 1;
			break;
		}
		unsigned char *so = NULL;
		size_t so_len = 0;
		KcErr err = {0};
		KcStatus st = kc_link_system(obj, obj_len, triple, linker, ".", &so, &so_len, &err);
		KcBuf payload = {0};
		wire_put_u32(&payload, T_STATUS, (uint32_t)st);
		if (st != KC_OK) {
			wire_put_str(&payload, T_WHERE, err.where);
			wire_put_str(&payload, T_MSG, err.msg);
		} else {
			wire_put(&payload, T_OBJECT, so, so_len);
		}
		free(so);
		bool sent = wire_send_frame(fd, WIRE_LINKED, &payload);
		kc_buf_free(&payload);
		if (!sent)
			break;
	}
	kc_buf_free(&in);
	return rc;
}

KcStatus
kc_link_via_helper(void *ctx, const unsigned char *obj, size_t obj_len, const char *triple,
                   const char *linker, const char *tmpdir, unsigned char **out, size_t *out_len,
                   KcErr *err)
{
	KcLinkHelper *h = ctx;
	(void)tmpdir; /* the helper links in its working directory, the worker's scratch */
	*out = NULL;
	*out_len = 0;
	if (h->fd < 0 || h->gone)
		return kc_fail(err, KC_INTERNAL, "link",
		               "this worker has no link helper to run the system linker");
	KcBuf b = {0};
	wire_put_str(&b, T_NAME, triple);
	if (linker && *linker)
		wire_put_str(&b, T_LINKER, linker);
	wire_put(&b, T_OBJECT, obj, obj_len);
	bool sent = wire_send_frame(h->fd, WIRE_LINK, &b);
	/* no deadline here: the helper bounds the linker's run, and kcsd's
	 * compile deadline bounds the whole job */
	uint32_t kind = 0;
	WireRead r = sent ? wire_read(h->fd, -1, &kind, &b) : WIRE_EOF;
	KcStatus st = KC_INTERNAL;
	bool have_status = false, bad = r != WIRE_OK || kind != WIRE_LINKED;
	size_t off = 0;
	WireField f;
	KcErr e = {0};
	while (!bad && wire_next(b.data, b.len, &off, &f, &bad)) {
		uint32_t v;
		if (f.tag == T_STATUS && wire_u32(&f, &v) && v < KC_STATUS_COUNT) {
			st = (KcStatus)v;
			have_status = true;
		} else if (f.tag == T_WHERE) {
			snprintf(e.where, sizeof e.where, "%s", f.p);
		} else if (f.tag == T_MSG) {
			snprintf(e.msg, sizeof e.msg, "%s", f.p);
		} else if (f.tag == T_OBJECT && !*out) {
			*out = kc_xmalloc(f.n ? f.n : 1);
			memcpy(*out, f.p, f.n);
			*out_len = f.n;
		}
	}
	kc_buf_free(&b);
	bool broken = bad || !have_status || (st == KC_OK && !*out);
	if (!broken && st == KC_OK)
		return KC_OK;
	free(*out);
	*out = NULL;
	*out_len = 0;
	if (!broken)
		return kc_fail(err, st, e.where[0] ? e.where : "link", "%s", e.msg);
	/* it died or is confused: this worker links no more, and its serve
	 * loop ends after this reply so kcsd starts a fresh one */
	h->gone = true;
	return kc_fail(err, KC_INTERNAL, "link", "the worker's link helper %s",
	               r == WIRE_OK ? "sent a malformed reply" : "is gone");
}
