/* arena.c - bump allocator: a linked list of blocks, each carved from the
 * front. Oversized requests get a block of their own. Everything is zeroed
 * and released together by arena_free(). */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Block {
	struct Block *next;
	size_t cap;
	size_t used;
	_Alignas(16) unsigned char data[];
} Block;

struct Arena {
	Block *head;
	size_t block_bytes;
	size_t total;
};

Arena *
arena_new(size_t block_bytes)
{
	Arena *a = kc_xcalloc(1, sizeof *a);
	a->block_bytes = block_bytes < 1024 ? 1024 : block_bytes;
	return a;
}

void *
arena_alloc(Arena *a, size_t size, size_t align)
{
	KC_ASSERT(align && (align & (align - 1)) == 0 && align <= 4096);
	if (size == 0)
		size = 1;
	Block *b = a->head;
	if (b) {
		size_t off = (b->used + align - 1) & ~(align - 1);
		if (off <= b->cap && size <= b->cap - off) {
			b->used = off + size;
			return b->data + off;
		}
	}
	size_t cap = a->block_bytes;
	KC_ASSERT(size <= SIZE_MAX - align - sizeof(Block));
	if (size + align > cap)
		cap = size + align;
	Block *nb = kc_xcalloc(1, sizeof(Block) + cap);
	nb->cap = cap;
	a->total += cap;
	/* keep the fuller block out of the way: big one-off blocks go second */
	if (b && size + align > a->block_bytes) {
		nb->next = b->next;
		b->next = nb;
	} else {
		nb->next = b;
		a->head = nb;
	}
	size_t off = ((uintptr_t)nb->data % align) ? align - ((uintptr_t)nb->data % align) : 0;
	nb->used = off + size;
	return nb->data + off;
}

char *
arena_strndup(Arena *a, const char *s, size_t n)
{
	char *p = arena_alloc(a, n + 1, 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

char *
arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *
arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	KC_ASSERT(n >= 0);
	char *p = arena_alloc(a, (size_t)n + 1, 1);
	vsnprintf(p, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return p;
}

size_t
arena_bytes(const Arena *a)
{
	return a->total;
}

void
arena_free(Arena *a)
{
	if (!a)
		return;
	Block *b = a->head;
	while (b) {
		Block *n = b->next;
		free(b);
		b = n;
	}
	free(a);
}
