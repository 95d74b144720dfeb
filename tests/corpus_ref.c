/* corpus_ref.c - the reference half of the corpus fixture (tests/corpus.cmake).
 *
 *   corpus_ref --corpus DIR --out DIR/ref [--seed N] [--jobs N]
 *
 * For every corpus file (DIR/ *.info|*.json and one folder down, as the
 * Python tests walk it) the graph is parsed, seeded inputs are made with
 * kc_interp_random_inputs and the reference interpreter runs once on them
 * (kc_interp_ties). Consumers (test_interp, test_conformance.py, and any
 * later test that runs a corpus kernel on another target) run their kernel
 * on these inputs and compare with these outputs, so the interpreter,
 * by far the slowest part of a corpus check, runs once per ctest run.
 * Per file, KEY being its path below DIR with '/' as "__":
 *   KEY.in    the inputs in kcsd-runner's --in format: "KCSRUN1\0", u32
 *             nargs, u32 ninputs, nargs x u64 byte sizes (inputs, then
 *             outputs), the inputs' bytes back to back (native order);
 *   KEY.ref   the interpreter's outputs back to back, then one tie byte
 *             per output element (kcsd-runner --ref's --out format), then
 *             the inputs the interpreter changed (Assign writes some in
 *             place), as it left them, in input order;
 *   KEY.json  {"file", "sha256" (of the file's bytes), "seed", "interp_ms",
 *             "args": [{"index", "tensor_name", "dtype", "shape",
 *             "is_output", "writes_input", "written" (changed by the
 *             interpreter), "bytes",
 *             "tolerance"}]}; or
 *             "error": {"code", "where", "message"} when the parser or the
 *             interpreter refuses the file (no .in/.ref then).
 * "tolerance" is the float comparison bound, |got - want| <= t + t |want|:
 * 1e-2 where float16/bfloat16 is upstream (kc_interp_half_upstream; for
 * inputs, their own dtype), else 1e-4; 0 for integers and bools (exact).
 * Elements whose tie byte is 1 hang on a near-tie comparison and may differ.
 * index.json lists every KEY.json in corpus order. Exit 0 when all files
 * were handled (refusals included), 1 on an I/O error, 77 (ctest's skip)
 * when DIR is absent.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compiler.h"
#include "telem.h"
#include "tjson.h"

#define MAX_FILES 4096
#define INTERP_MAX_BYTES ((size_t)1 << 32) /* live intermediates, as test_interp had */

typedef struct Job {
	char rel[1024];
	char key[1024];
	cJSON *rec; /* the KEY.json object, written by the worker */
} Job;

static Job jobs[MAX_FILES];
static int njobs;
static atomic_int next_job, io_errors;
static const char *corpus_dir, *out_dir;
static uint64_t seed = 11;

static int
cmp_rel(const void *a, const void *b)
{
	return strcmp(((const Job *)a)->rel, ((const Job *)b)->rel);
}

static bool
corpus_ext(const char *name)
{
	const char *dot = strrchr(name, '.');
	return dot && (!strcmp(dot, ".info") || !strcmp(dot, ".json"));
}

/* DIR/x and DIR/sub/x, as test_corpus.py's corpus_files() */
static void
collect(const char *sub, int depth)
{
	char path[2048];
	snprintf(path, sizeof path, "%s%s%s", corpus_dir, *sub ? "/" : "", sub);
	DIR *d = opendir(path);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)) && njobs < MAX_FILES) {
		char rel[1024], full[3072];
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof rel, "%s%s%s", sub, *sub ? "/" : "", e->d_name);
		snprintf(full, sizeof full, "%s/%s", corpus_dir, rel);
		if (stat(full, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth == 0) {
			collect(rel, 1);
		} else if (S_ISREG(st.st_mode) && corpus_ext(e->d_name)) {
			Job *j = &jobs[njobs++];
			snprintf(j->rel, sizeof j->rel, "%s", rel);
			size_t k = 0;
			for (const char *p = rel; *p && k + 2 < sizeof j->key; p++) {
				if (*p == '/')
					j->key[k++] = '_';
				j->key[k++] = *p == '/' ? '_' : *p;
			}
			j->key[k] = 0;
		}
	}
	closedir(d);
}

static void
error_rec(cJSON *rec, const KcErr *err, KcStatus st)
{
	cJSON *e = cJSON_AddObjectToObject(rec, "error");
	cJSON_AddStringToObject(e, "code", kc_status_code(st));
	cJSON_AddStringToObject(e, "where", err->where);
	cJSON_AddStringToObject(e, "message", err->msg);
}

static bool
put(FILE *f, const void *p, size_t n)
{
	return fwrite(p, 1, n, f) == n;
}

static void
one(Job *j)
{
	char path[3072];
	size_t len = 0;
	KcErr err = {0};
	KcLimits lim = {0};
	KcGraph *g = NULL;
	CompileCtx *c = compile_ctx_new();
	cJSON *rec = cJSON_CreateObject();
	void **args = NULL;
	uint8_t **ties = NULL;
	int n = 0, nin = 0;
	j->rec = rec;
	cJSON_AddStringToObject(rec, "file", j->rel);
	cJSON_AddNumberToObject(rec, "seed", (double)seed);
	snprintf(path, sizeof path, "%s/%s", corpus_dir, j->rel);
	char *text = t_read_file(path, &len);
	if (!text) {
		atomic_fetch_add(&io_errors, 1);
		fprintf(stderr, "corpus_ref: cannot read %s\n", path);
		goto done;
	}
	KcDigest dg;
	char hex[65];
	kc_sha256(text, len, &dg);
	kc_digest_hex(&dg, hex);
	cJSON_AddStringToObject(rec, "sha256", hex);
	KcStatus st = kc_parse(c, text, len, &lim, &g, &err);
	if (st != KC_OK) {
		error_rec(rec, &err, st);
		goto done;
	}
	n = kc_graph_nargs(g);
	args = calloc((size_t)n + 1, sizeof *args);
	ties = calloc((size_t)n + 1, sizeof *ties);
	uint64_t *bytes = calloc((size_t)n + 1, sizeof *bytes);
	int64_t *numels = calloc((size_t)n + 1, sizeof *numels);
	bool *written = calloc((size_t)n + 1, sizeof *written);
	cJSON *ja = cJSON_AddArrayToObject(rec, "args");
	for (int i = 0; i < n; i++) {
		KcArgInfo ai;
		kc_graph_arg(g, i, &ai);
		int64_t numel = 1;
		for (int d = 0; d < ai.rank; d++)
			numel *= ai.shape[d];
		numels[i] = numel;
		bytes[i] = (uint64_t)numel * t_dt_bytes(ai.dtype);
		args[i] = calloc(1, bytes[i] + 8);
		if (!ai.is_output)
			nin++;
		else
			ties[i] = calloc((size_t)numel + 1, 1);
		bool half = ai.is_output
		                ? kc_interp_half_upstream(c, g, i - nin)
		                : !strcmp(ai.dtype, "float16") || !strcmp(ai.dtype, "bfloat16");
		cJSON *a = cJSON_CreateObject();
		cJSON_AddNumberToObject(a, "index", i);
		cJSON_AddStringToObject(a, "tensor_name", ai.tensor_name ? ai.tensor_name : "");
		cJSON_AddStringToObject(a, "dtype", ai.dtype);
		cJSON *sh = cJSON_AddArrayToObject(a, "shape");
		for (int d = 0; d < ai.rank; d++)
			cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ai.shape[d]));
		cJSON_AddBoolToObject(a, "is_output", ai.is_output);
		if (ai.writes_input >= 0)
			cJSON_AddNumberToObject(a, "writes_input", ai.writes_input);
		else
			cJSON_AddNullToObject(a, "writes_input");
		cJSON_AddNumberToObject(a, "bytes", (double)bytes[i]);
		cJSON_AddNumberToObject(a, "tolerance",
		                        !t_dt_float(ai.dtype) ? 0
		                        : half                ? 1e-2
		                                              : 1e-4);
		cJSON_AddItemToArray(ja, a);
	}
	kc_interp_random_inputs(c, g, seed, args);
	snprintf(path, sizeof path, "%s/%s.in", out_dir, j->key);
	FILE *f = fopen(path, "wb");
	uint32_t hdr[2] = {(uint32_t)n, (uint32_t)nin};
	bool ok = f && put(f, "KCSRUN1", 8) && put(f, hdr, sizeof hdr) &&
	          put(f, bytes, sizeof *bytes * (size_t)n);
	for (int i = 0; ok && i < nin; i++)
		ok = put(f, args[i], bytes[i]);
	if (f && fclose(f) != 0)
		ok = false;
	if (!ok) {
		atomic_fetch_add(&io_errors, 1);
		fprintf(stderr, "corpus_ref: cannot write %s\n", path);
		goto free_args;
	}
	/* the interpreter's own copy: what it changes is what an Assign
	 * wrote, however the graph says so */
	void **orig = calloc((size_t)nin + 1, sizeof *orig);
	for (int i = 0; i < nin; i++)
		orig[i] = memcpy(malloc(bytes[i] + 1), args[i], bytes[i]);
	int64_t t0 = kc_now_us();
	st = kc_interp_ties(c, g, args, INTERP_MAX_BYTES, ties + nin, &err);
	for (int i = 0; i < nin; i++) {
		written[i] = memcmp(orig[i], args[i], bytes[i]) != 0;
		cJSON_AddBoolToObject(cJSON_GetArrayItem(ja, i), "written", written[i]);
		free(orig[i]);
	}
	for (int i = nin; i < n; i++)
		cJSON_AddBoolToObject(cJSON_GetArrayItem(ja, i), "written", false);
	free(orig);
	cJSON_AddNumberToObject(rec, "interp_ms", (double)(kc_now_us() - t0) / 1e3);
	if (st != KC_OK) {
		unlink(path);
		cJSON_DeleteItemFromObject(rec, "args");
		error_rec(rec, &err, st);
		goto free_args;
	}
	snprintf(path, sizeof path, "%s/%s.ref", out_dir, j->key);
	f = fopen(path, "wb");
	ok = f != NULL;
	for (int i = nin; ok && i < n; i++)
		ok = put(f, args[i], bytes[i]);
	for (int i = nin; ok && i < n; i++)
		ok = put(f, ties[i], (size_t)numels[i]);
	for (int i = 0; ok && i < nin; i++)
		if (written[i])
			ok = put(f, args[i], bytes[i]);
	if (f && fclose(f) != 0)
		ok = false;
	if (!ok) {
		atomic_fetch_add(&io_errors, 1);
		fprintf(stderr, "corpus_ref: cannot write %s\n", path);
	}
free_args:
	for (int i = 0; i < n; i++) {
		free(args[i]);
		free(ties[i]);
	}
	free(bytes);
	free(numels);
	free(written);
done:
	free(args);
	free(ties);
	free(text);
	compile_ctx_free(c);
}

static void *
worker(void *p)
{
	(void)p;
	for (int i; (i = atomic_fetch_add(&next_job, 1)) < njobs;)
		one(&jobs[i]);
	return NULL;
}

static bool
write_json(const char *path, const cJSON *j)
{
	char *s = cJSON_Print(j);
	FILE *f = fopen(path, "wb");
	bool ok = s && f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
	if (f && fclose(f) != 0)
		ok = false;
	free(s);
	return ok;
}

int
main(int argc, char **argv)
{
	int nthreads = 2;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--corpus"))
			corpus_dir = argv[i + 1];
		else if (!strcmp(argv[i], "--out"))
			out_dir = argv[i + 1];
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--jobs"))
			nthreads = atoi(argv[i + 1]);
	}
	if (!corpus_dir || !out_dir || nthreads < 1 || nthreads > 64) {
		fprintf(stderr, "usage: corpus_ref --corpus DIR --out DIR [--seed N] [--jobs N]\n");
		return 2;
	}
	struct stat st;
	if (stat(corpus_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		printf("# SKIP corpus absent (%s)\n", corpus_dir);
		return 77;
	}
	/* the folder (and its parent, shared with corpus_fixture.py) is made
	 * here; it is this tool's, so last run's files go */
	char parent[2048];
	snprintf(parent, sizeof parent, "%s", out_dir);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = 0;
		mkdir(parent, 0755);
	}
	mkdir(out_dir, 0755);
	DIR *od = opendir(out_dir);
	for (struct dirent *e; od && (e = readdir(od));) {
		char old[3072];
		const char *dot = strrchr(e->d_name, '.');
		if (dot && (!strcmp(dot, ".in") || !strcmp(dot, ".ref") || !strcmp(dot, ".json"))) {
			snprintf(old, sizeof old, "%s/%s", out_dir, e->d_name);
			unlink(old);
		}
	}
	if (od)
		closedir(od);
	kc_compiler_init();
	collect("", 0);
	qsort(jobs, (size_t)njobs, sizeof jobs[0], cmp_rel);
	int64_t t0 = kc_now_us();
	pthread_t th[64];
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, worker, NULL);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	cJSON *index = cJSON_CreateArray();
	int nerr = 0;
	for (int i = 0; i < njobs; i++) {
		char path[3072];
		Job *j = &jobs[i];
		if (!j->rec)
			continue;
		nerr += cJSON_GetObjectItem(j->rec, "error") != NULL;
		snprintf(path, sizeof path, "%s/%s.json", out_dir, j->key);
		if (!write_json(path, j->rec))
			atomic_fetch_add(&io_errors, 1);
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "file", j->rel);
		cJSON_AddStringToObject(e, "key", j->key);
		cJSON_AddItemToArray(index, e);
		cJSON_Delete(j->rec);
	}
	char path[3072];
	snprintf(path, sizeof path, "%s/index.json", out_dir);
	if (!write_json(path, index))
		atomic_fetch_add(&io_errors, 1);
	cJSON_Delete(index);
	printf("# corpus_ref: %d files, %d refused by the parser or the interpreter, seed %llu, "
	       "%.1f s on %d threads\n",
	       njobs, nerr, (unsigned long long)seed, (double)(kc_now_us() - t0) / 1e6, nthreads);
	return atomic_load(&io_errors) ? 1 : 0;
}
