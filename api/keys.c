/* keys.c - artifact signing keys, GET /v1/keys, and the end-to-end checks
 * on stored artifacts.
 *
 * One Ed25519 signing key (signing_key_file, or STATE_DIR/signing.key made
 * at first start) plus any number of verify-only public keys (rotation).
 * Every artifact's metadata ends with
 *   "signature": {"key_id": "<16 hex>", "sig": "<base64 of 64 bytes>"}
 * over kc_artifact_message(kernel_id, object_sha256, workload_key, symbol).
 *
 * Before a stored artifact is served, api_check_artifact() checks that the
 * metadata names this kernel_id, that the object's SHA-256 is the metadata's
 * object_sha256 (the end-to-end check above the cache's own checksums), and
 * that the signature is by the current signing key. A signature by an older
 * key that still verifies (or none, from before signing) is replaced by a
 * fresh one (rotation); a signature that fails is a mismatch.
 * Immutable after api_keys_init(); thread-safe.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

struct ApiKeys {
	KcSignKey *signer;
	KcSignKey **verify; /* verify-only keys, without the signer */
	int nverify;
};

static bool
known_key(const ApiKeys *k, const char *id)
{
	if (strcmp(kc_sign_key_id(k->signer), id) == 0)
		return true;
	for (int i = 0; i < k->nverify; i++)
		if (strcmp(kc_sign_key_id(k->verify[i]), id) == 0)
			return true;
	return false;
}

static KcStatus
add_verify_key(ApiKeys *k, const char *path, KcErr *err)
{
	KcSignKey *v = kc_sign_key_load_public(path, err);
	if (!v)
		return err->status;
	if (known_key(k, kc_sign_key_id(v))) {
		kc_sign_key_free(v);
		return KC_OK;
	}
	k->verify = kc_xrealloc(k->verify, (size_t)(k->nverify + 1) * sizeof *k->verify);
	k->verify[k->nverify++] = v;
	kc_log(KC_LOG_INFO, "keys: verify key %s from %s", kc_sign_key_id(v), path);
	return KC_OK;
}

KcStatus
api_keys_init(ApiCtx *a, const ApiKeysConfig *cfg, KcErr *err)
{
	ApiKeys *k = kc_xcalloc(1, sizeof *k);
	KcBuf path = {0};
	KcStatus st = KC_OK;
	bool created = false;
	bool configured = cfg->signing_key_file && *cfg->signing_key_file;
	if (configured)
		kc_buf_puts(&path, cfg->signing_key_file);
	else
		kc_buf_printf(&path, "%s/signing.key", cfg->state_dir ? cfg->state_dir : ".");
	k->signer = kc_sign_key_load(path.data, !configured, &created, err);
	if (!k->signer) {
		st = err->status;
		goto done;
	}
	kc_log(KC_LOG_INFO, "keys: %s signing key %s (%s)", created ? "created" : "loaded",
	       kc_sign_key_id(k->signer), path.data);
	if (cfg->verify_key_files && *cfg->verify_key_files) {
		char *list = kc_xstrdup(cfg->verify_key_files);
		for (char *save = NULL, *p = strtok_r(list, ",\n", &save); p && st == KC_OK;
		     p = strtok_r(NULL, ",\n", &save)) {
			while (*p == ' ' || *p == '\t')
				p++;
			size_t n = strlen(p);
			while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
				p[--n] = 0;
			if (*p)
				st = add_verify_key(k, p, err);
		}
		free(list);
	}
done:
	kc_buf_free(&path);
	if (st != KC_OK) {
		api_keys_free(k);
		return st;
	}
	api_keys_free(a->keys);
	a->keys = k;
	return KC_OK;
}

void
api_keys_free(ApiKeys *k)
{
	if (!k)
		return;
	kc_sign_key_free(k->signer);
	for (int i = 0; i < k->nverify; i++)
		kc_sign_key_free(k->verify[i]);
	free(k->verify);
	free(k);
}

static void
put_key(KcBuf *b, const KcSignKey *key)
{
	size_t n;
	char *pub = kc_base64(kc_sign_key_public(key), KC_ED25519_PUBLIC_BYTES, &n);
	kc_buf_printf(b, "{\"key_id\":\"%s\",\"alg\":\"ed25519\",\"public_key\":\"%s\"}",
	              kc_sign_key_id(key), pub);
	free(pub);
}

void
h_keys(ApiCtx *a, const ApiMatch *m, const ApiRequest *req, ApiResponse *resp)
{
	(void)m, (void)req;
	KcBuf b = {0};
	kc_buf_puts(&b, "{\"keys\":[");
	if (a->keys) {
		put_key(&b, a->keys->signer);
		for (int i = 0; i < a->keys->nverify; i++) {
			kc_buf_putc(&b, ',');
			put_key(&b, a->keys->verify[i]);
		}
	}
	kc_buf_puts(&b, "]}\n");
	api_reply_json_buf(resp, 200, &b);
}

/* Appends ,"signature":{...} by the signing key for these fields. */
static void
put_signature(const ApiKeys *k, KcBuf *b, const char *kid_hex, const char *obj_hex,
              const char *wl_hex, const char *symbol)
{
	KcBuf msg = {0};
	unsigned char sig[KC_ED25519_SIG_BYTES];
	kc_artifact_message(&msg, kid_hex, obj_hex, wl_hex, symbol);
	KC_ASSERT(kc_sign(k->signer, msg.data, msg.len, sig));
	size_t n;
	char *b64 = kc_base64(sig, sizeof sig, &n);
	kc_buf_printf(b, ",\"signature\":{\"key_id\":\"%s\",\"sig\":\"%s\"}",
	              kc_sign_key_id(k->signer), b64);
	free(b64);
	kc_buf_free(&msg);
}

void
api_sign_meta(ApiCtx *a, KcBuf *meta, const char *kid_hex, const char *obj_hex, const char *wl_hex,
              const char *symbol)
{
	if (a->keys)
		put_signature(a->keys, meta, kid_hex, obj_hex, wl_hex, symbol);
}

/* The string value of the first `"key":"` in meta (our own JSON: a quote
 * inside a string value is always escaped, so the pattern cannot start
 * inside one). Copies at most cap-1 bytes; false if absent or too long. */
static bool
meta_str(const char *meta, const char *key, char *out, size_t cap)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	const char *p = strstr(meta, pat);
	if (!p)
		return false;
	p += strlen(pat);
	size_t n = strcspn(p, "\"\\");
	if (p[n] != '"' || n >= cap)
		return false;
	memcpy(out, p, n);
	out[n] = 0;
	return true;
}

/* Verifies a stored signature by a key we know; false if the key is
 * unknown or the signature fails. */
static bool
verify_stored(const ApiKeys *k, const char *key_id, const char *sig_b64, const char *msg,
              size_t msg_len)
{
	const KcSignKey *key = NULL;
	if (strcmp(kc_sign_key_id(k->signer), key_id) == 0)
		key = k->signer;
	for (int i = 0; !key && i < k->nverify; i++)
		if (strcmp(kc_sign_key_id(k->verify[i]), key_id) == 0)
			key = k->verify[i];
	KcBuf sig = {0};
	bool ok = key && kc_base64_decode(sig_b64, strlen(sig_b64), &sig) &&
	          sig.len == KC_ED25519_SIG_BYTES &&
	          kc_ed25519_verify(kc_sign_key_public(key), msg, msg_len,
	                            (const unsigned char *)sig.data);
	kc_buf_free(&sig);
	return ok;
}

/* Rewrites meta with a fresh signature (cJSON: the old one may sit anywhere). */
static bool
resign(const ApiKeys *k, KcBuf *meta, const char *kid_hex, const char *obj_hex, const char *wl_hex,
       const char *symbol)
{
	cJSON *j = cJSON_ParseWithLength(meta->data, meta->len);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return false;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(j, "signature");
	char *txt = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	KC_ASSERT(txt);
	size_t n = strlen(txt);
	KC_ASSERT(n >= 2 && txt[n - 1] == '}');
	KcBuf out = {0};
	kc_buf_append(&out, txt, n - 1);
	cJSON_free(txt);
	put_signature(k, &out, kid_hex, obj_hex, wl_hex, symbol);
	kc_buf_putc(&out, '}');
	kc_buf_free(meta);
	*meta = out;
	return true;
}

ApiArtifactCheck
api_check_artifact(ApiCtx *a, const KcDigest *kernel_id, KcBuf *meta, const KcBuf *object,
                   char *why, size_t why_cap)
{
	char kid_hex[65], want_kid[80], obj_hex[80], wl_hex[80], symbol[256];
	char key_id[40] = "", sig[128] = "";
	kc_digest_hex(kernel_id, kid_hex);
	why[0] = 0;
	if (!meta->data || !meta_str(meta->data, "kernel_id", want_kid, sizeof want_kid) ||
	    strcmp(want_kid, kid_hex) != 0) {
		snprintf(why, why_cap, "stored metadata of kernel %s does not name it", kid_hex);
		return API_ARTIFACT_BAD;
	}
	if (!meta_str(meta->data, "object_sha256", obj_hex, sizeof obj_hex) ||
	    !meta_str(meta->data, "workload_key", wl_hex, sizeof wl_hex) ||
	    !meta_str(meta->data, "symbol", symbol, sizeof symbol)) {
		snprintf(why, why_cap, "stored metadata of kernel %s lacks a field", kid_hex);
		return API_ARTIFACT_BAD;
	}
	if (object) {
		KcDigest d;
		char got[65];
		kc_sha256(object->data ? object->data : "", object->len, &d);
		kc_digest_hex(&d, got);
		if (strcmp(got, obj_hex) != 0) {
			snprintf(
			    why, why_cap,
			    "stored object of kernel %s has SHA-256 %.16s..., its metadata says "
			    "%.16s...",
			    kid_hex, got, obj_hex);
			return API_ARTIFACT_BAD;
		}
	}
	const ApiKeys *k = a->keys;
	if (!k)
		return API_ARTIFACT_OK;
	bool has_sig = meta_str(meta->data, "key_id", key_id, sizeof key_id) &&
	               meta_str(meta->data, "sig", sig, sizeof sig);
	if (has_sig && strcmp(key_id, kc_sign_key_id(k->signer)) == 0)
		return API_ARTIFACT_OK; /* current key: the client verifies it */
	if (has_sig && known_key(k, key_id)) {
		KcBuf msg = {0};
		kc_artifact_message(&msg, kid_hex, obj_hex, wl_hex, symbol);
		bool ok = verify_stored(k, key_id, sig, msg.data, msg.len);
		kc_buf_free(&msg);
		if (!ok) {
			snprintf(why, why_cap,
			         "stored signature of kernel %s by key %s does not verify", kid_hex,
			         key_id);
			return API_ARTIFACT_BAD;
		}
	}
	/* an older key (or none, or one no longer configured): sign afresh */
	if (!resign(k, meta, kid_hex, obj_hex, wl_hex, symbol)) {
		snprintf(why, why_cap, "stored metadata of kernel %s is not a JSON object",
		         kid_hex);
		return API_ARTIFACT_BAD;
	}
	return API_ARTIFACT_RESIGNED;
}
