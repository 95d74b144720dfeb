/* err.c - status table lookups, the first-error-wins error record, the
 * assertion handler and the aborting allocators. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	int http;
	const char *wire;
	const char *text;
} status_info[KC_STATUS_COUNT] = {
#define E(code, http, wire, text) [KC_##code] = {http, wire, text},
#include "errors.def"
#undef E
};

int
kc_http_status(KcStatus st)
{
	KC_ASSERT(st < KC_STATUS_COUNT);
	return status_info[st].http;
}

const char *
kc_status_code(KcStatus st)
{
	KC_ASSERT(st < KC_STATUS_COUNT);
	return status_info[st].wire;
}

const char *
kc_status_text(KcStatus st)
{
	KC_ASSERT(st < KC_STATUS_COUNT);
	return status_info[st].text;
}

static void
sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = ' ';
}

KcStatus
kc_fail(KcErr *err, KcStatus st, const char *where, const char *fmt, ...)
{
	KC_ASSERT(st != KC_OK);
	if (!err)
		return st;
	if (err->status != KC_OK)
		return err->status;
	err->status = st;
	snprintf(err->where, sizeof err->where, "%s", where ? where : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	sanitize(err->where);
	sanitize(err->msg);
	return st;
}

void
kc_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "kcsd: assertion failed: %s (%s:%d)\n", expr, file, line);
	fflush(stderr);
	abort();
}

void *
kc_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	KC_ASSERT(p != NULL);
	return p;
}

void *
kc_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	KC_ASSERT(p != NULL);
	return p;
}

void *
kc_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	KC_ASSERT(p != NULL);
	return p;
}

char *
kc_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = kc_xmalloc(n);
	memcpy(p, s, n);
	return p;
}
