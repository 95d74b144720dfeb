/* knobs_md.c - prints docs/api.md's knob table (markdown) from the knob
 * table, kc_knob_info; scripts/gen-docs splices it between the markers.
 * Reading the table through the public API keeps the docs to what a tuner
 * sees.
 */
#include <stdio.h>
#include <string.h>

#include "compiler.h"

static void
put_templates(unsigned bits)
{
	if (bits == (1u << KC_TEMPLATE_COUNT) - 1) {
		fputs("all", stdout);
		return;
	}
	const char *sep = "";
	for (int t = 0; t < KC_TEMPLATE_COUNT; t++)
		if (bits >> t & 1) {
			printf("%s%s", sep, kc_template_name((KcTemplate)t));
			sep = ", ";
		}
}

int
main(void)
{
	puts("| knob | values | default | templates | targets | in canonical knobs | what it does "
	     "|");
	puts("|---|---|---|---|---|---|---|");
	for (int i = 0; i < kc_knob_count(); i++) {
		const KcKnobInfo *k = kc_knob_info(i);
		char vals[128];
		kc_knob_describe(k, vals, sizeof vals);
		printf("| `%s` | %s | ", k->name, vals);
		if (k->target_default)
			fputs("from the target", stdout);
		else if (k->type == KC_KNOB_BOOL)
			fputs(k->dflt ? "true" : "false", stdout);
		else if (k->dflt == 0 && (k->special & KC_KNOB_AUTO))
			fputs("0 (auto)", stdout);
		else
			printf("%lld", (long long)k->dflt);
		fputs(" | ", stdout);
		put_templates(k->templates);
		printf(" | %s | %s | %s |\n", k->backend,
		       k->always_printed ? "always" : "when not default", k->help);
	}
	return 0;
}
