/* knobs.c - schedule knobs from one table: the knob JSON parser, the
 * canonical printer and the read-only views of knobs.def and templates.def.
 *
 * The one idea: what a knob accepts (type, range, special values), which
 * templates take it and when the canonical JSON shows it are written once,
 * in its knobs.def row. A new row is parsed, range-checked, printed and
 * documented (scripts/gen-docs) with no other change here; what remains is
 * its KcKnobs member and the pass that reads it. Rules between knobs are
 * each template's (sched.c). A value out of range is refused, never
 * clamped: a schedule is applied exactly or not at all.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loop.h"

/* knobs.def column spellings */
#define TARGET INT64_MIN
#define TPL_ALL ((1u << KC_TEMPLATE_COUNT) - 1)
#define TPL_MATMUL (1u << KC_TEMPLATE_MATMUL)
#define BACKEND_CPU "cpu"
#define PRINT_ALWAYS true
#define PRINT_IFSET false

typedef enum KnobId {
#define X(e, field, ...) KNOB_##e,
#include "knobs.def"
#undef X
	KNOB_COUNT
} KnobId;

static const KcKnobInfo knob_info[KNOB_COUNT] = {
#define X(e, field, ctype, ty, lo, hi, sp, df, tpl, be, print, hl)                                 \
	{.name = #field,                                                                           \
	 .type = KC_KNOB_##ty,                                                                     \
	 .min = (lo),                                                                              \
	 .max = (hi),                                                                              \
	 .special = (sp),                                                                          \
	 .dflt = (df) == TARGET ? 0 : (df),                                                        \
	 .target_default = (df) == TARGET,                                                         \
	 .templates = TPL_##tpl,                                                                   \
	 .backend = BACKEND_##be,                                                                  \
	 .always_printed = PRINT_##print,                                                          \
	 .help = hl},
#include "knobs.def"
#undef X
};

static const char *const template_names[KC_TEMPLATE_COUNT] = {
#define X(e, name) name,
#include "templates.def"
#undef X
};

static int64_t
knob_get(const KcKnobs *k, KnobId id)
{
	switch (id) {
#define X(e, field, ...)                                                                           \
	case KNOB_##e:                                                                             \
		return (int64_t)k->field;
#include "knobs.def"
#undef X
	case KNOB_COUNT: break;
	}
	KC_ASSERT(!"knob id in range");
	return 0;
}

static void
knob_set(KcKnobs *k, KnobId id, int64_t v)
{
	switch (id) {
#define X(e, field, ctype, ...)                                                                    \
	case KNOB_##e:                                                                             \
		k->field = (ctype)v;                                                               \
		return;
#include "knobs.def"
#undef X
	case KNOB_COUNT: break;
	}
	KC_ASSERT(!"knob id in range");
}

const char *
kc_template_name(KcTemplate t)
{
	return (unsigned)t < KC_TEMPLATE_COUNT ? template_names[t] : NULL;
}

int
kc_knob_count(void)
{
	return KNOB_COUNT;
}

const KcKnobInfo *
kc_knob_info(int i)
{
	return i >= 0 && i < KNOB_COUNT ? &knob_info[i] : NULL;
}

const KcKnobInfo *
kc_knob_find(const char *name)
{
	for (int i = 0; i < KNOB_COUNT; i++)
		if (strcmp(knob_info[i].name, name) == 0)
			return &knob_info[i];
	return NULL;
}

bool
kc_knob_accepts(const KcKnobInfo *k, int64_t v)
{
	switch (k->type) {
	case KC_KNOB_BOOL: return v == 0 || v == 1;
	case KC_KNOB_INT:
	case KC_KNOB_POW2: break;
	}
	if ((v == 0 && (k->special & KC_KNOB_AUTO)) || (v == 1 && (k->special & KC_KNOB_OFF)))
		return true;
	if (v < k->min || v > k->max)
		return false;
	return k->type != KC_KNOB_POW2 || (v & (v - 1)) == 0;
}

/* Large powers of two as 2^n, which is how people read them. */
static void
num_text(int64_t v, char *buf, size_t cap)
{
	if (v >= (INT64_C(1) << 20) && (v & (v - 1)) == 0) {
		int n = 0;
		while ((INT64_C(1) << n) != v)
			n++;
		snprintf(buf, cap, "2^%d", n);
	} else {
		snprintf(buf, cap, "%lld", (long long)v);
	}
}

void
kc_knob_describe(const KcKnobInfo *k, char *buf, size_t cap)
{
	char lo[24], hi[24];
	const char *kind = "an integer";
	switch (k->type) {
	case KC_KNOB_BOOL: snprintf(buf, cap, "true or false"); return;
	case KC_KNOB_INT: break;
	case KC_KNOB_POW2: kind = "a power of two"; break;
	}
	num_text(k->min, lo, sizeof lo);
	num_text(k->max, hi, sizeof hi);
	bool a = k->special & KC_KNOB_AUTO, o = k->special & KC_KNOB_OFF;
	/* "0 (auto), 1 (off) or an integer from 2 to 16" */
	snprintf(buf, cap, "%s%s%s%s%s from %s to %s", a ? "0 (auto)" : "", a && o ? ", " : "",
	         o ? "1 (off)" : "", a || o ? " or " : "", kind, lo, hi);
}

/* where + "/" + name as a JSON pointer token (RFC 6901: "~" is "~0", "/"
 * is "~1"), the name cut at 64 bytes. */
static void
member_pointer(char *out, size_t cap, const char *where, const char *name)
{
	size_t n = (size_t)snprintf(out, cap, "%s/", where);
	for (int i = 0; name[i] && i < 64 && n + 3 < cap; i++) {
		if (name[i] == '~' || name[i] == '/') {
			out[n++] = '~';
			out[n++] = name[i] == '~' ? '0' : '1';
		} else {
			out[n++] = name[i];
		}
	}
	out[n < cap ? n : cap - 1] = '\0';
}

/* A knob value: true/false for a bool, else a JSON number with no
 * fraction; *out gets it when the knob accepts it. */
static bool
json_value(const KcKnobInfo *ki, const cJSON *v, int64_t *out)
{
	switch (ki->type) {
	case KC_KNOB_BOOL:
		if (!cJSON_IsBool(v))
			return false;
		*out = cJSON_IsTrue(v);
		return true;
	case KC_KNOB_INT:
	case KC_KNOB_POW2: break;
	}
	if (!cJSON_IsNumber(v))
		return false;
	double d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < -9e18 || d > 9e18)
		return false;
	*out = (int64_t)d;
	return kc_knob_accepts(ki, *out);
}

/* Knobs: {"vector_width": int, "unroll": int, ..., one member per knobs.def
 *         row, "stages": [...] (top level only)}, every member optional. */
KcStatus
knobs_parse(const cJSON *o, KcTemplate tpl, const char *where, KcKnobs *k, const cJSON **stages,
            KcErr *err)
{
	bool seen[KNOB_COUNT] = {false};
	const cJSON *it;
	char w[sizeof((KcErr *)0)->where];

	if (stages)
		*stages = NULL;
	if (!cJSON_IsObject(o))
		return kc_fail(err, KC_BAD_SCHEDULE, where, "knobs must be a JSON object");
	cJSON_ArrayForEach(it, o)
	{
		const char *name = it->string ? it->string : "";
		member_pointer(w, sizeof w, where, name);
		if (stages && strcmp(name, "stages") == 0) {
			if (*stages)
				return kc_fail(err, KC_BAD_SCHEDULE, w, "duplicate knob 'stages'");
			*stages = it;
			continue;
		}
		const KcKnobInfo *ki = kc_knob_find(name);
		if (!ki)
			return kc_fail(err, KC_BAD_SCHEDULE, w, "unknown knob '%.64s'", name);
		if (!(ki->templates & (1u << tpl)))
			return kc_fail(err, KC_BAD_SCHEDULE, w,
			               "knob '%s' does not apply to the %s template", ki->name,
			               kc_template_name(tpl));
		int64_t v = 0;
		if (!json_value(ki, it, &v)) {
			char d[96];
			kc_knob_describe(ki, d, sizeof d);
			return kc_fail(err, KC_BAD_SCHEDULE, w, "%s must be %s", ki->name, d);
		}
		KnobId id = (KnobId)(ki - knob_info);
		if (seen[id])
			return kc_fail(err, KC_BAD_SCHEDULE, w, "duplicate knob '%s'", ki->name);
		seen[id] = true;
		knob_set(k, id, v);
	}
	return KC_OK;
}

void
knobs_default(KcKnobs *k)
{
	for (int i = 0; i < KNOB_COUNT; i++)
		knob_set(k, (KnobId)i, knob_info[i].dflt);
}

bool
knobs_eq(const KcKnobs *a, const KcKnobs *b)
{
	for (int i = 0; i < KNOB_COUNT; i++)
		if (knob_get(a, (KnobId)i) != knob_get(b, (KnobId)i))
			return false;
	return true;
}

static void put_knobs(KcBuf *b, const KcKnobs *k, KcTemplate tpl, const KcSchedule *s, int last);

/* "stages": the effective knobs of stages 0..last. */
static void
put_stages(KcBuf *b, const KcSchedule *s, int last)
{
	kc_buf_puts(b, "\"stages\":[");
	for (int i = 0; i <= last; i++) {
		if (i)
			kc_buf_putc(b, ',');
		put_knobs(b, &s->stage[i], s->tpl, NULL, -1);
	}
	kc_buf_putc(b, ']');
}

/* One knob object in name order, with "stages" (stages 0..last of s, when
 * s and last >= 0) at its place among the names. */
static void
put_knobs(KcBuf *b, const KcKnobs *k, KcTemplate tpl, const KcSchedule *s, int last)
{
	int order[KNOB_COUNT];
	bool first = true, stages = s && last >= 0;

	for (int i = 0; i < KNOB_COUNT; i++) { /* insertion sort: a dozen names */
		int j = i;
		for (; j > 0 && strcmp(knob_info[order[j - 1]].name, knob_info[i].name) > 0; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	kc_buf_putc(b, '{');
	for (int i = 0; i < KNOB_COUNT; i++) {
		const KcKnobInfo *ki = &knob_info[order[i]];
		int64_t v = knob_get(k, (KnobId)order[i]);
		if (stages && strcmp(ki->name, "stages") > 0) {
			if (!first)
				kc_buf_putc(b, ',');
			put_stages(b, s, last);
			stages = first = false;
		}
		if (!(ki->templates & (1u << tpl)) || (!ki->always_printed && v == ki->dflt))
			continue;
		kc_buf_printf(b, "%s\"%s\":", first ? "" : ",", ki->name);
		first = false;
		if (ki->type == KC_KNOB_BOOL)
			kc_buf_puts(b, v ? "true" : "false");
		else
			kc_buf_printf(b, "%lld", (long long)v);
	}
	if (stages) {
		if (!first)
			kc_buf_putc(b, ',');
		put_stages(b, s, last);
	}
	kc_buf_putc(b, '}');
}

const char *
knobs_canonical(Arena *a, const KcSchedule *s)
{
	KcBuf b = {0};
	int last = -1;

	for (int i = 0; i < s->nstages; i++)
		if (!knobs_eq(&s->stage[i], &s->knobs))
			last = i;
	put_knobs(&b, &s->knobs, s->tpl, s, last);
	const char *r = arena_strdup(a, b.data);
	kc_buf_free(&b);
	return r;
}
