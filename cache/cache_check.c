/* cache_check.c - the start-up check of data.mdb, and moving a damaged file
 * aside.
 *
 * The one idea: LMDB trusts its file. A truncated or overwritten data.mdb
 * can make LMDB read past the end of the file (SIGBUS) or follow garbage
 * (SIGSEGV, an assertion), so the check runs in a forked child before the
 * daemon opens the environment: it compares the file size with the last
 * page the meta page claims, walks every database with a cursor, checks
 * that every key and value lies inside the file, and that no page on the
 * free list is also a leaf or overflow page in use. A child that reports
 * damage or dies from a signal means the file is damaged: it is renamed to
 * data.mdb.damaged-<UTC time> (never deleted) and kcsd starts empty. A
 * damaged *value* that passes this check is caught by its checksum on read.
 * The child ends with _exit(): it is not the daemon.
 *
 * cache_audit, at the end, checks what the walk does not: the references
 * between the databases (every kernel and schedule has its workload, every
 * workload has a schedule or a kernel).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define CHECK_TIMEOUT_S 300
#define CHILD_OK 0
#define CHILD_CANNOT 2 /* could not check (permissions, ...): not damage */
#define CHILD_DAMAGED 3

bool
damage_code(int rc)
{
	return rc == MDB_INVALID || rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND ||
	       rc == MDB_VERSION_MISMATCH;
}

bool
move_aside(const char *dir, const char *path, const char *why)
{
	char dst[4400], when[32], lock[4200];
	struct tm tm;
	time_t t = (time_t)kc_wall_s();
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
	snprintf(dst, sizeof dst, "%s.damaged-%s", path, when);
	for (int i = 1; access(dst, F_OK) == 0 && i < 1000; i++)
		snprintf(dst, sizeof dst, "%s.damaged-%s-%d", path, when, i);
	if (rename(path, dst) != 0) {
		kc_log(KC_LOG_ERROR, "cache: %s is damaged (%s) and cannot be moved aside: %s",
		       path, why, strerror(errno));
		return false;
	}
	snprintf(lock, sizeof lock, "%s/lock.mdb", dir);
	unlink(lock);
	kc_log(KC_LOG_ERROR,
	       "cache: %s is damaged (%s); moved it to %s and starting with an empty cache", path,
	       why, dst);
	return true;
}

/* ---- the child ------------------------------------------------------------ */

/* What the walk knows about the file. */
typedef struct Walk {
	const char *base; /* the map, from /proc/self/maps; NULL: unknown */
	size_t file_bytes, psize, npages;
	unsigned char *live; /* bit per page: leaf or overflow page in use */
	unsigned char *freed;
	char why[256];
} Walk;

static bool
bit_get(const unsigned char *m, size_t i)
{
	return (m[i / 8] >> (i % 8)) & 1;
}

static void
bit_set(unsigned char *m, size_t i)
{
	m[i / 8] |= (unsigned char)(1u << (i % 8));
}

/* The start of the mapping of the file with inode `ino`, or NULL. */
static const char *
map_base(ino_t ino)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4600];
	const char *base = NULL;
	if (!f)
		return NULL;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi, off, in;
		char perms[8], dev[16];
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &in) ==
		        6 &&
		    in == (unsigned long)ino && off == 0) {
			base = (const char *)(uintptr_t)lo;
			break;
		}
	}
	fclose(f);
	return base;
}

/* Marks the pages under [p, p + n) live; false if outside the file. */
static bool
mark(Walk *w, const void *p, size_t n)
{
	if (!w->base)
		return true;
	const char *c = p;
	if (c < w->base || n > w->file_bytes || (size_t)(c - w->base) > w->file_bytes - n)
		return false;
	size_t first = (size_t)(c - w->base) / w->psize;
	size_t last = n ? ((size_t)(c - w->base) + n - 1) / w->psize : first;
	for (size_t i = first; i <= last && i < w->npages; i++)
		bit_set(w->live, i);
	return true;
}

/* Walks one database; returns an LMDB code or MDB_CORRUPTED (why set). */
static int
walk_db(Walk *w, MDB_txn *txn, MDB_dbi dbi, const char *name)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc != MDB_SUCCESS)
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		bool same = w->base && (size_t)((const char *)v.mv_data - w->base) / w->psize ==
		                           (size_t)((const char *)k.mv_data - w->base) / w->psize;
		/* an overflow value starts 16 bytes into its first page */
		const char *vp = same ? v.mv_data : (const char *)v.mv_data - 16;
		size_t vn = same ? v.mv_size : v.mv_size + 16;
		if (!mark(w, k.mv_data, k.mv_size) || !mark(w, vp, vn)) {
			snprintf(w->why, sizeof w->why,
			         "a record of database '%s' lies outside the file", name);
			rc = MDB_CORRUPTED;
			break;
		}
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND && rc != MDB_CORRUPTED)
		snprintf(w->why, sizeof w->why, "walking database '%s': %s", name,
		         mdb_strerror(rc));
	return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

/* Every page on the free list is inside the file, listed once, and not
 * a page in use. */
static int
check_free(Walk *w, MDB_txn *txn, size_t last_pgno)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, 0 /* FREE_DBI */, &cur);
	if (rc != MDB_SUCCESS)
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		size_t cnt, pg;
		if (v.mv_size < sizeof cnt || v.mv_size % sizeof cnt != 0) {
			rc = MDB_CORRUPTED;
			break;
		}
		memcpy(&cnt, v.mv_data, sizeof cnt);
		if (cnt != v.mv_size / sizeof cnt - 1) {
			rc = MDB_CORRUPTED;
			break;
		}
		for (size_t i = 1; rc == MDB_SUCCESS && i <= cnt; i++) {
			memcpy(&pg, (const char *)v.mv_data + i * sizeof pg, sizeof pg);
			if (pg < 2 || pg > last_pgno)
				rc = MDB_CORRUPTED;
			else if (w->base && (bit_get(w->live, pg) || bit_get(w->freed, pg)))
				rc = MDB_CORRUPTED;
			else if (w->base)
				bit_set(w->freed, pg);
		}
		if (rc != MDB_SUCCESS)
			break;
	}
	mdb_cursor_close(cur);
	if (rc == MDB_CORRUPTED)
		snprintf(w->why, sizeof w->why, "the free page list is inconsistent");
	else if (rc != MDB_NOTFOUND)
		snprintf(w->why, sizeof w->why, "walking the free list: %s", mdb_strerror(rc));
	return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

static int
check_child(const char *dir, const char *path, char *why, size_t cap)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_envinfo info;
	MDB_stat est;
	MDB_dbi main_dbi;
	MDB_val k, v;
	struct stat sb;
	Walk w = {0};
	int code = CHILD_DAMAGED;
	int rc;

	if (stat(path, &sb) != 0) {
		snprintf(why, cap, "cannot stat: %s", strerror(errno));
		return CHILD_CANNOT;
	}
	rc = mdb_env_create(&env);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_set_maxdbs(env, 64);
	if (rc == MDB_SUCCESS)
		rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600);
	if (rc != MDB_SUCCESS) {
		snprintf(why, cap, "LMDB cannot open it: %s", mdb_strerror(rc));
		code =
		    damage_code(rc) || rc == ENOMEM || rc == EINVAL ? CHILD_DAMAGED : CHILD_CANNOT;
		goto done;
	}
	if (mdb_env_info(env, &info) != MDB_SUCCESS || mdb_env_stat(env, &est) != MDB_SUCCESS) {
		snprintf(why, cap, "LMDB cannot read its meta page");
		goto done;
	}
	w.psize = est.ms_psize;
	w.file_bytes = (size_t)sb.st_size;
	if (w.psize == 0 || (info.me_last_pgno + 1) > w.file_bytes / w.psize) {
		snprintf(why, cap, "truncated: %zu bytes, but its meta page needs %zu",
		         w.file_bytes, (info.me_last_pgno + 1) * w.psize);
		goto done;
	}
	w.npages = info.me_last_pgno + 1;
	w.base = map_base(sb.st_ino);
	w.live = kc_xcalloc(w.npages / 8 + 1, 1);
	w.freed = kc_xcalloc(w.npages / 8 + 1, 1);
	rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS)
		rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
	if (rc != MDB_SUCCESS) {
		snprintf(why, cap, "LMDB cannot read it: %s", mdb_strerror(rc));
		goto done;
	}
	rc = walk_db(&w, txn, main_dbi, "(main)");
	if (rc == MDB_SUCCESS)
		rc = walk_db(&w, txn, 0, "(free list)");
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, main_dbi, &cur);
	for (int crc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : MDB_NOTFOUND;
	     rc == MDB_SUCCESS && crc == MDB_SUCCESS; crc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		char name[128];
		MDB_dbi dbi;
		if (k.mv_size == 0 || k.mv_size >= sizeof name || memchr(k.mv_data, 0, k.mv_size)) {
			snprintf(w.why, sizeof w.why, "a database name is malformed");
			rc = MDB_CORRUPTED;
			break;
		}
		memcpy(name, k.mv_data, k.mv_size);
		name[k.mv_size] = 0;
		rc = mdb_dbi_open(txn, name, 0, &dbi);
		if (rc != MDB_SUCCESS) {
			snprintf(w.why, sizeof w.why, "opening database '%s': %s", name,
			         mdb_strerror(rc));
			break;
		}
		rc = walk_db(&w, txn, dbi, name);
	}
	if (rc == MDB_SUCCESS)
		rc = check_free(&w, txn, info.me_last_pgno);
	if (rc != MDB_SUCCESS) {
		snprintf(why, cap, "%s", w.why[0] ? w.why : mdb_strerror(rc));
		goto done;
	}
	code = CHILD_OK;
done:
	if (cur)
		mdb_cursor_close(cur);
	if (txn)
		mdb_txn_abort(txn);
	if (env)
		mdb_env_close(env);
	free(w.live);
	free(w.freed);
	return code;
}

/* ---- the parent ------------------------------------------------------------ */

KcStatus
check_at_start(const char *dir, const char *path, KcErr *err)
{
	struct stat sb;
	int fds[2], status = 0;
	char why[300] = "";
	if (stat(path, &sb) != 0 || sb.st_size == 0)
		return KC_OK; /* a new store */
	if (pipe(fds) != 0)
		return kc_fail(err, KC_CACHE, "cache", "cannot check %s: pipe: %s", path,
		               strerror(errno));
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return kc_fail(err, KC_CACHE, "cache", "cannot check %s: fork: %s", path,
		               strerror(errno));
	}
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		close(fds[0]);
		setrlimit(RLIMIT_CORE, &no_core);
		signal(SIGALRM, SIG_DFL);
		alarm(CHECK_TIMEOUT_S);
		int code = check_child(dir, path, why, sizeof why);
		if (write(fds[1], why, strlen(why)) < 0)
			code = code == CHILD_OK ? CHILD_OK : code;
		_exit(code);
	}
	close(fds[1]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	ssize_t n = read(fds[0], why, sizeof why - 1);
	why[n > 0 ? n : 0] = 0;
	close(fds[0]);
	if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_OK)
		return KC_OK;
	if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_CANNOT) {
		kc_log(KC_LOG_WARN, "cache: could not check %s (%s)", path, why);
		return KC_OK; /* opening it will say what is wrong */
	}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		return kc_fail(err, KC_CACHE, "cache",
		               "the start-up check of %s did not finish within %d s; not starting",
		               path, CHECK_TIMEOUT_S);
	if (WIFSIGNALED(status))
		snprintf(why, sizeof why, "reading it crashed the check with signal %d",
		         WTERMSIG(status));
	else if (WEXITSTATUS(status) != CHILD_DAMAGED || !why[0])
		snprintf(why, sizeof why, "the check failed with exit code %d",
		         WEXITSTATUS(status));
	if (!move_aside(dir, path, why))
		return kc_fail(err, KC_CACHE, "cache",
		               "%s is damaged (%s) and cannot be moved aside; not starting", path,
		               why);
	return KC_OK;
}

/* ---- the reference audit (cache_audit) -------------------------------------- */

static int
key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

/* The workload keys kref names, sorted (duplicates kept). */
static int
kref_workloads(Cache *c, MDB_txn *txn, KcDigest **out, size_t *n)
{
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	size_t cap = 0;
	*out = NULL;
	*n = 0;
	int rc = mdb_cursor_open(txn, c->kref, &cur);
	for (rc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : rc;
	     rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (!frame_ok(&v) || v.mv_size != FRAME_HDR + 64)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			*out = kc_xrealloc(*out, cap * sizeof **out);
		}
		memcpy((*out)[(*n)++].b, (const unsigned char *)v.mv_data + FRAME_HDR, 32);
	}
	if (cur)
		mdb_cursor_close(cur);
	if (*n > 1)
		qsort(*out, *n, sizeof **out, key_cmp);
	return rc == MDB_NOTFOUND ? MDB_SUCCESS : rc;
}

/* True if the workload record `wk` is stored and passes its checksum. */
static bool
workload_stored(Cache *c, MDB_txn *txn, const unsigned char *wk)
{
	MDB_val k = {32, (void *)wk}, v;
	return mdb_get(txn, c->workloads, &k, &v) == MDB_SUCCESS && frame_ok(&v);
}

KcStatus
cache_audit(Cache *c, CacheAudit *out, KcErr *err)
{
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	KcDigest *refs = NULL, last = {{0}};
	size_t nrefs = 0;
	bool have_last = false;
	memset(out, 0, sizeof *out);
	int rc = txn_begin(c, MDB_RDONLY, &txn);
	if (rc == MDB_SUCCESS)
		rc = kref_workloads(c, txn, &refs, &nrefs);
	/* kernels: distinct ids of artifacts, each with a kref to a stored workload */
	if (rc == MDB_SUCCESS)
		rc = mdb_cursor_open(txn, c->artifacts, &cur);
	for (rc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : rc;
	     rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != 33 || (have_last && memcmp(last.b, k.mv_data, 32) == 0))
			continue;
		memcpy(last.b, k.mv_data, 32);
		have_last = true;
		out->kernels++;
		MDB_val rk = {32, last.b}, rv;
		if (mdb_get(txn, c->kref, &rk, &rv) != MDB_SUCCESS || !frame_ok(&rv) ||
		    rv.mv_size != FRAME_HDR + 64 ||
		    !workload_stored(c, txn, (const unsigned char *)rv.mv_data + FRAME_HDR))
			out->kernels_without_workload++;
	}
	if (cur)
		mdb_cursor_close(cur);
	cur = NULL;
	if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_open(txn, c->schedules, &cur);
	for (rc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : rc;
	     rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		out->schedules++;
		if (k.mv_size != 64 || !workload_stored(c, txn, k.mv_data))
			out->schedules_without_workload++;
	}
	if (cur)
		mdb_cursor_close(cur);
	cur = NULL;
	if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_open(txn, c->workloads, &cur);
	for (rc = rc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_FIRST) : rc;
	     rc == MDB_SUCCESS; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		out->workloads++;
		if (k.mv_size != 32)
			continue;
		bool kernel = nrefs && bsearch(k.mv_data, refs, nrefs, sizeof *refs, key_cmp);
		if (!kernel && !has_prefix(txn, c->schedules, k.mv_data) &&
		    !has_prefix(txn, c->kindex, k.mv_data))
			out->unreferenced_workloads++;
	}
	if (cur)
		mdb_cursor_close(cur);
	txn_abort(c, txn);
	free(refs);
	if (rc != MDB_NOTFOUND && rc != MDB_SUCCESS)
		return lmdb_fail(c, err, rc, "auditing the store");
	return KC_OK;
}
