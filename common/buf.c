/* buf.c - growable NUL-terminated byte buffer used for JSON replies, dumps
 * and canonical serialisations. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
reserve(KcBuf *b, size_t extra)
{
	KC_ASSERT(extra < SIZE_MAX / 2 && b->len < SIZE_MAX / 2);
	if (b->len + extra + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	b->data = kc_xrealloc(b->data, cap);
	b->cap = cap;
}

void
kc_buf_append(KcBuf *b, const void *p, size_t n)
{
	reserve(b, n);
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = 0;
}

void
kc_buf_puts(KcBuf *b, const char *s)
{
	kc_buf_append(b, s, strlen(s));
}

void
kc_buf_putc(KcBuf *b, char c)
{
	kc_buf_append(b, &c, 1);
}

void
kc_buf_vprintf(KcBuf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	KC_ASSERT(n >= 0);
	reserve(b, (size_t)n);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	b->len += (size_t)n;
}

void
kc_buf_printf(KcBuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kc_buf_vprintf(b, fmt, ap);
	va_end(ap);
}

void
kc_buf_json_str(KcBuf *b, const char *s)
{
	kc_buf_putc(b, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': kc_buf_puts(b, "\\\""); break;
		case '\\': kc_buf_puts(b, "\\\\"); break;
		case '\n': kc_buf_puts(b, "\\n"); break;
		case '\r': kc_buf_puts(b, "\\r"); break;
		case '\t': kc_buf_puts(b, "\\t"); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				kc_buf_printf(b, "\\u%04x", *p);
			else
				kc_buf_putc(b, (char)*p);
		}
	}
	kc_buf_putc(b, '"');
}

char *
kc_buf_take(KcBuf *b, size_t *len)
{
	if (!b->data)
		reserve(b, 0), b->data[0] = 0;
	char *p = b->data;
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}

void
kc_buf_free(KcBuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
