/* log.c - one line per call to stderr, written with a single write(2) so
 * lines from different threads never interleave; time helpers. */
#include "common.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static KcLogLevel min_level = KC_LOG_INFO; /* set once before threads start */

void
kc_log_set_level(KcLogLevel lvl)
{
	min_level = lvl;
}

int
kc_cpu_count(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

void
kc_cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	KC_ASSERT(pthread_cond_init(cv, &ca) == 0);
	pthread_condattr_destroy(&ca);
}

int
kc_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_us)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_us / 1000000),
	                      .tv_nsec = (long)(deadline_us % 1000000) * 1000};
	return pthread_cond_timedwait(cv, mu, &ts);
}

int64_t
kc_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
kc_wall_s(void)
{
	return (int64_t)time(NULL);
}

void
kc_iso8601(int64_t wall_s, char out[32])
{
	time_t t = (time_t)wall_s;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void
kc_log(KcLogLevel lvl, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	if (lvl < min_level)
		return;
	char line[2048];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
	n += snprintf(line + n, sizeof line - (size_t)n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
	              names[lvl]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	for (int i = 0; i < n; i++)
		if (line[i] == '\n')
			line[i] = ' ';
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}
