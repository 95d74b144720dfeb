/* tjson.c - JSON helpers shared by the parser and canonical-form tests:
 * test documents written with ' for ", edited by JSON pointer. */
#include "tjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- cJSON helpers: documents written with ' for ", edited by JSON pointer */

/* Parse `s` with every ' turned into " (keeps test literals readable). */
cJSON *
jq(const char *s)
{
	char *t = strdup(s);
	for (char *c = t; *c; c++)
		if (*c == '\'')
			*c = '"';
	cJSON *j = cJSON_Parse(t);
	free(t);
	if (!j)
		fprintf(stderr, "# bad test JSON: %s\n", s);
	return j;
}

/* The item at JSON pointer `ptr` ("" = root), or NULL. *parent and *last
 * receive the parent item and the last token when asked for. */
cJSON *
jat(cJSON *root, const char *ptr, cJSON **parent, char *last)
{
	cJSON *cur = root, *par = NULL;
	char tok[256];
	const char *p = ptr;
	tok[0] = '\0';
	while (cur && *p == '/') {
		p++;
		size_t n = strcspn(p, "/");
		snprintf(tok, sizeof tok, "%.*s", (int)n, p);
		p += n;
		par = cur;
		if (cJSON_IsArray(cur))
			cur = cJSON_GetArrayItem(cur, atoi(tok));
		else
			cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
	}
	if (parent)
		*parent = par;
	if (last)
		strcpy(last, tok);
	return cur;
}

/* Replace (or add to an object) the item at ptr with `val` (' quoting). */
void
jset(cJSON *root, const char *ptr, const char *val)
{
	cJSON *par;
	char last[256];
	jat(root, ptr, &par, last);
	cJSON *v = jq(val);
	if (!par || !v) {
		fprintf(stderr, "# jset: no parent for %s\n", ptr);
		cJSON_Delete(v);
		return;
	}
	if (cJSON_IsArray(par)) {
		int i = atoi(last);
		if (i >= cJSON_GetArraySize(par))
			cJSON_AddItemToArray(par, v);
		else
			cJSON_ReplaceItemInArray(par, i, v);
	} else if (cJSON_GetObjectItemCaseSensitive(par, last)) {
		cJSON_ReplaceItemInObjectCaseSensitive(par, last, v);
	} else {
		cJSON_AddItemToObject(par, last, v);
	}
}

void
jdel(cJSON *root, const char *ptr)
{
	cJSON *par;
	char last[256];
	jat(root, ptr, &par, last);
	if (cJSON_IsArray(par))
		cJSON_DeleteItemFromArray(par, atoi(last));
	else if (par)
		cJSON_DeleteItemFromObjectCaseSensitive(par, last);
}

char *
t_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	KcBuf b = {0};
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
		kc_buf_append(&b, tmp, n);
	fclose(f);
	return kc_buf_take(&b, len);
}
