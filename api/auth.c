/* auth.c - who may call which route: bearer tokens, roles, protected mode.
 *
 * Roles are ordered: read < write < admin (a higher role implies the lower
 * ones). Each route's required role is a flag on its row in routes.def
 * (API_F_PUBLIC: no token; API_F_READ / API_F_WRITE / API_F_ADMIN; a row
 * with none of them needs admin, so a route added without thinking about
 * auth fails closed).
 *
 * The configuration holds only SHA-256 digests of tokens, as lines
 * "<sha256-hex> <role> [name]" (config key `token`, repeatable, and/or a
 * `tokens_file`). A presented token is hashed and compared with every
 * configured digest in constant time (CRYPTO_memcmp, no early exit).
 * With no tokens configured kcsd runs in protected mode (as Redis does):
 * every route is allowed, but only to loopback clients; others get 403.
 * `anonymous_read` lets the read role through without a token.
 *
 * api_authorize() runs on the HTTP thread as soon as the headers are in,
 * before any body is read, so an unauthenticated upload is refused early.
 * Nothing here changes after api_auth_init(); reads need no lock.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "internal.h"

/* The closed set of roles, in increasing order of power. */
#define API_ROLES(X)                                                                               \
	X(NONE, "none")                                                                            \
	X(READ, "read")                                                                            \
	X(WRITE, "write")                                                                          \
	X(ADMIN, "admin")

typedef enum ApiRole {
#define X(e, name) ROLE_##e,
	API_ROLES(X)
#undef X
} ApiRole;

static const char *const role_names[] = {
#define X(e, name) name,
    API_ROLES(X)
#undef X
};

typedef struct Token {
	KcDigest digest;
	ApiRole role;
	char name[64];
} Token;

struct ApiAuth {
	Token *tokens;
	size_t n, cap;
	bool anonymous_read;
};

#define MAX_TOKEN_BYTES 4096

static ApiRole
route_role(unsigned flags)
{
	if (flags & API_F_PUBLIC)
		return ROLE_NONE;
	if (flags & API_F_ADMIN)
		return ROLE_ADMIN;
	if (flags & API_F_WRITE)
		return ROLE_WRITE;
	if (flags & API_F_READ)
		return ROLE_READ;
	return ROLE_ADMIN; /* no role flag: fail closed */
}

const char *
api_route_role_name(unsigned flags)
{
	return role_names[route_role(flags)];
}

static bool
parse_role(const char *s, ApiRole *out)
{
	for (int r = ROLE_READ; r <= ROLE_ADMIN; r++) {
		if (strcmp(s, role_names[r]) == 0) {
			*out = (ApiRole)r;
			return true;
		}
	}
	return false;
}

/* One line "<sha256-hex> <role> [name]"; blank lines and '#' comments are
 * skipped. `origin` names the file and line for errors. */
static KcStatus
add_line(ApiAuth *au, char *line, const char *origin, KcErr *err)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = 0;
	char *save = NULL;
	char *hex = strtok_r(line, " \t\r\n", &save);
	if (!hex)
		return KC_OK;
	char *role = strtok_r(NULL, " \t\r\n", &save);
	char *name = strtok_r(NULL, " \t\r\n", &save);
	Token t = {0};
	for (char *p = hex; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	if (!kc_digest_parse(hex, &t.digest))
		return kc_fail(err, KC_BAD_REQUEST, "auth",
		               "%s: expected \"<sha256-hex> <role> [name]\" with a 64-hex digest "
		               "(see kcsd --hash-token); tokens are never stored in clear",
		               origin);
	if (!role || !parse_role(role, &t.role))
		return kc_fail(err, KC_BAD_REQUEST, "auth", "%s: role must be read, write or admin",
		               origin);
	snprintf(t.name, sizeof t.name, "%s", name ? name : "-");
	if (au->n == au->cap) {
		au->cap = au->cap ? 2 * au->cap : 8;
		au->tokens = kc_xrealloc(au->tokens, au->cap * sizeof *au->tokens);
	}
	au->tokens[au->n++] = t;
	return KC_OK;
}

static KcStatus
add_text(ApiAuth *au, const char *text, const char *what, KcErr *err)
{
	char *copy = kc_xstrdup(text);
	KcStatus st = KC_OK;
	int lineno = 0;
	for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line && st == KC_OK;
	     line = strtok_r(NULL, "\n", &save)) {
		char origin[512];
		snprintf(origin, sizeof origin, "%s #%d", what, ++lineno);
		st = add_line(au, line, origin, err);
	}
	free(copy);
	return st;
}

static KcStatus
add_file(ApiAuth *au, const char *path, KcErr *err)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return kc_fail(err, KC_BAD_REQUEST, "auth", "cannot read tokens_file %s: %s", path,
		               strerror(errno));
	char line[1024];
	int lineno = 0;
	KcStatus st = KC_OK;
	while (st == KC_OK && fgets(line, sizeof line, f)) {
		char origin[512];
		snprintf(origin, sizeof origin, "%s:%d", path, ++lineno);
		st = add_line(au, line, origin, err);
	}
	fclose(f);
	return st;
}

KcStatus
api_auth_init(ApiCtx *a, const ApiAuthConfig *cfg, KcErr *err)
{
	ApiAuth *au = kc_xcalloc(1, sizeof *au);
	au->anonymous_read = cfg->anonymous_read;
	KcStatus st = KC_OK;
	if (cfg->tokens && *cfg->tokens)
		st = add_text(au, cfg->tokens, "token", err);
	if (st == KC_OK && cfg->tokens_file && *cfg->tokens_file)
		st = add_file(au, cfg->tokens_file, err);
	if (st != KC_OK) {
		api_auth_free(au);
		return st;
	}
	api_auth_free(a->auth);
	a->auth = au;
	if (au->n == 0)
		kc_log(KC_LOG_WARN,
		       "auth: protected mode: no tokens configured, so every route is open to "
		       "loopback clients and closed to everyone else%s",
		       au->anonymous_read ? " (except reads: anonymous_read = 1)" : "");
	else
		kc_log(KC_LOG_INFO, "auth: %zu token digest(s) loaded; anonymous read %s", au->n,
		       au->anonymous_read ? "allowed" : "refused");
	return KC_OK;
}

void
api_auth_free(ApiAuth *au)
{
	if (!au)
		return;
	OPENSSL_cleanse(au->tokens, au->cap * sizeof *au->tokens);
	free(au->tokens);
	free(au);
}

const char *
api_auth_mode(const ApiCtx *a)
{
	return a->auth && a->auth->n > 0 ? "tokens" : "protected-mode";
}

/* The role of a presented token, ROLE_NONE if unknown. Every configured
 * digest is compared, whatever matched earlier. */
static ApiRole
token_role(const ApiAuth *au, const char *tok, size_t len)
{
	KcDigest d;
	kc_sha256(tok, len, &d);
	ApiRole role = ROLE_NONE;
	for (size_t i = 0; i < au->n; i++) {
		int same = CRYPTO_memcmp(d.b, au->tokens[i].digest.b, sizeof d.b) == 0;
		/* branch-free select: keep the highest role that matched */
		unsigned mask = 0u - (unsigned)(same & (au->tokens[i].role > role));
		role = (ApiRole)(((unsigned)au->tokens[i].role & mask) | ((unsigned)role & ~mask));
	}
	return role;
}

static void
unauthorized(ApiResponse *resp, const char *msg)
{
	api_reply_error(resp, KC_UNAUTHORIZED, "Authorization", msg);
	resp->header_name = "WWW-Authenticate";
	snprintf(resp->header_value, sizeof resp->header_value, "Bearer realm=\"kcsd\"");
}

bool
api_authorize(ApiCtx *a, const ApiMatch *m, const char *authorization, bool loopback,
              ApiResponse *resp)
{
	ApiRole need = route_role(m->flags);
	const ApiAuth *au = a->auth;
	char msg[256];
	if (need == ROLE_NONE)
		return true;
	if (!au || au->n == 0) {
		if (loopback || (au && au->anonymous_read && need == ROLE_READ))
			return true;
		api_reply_error(resp, KC_FORBIDDEN, NULL,
		                "kcsd runs in protected mode (no tokens configured) and serves "
		                "loopback clients only; configure token digests (token or "
		                "tokens_file) to serve other hosts");
		return false;
	}
	const char *tok = NULL;
	size_t len = 0;
	if (authorization) {
		const char *p = authorization;
		while (*p == ' ' || *p == '\t')
			p++;
		if (strncasecmp(p, "Bearer", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
			p += 6;
			while (*p == ' ' || *p == '\t')
				p++;
			len = strlen(p);
			while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
				len--;
			if (len > 0 && len <= MAX_TOKEN_BYTES)
				tok = p;
		}
	}
	if (!tok) {
		if (au->anonymous_read && need == ROLE_READ && !authorization)
			return true;
		unauthorized(resp, authorization ? "malformed Authorization header: expected "
		                                   "\"Bearer <token>\""
		                                 : "this route needs a bearer token "
		                                   "(Authorization: Bearer <token>)");
		return false;
	}
	ApiRole have = token_role(au, tok, len);
	if (have == ROLE_NONE) {
		unauthorized(resp, "unknown bearer token");
		return false;
	}
	if (have < need) {
		snprintf(msg, sizeof msg, "this route needs the %s role; the token has the %s role",
		         role_names[need], role_names[have]);
		api_reply_error(resp, KC_FORBIDDEN, NULL, msg);
		return false;
	}
	return true;
}

void
api_hash_token_line(const char *token, const char *role, const char *name, KcBuf *out)
{
	KcDigest d;
	char hex[65];
	kc_sha256(token, strlen(token), &d);
	kc_digest_hex(&d, hex);
	kc_buf_printf(out, "%s %s%s%s\n", hex, role, name ? " " : "", name ? name : "");
}

bool
api_role_valid(const char *role)
{
	ApiRole r;
	return parse_role(role, &r);
}
