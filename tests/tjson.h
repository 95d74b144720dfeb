/* tjson.h - JSON helpers for tests: write documents with ' for " and edit
 * them by JSON pointer. Returned cJSON trees belong to the caller. */
#ifndef KCS_TJSON_H
#define KCS_TJSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Parse `s` with every ' turned into "; NULL (and a note) on bad JSON. */
cJSON *jq(const char *s);
/* The item at JSON pointer `ptr` ("" = root), or NULL; *parent and *last
 * receive the parent item and the last token when asked for. */
cJSON *jat(cJSON *root, const char *ptr, cJSON **parent, char *last);
/* Replace (or add to an object) the item at ptr with `val` (' quoting). */
void jset(cJSON *root, const char *ptr, const char *val);
void jdel(cJSON *root, const char *ptr);
/* A whole file, malloc'd and NUL-terminated; NULL if unreadable. */
char *t_read_file(const char *path, size_t *len);

#endif
