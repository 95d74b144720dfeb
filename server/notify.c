/* notify.c - telling systemd how kcsd is doing (Type=notify, WatchdogSec=).
 *
 * main.c calls notify_ready() once the LMDB environment is open and MHD is
 * listening, and notify_stopping() as soon as a stop signal arrives. When
 * systemd set $WATCHDOG_USEC, a thread sends WATCHDOG=1 every half period,
 * but only while the worker pool is not wedged (server_wedged: every worker
 * stuck on one job longer than compile_timeout_s). A wedged pool stops the
 * pings, so systemd kills and restarts kcsd after WatchdogSec: LLVM cannot
 * be interrupted inside a thread, and this is the bound on a stuck compile.
 * sd_notify() is a no-op without $NOTIFY_SOCKET, so all of this costs
 * nothing outside systemd.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "server.h"

struct Notifier {
	Server *srv;
	int64_t stuck_us;
	uint64_t period_us; /* between pings: WATCHDOG_USEC / 2 */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* signalled by notify_stopping */
	bool stop;
	bool thread_started;
	pthread_t thread;
};

static void *
watchdog_main(void *arg)
{
	Notifier *n = arg;
	bool wedged_logged = false;
	pthread_mutex_lock(&n->mu);
	while (!n->stop) {
		pthread_mutex_unlock(&n->mu);
		if (!server_wedged(n->srv, n->stuck_us)) {
			sd_notify(0, "WATCHDOG=1");
			wedged_logged = false;
		} else if (!wedged_logged) {
			kc_log(KC_LOG_ERROR,
			       "every compile worker has been stuck for over %lld s: "
			       "not pinging the systemd watchdog",
			       (long long)(n->stuck_us / 1000000));
			wedged_logged = true;
		}
		int64_t deadline = kc_now_us() + (int64_t)n->period_us;
		pthread_mutex_lock(&n->mu);
		while (!n->stop && kc_cond_wait_until(&n->cv, &n->mu, deadline) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&n->mu);
	return NULL;
}

Notifier *
notify_ready(Server *srv, int port, int stuck_s)
{
	Notifier *n = kc_xcalloc(1, sizeof *n);
	n->srv = srv;
	n->stuck_us = (int64_t)stuck_s * 1000000;
	pthread_mutex_init(&n->mu, NULL);
	kc_cond_init_monotonic(&n->cv);

	sd_notifyf(0, "READY=1\nSTATUS=listening on port %d", port);
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		n->period_us = usec / 2;
		if (n->period_us < 1000)
			n->period_us = 1000;
		KC_ASSERT(pthread_create(&n->thread, NULL, watchdog_main, n) == 0);
		n->thread_started = true;
		kc_log(KC_LOG_INFO, "systemd watchdog: pinging every %.1f s",
		       (double)n->period_us / 1e6);
	}
	return n;
}

void
notify_stopping(Notifier *n)
{
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	if (!n)
		return;
	pthread_mutex_lock(&n->mu);
	n->stop = true;
	pthread_cond_signal(&n->cv);
	pthread_mutex_unlock(&n->mu);
	if (n->thread_started)
		pthread_join(n->thread, NULL);
	pthread_cond_destroy(&n->cv);
	pthread_mutex_destroy(&n->mu);
	free(n);
}
