/* hash.c - SHA-256 through OpenSSL's EVP interface, hex and base64. */
#include "common.h"

#include <openssl/evp.h>
#include <string.h>

struct KcSha256 {
	EVP_MD_CTX *ctx;
};

void
kc_sha256(const void *data, size_t len, KcDigest *out)
{
	unsigned int n = 0;
	int ok = EVP_Digest(data, len, out->b, &n, EVP_sha256(), NULL);
	KC_ASSERT(ok == 1 && n == 32);
}

KcSha256 *
kc_sha256_begin(void)
{
	KcSha256 *h = kc_xmalloc(sizeof *h);
	h->ctx = EVP_MD_CTX_new();
	KC_ASSERT(h->ctx != NULL);
	KC_ASSERT(EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) == 1);
	return h;
}

void
kc_sha256_update(KcSha256 *h, const void *data, size_t len)
{
	KC_ASSERT(EVP_DigestUpdate(h->ctx, data, len) == 1);
}

void
kc_sha256_end(KcSha256 *h, KcDigest *out)
{
	unsigned int n = 0;
	KC_ASSERT(EVP_DigestFinal_ex(h->ctx, out->b, &n) == 1 && n == 32);
	EVP_MD_CTX_free(h->ctx);
	free(h);
}

void
kc_digest_hex(const KcDigest *d, char out[65])
{
	static const char hx[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hx[d->b[i] >> 4];
		out[2 * i + 1] = hx[d->b[i] & 15];
	}
	out[64] = 0;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool
kc_digest_parse(const char *hex, KcDigest *out)
{
	if (!hex || strlen(hex) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out->b[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

char *
kc_base64(const void *data, size_t len, size_t *out_len)
{
	KC_ASSERT(len < (SIZE_MAX / 4) * 3 - 4);
	size_t n = 4 * ((len + 2) / 3);
	char *out = kc_xmalloc(n + 1);
	/* EVP_EncodeBlock takes an int length: encode in chunks of 3 KiB * 1024 */
	size_t done = 0, w = 0;
	while (done < len) {
		size_t chunk = len - done;
		if (chunk > 3u * 1024 * 1024)
			chunk = 3u * 1024 * 1024;
		int k = EVP_EncodeBlock((unsigned char *)out + w,
		                        (const unsigned char *)data + done, (int)chunk);
		KC_ASSERT(k >= 0);
		w += (size_t)k;
		done += chunk;
	}
	out[w] = 0;
	if (out_len)
		*out_len = w;
	return out;
}
