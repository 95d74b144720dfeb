/* server.c - the libmicrohttpd front end: requests in, api/ responses out.
 *
 * MHD runs an epoll thread pool. Each request gets a Req (in *con_cls) that
 * accumulates the body into a buffer capped at max_body_bytes (a declared
 * Content-Length over the cap is answered 413 before any body is read).
 * Routes flagged API_F_BLOCKING never run on an MHD thread: the connection
 * is suspended, the Req goes to the worker pool (full: 503 at once), the
 * worker fills the response and resumes the connection, and MHD calls the
 * handler again, which queues it. A blocking route that api_handle_fast
 * can answer without blocking (a memoised compile hit) is answered on the
 * MHD thread instead, with no hop. NOTIFY_COMPLETED writes the one access
 * log line per request and frees the Req.
 *
 * Auth (api_authorize) is decided when the headers are in, before any body
 * is read. With tls_cert_file/tls_key_file MHD serves HTTPS (GnuTLS: MHD's
 * only TLS), the PEM files read once at start.
 *
 * Shutdown: draining (new requests that need a worker get 503
 * shutting_down) -> drain the workers (queued jobs run, their connections
 * resume) -> wait for in-flight requests to be answered -> MHD_stop_daemon,
 * with no connection left suspended. Not MHD_quiesce_daemon: in
 * libmicrohttpd 0.9.75 with MHD_USE_EPOLL_INTERNAL_THREAD it races its own
 * epoll thread (both remove the listen FD; the loser's epoll_ctl fails and
 * MHD panics, aborting kcsd on SIGTERM), so the listener stays open until
 * MHD_stop_daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server.h"

#define MAX_QUERY_ARGS 8

struct Server {
	struct MHD_Daemon *d;
	ApiCtx *api;
	Workers *workers;
	size_t max_body;
	uint64_t max_discard; /* over-cap body bytes dropped before closing */
	int grace_s;
	int port;
	atomic_bool draining;
	atomic_int active; /* requests with a Req not yet completed */
	bool stopped;
	char *tls_cert; /* PEM text, NULL without TLS; kept for MHD's life */
	char *tls_key;
};

typedef struct QueryArg {
	char *key;
	char *value;
} QueryArg;

/* Per-request state, owned by the connection's *con_cls. */
typedef struct Req {
	Server *srv;
	struct MHD_Connection *conn;
	int64_t t0;
	char method[16];
	char client[INET6_ADDRSTRLEN];
	bool loopback; /* client is 127.0.0.0/8 or ::1 (protected mode) */
	char *path;
	char *content_type;
	QueryArg query[MAX_QUERY_ARGS];
	int nquery;
	ApiMatch m;
	bool routed; /* m is a matched route (for metrics) */
	KcBuf body;
	bool too_large;
	uint64_t discarded;
	bool submitted; /* handed to a worker */
	int attempt;    /* times parked and woken (ApiRequest.attempt) */
	bool have_resp; /* resp is ready to queue */
	ApiResponse resp;
	int status; /* what was queued, for the log */
	size_t bytes;
	const char *cache;
} Req;

static const char *
req_query(void *closure, const char *key)
{
	Req *r = closure;
	for (int i = 0; i < r->nquery; i++)
		if (strcmp(r->query[i].key, key) == 0)
			return r->query[i].value ? r->query[i].value : "";
	return NULL;
}

static enum MHD_Result
collect_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	Req *r = cls;
	if (r->nquery == MAX_QUERY_ARGS || !key)
		return MHD_NO;
	r->query[r->nquery].key = kc_xstrdup(key);
	r->query[r->nquery].value = value ? kc_xstrdup(value) : NULL;
	r->nquery++;
	return MHD_YES;
}

static Req *
req_new(Server *s, struct MHD_Connection *conn, const char *method, const char *url)
{
	Req *r = kc_xcalloc(1, sizeof *r);
	r->srv = s;
	r->conn = conn;
	r->t0 = kc_now_us();
	snprintf(r->method, sizeof r->method, "%s", method ? method : "?");
	snprintf(r->client, sizeof r->client, "-");
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (ci && ci->client_addr) {
		const struct sockaddr *sa = ci->client_addr;
		if (sa->sa_family == AF_INET) {
			const struct in_addr *in = &((const struct sockaddr_in *)sa)->sin_addr;
			inet_ntop(AF_INET, in, r->client, sizeof r->client);
			r->loopback = (ntohl(in->s_addr) >> 24) == 127;
		} else if (sa->sa_family == AF_INET6) {
			const struct in6_addr *in6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
			inet_ntop(AF_INET6, in6, r->client, sizeof r->client);
			r->loopback = IN6_IS_ADDR_LOOPBACK(in6) ||
			              (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
		}
	}
	r->path = kc_xstrdup(url ? url : "");
	const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
	r->content_type = ct ? kc_xstrdup(ct) : NULL;
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_query, r);
	return r;
}

static void
req_free(Req *r)
{
	for (int i = 0; i < r->nquery; i++) {
		free(r->query[i].key);
		free(r->query[i].value);
	}
	api_response_free(&r->resp);
	kc_buf_free(&r->body);
	free(r->content_type);
	free(r->path);
	free(r);
}

/* A streamed body (ApiResponse.stream) handed to MHD. */
typedef struct StreamCls {
	long (*fn)(void *arg, char *buf, size_t max);
	void (*done)(void *arg);
	void *arg;
} StreamCls;

static ssize_t
stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	StreamCls *sc = cls;
	long n = sc->fn(sc->arg, buf, max);
	if (n > 0)
		return (ssize_t)n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void
stream_done(void *cls)
{
	StreamCls *sc = cls;
	if (sc->done)
		sc->done(sc->arg);
	free(sc);
}

/* Queues r->resp (taking its body or stream). */
static enum MHD_Result
send_resp(Req *r)
{
	ApiResponse *p = &r->resp;
	struct MHD_Response *mr;
	if (p->stream) {
		StreamCls *sc = kc_xmalloc(sizeof *sc);
		*sc = (StreamCls){p->stream, p->stream_free, p->stream_arg};
		mr = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, sc,
		                                       stream_done);
		if (!mr) {
			free(sc);
			return MHD_NO;
		}
		p->stream = NULL;
		p->stream_free = NULL;
		p->stream_arg = NULL;
	} else {
		mr = MHD_create_response_from_buffer(p->body_len, p->body, MHD_RESPMEM_MUST_FREE);
		if (!mr)
			return MHD_NO;
		p->body = NULL;
	}
	if (p->content_type)
		MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, p->content_type);
	if (p->header_name)
		MHD_add_response_header(mr, p->header_name, p->header_value);
	if (p->cache)
		MHD_add_response_header(mr, "X-Kcsd-Cache", p->cache);
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)p->status, mr);
	MHD_destroy_response(mr);
	if (ret == MHD_YES) {
		r->status = p->status;
		r->bytes = p->body_len;
		r->cache = p->cache;
	}
	return ret;
}

static enum MHD_Result
send_error(Req *r, KcStatus st, const char *msg)
{
	api_reply_error(&r->resp, st, NULL, msg);
	return send_resp(r);
}

static void
fill_request(Req *r, ApiRequest *q)
{
	*q = (ApiRequest){
	    .method = r->method,
	    .path = r->path,
	    .query = req_query,
	    .query_closure = r,
	    .content_type = r->content_type,
	    .body = r->body.data,
	    .body_len = r->body.len,
	    .client = r->client,
	};
}

static void wake_req(void *closure, const KcErr *err);

/* Worker thread: run the blocking handler, then wake the connection. A
 * handler that parked leaves the connection suspended and the Req to
 * wake_req; the job must not touch r after that. */
static void
run_job(void *arg)
{
	Req *r = arg;
	ApiRequest q;
	bool parked = false;
	fill_request(r, &q);
	q.parked = &parked;
	q.wake = wake_req;
	q.wake_closure = r;
	q.attempt = r->attempt;
	api_handle(r->srv->api, &r->m, &q, &r->resp);
	if (parked)
		return;
	r->have_resp = true;
	MHD_resume_connection(r->conn);
}

/* ApiRequest.wake: a parked request runs again on a worker (queued even
 * while draining, which waits for it), or is answered with `err`. */
static void
wake_req(void *closure, const KcErr *err)
{
	Req *r = closure;
	if (!err) {
		r->attempt++;
		if (workers_submit(r->srv->workers, run_job, r, true))
			return;
		api_reply_error(&r->resp, KC_OVERLOADED, NULL, NULL);
	} else {
		api_reply_kcerr(&r->resp, err);
	}
	r->have_resp = true;
	MHD_resume_connection(r->conn);
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
           const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	(void)version;
	Server *s = cls;
	Req *r = *con_cls;

	if (!r) {
		/* headers received */
		r = req_new(s, conn, method, url);
		*con_cls = r;
		atomic_fetch_add(&s->active, 1);
		r->routed = api_route(r->method, r->path, &r->m, &r->resp);
		if (!r->routed)
			return send_resp(r);
		/* auth from the headers alone: an unauthorised body is never read */
		if (!api_authorize(s->api, &r->m,
		                   MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                               MHD_HTTP_HEADER_AUTHORIZATION),
		                   r->loopback, &r->resp))
			return send_resp(r);
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl) {
			char *end;
			unsigned long long n = strtoull(cl, &end, 10);
			if (n > s->max_body)
				return send_error(r, KC_TOO_LARGE,
				                  "request body exceeds max_body_bytes");
		}
		return MHD_YES;
	}

	if (*upload_data_size > 0) {
		/* a body chunk: keep it if the route takes a body and it fits;
		 * a body sent to a route that takes none is dropped */
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (!(r->m.flags & API_F_BODY)) {
			r->discarded += n;
			return r->discarded > s->max_discard ? MHD_NO : MHD_YES;
		}
		if (!r->too_large && r->body.len + n > s->max_body) {
			r->too_large = true;
			kc_buf_free(&r->body);
		}
		if (r->too_large) {
			/* MHD 0.9.75 refuses a response queued while the body is
			 * being received (only a declared Content-Length can be
			 * refused up front): drop the rest, answer 413 at the end,
			 * but close on a client that keeps going past the bound. */
			r->discarded += n;
			return r->discarded > s->max_discard ? MHD_NO : MHD_YES;
		}
		kc_buf_append(&r->body, upload_data, n);
		return MHD_YES;
	}

	/* the whole request is in (or a worker resumed us) */
	if (r->have_resp)
		return send_resp(r);
	if (r->too_large)
		return send_error(r, KC_TOO_LARGE, "request body exceeds max_body_bytes");
	if (r->m.flags & API_F_BLOCKING) {
		if (r->submitted)
			return MHD_YES; /* not expected: suspended until the job ends */
		if (atomic_load(&s->draining))
			return send_error(r, KC_SHUTTING_DOWN, NULL);
		/* a memoised compile hit needs no worker (api_handle_fast) */
		ApiRequest fq;
		fill_request(r, &fq);
		if (api_handle_fast(s->api, &r->m, &fq, &r->resp))
			return send_resp(r);
		r->submitted = true;
		MHD_suspend_connection(conn);
		if (!workers_submit(s->workers, run_job, r, false)) {
			api_reply_error(
			    &r->resp, atomic_load(&s->draining) ? KC_SHUTTING_DOWN : KC_OVERLOADED,
			    NULL, NULL);
			r->have_resp = true;
			MHD_resume_connection(conn);
		}
		return MHD_YES;
	}
	ApiRequest q;
	fill_request(r, &q);
	api_handle(s->api, &r->m, &q, &r->resp);
	return send_resp(r);
}

/* Writes the access log line, frees the request. */
static void
on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
             enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	Server *s = cls;
	Req *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	char path[201];
	snprintf(path, sizeof path, "%s", r->path);
	for (char *p = path; *p; p++)
		if ((unsigned char)*p < 0x21 || (unsigned char)*p >= 0x7f)
			*p = '?';
	int64_t us = kc_now_us() - r->t0;
	api_metrics_request(s->api, r->routed ? (int)r->m.route : -1, r->status, us);
	kc_log(KC_LOG_INFO, "%s %s %s %d %zu %lldus cache=%s%s", r->client, r->method, path,
	       r->status, r->bytes, (long long)us, r->cache ? r->cache : "-",
	       toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
	req_free(r);
	atomic_fetch_sub(&s->active, 1);
}

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	KcBuf b = {0};
	kc_buf_vprintf(&b, fmt, ap);
	while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
		b.data[--b.len] = 0;
	kc_log(KC_LOG_WARN, "http: %s", b.data ? b.data : "");
	kc_buf_free(&b);
}

/* ApiGaugesFn: what /metrics needs from the server. */
static void
server_gauges(void *closure, ApiServerGauges *out)
{
	Server *s = closure;
	WorkersStats ws;
	workers_stats(s->workers, &ws);
	*out = (ApiServerGauges){
	    .queue_depth = ws.queued,
	    .queue_capacity = ws.capacity,
	    .workers = ws.threads,
	    .workers_busy = ws.running,
	    .requests_active = atomic_load(&s->active),
	};
}

bool
server_wedged(Server *s, int64_t stuck_us)
{
	WorkersStats ws;
	workers_stats(s->workers, &ws);
	return stuck_us > 0 && ws.running == ws.threads && kc_now_us() - ws.progress_us > stuck_us;
}

/* "HOST:PORT", "[V6]:PORT" or ":PORT" -> an address for MHD. */
static bool
resolve_listen(const char *spec, struct sockaddr_storage *ss, bool *v6, KcErr *err)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec + strlen(spec) - 1) {
		kc_fail(err, KC_BAD_REQUEST, "listen", "listen address %s is not HOST:PORT", spec);
		return false;
	}
	size_t hl = (size_t)(colon - spec);
	if (hl >= sizeof host) {
		kc_fail(err, KC_BAD_REQUEST, "listen", "listen host is too long");
		return false;
	}
	memcpy(host, spec, hl);
	host[hl] = 0;
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = 0;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
	if (rc != 0 || !res) {
		kc_fail(err, KC_BAD_REQUEST, "listen", "cannot resolve %s: %s", spec,
		        gai_strerror(rc));
		return false;
	}
	memset(ss, 0, sizeof *ss);
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*v6 = res->ai_family == AF_INET6;
	freeaddrinfo(res);
	return true;
}

/* Reads a PEM file for MHD (NUL-terminated); `what` names the setting. */
static bool
read_pem(const char *path, const char *what, char **out, KcErr *err)
{
	FILE *f = fopen(path, "r");
	KcBuf b = {0};
	char chunk[4096];
	size_t n;
	if (!f) {
		kc_fail(err, KC_BAD_REQUEST, what, "cannot read %s %s: %s", what, path,
		        strerror(errno));
		return false;
	}
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && b.len < (1u << 20))
		kc_buf_append(&b, chunk, n);
	bool bad = ferror(f) != 0;
	fclose(f);
	if (bad || b.len >= (1u << 20) || !b.data || !strstr(b.data, "-----BEGIN ")) {
		kc_fail(err, KC_BAD_REQUEST, what, "%s %s is not a PEM file", what, path);
		kc_buf_free(&b);
		return false;
	}
	*out = kc_buf_take(&b, NULL);
	return true;
}

Server *
server_new(const ServerConfig *cfg, ApiCtx *api, KcErr *err)
{
	struct sockaddr_storage ss;
	bool v6 = false;
	if (!resolve_listen(cfg->listen, &ss, &v6, err))
		return NULL;
	Server *s = kc_xcalloc(1, sizeof *s);
	if (*cfg->tls_cert_file &&
	    (!read_pem(cfg->tls_cert_file, "tls_cert_file", &s->tls_cert, err) ||
	     !read_pem(cfg->tls_key_file, "tls_key_file", &s->tls_key, err))) {
		free(s->tls_cert);
		free(s);
		return NULL;
	}
	s->api = api;
	s->max_body = (size_t)cfg->max_body_bytes;
	s->max_discard = 16 * (uint64_t)s->max_body;
	if (s->max_discard > (UINT64_C(1) << 30))
		s->max_discard = UINT64_C(1) << 30;
	s->grace_s = (int)cfg->shutdown_grace_s;
	atomic_init(&s->draining, false);
	atomic_init(&s->active, 0);
	int nworkers = (int)cfg->workers;
	if (nworkers <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		nworkers = n > 0 ? (int)n : 1;
	}
	s->workers = workers_new(nworkers, (int)cfg->queue_depth);
	api_set_gauges(api, server_gauges, s);

	unsigned flags =
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	if (v6)
		flags |= MHD_USE_IPv6;
	struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}};
	if (s->tls_cert) {
		flags |= MHD_USE_TLS;
		tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert};
		tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key};
		tls[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	}
	s->d = MHD_start_daemon(
	    flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
	    s, /* must come first */
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned int)cfg->http_threads, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned int)cfg->connection_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned int)cfg->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	    (unsigned int)cfg->per_ip_connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    (size_t)cfg->connection_memory_bytes, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
	    MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	if (!s->d) {
		if (s->tls_cert)
			kc_fail(err, KC_INTERNAL, "listen",
			        "cannot serve HTTPS on %s: check that %s and %s are a matching "
			        "PEM certificate and key (see the log)",
			        cfg->listen, cfg->tls_cert_file, cfg->tls_key_file);
		else
			kc_fail(err, KC_INTERNAL, "listen", "cannot listen on %s", cfg->listen);
		workers_free(s->workers);
		free(s->tls_cert);
		free(s->tls_key);
		free(s);
		return NULL;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : 0;
	return s;
}

int
server_port(const Server *s)
{
	return s->port;
}

bool
server_shutdown(Server *s)
{
	if (s->stopped)
		return true;
	atomic_store(&s->draining, true);
	kc_log(KC_LOG_INFO, "shutting down: %d request(s) in flight, %d s grace",
	       atomic_load(&s->active), s->grace_s);
	int64_t deadline = kc_now_us() + (int64_t)s->grace_s * 1000000;
	if (!workers_drain_until(s->workers, deadline)) {
		/* A job outlived the grace period (a wedged compile): answer what
		 * waits on it and leave without it; the caller exits the process
		 * (the store is crash-safe), since neither the job's thread nor
		 * MHD (its connection stays suspended) can be stopped. */
		int n = api_cancel_parked(s->api, KC_SHUTTING_DOWN);
		WorkersStats ws;
		workers_stats(s->workers, &ws);
		kc_log(KC_LOG_WARN,
		       "shutdown_grace_s (%d s) is over with %d job(s) running and %d queued; "
		       "%d parked request(s) answered 503; exiting without them",
		       s->grace_s, ws.running, ws.queued, n);
		/* let the answered connections flush, briefly */
		int64_t flush = kc_now_us() + 500000;
		while (atomic_load(&s->active) > ws.running + ws.queued && kc_now_us() < flush) {
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
		return false;
	}
	/* Resumed connections still have to send their responses. */
	while (atomic_load(&s->active) > 0 && kc_now_us() < deadline) {
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (atomic_load(&s->active) > 0)
		kc_log(KC_LOG_WARN, "stopping with %d request(s) unanswered",
		       atomic_load(&s->active));
	MHD_stop_daemon(s->d);
	s->d = NULL;
	s->stopped = true;
	return true;
}

void
server_free(Server *s)
{
	if (!s)
		return;
	server_shutdown(s);
	workers_free(s->workers);
	if (s->tls_key)
		explicit_bzero(s->tls_key, strlen(s->tls_key));
	free(s->tls_key);
	free(s->tls_cert);
	free(s);
}
