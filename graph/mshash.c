/* mshash.c - MindSpore's kernel-name hash of a composite JSON body
 * (akg-format.md 5).
 *
 * MindSpore names a fused kernel "Fused_<ops>_<std::hash(json.dump())>",
 * hashing the compact nlohmann::json dump before it adds a few keys. We
 * re-serialise the body the way nlohmann dumps it: objects with keys in
 * byte order (std::map; a repeated key keeps its last value), no spaces,
 * strings escaped as nlohmann escapes them (non-ASCII kept as UTF-8),
 * integers as integers and doubles in shortest round-trip form with
 * nlohmann's layout ("1.0", "0.001", "1e-05", "1.5e+20"). The body was
 * itself written by nlohmann in the common case, so a number's written
 * digits are kept when they are a shortest form: that reproduces
 * nlohmann's choice among equally short digit strings (the float-tie
 * caveat of the doc). Then libstdc++ _Hash_bytes with seed 0xc70f6907.
 *
 * The tree is a small private one (cJSON loses integer-vs-double and
 * big-integer digits); it lives in a local arena.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

#define MS_SEED 0xc70f6907u
#define MAX_DEPTH 256

typedef enum JKind { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ } JKind;

typedef struct JNode JNode;
struct JNode {
	JKind kind;
	const char *s; /* J_STR: decoded bytes; J_NUM: literal text */
	size_t len;
	const char *key; /* member of an object: decoded key */
	size_t keylen;
	int pos; /* index in its parent (for a stable key sort) */
	int n;   /* J_ARR/J_OBJ: children */
	JNode **kids;
};

typedef struct JParser {
	Arena *a;
	const char *p, *end;
	int depth;
} JParser;

/* ---- _Hash_bytes --------------------------------------------------------- */

static uint64_t
shift_mix(uint64_t v)
{
	return v ^ (v >> 47);
}

uint64_t
kc_hash_bytes(const void *ptr, size_t len, uint64_t seed)
{
	const uint64_t m = UINT64_C(0xc6a4a7935bd1e995);
	const unsigned char *p = ptr;
	size_t end = len & ~(size_t)7;
	uint64_t h = seed ^ (len * m);

	for (size_t i = 0; i < end; i += 8) {
		uint64_t k = 0;
		for (int b = 7; b >= 0; b--)
			k = (k << 8) | p[i + (size_t)b];
		k = shift_mix(k * m) * m;
		h ^= k;
		h *= m;
	}
	if (len & 7) {
		uint64_t t = 0;
		for (size_t b = len; b > end; b--)
			t = (t << 8) | p[b - 1];
		h ^= t;
		h *= m;
	}
	h = shift_mix(h) * m;
	return shift_mix(h);
}

/* ---- parsing (RFC 8259) ------------------------------------------------- */

static void
skip_ws(JParser *P)
{
	while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r'))
		P->p++;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool
hex4(JParser *P, unsigned *out)
{
	unsigned v = 0;
	if (P->end - P->p < 4)
		return false;
	for (int i = 0; i < 4; i++) {
		int h = hexval(P->p[i]);
		if (h < 0)
			return false;
		v = v * 16 + (unsigned)h;
	}
	P->p += 4;
	*out = v;
	return true;
}

static void
put_utf8(KcBuf *b, unsigned cp)
{
	if (cp < 0x80) {
		kc_buf_putc(b, (char)cp);
	} else if (cp < 0x800) {
		kc_buf_putc(b, (char)(0xc0 | (cp >> 6)));
		kc_buf_putc(b, (char)(0x80 | (cp & 63)));
	} else if (cp < 0x10000) {
		kc_buf_putc(b, (char)(0xe0 | (cp >> 12)));
		kc_buf_putc(b, (char)(0x80 | ((cp >> 6) & 63)));
		kc_buf_putc(b, (char)(0x80 | (cp & 63)));
	} else {
		kc_buf_putc(b, (char)(0xf0 | (cp >> 18)));
		kc_buf_putc(b, (char)(0x80 | ((cp >> 12) & 63)));
		kc_buf_putc(b, (char)(0x80 | ((cp >> 6) & 63)));
		kc_buf_putc(b, (char)(0x80 | (cp & 63)));
	}
}

/* string = '"' chars '"'; decoded into the arena (may hold NUL bytes). */
static bool
parse_str(JParser *P, const char **out, size_t *len)
{
	KcBuf b = {0};
	bool ok = false;

	P->p++; /* '"' */
	while (P->p < P->end) {
		unsigned char ch = (unsigned char)*P->p++;
		if (ch == '"') {
			ok = true;
			break;
		}
		if (ch < 0x20)
			break;
		if (ch != '\\') {
			kc_buf_putc(&b, (char)ch);
			continue;
		}
		if (P->p >= P->end)
			break;
		ch = (unsigned char)*P->p++;
		unsigned cp, lo;
		switch (ch) {
		case '"':
		case '\\':
		case '/': kc_buf_putc(&b, (char)ch); continue;
		case 'b': kc_buf_putc(&b, '\b'); continue;
		case 'f': kc_buf_putc(&b, '\f'); continue;
		case 'n': kc_buf_putc(&b, '\n'); continue;
		case 'r': kc_buf_putc(&b, '\r'); continue;
		case 't': kc_buf_putc(&b, '\t'); continue;
		case 'u':
			if (!hex4(P, &cp))
				goto done;
			if (cp >= 0xd800 && cp < 0xdc00 && P->end - P->p >= 6 && P->p[0] == '\\' &&
			    P->p[1] == 'u') {
				P->p += 2;
				if (!hex4(P, &lo) || lo < 0xdc00 || lo >= 0xe000)
					goto done;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			put_utf8(&b, cp);
			continue;
		default: goto done;
		}
	}
done:
	if (ok) {
		*len = b.len;
		/* copied byte for byte: the string may hold NULs */
		char *copy = arena_alloc(P->a, b.len + 1, 1);
		if (b.len)
			memcpy(copy, b.data, b.len);
		*out = copy;
	}
	kc_buf_free(&b);
	return ok;
}

static JNode *parse_value(JParser *P);

/* array = '[' [value (',' value)*] ']';  object = '{' [str ':' value ...] '}' */
static JNode *
parse_container(JParser *P, JNode *nd, char close)
{
	KcBuf kids = {0}; /* JNode* array */
	JNode *ret = NULL;

	if (++P->depth > MAX_DEPTH)
		return NULL;
	P->p++;
	skip_ws(P);
	if (P->p < P->end && *P->p == close) {
		P->p++;
		ret = nd;
		goto done;
	}
	for (;;) {
		const char *key = NULL;
		size_t keylen = 0;
		skip_ws(P);
		if (close == '}') {
			if (P->p >= P->end || *P->p != '"' || !parse_str(P, &key, &keylen))
				goto done;
			skip_ws(P);
			if (P->p >= P->end || *P->p != ':')
				goto done;
			P->p++;
		}
		JNode *kid = parse_value(P);
		if (!kid)
			goto done;
		kid->key = key;
		kid->keylen = keylen;
		kid->pos = (int)(kids.len / sizeof(JNode *));
		kc_buf_append(&kids, &kid, sizeof kid);
		skip_ws(P);
		if (P->p < P->end && *P->p == ',') {
			P->p++;
			continue;
		}
		if (P->p < P->end && *P->p == close) {
			P->p++;
			break;
		}
		goto done;
	}
	nd->n = (int)(kids.len / sizeof(JNode *));
	nd->kids = ARENA_ARRAY(P->a, JNode *, nd->n);
	memcpy(nd->kids, kids.data, kids.len);
	ret = nd;
done:
	kc_buf_free(&kids);
	P->depth--;
	return ret;
}

static JNode *
parse_value(JParser *P)
{
	JNode *nd = ARENA_NEW(P->a, JNode);

	skip_ws(P);
	if (P->p >= P->end)
		return NULL;
	switch (*P->p) {
	case '{': nd->kind = J_OBJ; return parse_container(P, nd, '}');
	case '[': nd->kind = J_ARR; return parse_container(P, nd, ']');
	case '"': nd->kind = J_STR; return parse_str(P, &nd->s, &nd->len) ? nd : NULL;
	default: break;
	}
	static const struct {
		const char *w;
		JKind k;
	} words[] = {{"null", J_NULL}, {"false", J_FALSE}, {"true", J_TRUE}};
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
		size_t n = strlen(words[i].w);
		if ((size_t)(P->end - P->p) >= n && memcmp(P->p, words[i].w, n) == 0) {
			P->p += n;
			nd->kind = words[i].k;
			return nd;
		}
	}
	/* number = '-'? int frac? exp? */
	const char *s = P->p;
	if (P->p < P->end && *P->p == '-')
		P->p++;
	if (P->p >= P->end || *P->p < '0' || *P->p > '9')
		return NULL;
	while (P->p < P->end && ((*P->p >= '0' && *P->p <= '9') || *P->p == '.' || *P->p == 'e' ||
	                         *P->p == 'E' || *P->p == '+' || *P->p == '-'))
		P->p++;
	nd->kind = J_NUM;
	nd->len = (size_t)(P->p - s);
	nd->s = arena_strndup(P->a, s, nd->len);
	return nd;
}

/* ---- serialising like nlohmann::json::dump() ------------------------------ */

static void
put_str(KcBuf *b, const char *s, size_t len)
{
	kc_buf_putc(b, '"');
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': kc_buf_puts(b, "\\\""); break;
		case '\\': kc_buf_puts(b, "\\\\"); break;
		case '\b': kc_buf_puts(b, "\\b"); break;
		case '\f': kc_buf_puts(b, "\\f"); break;
		case '\n': kc_buf_puts(b, "\\n"); break;
		case '\r': kc_buf_puts(b, "\\r"); break;
		case '\t': kc_buf_puts(b, "\\t"); break;
		default:
			if (c < 0x20)
				kc_buf_printf(b, "\\u%04x", c);
			else
				kc_buf_putc(b, (char)c);
		}
	}
	kc_buf_putc(b, '"');
}

/* Significant digits of a decimal literal and its decimal exponent:
 * value = 0.DIGITS x 10^exp10. Returns the digit count (0 for zero). */
static int
lit_digits(const char *s, char *dig, int cap, int *exp10)
{
	const char *p = s + (*s == '-');
	int n = 0, intlen = 0, e = 0, lead = 0;
	bool frac = false;

	for (; *p && *p != 'e' && *p != 'E'; p++) {
		if (*p == '.') {
			frac = true;
			continue;
		}
		if (!frac)
			intlen++;
		if (n < cap)
			dig[n++] = *p;
	}
	if (*p)
		e = atoi(p + 1);
	while (lead < n && dig[lead] == '0')
		lead++;
	memmove(dig, dig + lead, (size_t)(n - lead));
	n -= lead;
	while (n > 0 && dig[n - 1] == '0')
		n--;
	dig[n] = 0;
	*exp10 = intlen + e - lead;
	return n;
}

/* Shortest %.*e digits of x that read back as x. */
static int
shortest_digits(double x, char *dig, int *exp10)
{
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
		if (strtod(buf, NULL) == x || prec == 17) {
			int n = 0;
			char *p = buf + (buf[0] == '-');
			for (; *p && *p != 'e'; p++)
				if (*p != '.')
					dig[n++] = *p;
			while (n > 1 && dig[n - 1] == '0')
				n--;
			dig[n] = 0;
			*exp10 = atoi(strchr(buf, 'e') + 1) + 1;
			return n;
		}
	}
	return 0;
}

/* nlohmann's dtoa_impl::format_buffer: k digits, value = 0.DIG x 10^n. */
static void
put_double_digits(KcBuf *b, bool neg, const char *dig, int k, int n)
{
	if (neg)
		kc_buf_putc(b, '-');
	if (k <= n && n <= 15) {
		kc_buf_append(b, dig, (size_t)k);
		for (int i = k; i < n; i++)
			kc_buf_putc(b, '0');
		kc_buf_puts(b, ".0");
	} else if (0 < n && n <= 15) {
		kc_buf_append(b, dig, (size_t)n);
		kc_buf_putc(b, '.');
		kc_buf_append(b, dig + n, (size_t)(k - n));
	} else if (-4 < n && n <= 0) {
		kc_buf_puts(b, "0.");
		for (int i = 0; i < -n; i++)
			kc_buf_putc(b, '0');
		kc_buf_append(b, dig, (size_t)k);
	} else {
		int e = n - 1;
		kc_buf_putc(b, dig[0]);
		if (k > 1) {
			kc_buf_putc(b, '.');
			kc_buf_append(b, dig + 1, (size_t)(k - 1));
		}
		kc_buf_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
}

static void
put_num(KcBuf *b, const char *lit)
{
	bool isint = strpbrk(lit, ".eE") == NULL;
	char *endp;

	if (isint) { /* nlohmann: int64, else uint64, else double */
		errno = 0;
		long long v = strtoll(lit, &endp, 10);
		if (errno == 0) {
			kc_buf_printf(b, "%lld", v);
			return;
		}
		errno = 0;
		if (lit[0] != '-') {
			unsigned long long uv = strtoull(lit, &endp, 10);
			if (errno == 0) {
				kc_buf_printf(b, "%llu", uv);
				return;
			}
		}
	}
	double x = strtod(lit, NULL);
	if (!isfinite(x)) {
		kc_buf_puts(b, "null");
		return;
	}
	if (x == 0) {
		kc_buf_puts(b, signbit(x) ? "-0.0" : "0.0");
		return;
	}
	char sd[40], ld[40];
	int se, le;
	int sn = shortest_digits(x, sd, &se);
	int ln = lit_digits(lit, ld, 38, &le);
	if (ln == sn && le == se && strtod(lit, NULL) == x) /* written digits are shortest */
		put_double_digits(b, x < 0, ld, ln, le);
	else
		put_double_digits(b, x < 0, sd, sn, se);
}

static int
keycmp(const JNode *x, const JNode *y)
{
	size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
	int c = memcmp(x->key, y->key, n);
	if (c)
		return c;
	return (x->keylen > y->keylen) - (x->keylen < y->keylen);
}

static bool
key_is(const JNode *kid, const char *k)
{
	return kid->keylen == strlen(k) && memcmp(kid->key, k, kid->keylen) == 0;
}

static void dump(KcBuf *b, const JNode *nd, int depth, int version);

static bool
top_dropped(bool has_cc, const JNode *kid, int version)
{
	static const char *const post[] = {
	    "id", "op", "platform", "composite", "composite_graph", "node_name", "op_full_name"};
	for (size_t i = 0; i < sizeof post / sizeof post[0]; i++)
		if (key_is(kid, post[i]))
			return true;
	if (version != 0)
		return false;
	if (key_is(kid, "compute_capability"))
		return true;
	return key_is(kid, "process") && !has_cc;
}

/* qsort order: key bytes, then position (so the sort is stable) */
static int
member_cmp(const void *x, const void *y)
{
	const JNode *a = *(const JNode *const *)x, *b = *(const JNode *const *)y;
	int c = keycmp(a, b);
	return c ? c : (a->pos > b->pos) - (a->pos < b->pos);
}

static void
dump_obj(KcBuf *b, const JNode *nd, int depth, int version)
{
	JNode **k = kc_xmalloc(sizeof *k * (size_t)(nd->n ? nd->n : 1));
	int n = 0, m = 0;
	bool has_cc = false;

	for (int i = 0; i < nd->n && depth == 0; i++)
		has_cc = has_cc || key_is(nd->kids[i], "compute_capability");
	for (int i = 0; i < nd->n; i++)
		if (!(depth == 0 && top_dropped(has_cc, nd->kids[i], version)))
			k[n++] = nd->kids[i];
	qsort(k, (size_t)n, sizeof *k, member_cmp);
	/* a repeated key keeps its last value (std::map operator[]) */
	for (int i = 0; i < n; i++) {
		if (i + 1 < n && keycmp(k[i], k[i + 1]) == 0)
			continue;
		k[m++] = k[i];
	}
	n = m;
	kc_buf_putc(b, '{');
	for (int i = 0; i < n; i++) {
		if (i)
			kc_buf_putc(b, ',');
		if (key_is(k[i], "ptr_address") && k[i]->kind == J_STR)
			continue; /* cut out, the comma left behind */
		put_str(b, k[i]->key, k[i]->keylen);
		kc_buf_putc(b, ':');
		dump(b, k[i], depth + 1, version);
	}
	kc_buf_putc(b, '}');
	free(k);
}

static void
dump(KcBuf *b, const JNode *nd, int depth, int version)
{
	switch (nd->kind) {
	case J_NULL: kc_buf_puts(b, "null"); break;
	case J_FALSE: kc_buf_puts(b, "false"); break;
	case J_TRUE: kc_buf_puts(b, "true"); break;
	case J_NUM: put_num(b, nd->s); break;
	case J_STR: put_str(b, nd->s, nd->len); break;
	case J_ARR:
		kc_buf_putc(b, '[');
		for (int i = 0; i < nd->n; i++) {
			if (i)
				kc_buf_putc(b, ',');
			dump(b, nd->kids[i], depth + 1, version);
		}
		kc_buf_putc(b, ']');
		break;
	case J_OBJ: dump_obj(b, nd, depth, version); break;
	}
}

KcStatus
kc_ms_hash(const char *json, size_t len, uint64_t *out, KcErr *err)
{
	JParser P = {.a = arena_new(0), .p = json, .end = json + len};
	KcBuf b = {0};
	KcStatus st = KC_OK;
	int version = 0;

	*out = 0;
	JNode *root = parse_value(&P);
	skip_ws(&P);
	if (!root || P.p != P.end) {
		st = kc_fail(err, KC_BAD_JSON, "", "body is not JSON");
		goto done;
	}
	if (root->kind == J_OBJ)
		for (int i = 0; i < root->n; i++)
			if (key_is(root->kids[i], "version") && root->kids[i]->kind == J_NUM)
				version = atoi(root->kids[i]->s);
	dump(&b, root, 0, version);
	*out = kc_hash_bytes(b.data, b.len, MS_SEED);
done:
	kc_buf_free(&b);
	arena_free(P.a);
	return st;
}
