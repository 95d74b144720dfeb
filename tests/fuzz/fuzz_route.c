/* fuzz_route.c - libFuzzer target: the request router and target names.
 *
 * The input is split at the first two newlines into a method, a path and a
 * rest. api_route() gets the method and path (as the server passes them:
 * NUL-terminated, any bytes); an unmatched request must come back with an
 * error response, a matched one with a route id in range. The rest, cut to
 * 1 KiB as the server's target buffer is, goes to kc_target_resolve() (the
 * ?target= parser). Any crash, sanitizer report or leak is a bug. Built
 * only with -DKC_FUZZ=ON and clang (tests/fuzz.cmake).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	kc_compiler_init();
	return 0;
}

/* A malloc'd NUL-terminated copy of data[0..n). */
static char *
dup_n(const uint8_t *data, size_t n)
{
	char *s = malloc(n + 1);
	KC_ASSERT(s);
	memcpy(s, data, n);
	s[n] = 0;
	return s;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl1 = memchr(data, '\n', size);
	size_t mlen = nl1 ? (size_t)(nl1 - data) : size;
	const uint8_t *rest = nl1 ? nl1 + 1 : data + size;
	size_t rlen = size - (size_t)(rest - data);
	const uint8_t *nl2 = memchr(rest, '\n', rlen);
	size_t plen = nl2 ? (size_t)(nl2 - rest) : rlen;
	const uint8_t *tail = nl2 ? nl2 + 1 : rest + rlen;
	size_t tlen = size - (size_t)(tail - data);

	char *method = dup_n(data, mlen < 16 ? mlen : 16);
	char *path = dup_n(rest, plen);
	ApiMatch m;
	ApiResponse resp = {0};
	if (api_route(method, path, &m, &resp)) {
		KC_ASSERT((unsigned)m.route < API_ROUTE_COUNT);
		KC_ASSERT(resp.body == NULL);
		(void)api_route_pattern(m.route);
	} else {
		KC_ASSERT(resp.status == 404 || resp.status == 405);
		KC_ASSERT(resp.body && resp.body_len > 0);
	}
	api_response_free(&resp);

	char *target = dup_n(tail, tlen < 1023 ? tlen : 1023);
	KcTarget t;
	KcErr err = {0};
	(void)kc_target_resolve(target, &t, &err);
	free(target);
	free(path);
	free(method);
	return 0;
}
