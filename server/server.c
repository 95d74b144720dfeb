/* server.c - the libmicrohttpd front end: requests in, api/ responses out.
 *
 * MHD runs an epoll thread pool. Each request gets a Req (in *con_cls) that
 * accumulates the body into a buffer capped by its route (routes.def: 413
 * above; a declared Content-Length over it is answered before any body is
 * read). Every body is also reserved against one budget shared by all
 * connections, max_inflight_body_bytes: by its declared Content-Length
 * when the headers are in, else chunk by chunk, and released when the
 * request completes. A body that does not fit is answered 503 overloaded
 * with Retry-After. Bodies over SMALL_BODY_BYTES may fill the budget only
 * up to body_budget_big, so held near-cap uploads cannot lock out ordinary
 * (composite JSON is a few KB) requests.
 * Routes flagged API_F_BLOCKING never run on an MHD thread: the connection
 * is suspended, the Req goes to the worker pool (full: 503 at once), the
 * worker fills the response and resumes the connection, and MHD calls the
 * handler again, which queues it. A blocking route that api_handle_fast
 * can answer without blocking (a memoised compile hit) is answered on the
 * MHD thread instead, with no hop. NOTIFY_COMPLETED writes the one access
 * log line per request and frees the Req.
 *
 * Slow clients: MHD calls kcsd only once the headers are complete, and
 * its connection timeout is an idle timer, so a client sending a byte now
 * and then keeps its connection forever. MHD_OPTION_NOTIFY_CONNECTION
 * records every connection (Conn: its fd and, in one atomic word, whether
 * a request is arriving and since when); with request_deadline_s set, a
 * reaper thread shutdown()s the fd of one whose request has been arriving
 * for longer than that, counted from accept or from its previous answer.
 * A request kcsd is working on or answering is never reaped. The reaper
 * uses only the fd, under conns_mu, and MHD closes an fd only after the
 * CLOSED notification has unlinked its Conn under the same lock.
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
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
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
/* Bodies up to this size may use the whole body budget; larger ones only
 * body_budget_big of it. The largest real composite file is 12 KB. */
#define SMALL_BODY_BYTES (64 * 1024)
/* After a request whose body or reply was larger, freed memory is handed
 * back to the system (malloc_trim), so RSS returns after big uploads. */
#define TRIM_BYTES (256 * 1024)

/* Where a connection is: ConnState in the low two bits of Conn.word, the
 * kc_now_us() its current request started arriving in the rest, so that
 * the reaper's check and its claim are one compare-and-swap. */
typedef enum ConnState {
	CONN_ARRIVING, /* a request's headers or body are arriving (or none yet) */
	CONN_BUSY,     /* the request is whole: kcsd works on it or answers it */
	CONN_REAPED,   /* the reaper shut it down */
} ConnState;
#define CONN_WORD(state, since_us) (((uint_fast64_t)(since_us) << 2) | (uint_fast64_t)(state))
#define CONN_STATE(w) ((ConnState)((w)&3u))
#define CONN_SINCE(w) ((int64_t)((w) >> 2))

/* One open connection (MHD_OPTION_NOTIFY_CONNECTION), in Server.conns. */
typedef struct Conn {
	struct Conn *prev, *next; /* under Server.conns_mu */
	int fd;
	atomic_uint_fast64_t word; /* CONN_WORD(state, since) */
} Conn;

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
	/* request bodies: bytes reserved against max_inflight_body_bytes */
	size_t body_budget;     /* max_inflight_body_bytes */
	size_t body_budget_big; /* what bodies over SMALL_BODY_BYTES may fill */
	atomic_size_t body_inflight;
	atomic_uint_fast64_t budget_refusals;
	/* the request deadline (request_deadline_s; 0: no reaper) */
	int64_t deadline_us;
	pthread_mutex_t conns_mu; /* guards conns and reaper_stop */
	pthread_cond_t reaper_cv;
	Conn *conns;
	atomic_int nconns; /* open connections, until MHD has cleaned them up */
	bool reaper_started, reaper_stop;
	pthread_t reaper;
	atomic_uint_fast64_t reaped;
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
	Conn *cn;    /* its connection's record */
	KcBuf body;
	size_t body_cap;      /* the route's cap (api_body_cap) */
	const char *cap_name; /* the setting behind it */
	size_t reserved;      /* body bytes reserved in Server.body_inflight */
	KcStatus refused;     /* KC_TOO_LARGE or KC_OVERLOADED: the rest of the
	                       * body is dropped, answered at its end */
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
	const union MHD_ConnectionInfo *sc =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	r->cn = sc ? sc->socket_context : NULL;
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

/* ---- the body budget ------------------------------------------------------ */

/* Reserves n more body bytes for r; false, with nothing reserved, when the
 * budget cannot take them. */
static bool
budget_take(Server *s, Req *r, size_t n)
{
	size_t limit = r->reserved + n > SMALL_BODY_BYTES ? s->body_budget_big : s->body_budget;
	size_t cur = atomic_load(&s->body_inflight);
	do {
		if (n > limit || cur > limit - n)
			return false;
	} while (!atomic_compare_exchange_weak(&s->body_inflight, &cur, cur + n));
	r->reserved += n;
	return true;
}

static void
budget_release(Server *s, Req *r)
{
	if (r->reserved)
		atomic_fetch_sub(&s->body_inflight, r->reserved);
	r->reserved = 0;
}

/* Makes room for n more body bytes: the buffer's capacity is what is
 * reserved (a declared Content-Length was reserved and allocated whole). */
static bool
body_room(Server *s, Req *r, size_t n)
{
	size_t need = r->body.len + n + 1;
	if (need <= r->body.cap)
		return true;
	size_t cap = r->body.cap ? r->body.cap : 4096;
	while (cap < need)
		cap *= 2;
	if (cap > r->body_cap + 1)
		cap = r->body_cap + 1;
	if (!budget_take(s, r, cap - r->body.cap))
		return false;
	r->body.data = kc_xrealloc(r->body.data, cap);
	r->body.cap = cap;
	return true;
}

/* Drops the body kept so far (the rest will be dropped too): `st` is
 * answered once the request ends. */
static void
body_refuse(Server *s, Req *r, KcStatus st)
{
	r->refused = st;
	kc_buf_free(&r->body);
	budget_release(s, r);
	if (st == KC_OVERLOADED)
		atomic_fetch_add(&s->budget_refusals, 1);
}

/* ---- connections and the request deadline --------------------------------- */

/* The request on c is whole or answered: kcsd's turn, never reaped. */
static void
conn_busy(Conn *c)
{
	if (!c)
		return;
	uint_fast64_t w = atomic_load(&c->word);
	while (CONN_STATE(w) == CONN_ARRIVING &&
	       !atomic_compare_exchange_weak(&c->word, &w, CONN_WORD(CONN_BUSY, CONN_SINCE(w))))
		;
}

/* The answer is done: the next request's deadline counts from now. */
static void
conn_next(Conn *c)
{
	if (!c)
		return;
	uint_fast64_t w = atomic_load(&c->word);
	while (CONN_STATE(w) != CONN_REAPED &&
	       !atomic_compare_exchange_weak(&c->word, &w, CONN_WORD(CONN_ARRIVING, kc_now_us())))
		;
}

static void
on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
              enum MHD_ConnectionNotificationCode toe)
{
	Server *s = cls;
	switch (toe) {
	case MHD_CONNECTION_NOTIFY_STARTED: {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		Conn *c = kc_xcalloc(1, sizeof *c);
		c->fd = ci ? ci->connect_fd : -1;
		atomic_init(&c->word, CONN_WORD(CONN_ARRIVING, kc_now_us()));
		pthread_mutex_lock(&s->conns_mu);
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		pthread_mutex_unlock(&s->conns_mu);
		atomic_fetch_add(&s->nconns, 1);
		*socket_context = c;
		break;
	}
	case MHD_CONNECTION_NOTIFY_CLOSED: {
		/* before MHD closes the fd: once unlinked, the reaper cannot
		 * touch it */
		Conn *c = *socket_context;
		if (!c)
			break;
		pthread_mutex_lock(&s->conns_mu);
		if (c->prev)
			c->prev->next = c->next;
		else
			s->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		pthread_mutex_unlock(&s->conns_mu);
		atomic_fetch_sub(&s->nconns, 1);
		free(c);
		*socket_context = NULL;
		break;
	}
	}
}

/* Shuts down every connection whose request has been arriving for longer
 * than the deadline; checks a few times per deadline. */
static void *
reaper_main(void *arg)
{
	Server *s = arg;
	int64_t tick_us = s->deadline_us / 4;
	if (tick_us < 100000)
		tick_us = 100000;
	if (tick_us > 1000000)
		tick_us = 1000000;
	pthread_mutex_lock(&s->conns_mu);
	while (!s->reaper_stop) {
		int64_t now = kc_now_us();
		for (Conn *c = s->conns; c; c = c->next) {
			uint_fast64_t w = atomic_load(&c->word);
			if (CONN_STATE(w) != CONN_ARRIVING ||
			    now - CONN_SINCE(w) <= s->deadline_us || c->fd < 0)
				continue;
			/* the state may have moved on since the load: then the
			 * exchange fails and the connection is left alone */
			if (atomic_compare_exchange_strong(&c->word, &w,
			                                   CONN_WORD(CONN_REAPED, CONN_SINCE(w)))) {
				shutdown(c->fd, SHUT_RDWR);
				atomic_fetch_add(&s->reaped, 1);
			}
		}
		kc_cond_wait_until(&s->reaper_cv, &s->conns_mu, kc_now_us() + tick_us);
	}
	pthread_mutex_unlock(&s->conns_mu);
	return NULL;
}

static void
reaper_stop(Server *s)
{
	if (!s->reaper_started)
		return;
	pthread_mutex_lock(&s->conns_mu);
	s->reaper_stop = true;
	pthread_cond_signal(&s->reaper_cv);
	pthread_mutex_unlock(&s->conns_mu);
	pthread_join(s->reaper, NULL);
	s->reaper_started = false;
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
	conn_busy(r->cn); /* answering: not reaped while the reply goes out */
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

static enum MHD_Result
send_too_large(Req *r)
{
	char msg[96];
	snprintf(msg, sizeof msg, "request body exceeds %s", r->cap_name);
	return send_error(r, KC_TOO_LARGE, msg);
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
		r->body_cap = api_body_cap(s->api, &r->m, &r->cap_name);
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl) {
			char *end;
			unsigned long long n = strtoull(cl, &end, 10);
			if (n > r->body_cap)
				return send_too_large(r);
			/* the declared body is reserved (and allocated) whole now,
			 * so a held upload cannot grow past its share later */
			if (n > 0 && (r->m.flags & API_F_BODY)) {
				if (!budget_take(s, r, (size_t)n)) {
					atomic_fetch_add(&s->budget_refusals, 1);
					return send_error(r, KC_OVERLOADED,
					                  "request bodies in flight exceed "
					                  "max_inflight_body_bytes; retry later");
				}
				r->body.data = kc_xmalloc((size_t)n + 1);
				r->body.data[0] = 0;
				r->body.cap = (size_t)n + 1;
			}
		}
		return MHD_YES;
	}

	if (*upload_data_size > 0) {
		/* a body chunk: keep it if the route takes a body and it fits
		 * its cap and the budget; a body sent to a route that takes none
		 * is dropped */
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (!(r->m.flags & API_F_BODY)) {
			r->discarded += n;
			return r->discarded > s->max_discard ? MHD_NO : MHD_YES;
		}
		if (!r->refused && r->body.len + n > r->body_cap)
			body_refuse(s, r, KC_TOO_LARGE);
		if (!r->refused && !body_room(s, r, n))
			body_refuse(s, r, KC_OVERLOADED);
		if (r->refused) {
			/* MHD 0.9.75 refuses a response queued while the body is
			 * being received (only a declared Content-Length can be
			 * refused up front): drop the rest, answer at the end,
			 * but close on a client that keeps going past the bound. */
			r->discarded += n;
			return r->discarded > s->max_discard ? MHD_NO : MHD_YES;
		}
		kc_buf_append(&r->body, upload_data, n);
		return MHD_YES;
	}

	/* the whole request is in (or a worker resumed us) */
	conn_busy(r->cn);
	if (r->have_resp)
		return send_resp(r);
	if (r->refused == KC_TOO_LARGE)
		return send_too_large(r);
	if (r->refused == KC_OVERLOADED)
		return send_error(r, KC_OVERLOADED,
		                  "request bodies in flight exceed max_inflight_body_bytes; retry "
		                  "later");
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
	bool big = r->body.cap > TRIM_BYTES || r->reserved > TRIM_BYTES || r->bytes > TRIM_BYTES;
	conn_next(r->cn);
	budget_release(s, r);
	req_free(r);
	atomic_fetch_sub(&s->active, 1);
	/* glibc keeps freed big blocks in its arenas; hand them back */
	if (big)
		malloc_trim(0);
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
	    .body_bytes_inflight = (int64_t)atomic_load(&s->body_inflight),
	    .body_bytes_budget = (int64_t)s->body_budget,
	    .body_budget_refusals = atomic_load(&s->budget_refusals),
	    .connections_reaped = atomic_load(&s->reaped),
	    .connections_open = atomic_load(&s->nconns),
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
	/* the last eighth of the budget is kept for small bodies, unless that
	 * would leave too little for one body of the largest cap */
	s->body_budget = (size_t)cfg->max_inflight_body_bytes;
	size_t largest = (size_t)config_largest_body_cap(cfg, NULL);
	size_t keep = s->body_budget / 8;
	if (keep > s->body_budget - largest)
		keep = s->body_budget - largest;
	s->body_budget_big = s->body_budget - keep;
	atomic_init(&s->body_inflight, 0);
	atomic_init(&s->budget_refusals, 0);
	atomic_init(&s->reaped, 0);
	atomic_init(&s->nconns, 0);
	s->deadline_us = cfg->request_deadline_s * 1000000;
	pthread_mutex_init(&s->conns_mu, NULL);
	kc_cond_init_monotonic(&s->reaper_cv);
	int nworkers = (int)cfg->workers;
	if (nworkers <= 0)
		nworkers = kc_cpu_count();
	s->workers = workers_new(nworkers, (int)cfg->queue_depth);
	api_set_gauges(api, server_gauges, s);

	unsigned flags =
	    MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	if (v6)
		flags |= MHD_USE_IPv6;
	struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}};
	struct MHD_OptionItem track[2] = {
	    {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s},
	    {MHD_OPTION_END, 0, NULL},
	};
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
	    MHD_OPTION_ARRAY, tls, MHD_OPTION_ARRAY, track, MHD_OPTION_END);
	if (!s->d) {
		if (s->tls_cert)
			kc_fail(err, KC_INTERNAL, "listen",
			        "cannot serve HTTPS on %s: check that %s and %s are a matching "
			        "PEM certificate and key (see the log)",
			        cfg->listen, cfg->tls_cert_file, cfg->tls_key_file);
		else
			kc_fail(err, KC_INTERNAL, "listen", "cannot listen on %s", cfg->listen);
		workers_free(s->workers);
		pthread_cond_destroy(&s->reaper_cv);
		pthread_mutex_destroy(&s->conns_mu);
		free(s->tls_cert);
		free(s->tls_key);
		free(s);
		return NULL;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : 0;
	if (s->deadline_us > 0) {
		int rc = pthread_create(&s->reaper, NULL, reaper_main, s);
		KC_ASSERT(rc == 0);
		s->reaper_started = true;
	}
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
	reaper_stop(s); /* MHD is stopped: no connection is left */
	workers_free(s->workers);
	pthread_cond_destroy(&s->reaper_cv);
	pthread_mutex_destroy(&s->conns_mu);
	if (s->tls_key)
		explicit_bzero(s->tls_key, strlen(s->tls_key));
	free(s->tls_key);
	free(s->tls_cert);
	free(s);
}
