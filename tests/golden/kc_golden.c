/* kc_golden.c - print a composite's loop-nest dumps for a named target.
 *
 *   kc_golden [-p PASS[,PASS...]] FILE TARGET
 *
 * Parses FILE, resolves TARGET (a named target, never "cpu": the output
 * must not depend on the machine running it), takes the default schedule
 * and runs kc_compile with a dump of the chosen passes (default
 * "lower,schedule": the loop nest before and after scheduling), which it
 * prints: in pipeline order, each with its "== name ==" header. Only
 * the public API of compiler/compiler.h is used, so the output pins what
 * the compiler produces, not how its files are laid out. The whole
 * pipeline runs, so a graph that stops compiling fails here too.
 * Exit status: 0 on success, 1 on a compile error (on stderr), 2 on usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"

#define MAX_FILE (64L << 20) /* bytes of composite JSON we read */

static char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > MAX_FILE ||
	    fseek(f, 0, SEEK_SET) != 0)
		goto done;
	p = malloc((size_t)n + 1);
	if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
		free(p);
		p = NULL;
		goto done;
	}
	p[n] = '\0';
	*len = (size_t)n;
done:
	fclose(f);
	return p;
}

/* The dump_passes mask of a comma-separated list of pass names; 0 if a
 * name is not a pass (or the list is empty). */
static unsigned
pass_mask(const char *list)
{
	unsigned mask = 0;

	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		KcPass k = kc_pass_lookup(p, n);
		if (k == KC_PASS_COUNT)
			return 0;
		mask |= 1u << k;
		p += n;
		if (*p == ',')
			p++;
	}
	return mask;
}

int
main(int argc, char **argv)
{
	const char *passes = "lower,schedule";
	CompileCtx *c = NULL;
	KcGraph *g = NULL;
	KcTarget tgt;
	KcErr err = {0};
	KcLimits lim = {0};
	KcBuf dump = {0};
	KcArtifact art = {0};
	KcCompileOptions opts = {0};
	char *json = NULL;
	size_t len = 0;
	int rc = 1;

	if (argc == 5 && strcmp(argv[1], "-p") == 0) {
		passes = argv[2];
		argv += 2;
		argc -= 2;
	}
	if (argc != 3 || !(opts.dump_passes = pass_mask(passes))) {
		fprintf(stderr, "usage: kc_golden [-p PASS[,PASS...]] FILE TARGET\n");
		return 2;
	}
	if (strcmp(argv[2], "cpu") == 0) {
		fprintf(stderr, "kc_golden: name a target; \"cpu\" depends on the host\n");
		return 2;
	}
	if (!(json = read_file(argv[1], &len))) {
		fprintf(stderr, "kc_golden: cannot read %s\n", argv[1]);
		return 1;
	}
	kc_compiler_init();
	c = compile_ctx_new();
	if (kc_parse(c, json, len, &lim, &g, &err) != KC_OK ||
	    kc_target_resolve(argv[2], &tgt, &err) != KC_OK)
		goto done;
	opts.dump = &dump;
	opts.verify = true;
	if (kc_compile(c, g, &tgt, kc_schedule_default(c, g, &tgt), &opts, &art, &err) != KC_OK)
		goto done;
	if (dump.len)
		fwrite(dump.data, 1, dump.len, stdout);
	rc = fflush(stdout) == 0 ? 0 : 1;
done:
	if (err.status != KC_OK)
		fprintf(stderr, "kc_golden: %s: %s at %s: %s\n", argv[1],
		        kc_status_code(err.status), err.where, err.msg);
	kc_artifact_free(&art);
	kc_buf_free(&dump);
	compile_ctx_free(c);
	free(json);
	return rc;
}
