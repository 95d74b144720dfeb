/* kcs.c - command-line client of kcsd (API v1): `kcs compile FILE
 * [--target T] [-o out.so] [--dump P,...]`, `kcs get ID
 * [--ir|--asm|--object] [-o FILE]`, `kcs version`, `kcs keys`,
 * `kcs host-target`; --server URL on each.
 *
 * The one idea: the CLI trusts nothing it did not check. An object is written
 * only after its SHA-256 matches the response's object_sha256, the metadata's
 * Ed25519 signature verifies with a key of the trusted-keys file (exit 4
 * otherwise) and every CPU feature in target.features is present on this
 * machine (exit 3 otherwise; --no-check skips the feature test, for cross
 * builds). The default target is this machine's "x86_64+<features>" read
 * from /proc/cpuinfo, not "cpu", so a kernel compiled here runs here even
 * when the server is another machine. Over https the server certificate is
 * verified (--cacert FILE or $KCS_CACERT, else the system CAs).
 * Exit codes: 0 ok, 1 server or transport error, 2 usage, 3 missing CPU
 * feature, 4 bad or untrusted signature. Depends on common/ and the wire
 * format only (libcurl, cJSON).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "common.h"

#define DEFAULT_SERVER "http://127.0.0.1:8787"
#define MAX_RESPONSE ((size_t)256 << 20)
#define MAX_REQUEST ((size_t)64 << 20)

enum { EXIT_SERVER = 1, EXIT_USAGE = 2, EXIT_FEATURE = 3, EXIT_SIGNATURE = 4 };

/* Set once in main: the CA file for https (NULL: libcurl's default). */
static const char *cacert_file;

/* ---- host CPU features ------------------------------------------------- */

typedef struct FlagMap {
	const char *flag; /* /proc/cpuinfo spelling */
	const char *llvm; /* LLVM feature name */
	int in_target;    /* printed in the default target name */
} FlagMap;

/* /proc/cpuinfo spelling -> LLVM, in the order of the target name. */
static const FlagMap x86_flags[] = {
#define X86(fl, llvm, t) {fl, llvm, t},
#define ARM(fl, llvm, t)
#include "cpuflags.def"
#undef X86
#undef ARM
};

static const FlagMap arm_flags[] = {
#define X86(fl, llvm, t)
#define ARM(fl, llvm, t) {fl, llvm, t},
#include "cpuflags.def"
#undef X86
#undef ARM
};

/* clang-format off */

/* Always present on the architecture (baseline). */
static const char *const x86_base[] = {"64bit", "x87", "cmov", "cx8", "mmx", "fxsr", "sse", "sse2"};
static const char *const arm_base[] = {"neon", "fp-armv8"};
/* Not checked: CET shadow-stack instructions are NOPs on CPUs without it, and
 * Linux lists the flag ("user_shstk") only when it enables user shadow stacks,
 * so LLVM's CPUID-based host detection reports it where cpuinfo does not. */
static const char *const unchecked[] = {"shstk"};
/* clang-format on */

typedef struct Host {
	char arch[72];
	const char *have[128]; /* LLVM feature names this CPU has */
	size_t nhave;
	const FlagMap *map;
	size_t nmap;
} Host;

static int
has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
		int start = p == list || p[-1] == ' ' || p[-1] == '\t';
		int end = p[n] == 0 || p[n] == ' ' || p[n] == '\n' || p[n] == '\t';
		if (start && end)
			return 1;
	}
	return 0;
}

static int
host_has(const Host *h, const char *feat)
{
	for (size_t i = 0; i < h->nhave; i++)
		if (strcmp(h->have[i], feat) == 0)
			return 1;
	return 0;
}

static void
host_add(Host *h, const char *feat)
{
	if (!host_has(h, feat) && h->nhave < sizeof h->have / sizeof h->have[0])
		h->have[h->nhave++] = feat;
}

/* Reads the CPU's flags line once into h. */
static void
host_detect(Host *h)
{
	struct utsname u;
	memset(h, 0, sizeof *h);
	snprintf(h->arch, sizeof h->arch, "%s", uname(&u) == 0 ? u.machine : "unknown");
	const char *const *base = NULL;
	size_t nbase = 0;
	const char *key = "flags";
	if (strcmp(h->arch, "x86_64") == 0) {
		h->map = x86_flags;
		h->nmap = sizeof x86_flags / sizeof x86_flags[0];
		base = x86_base;
		nbase = sizeof x86_base / sizeof x86_base[0];
	} else if (strcmp(h->arch, "aarch64") == 0 || strcmp(h->arch, "arm64") == 0) {
		snprintf(h->arch, sizeof h->arch, "aarch64");
		h->map = arm_flags;
		h->nmap = sizeof arm_flags / sizeof arm_flags[0];
		base = arm_base;
		nbase = sizeof arm_base / sizeof arm_base[0];
		key = "Features";
	}
	for (size_t i = 0; i < nbase; i++)
		host_add(h, base[i]);
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		char *colon = strchr(line, ':');
		if (!colon || strncmp(line, key, strlen(key)) != 0)
			continue;
		for (size_t i = 0; i < h->nmap; i++)
			if (has_word(colon + 1, h->map[i].flag))
				host_add(h, h->map[i].llvm);
		break;
	}
	free(line);
	fclose(f);
}

/* "x86_64+sse3+...": the default target name for this machine. */
static void
host_target(const Host *h, KcBuf *out)
{
	kc_buf_puts(out, h->arch);
	for (size_t i = 0; i < h->nmap; i++) {
		const FlagMap *m = &h->map[i];
		if (!m->in_target || !host_has(h, m->llvm))
			continue;
		/* print each LLVM name once (several flags may map to it) */
		int dup = 0;
		for (size_t j = 0; j < i; j++)
			if (h->map[j].in_target && strcmp(h->map[j].llvm, m->llvm) == 0)
				dup = 1;
		if (!dup)
			kc_buf_printf(out, "+%s", m->llvm);
	}
}

/* Checks a response's "target" object against this CPU. Returns 0 when it
 * can run here; otherwise prints what is missing and returns EXIT_FEATURE. */
static int
check_target(const Host *h, const cJSON *target)
{
	const cJSON *triple = cJSON_GetObjectItemCaseSensitive(target, "triple");
	const cJSON *feats = cJSON_GetObjectItemCaseSensitive(target, "features");
	if (cJSON_IsString(triple)) {
		char arch[32];
		size_t n = strcspn(triple->valuestring, "-");
		snprintf(arch, sizeof arch, "%.*s", (int)(n < 31 ? n : 31), triple->valuestring);
		if (strcmp(arch, "arm64") == 0)
			snprintf(arch, sizeof arch, "aarch64");
		if (arch[0] && strcmp(arch, h->arch) != 0) {
			fprintf(stderr, "kcs: kernel is for %s, this machine is %s\n",
			        triple->valuestring, h->arch);
			return EXIT_FEATURE;
		}
	}
	if (!cJSON_IsString(feats))
		return 0;
	KcBuf missing = {0};
	char *list = kc_xstrdup(feats->valuestring);
	for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		int skip = tok[0] != '+' || host_has(h, tok + 1);
		for (size_t i = 0; i < sizeof unchecked / sizeof unchecked[0]; i++)
			skip |= strcmp(tok + 1, unchecked[i]) == 0;
		if (skip)
			continue;
		kc_buf_printf(&missing, "%s%s", missing.len ? ", " : "", tok + 1);
	}
	free(list);
	int rc = 0;
	if (missing.len) {
		fprintf(stderr, "kcs: kernel needs CPU features this machine lacks: %s\n",
		        missing.data);
		rc = EXIT_FEATURE;
	}
	kc_buf_free(&missing);
	return rc;
}

/* ---- HTTP ---------------------------------------------------------------- */

typedef struct Reply {
	long status;
	KcBuf body;
	int too_large;
	char dump_object[16]; /* the X-Kcsd-Dump-Object header, or "" */
} Reply;

static size_t
on_data(char *p, size_t size, size_t n, void *arg)
{
	Reply *r = arg;
	size_t len = size * n;
	if (r->body.len + len > MAX_RESPONSE) {
		r->too_large = 1;
		return 0; /* aborts the transfer */
	}
	kc_buf_append(&r->body, p, len);
	return len;
}

static size_t
on_header(char *p, size_t size, size_t n, void *arg)
{
	Reply *r = arg;
	size_t len = size * n;
	static const char name[] = "x-kcsd-dump-object:";
	if (len > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
		const char *v = p + sizeof name - 1;
		size_t vl = len - (sizeof name - 1);
		while (vl && (*v == ' ' || *v == '\t'))
			v++, vl--;
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		snprintf(r->dump_object, sizeof r->dump_object, "%.*s", (int)vl, v);
	}
	return len;
}

/* One request. body NULL = GET. Returns 0 when a reply (any status) came
 * back; prints the transport error and returns EXIT_SERVER otherwise. */
static int
http(const char *url, const char *body, size_t body_len, Reply *r)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hdr = NULL;
	int rc = 0;
	KC_ASSERT(c);
	memset(r, 0, sizeof *r);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MAX_RESPONSE);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "kcs/1");
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (cacert_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, cacert_file);
	const char *token = getenv("KCS_TOKEN");
	if (token && *token) {
		KcBuf h = {0};
		kc_buf_printf(&h, "Authorization: Bearer %s", token);
		hdr = curl_slist_append(hdr, h.data);
		kc_buf_free(&h);
	}
	if (body) {
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
		hdr = curl_slist_append(hdr, "Expect:");
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
	}
	if (hdr)
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	CURLcode cc = curl_easy_perform(c);
	if (cc != CURLE_OK) {
		if (r->too_large || cc == CURLE_FILESIZE_EXCEEDED)
			fprintf(stderr, "kcs: response from %s exceeds %zu bytes\n", url,
			        MAX_RESPONSE);
		else
			fprintf(stderr, "kcs: %s: %s\n", url, curl_easy_strerror(cc));
		rc = EXIT_SERVER;
		goto done;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
done:
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	return rc;
}

/* For a non-2xx reply: prints "kcs: <status> <code> at <where>: <message>"
 * from the error object (or the raw body) and returns EXIT_SERVER. */
static int
report_error(const Reply *r)
{
	cJSON *j = cJSON_ParseWithLength(r->body.data ? r->body.data : "", r->body.len);
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "status");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
	const cJSON *where = cJSON_GetObjectItemCaseSensitive(e, "where");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
	if (cJSON_IsObject(e))
		fprintf(stderr, "kcs: %ld %s at %s: %s\n",
		        cJSON_IsNumber(st) ? (long)st->valuedouble : r->status,
		        cJSON_IsString(code) ? code->valuestring : "?",
		        cJSON_IsString(where) ? where->valuestring : "?",
		        cJSON_IsString(msg) ? msg->valuestring : "?");
	else
		fprintf(stderr, "kcs: %ld http_error at server: %.200s\n", r->status,
		        r->body.data ? r->body.data : "");
	cJSON_Delete(j);
	return EXIT_SERVER;
}

/* GET/POST and parse a JSON reply; *out is NULL on failure (rc != 0). */
static int
http_json(const char *url, const char *body, size_t len, cJSON **out)
{
	Reply r;
	int rc = http(url, body, len, &r);
	*out = NULL;
	if (rc == 0 && (r.status < 200 || r.status > 299))
		rc = report_error(&r);
	if (rc == 0) {
		*out = cJSON_ParseWithLength(r.body.data ? r.body.data : "", r.body.len);
		if (!*out) {
			fprintf(stderr, "kcs: %s: reply is not JSON\n", url);
			rc = EXIT_SERVER;
		}
	}
	kc_buf_free(&r.body);
	return rc;
}

/* ---- helpers ------------------------------------------------------------- */

/* Standard padded base64 -> bytes. Returns 0, or -1 on malformed input. */
static int
b64decode(const char *s, KcBuf *out)
{
	return kc_base64_decode(s, strlen(s), out) ? 0 : -1;
}

static int
sha_matches(const KcBuf *obj, const cJSON *meta)
{
	const cJSON *want = cJSON_GetObjectItemCaseSensitive(meta, "object_sha256");
	KcDigest d;
	char hex[65];
	kc_sha256(obj->data ? obj->data : "", obj->len, &d);
	kc_digest_hex(&d, hex);
	if (!cJSON_IsString(want) || strcmp(want->valuestring, hex) != 0) {
		fprintf(stderr, "kcs: object sha256 %s does not match object_sha256 %s\n", hex,
		        cJSON_IsString(want) ? want->valuestring : "(missing)");
		return 0;
	}
	return 1;
}

static int
write_file(const char *path, const void *data, size_t len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
	if (!f) {
		fprintf(stderr, "kcs: %s: %s\n", path, strerror(errno));
		return EXIT_SERVER;
	}
	int ok = fwrite(data, 1, len, f) == len;
	ok = (f == stdout ? fflush(f) == 0 : fclose(f) == 0) && ok;
	if (!ok) {
		fprintf(stderr, "kcs: writing %s: %s\n", path, strerror(errno));
		return EXIT_SERVER;
	}
	return 0;
}

static int
read_file(const char *path, KcBuf *out)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char chunk[65536];
	size_t n;
	if (!f) {
		fprintf(stderr, "kcs: %s: %s\n", path, strerror(errno));
		return EXIT_USAGE;
	}
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		kc_buf_append(out, chunk, n);
		if (out->len > MAX_REQUEST) {
			fprintf(stderr, "kcs: %s: larger than %zu bytes\n", path, MAX_REQUEST);
			break;
		}
	}
	int bad = ferror(f) || out->len > MAX_REQUEST;
	if (f != stdin)
		fclose(f);
	return bad ? EXIT_USAGE : 0;
}

static void
print_json(const cJSON *j)
{
	char *s = cJSON_Print(j);
	KC_ASSERT(s);
	puts(s);
	cJSON_free(s);
}

static void
url_escape(KcBuf *out, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '~')
			kc_buf_putc(out, (char)c);
		else
			kc_buf_printf(out, "%%%c%c", hex[c >> 4], hex[c & 15]);
	}
}

/* ---- signatures ---------------------------------------------------------- */

typedef struct TrustedKey {
	char id[KC_KEY_ID_LEN + 1];
	unsigned char pub[KC_ED25519_PUBLIC_BYTES];
} TrustedKey;

typedef struct Trust {
	const char *path; /* the trusted-keys file */
	int tofu;         /* --trust-on-first-use */
	TrustedKey *keys;
	size_t n;
} Trust;

/* $KCS_TRUSTED_KEYS, else $XDG_CONFIG_HOME (~/.config)/kcs/trusted_keys. */
static void
default_trust_path(KcBuf *out)
{
	const char *p = getenv("KCS_TRUSTED_KEYS");
	const char *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME");
	if (p && *p)
		kc_buf_puts(out, p);
	else if (xdg && *xdg)
		kc_buf_printf(out, "%s/kcs/trusted_keys", xdg);
	else
		kc_buf_printf(out, "%s/.config/kcs/trusted_keys", home ? home : ".");
}

static void
trust_add(Trust *t, const char *id, const unsigned char *pub)
{
	t->keys = kc_xrealloc(t->keys, (t->n + 1) * sizeof *t->keys);
	snprintf(t->keys[t->n].id, sizeof t->keys[t->n].id, "%s", id);
	memcpy(t->keys[t->n].pub, pub, KC_ED25519_PUBLIC_BYTES);
	t->n++;
}

/* Parses "<key_id> <base64 raw key>" into id/pub; false if malformed or
 * if key_id is not the key's. */
static int
parse_key(const char *id, const char *b64, char out_id[KC_KEY_ID_LEN + 1],
          unsigned char pub[KC_ED25519_PUBLIC_BYTES])
{
	KcBuf raw = {0};
	int ok = kc_base64_decode(b64, strlen(b64), &raw) && raw.len == KC_ED25519_PUBLIC_BYTES;
	if (ok) {
		kc_key_id((const unsigned char *)raw.data, out_id);
		memcpy(pub, raw.data, KC_ED25519_PUBLIC_BYTES);
		ok = strcmp(out_id, id) == 0;
	}
	kc_buf_free(&raw);
	return ok;
}

/* Reads the trusted-keys file (absent: no keys). Returns 0 or EXIT_SIGNATURE
 * on a malformed line. */
static int
trust_load(Trust *t)
{
	FILE *f = fopen(t->path, "r");
	char line[512];
	int lineno = 0, rc = 0;
	if (!f)
		return 0;
	while (!rc && fgets(line, sizeof line, f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *save = NULL;
		char *id = strtok_r(line, " \t\r\n", &save);
		char *b64 = strtok_r(NULL, " \t\r\n", &save);
		char kid[KC_KEY_ID_LEN + 1];
		unsigned char pub[KC_ED25519_PUBLIC_BYTES];
		if (!id)
			continue;
		if (!b64 || strtok_r(NULL, " \t\r\n", &save) || !parse_key(id, b64, kid, pub)) {
			fprintf(stderr,
			        "kcs: %s:%d: expected \"<key_id> <base64 public key>\" with key_id "
			        "= sha256(key)[:16]\n",
			        t->path, lineno);
			rc = EXIT_SIGNATURE;
		} else {
			trust_add(t, kid, pub);
		}
	}
	fclose(f);
	return rc;
}

/* mkdir -p of the file's directory (mode 0700). */
static void
make_parent(const char *path)
{
	char *d = kc_xstrdup(path);
	for (char *p = d + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		mkdir(d, 0700);
		*p = '/';
	}
	free(d);
}

/* Trust on first use: with an empty or absent trusted-keys file, fetch the
 * server's /v1/keys, store them and warn. Returns 0 or an exit code. */
static int
trust_first_use(Trust *t, const char *server)
{
	KcBuf url = {0}, text = {0}, tmp = {0};
	cJSON *j = NULL;
	kc_buf_printf(&url, "%s/v1/keys", server);
	int rc = http_json(url.data, NULL, 0, &j);
	const cJSON *k;
	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(j, "keys"))
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(k, "key_id");
		const cJSON *pk = cJSON_GetObjectItemCaseSensitive(k, "public_key");
		const cJSON *alg = cJSON_GetObjectItemCaseSensitive(k, "alg");
		char kid[KC_KEY_ID_LEN + 1];
		unsigned char pub[KC_ED25519_PUBLIC_BYTES];
		if (!cJSON_IsString(id) || !cJSON_IsString(pk) || !cJSON_IsString(alg) ||
		    strcmp(alg->valuestring, "ed25519") != 0 ||
		    !parse_key(id->valuestring, pk->valuestring, kid, pub))
			continue;
		trust_add(t, kid, pub);
		kc_buf_printf(&text, "%s %s\n", kid, pk->valuestring);
	}
	if (rc == 0 && t->n == 0) {
		fprintf(stderr, "kcs: %s lists no usable keys\n", url.data);
		rc = EXIT_SIGNATURE;
	}
	if (rc == 0) {
		make_parent(t->path);
		kc_buf_printf(&tmp, "%s.tmp%ld", t->path, (long)getpid());
		int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int ok = fd >= 0 && write(fd, text.data, text.len) == (ssize_t)text.len &&
		         fsync(fd) == 0;
		if (fd >= 0)
			ok = close(fd) == 0 && ok;
		if (!ok || rename(tmp.data, t->path) != 0) {
			fprintf(stderr, "kcs: cannot write %s: %s\n", t->path, strerror(errno));
			unlink(tmp.data);
			rc = EXIT_SIGNATURE;
		} else {
			fprintf(stderr,
			        "kcs: warning: trust on first use: now trusting key(s) of %s, "
			        "stored in %s:\n%scheck them out of band\n",
			        server, t->path, text.data);
		}
	}
	cJSON_Delete(j);
	kc_buf_free(&url);
	kc_buf_free(&text);
	kc_buf_free(&tmp);
	return rc;
}

/* Verifies meta's signature over its fields with a trusted key (the object's
 * SHA-256 is checked separately by sha_matches). Returns 0 or
 * EXIT_SIGNATURE with the reason on stderr. */
static int
verify_signature(Trust *t, const char *server, const cJSON *meta)
{
	static const char *const fields[] = {"kernel_id", "object_sha256", "workload_key",
	                                     "symbol"};
	const cJSON *sig = cJSON_GetObjectItemCaseSensitive(meta, "signature");
	const cJSON *kid = cJSON_GetObjectItemCaseSensitive(sig, "key_id");
	const cJSON *s64 = cJSON_GetObjectItemCaseSensitive(sig, "sig");
	KcBuf msg = {0}, raw = {0};
	int rc = 0;
	if (!cJSON_IsString(kid) || !cJSON_IsString(s64)) {
		fprintf(stderr, "kcs: refusing the kernel: it carries no signature\n");
		return EXIT_SIGNATURE;
	}
	if ((rc = trust_load(t)) != 0)
		return rc;
	if (t->n == 0 && t->tofu && (rc = trust_first_use(t, server)) != 0)
		return rc;
	const TrustedKey *key = NULL;
	for (size_t i = 0; i < t->n && !key; i++)
		if (strcmp(t->keys[i].id, kid->valuestring) == 0)
			key = &t->keys[i];
	if (!key) {
		fprintf(stderr,
		        "kcs: refusing the kernel: it is signed by key %s, which is not in the "
		        "trusted keys %s (add it after checking it, e.g. from `kcs keys`, or "
		        "use --trust-on-first-use with a fresh file)\n",
		        kid->valuestring, t->path);
		return EXIT_SIGNATURE;
	}
	kc_buf_puts(&msg, "kcs-artifact-v1");
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(meta, fields[i]);
		kc_buf_printf(&msg, ":%s", cJSON_IsString(f) ? f->valuestring : "");
	}
	if (!kc_base64_decode(s64->valuestring, strlen(s64->valuestring), &raw) ||
	    raw.len != KC_ED25519_SIG_BYTES ||
	    !kc_ed25519_verify(key->pub, msg.data, msg.len, (const unsigned char *)raw.data)) {
		fprintf(stderr,
		        "kcs: refusing the kernel: its signature by key %s does not verify "
		        "(the metadata or the object was altered)\n",
		        kid->valuestring);
		rc = EXIT_SIGNATURE;
	}
	kc_buf_free(&msg);
	kc_buf_free(&raw);
	return rc;
}

/* ---- commands ------------------------------------------------------------ */

typedef struct Opts {
	Trust *trust;
	const char *server;
	const char *target;
	const char *out;
	const char *what; /* get: NULL (metadata), "ir", "asm", "object" */
	const char *arg;  /* FILE or ID */
	const char *dump; /* compile: the passes to dump ("schedule,link"), or NULL */
	int no_check;
} Opts;

/* GET /v1/kernels/{id}/dump?pass=...: the pass dumps to stdout. A note on
 * stderr when the server's fresh compile did not give the stored object. */
static int
print_dump(const Opts *o, const char *kernel_id)
{
	KcBuf url = {0};
	Reply r = {0};
	kc_buf_printf(&url, "%s/v1/kernels/", o->server);
	url_escape(&url, kernel_id);
	kc_buf_puts(&url, "/dump?pass=");
	url_escape(&url, o->dump);
	int rc = http(url.data, NULL, 0, &r);
	if (rc == 0 && (r.status < 200 || r.status > 299))
		rc = report_error(&r);
	if (rc == 0) {
		if (strcmp(r.dump_object, "differs") == 0)
			fprintf(stderr,
			        "kcs: note: the dump comes from a fresh compile whose object "
			        "differs from the stored one\n");
		rc = write_file("-", r.body.data ? r.body.data : "", r.body.len);
	}
	kc_buf_free(&r.body);
	kc_buf_free(&url);
	return rc;
}

static int
cmd_compile(const Opts *o, const Host *h)
{
	KcBuf body = {0}, url = {0}, tgt = {0}, obj = {0};
	cJSON *meta = NULL;
	int rc = read_file(o->arg, &body);
	if (rc)
		goto done;
	if (o->target)
		kc_buf_puts(&tgt, o->target);
	else
		host_target(h, &tgt);
	kc_buf_printf(&url, "%s/v1/compile?target=", o->server);
	url_escape(&url, tgt.data);
	rc = http_json(url.data, body.data ? body.data : "", body.len, &meta);
	if (rc)
		goto done;
	cJSON *b64 = cJSON_DetachItemFromObjectCaseSensitive(meta, "object_base64");
	if (!cJSON_IsString(b64) || b64decode(b64->valuestring, &obj) != 0) {
		fprintf(stderr, "kcs: reply has no valid object_base64\n");
		rc = EXIT_SERVER;
	}
	cJSON_Delete(b64);
	/* with --dump, stdout holds the dump alone */
	const cJSON *kid = cJSON_GetObjectItemCaseSensitive(meta, "kernel_id");
	if (!o->dump)
		print_json(meta);
	else if (cJSON_IsString(kid))
		fprintf(stderr, "kcs: kernel %s\n", kid->valuestring);
	if (!rc && o->dump && !cJSON_IsString(kid)) {
		fprintf(stderr, "kcs: reply has no kernel_id\n");
		rc = EXIT_SERVER;
	}
	if (rc || !o->out)
		goto dump;
	if (!sha_matches(&obj, meta)) {
		rc = EXIT_SIGNATURE;
		goto done;
	}
	if ((rc = verify_signature(o->trust, o->server, meta)) != 0)
		goto done;
	if (!o->no_check &&
	    (rc = check_target(h, cJSON_GetObjectItemCaseSensitive(meta, "target"))))
		goto done;
	rc = write_file(o->out, obj.data ? obj.data : "", obj.len);
dump:
	if (!rc && o->dump)
		rc = print_dump(o, kid->valuestring);
done:
	cJSON_Delete(meta);
	kc_buf_free(&body);
	kc_buf_free(&url);
	kc_buf_free(&tgt);
	kc_buf_free(&obj);
	return rc;
}

static int
cmd_get(const Opts *o, const Host *h)
{
	KcBuf url = {0}, base = {0};
	cJSON *meta = NULL;
	Reply r = {0};
	int rc;
	kc_buf_printf(&base, "%s/v1/kernels/", o->server);
	url_escape(&base, o->arg);
	rc = http_json(base.data, NULL, 0, &meta);
	if (rc)
		goto done;
	if (!o->what) {
		if (o->out) {
			char *s = cJSON_Print(meta);
			rc = write_file(o->out, s, strlen(s));
			cJSON_free(s);
		} else {
			print_json(meta);
		}
		goto done;
	}
	int is_obj = strcmp(o->what, "object") == 0;
	if (is_obj && !o->no_check &&
	    (rc = check_target(h, cJSON_GetObjectItemCaseSensitive(meta, "target"))))
		goto done;
	kc_buf_printf(&url, "%s/%s", base.data, o->what);
	if ((rc = http(url.data, NULL, 0, &r)) != 0)
		goto done;
	if (r.status < 200 || r.status > 299) {
		rc = report_error(&r);
		goto done;
	}
	if (is_obj && !sha_matches(&r.body, meta)) {
		rc = EXIT_SIGNATURE;
		goto done;
	}
	if (is_obj && (rc = verify_signature(o->trust, o->server, meta)) != 0)
		goto done;
	if (is_obj && !o->out && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "kcs: refusing to write an object to a terminal; use -o FILE\n");
		rc = EXIT_USAGE;
		goto done;
	}
	rc = write_file(o->out ? o->out : "-", r.body.data ? r.body.data : "", r.body.len);
done:
	cJSON_Delete(meta);
	kc_buf_free(&r.body);
	kc_buf_free(&url);
	kc_buf_free(&base);
	return rc;
}

static int
cmd_version(const Opts *o)
{
	KcBuf url = {0};
	cJSON *v = NULL;
	kc_buf_printf(&url, "%s/v1/version", o->server);
	int rc = http_json(url.data, NULL, 0, &v);
	if (rc == 0)
		print_json(v);
	cJSON_Delete(v);
	kc_buf_free(&url);
	return rc;
}

/* Prints the server's keys as trusted-keys lines ("<key_id> <base64>"). */
static int
cmd_keys(const Opts *o)
{
	KcBuf url = {0};
	cJSON *v = NULL;
	kc_buf_printf(&url, "%s/v1/keys", o->server);
	int rc = http_json(url.data, NULL, 0, &v);
	const cJSON *k;
	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(v, "keys"))
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(k, "key_id");
		const cJSON *pk = cJSON_GetObjectItemCaseSensitive(k, "public_key");
		if (cJSON_IsString(id) && cJSON_IsString(pk))
			printf("%s %s\n", id->valuestring, pk->valuestring);
	}
	cJSON_Delete(v);
	kc_buf_free(&url);
	return rc;
}

static void
usage(FILE *f)
{
	fputs("usage: kcs compile FILE [--target T] [-o out.so] [--dump P,...] [--no-check]\n"
	      "                    [--server URL]\n"
	      "       kcs get ID [--ir|--asm|--object] [-o FILE] [--no-check] [--server URL]\n"
	      "       kcs version [--server URL]\n"
	      "       kcs keys [--server URL]     (the server's keys, as trusted-keys lines)\n"
	      "       kcs host-target\n"
	      "Common options: --cacert FILE (https CA, or $KCS_CACERT), --trusted-keys\n"
	      "FILE (or $KCS_TRUSTED_KEYS, else ~/.config/kcs/trusted_keys: lines\n"
	      "\"<key_id> <base64 public key>\"), --trust-on-first-use (fill an empty\n"
	      "trusted-keys file from the server's /v1/keys, with a warning).\n"
	      "The server defaults to $KCS_SERVER, then " DEFAULT_SERVER ".\n"
	      "$KCS_TOKEN, when set, is sent as a bearer token.\n"
	      "--dump prints the named pass dumps of the kernel to stdout (instead of\n"
	      "its metadata): graph, lower, schedule, emit-llvm, optimize, object, link.\n"
	      "The target defaults to this machine (see host-target); 'cpu' means the\n"
	      "server's own CPU. Exit: 0 ok, 1 server error, 2 usage, 3 this CPU lacks\n"
	      "a feature the kernel needs (--no-check writes it anyway), 4 the kernel's\n"
	      "signature or object does not verify against the trusted keys.\n",
	      f);
}

int
main(int argc, char **argv)
{
	Opts o = {0};
	Trust trust = {0};
	KcBuf trust_path = {0};
	Host h;
	const char *cmd = argc > 1 ? argv[1] : NULL;
	if (!cmd || strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
		usage(cmd ? stdout : stderr);
		return cmd ? 0 : EXIT_USAGE;
	}
	o.server = getenv("KCS_SERVER");
	o.trust = &trust;
	cacert_file = getenv("KCS_CACERT");
	if (cacert_file && !*cacert_file)
		cacert_file = NULL;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if ((strcmp(a, "--server") == 0 || strcmp(a, "-s") == 0) && more)
			o.server = argv[++i];
		else if ((strcmp(a, "--target") == 0 || strcmp(a, "-t") == 0) && more)
			o.target = argv[++i];
		else if (strcmp(a, "-o") == 0 && more)
			o.out = argv[++i];
		else if (strcmp(a, "--ir") == 0)
			o.what = "ir";
		else if (strcmp(a, "--asm") == 0)
			o.what = "asm";
		else if (strcmp(a, "--object") == 0)
			o.what = "object";
		else if (strcmp(a, "--no-check") == 0)
			o.no_check = 1;
		else if (strcmp(a, "--dump") == 0 && more)
			o.dump = argv[++i];
		else if (strncmp(a, "--dump=", 7) == 0)
			o.dump = a + 7;
		else if (strcmp(a, "--cacert") == 0 && more)
			cacert_file = argv[++i];
		else if (strcmp(a, "--trusted-keys") == 0 && more)
			trust.path = argv[++i];
		else if (strcmp(a, "--trust-on-first-use") == 0)
			trust.tofu = 1;
		else if ((a[0] != '-' || strcmp(a, "-") == 0) && !o.arg)
			o.arg = a;
		else {
			fprintf(stderr, "kcs: unexpected argument '%s'\n", a);
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (!o.server || !*o.server)
		o.server = DEFAULT_SERVER;
	/* "host:port" without a scheme is accepted */
	KcBuf server = {0};
	if (!strstr(o.server, "://"))
		kc_buf_puts(&server, "http://");
	kc_buf_puts(&server, o.server);
	while (server.len && server.data[server.len - 1] == '/')
		server.data[--server.len] = 0;
	o.server = server.data;
	if (!trust.path) {
		default_trust_path(&trust_path);
		trust.path = trust_path.data;
	}
	host_detect(&h);

	int rc;
	int need_arg = strcmp(cmd, "compile") == 0 || strcmp(cmd, "get") == 0;
	if (o.dump && strcmp(cmd, "compile") != 0) {
		fprintf(stderr, "kcs: --dump goes with compile\n");
		usage(stderr);
		rc = EXIT_USAGE;
	} else if (need_arg && !o.arg) {
		fprintf(stderr, "kcs: %s needs an argument\n", cmd);
		usage(stderr);
		rc = EXIT_USAGE;
	} else if (strcmp(cmd, "host-target") == 0) {
		KcBuf t = {0};
		host_target(&h, &t);
		puts(t.data);
		kc_buf_free(&t);
		rc = 0;
	} else {
		curl_global_init(CURL_GLOBAL_DEFAULT);
		if (strcmp(cmd, "compile") == 0)
			rc = cmd_compile(&o, &h);
		else if (strcmp(cmd, "get") == 0)
			rc = cmd_get(&o, &h);
		else if (strcmp(cmd, "version") == 0)
			rc = cmd_version(&o);
		else if (strcmp(cmd, "keys") == 0)
			rc = cmd_keys(&o);
		else {
			fprintf(stderr, "kcs: unknown command '%s'\n", cmd);
			usage(stderr);
			rc = EXIT_USAGE;
		}
		curl_global_cleanup();
	}
	kc_buf_free(&server);
	kc_buf_free(&trust_path);
	free(trust.keys);
	return rc;
}
