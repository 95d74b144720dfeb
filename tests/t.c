/* t.c - the TAP harness behind t.h. */
#include "t.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "version.h"

static int n_run, n_fail, n_skip;
static const char *cur = "";

void
t_ok(int cond, const char *file, int line, const char *expr)
{
	n_run++;
	if (cond) {
		printf("ok %d - %s: %s\n", n_run, cur, expr);
	} else {
		n_fail++;
		printf("not ok %d - %s: %s (%s:%d)\n", n_run, cur, expr, file, line);
	}
	fflush(stdout);
}

void
t_okf(int cond, const char *file, int line, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	t_ok(cond, file, line, msg);
}

void
t_sub(const char *name, void (*fn)(void))
{
	/* T_ONLY=name[,name...]: run just those subtests (while working on one) */
	const char *only = getenv("T_ONLY");
	if (only && *only) {
		size_t n = strlen(name);
		const char *p = only;
		while ((p = strstr(p, name)) &&
		       !((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')))
			p += n;
		if (!p)
			return;
	}
	cur = name;
	printf("# %s\n", name);
	fn();
	cur = "";
}

void
t_skip(const char *why)
{
	n_skip++;
	printf("ok %d - %s # SKIP %s\n", ++n_run, cur, why);
}

int
t_done(void)
{
	printf("1..%d\n", n_run);
	printf("# %d passed, %d failed, %d skipped\n", n_run - n_fail - n_skip, n_fail, n_skip);
	return n_fail ? 1 : 0;
}

const char *
t_corpus_dir(void)
{
	static char path[4096];
	const char *env = getenv("KCS_CORPUS_DIR");
	if (env && *env)
		snprintf(path, sizeof path, "%s", env);
	else
		snprintf(path, sizeof path, "%s/../shared/corpus/akg", KCSD_SOURCE_DIR);
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	return path;
}
