/* json_scan.c - bound a JSON text before any tree is built from it.
 *
 * cJSON makes one heap node per value, so a body of `[0,0,...]` costs many
 * times its size once parsed, and deep nesting costs stack. This pass walks the bytes once,
 * counts what a parser could make a node of and tracks the nesting depth,
 * and stops at the first limit passed, so a refused body never reaches the
 * parser. It is deliberately not a validator: it only needs to find where
 * strings begin and end (to skip brackets inside them) and where scalars
 * begin, which keeps its count an upper bound on any parser's nodes for
 * the same text, whatever the text is.
 */
#include <inttypes.h>

#include "common.h"

static bool
is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

KcStatus
kc_json_scan(const char *json, size_t len, int64_t max_tokens, int max_depth, KcJsonScan *out,
             KcErr *err)
{
	const unsigned char *p = (const unsigned char *)json, *end = p + (json ? len : 0);
	int64_t tokens = 0;
	int depth = 0, deepest = 0;
	bool in_scalar = false; /* inside a number or literal: its bytes are one token */
	KcStatus st = KC_OK;

	while (p < end) {
		unsigned char c = *p++;
		bool opens = false;
		switch (c) {
		case '"':
			/* a string (key or value) is one token; skip to its
			 * closing quote, escapes included */
			tokens++;
			in_scalar = false;
			while (p < end && *p != '"')
				p += *p == '\\' && p + 1 < end ? 2 : 1;
			p += p < end; /* the closing quote */
			break;
		case '[':
		case '{':
			tokens++;
			in_scalar = false;
			opens = true;
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			in_scalar = false;
			break;
		case ',':
		case ':': in_scalar = false; break;
		default:
			if (is_ws(c)) {
				in_scalar = false;
			} else if (!in_scalar) {
				tokens++;
				in_scalar = true;
			}
		}
		if (max_tokens > 0 && tokens > max_tokens) {
			st = kc_fail(err, KC_TOO_LARGE, KC_JSON_SCAN_WHERE,
			             "the body has more than %" PRId64
			             " JSON tokens (max_json_tokens)",
			             max_tokens);
			break;
		}
		if (opens && ++depth > deepest) {
			deepest = depth;
			if (max_depth > 0 && depth > max_depth) {
				st = kc_fail(err, KC_TOO_LARGE, KC_JSON_SCAN_WHERE,
				             "the body nests arrays and objects deeper than %d "
				             "(max_json_depth)",
				             max_depth);
				break;
			}
		}
	}
	if (out)
		*out = (KcJsonScan){.tokens = tokens, .depth = deepest};
	return st;
}
