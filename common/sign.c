/* sign.c - Ed25519 keys and artifact signatures through OpenSSL's EVP.
 *
 * A KcSignKey is one Ed25519 key: a private key (can sign) or a public key
 * (verify only). Private keys live in PEM PKCS#8 files; a missing key file
 * can be created, atomically (temp file mode 0600, fsync, rename, fsync of
 * the directory), so a crash never leaves a half-written key. The key id is
 * the first 16 hex characters of SHA-256 over the raw 32-byte public key.
 * The signed message of an artifact is the ASCII line
 * "kcs-artifact-v1:<kernel_id>:<object_sha256>:<workload_key>:<symbol>".
 * OpenSSL errors are turned into KcErr here and nowhere else.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "common.h"

struct KcSignKey {
	EVP_PKEY *pkey;
	bool has_private;
	unsigned char pub[KC_ED25519_PUBLIC_BYTES];
	char id[KC_KEY_ID_LEN + 1];
};

/* The newest OpenSSL error as text (drains the queue). */
static const char *
ossl_reason(char *buf, size_t cap)
{
	unsigned long e = ERR_get_error(), next;
	while ((next = ERR_get_error()) != 0)
		e = next;
	if (!e) {
		snprintf(buf, cap, "not a PEM Ed25519 key");
		return buf;
	}
	ERR_error_string_n(e, buf, cap);
	return buf;
}

void
kc_key_id(const unsigned char pub[KC_ED25519_PUBLIC_BYTES], char out[KC_KEY_ID_LEN + 1])
{
	KcDigest d;
	char hex[65];
	kc_sha256(pub, KC_ED25519_PUBLIC_BYTES, &d);
	kc_digest_hex(&d, hex);
	memcpy(out, hex, KC_KEY_ID_LEN);
	out[KC_KEY_ID_LEN] = 0;
}

/* Wraps pkey (taking it) after checking it is Ed25519. */
static KcSignKey *
wrap(EVP_PKEY *pkey, bool has_private, const char *path, KcErr *err)
{
	size_t n = KC_ED25519_PUBLIC_BYTES;
	if (EVP_PKEY_get_id(pkey) != EVP_PKEY_ED25519) {
		kc_fail(err, KC_INTERNAL, "keys", "%s: not an Ed25519 key", path);
		EVP_PKEY_free(pkey);
		return NULL;
	}
	KcSignKey *k = kc_xcalloc(1, sizeof *k);
	k->pkey = pkey;
	k->has_private = has_private;
	KC_ASSERT(EVP_PKEY_get_raw_public_key(pkey, k->pub, &n) == 1 &&
	          n == KC_ED25519_PUBLIC_BYTES);
	kc_key_id(k->pub, k->id);
	return k;
}

/* Writes the private key PEM to `path` atomically, mode 0600. */
static bool
write_key_file(EVP_PKEY *pkey, const char *path, KcErr *err)
{
	char tmp[4096], dir[4096];
	bool ok = false;
	BIO *mem = BIO_new(BIO_s_mem());
	int fd = -1;
	KC_ASSERT(mem);
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
	if (PEM_write_bio_PrivateKey(mem, pkey, NULL, NULL, 0, NULL, NULL) != 1) {
		char why[256];
		kc_fail(err, KC_INTERNAL, "keys", "cannot encode the signing key: %s",
		        ossl_reason(why, sizeof why));
		goto done;
	}
	char *pem = NULL;
	long len = BIO_get_mem_data(mem, &pem);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		kc_fail(err, KC_INTERNAL, "keys", "cannot create %s: %s", tmp, strerror(errno));
		goto done;
	}
	if (write(fd, pem, (size_t)len) != (ssize_t)len || fsync(fd) != 0) {
		kc_fail(err, KC_INTERNAL, "keys", "cannot write %s: %s", tmp, strerror(errno));
		goto done;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, path) != 0) {
		kc_fail(err, KC_INTERNAL, "keys", "cannot rename %s to %s: %s", tmp, path,
		        strerror(errno));
		goto done;
	}
	snprintf(dir, sizeof dir, "%s", path);
	int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	ok = true;
done:
	if (fd >= 0)
		close(fd);
	if (!ok)
		unlink(tmp);
	BIO_free(mem);
	return ok;
}

KcSignKey *
kc_sign_key_load(const char *path, bool create, bool *created, KcErr *err)
{
	if (created)
		*created = false;
	FILE *f = fopen(path, "r");
	if (!f && errno == ENOENT && create) {
		EVP_PKEY *pkey = NULL;
		EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
		if (!ctx || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &pkey) != 1) {
			char why[256];
			kc_fail(err, KC_INTERNAL, "keys", "cannot generate an Ed25519 key: %s",
			        ossl_reason(why, sizeof why));
			EVP_PKEY_CTX_free(ctx);
			return NULL;
		}
		EVP_PKEY_CTX_free(ctx);
		if (!write_key_file(pkey, path, err)) {
			EVP_PKEY_free(pkey);
			return NULL;
		}
		if (created)
			*created = true;
		return wrap(pkey, true, path, err);
	}
	if (!f) {
		kc_fail(err, KC_INTERNAL, "keys", "cannot read key file %s: %s", path,
		        strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
		kc_log(KC_LOG_WARN, "signing key %s is readable by group or others (mode %03o)",
		       path, (unsigned)(st.st_mode & 0777));
	EVP_PKEY *pkey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	if (!pkey) {
		char why[256];
		kc_fail(err, KC_INTERNAL, "keys", "%s: not a PEM private key: %s", path,
		        ossl_reason(why, sizeof why));
		return NULL;
	}
	return wrap(pkey, true, path, err);
}

KcSignKey *
kc_sign_key_load_public(const char *path, KcErr *err)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		kc_fail(err, KC_INTERNAL, "keys", "cannot read key file %s: %s", path,
		        strerror(errno));
		return NULL;
	}
	EVP_PKEY *pkey = PEM_read_PUBKEY(f, NULL, NULL, NULL);
	bool priv = false;
	if (!pkey) {
		/* a private key file also names its public key */
		ERR_clear_error();
		rewind(f);
		pkey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		priv = pkey != NULL;
	}
	fclose(f);
	if (!pkey) {
		char why[256];
		kc_fail(err, KC_INTERNAL, "keys", "%s: not a PEM public or private key: %s", path,
		        ossl_reason(why, sizeof why));
		return NULL;
	}
	KcSignKey *k = wrap(pkey, priv, path, err);
	if (k)
		k->has_private = false; /* used for verification only */
	return k;
}

void
kc_sign_key_free(KcSignKey *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->pkey);
	free(k);
}

const char *
kc_sign_key_id(const KcSignKey *k)
{
	return k->id;
}

const unsigned char *
kc_sign_key_public(const KcSignKey *k)
{
	return k->pub;
}

bool
kc_sign(const KcSignKey *k, const void *msg, size_t len, unsigned char sig[KC_ED25519_SIG_BYTES])
{
	if (!k->has_private)
		return false;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	size_t n = KC_ED25519_SIG_BYTES;
	KC_ASSERT(ctx);
	bool ok = EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
	          EVP_DigestSign(ctx, sig, &n, msg, len) == 1 && n == KC_ED25519_SIG_BYTES;
	EVP_MD_CTX_free(ctx);
	return ok;
}

bool
kc_ed25519_verify(const unsigned char pub[KC_ED25519_PUBLIC_BYTES], const void *msg, size_t len,
                  const unsigned char sig[KC_ED25519_SIG_BYTES])
{
	EVP_PKEY *pkey =
	    EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, KC_ED25519_PUBLIC_BYTES);
	if (!pkey)
		return false;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	KC_ASSERT(ctx);
	bool ok = EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
	          EVP_DigestVerify(ctx, sig, KC_ED25519_SIG_BYTES, msg, len) == 1;
	EVP_MD_CTX_free(ctx);
	EVP_PKEY_free(pkey);
	ERR_clear_error();
	return ok;
}

void
kc_artifact_message(KcBuf *out, const char *kernel_id, const char *object_sha256,
                    const char *workload_key, const char *symbol)
{
	kc_buf_printf(out, "kcs-artifact-v1:%s:%s:%s:%s", kernel_id, object_sha256, workload_key,
	              symbol);
}

static int
b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

bool
kc_base64_decode(const char *s, size_t len, KcBuf *out)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t pad = 0, chars = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '=') {
			pad++;
			chars++;
			continue;
		}
		int v = b64val((unsigned char)s[i]);
		if (v < 0 || pad)
			return false;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		chars++;
		if (bits >= 8) {
			bits -= 8;
			kc_buf_putc(out, (char)((acc >> bits) & 0xFF));
		}
	}
	return pad <= 2 && chars % 4 == 0;
}
