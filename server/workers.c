/* workers.c - a bounded pool of threads for blocking API handlers.
 *
 * A ring buffer of at most queue_depth waiting jobs and N threads taking
 * from it. Submitting to a full queue fails at once (the caller answers
 * 503) instead of waiting: back-pressure reaches the client, never an HTTP
 * thread. Draining closes the queue to new jobs and waits for the queued
 * and running ones, which is what a graceful shutdown needs.
 */
#include <pthread.h>
#include <errno.h>
#include <stdlib.h>

#include "server.h"

typedef struct Job {
	WorkFn fn;
	void *arg;
} Job;

struct Workers {
	pthread_mutex_t mu;
	pthread_cond_t has_job; /* queue non-empty or stopping */
	pthread_cond_t idle;    /* queue empty and nothing running */
	Job *ring;
	int depth, head, count;
	int running;
	bool closed;   /* no new jobs */
	bool stopping; /* threads exit once the queue is empty */
	int nthreads;
	pthread_t *threads;
	int64_t progress_us; /* when a job last started or finished (kc_now_us) */
};

static void *
worker_main(void *arg)
{
	Workers *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (w->count == 0 && !w->stopping)
			pthread_cond_wait(&w->has_job, &w->mu);
		if (w->count == 0)
			break;
		Job j = w->ring[w->head];
		w->head = (w->head + 1) % w->depth;
		w->count--;
		w->running++;
		w->progress_us = kc_now_us();
		pthread_mutex_unlock(&w->mu);
		j.fn(j.arg);
		pthread_mutex_lock(&w->mu);
		w->running--;
		w->progress_us = kc_now_us();
		if (w->count == 0 && w->running == 0)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

#define WORKER_STACK_BYTES ((size_t)64 << 20)

Workers *
workers_new(int nthreads, int queue_depth)
{
	KC_ASSERT(nthreads > 0 && queue_depth > 0);
	Workers *w = kc_xcalloc(1, sizeof *w);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->has_job, NULL);
	kc_cond_init_monotonic(&w->idle);
	w->depth = queue_depth;
	w->ring = kc_xcalloc((size_t)queue_depth, sizeof *w->ring);
	w->nthreads = nthreads;
	w->threads = kc_xcalloc((size_t)nthreads, sizeof *w->threads);
	w->progress_us = kc_now_us();
	/* Lowering recurses once per op of a graph (about 320 bytes a level,
	 * more under ASan); max_ops is bounded in config.def so that this
	 * reserved (not committed) stack always suffices. */
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	KC_ASSERT(pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES) == 0);
	for (int i = 0; i < nthreads; i++)
		KC_ASSERT(pthread_create(&w->threads[i], &attr, worker_main, w) == 0);
	pthread_attr_destroy(&attr);
	return w;
}

bool
workers_submit(Workers *w, WorkFn fn, void *arg, bool even_draining)
{
	bool ok = false;
	pthread_mutex_lock(&w->mu);
	if ((!w->closed || (even_draining && !w->stopping)) && w->count < w->depth) {
		w->ring[(w->head + w->count) % w->depth] = (Job){fn, arg};
		w->count++;
		pthread_cond_signal(&w->has_job);
		ok = true;
	}
	pthread_mutex_unlock(&w->mu);
	return ok;
}

void
workers_stats(Workers *w, WorkersStats *out)
{
	pthread_mutex_lock(&w->mu);
	*out = (WorkersStats){
	    .queued = w->count,
	    .capacity = w->depth,
	    .threads = w->nthreads,
	    .running = w->running,
	    .progress_us = w->progress_us,
	};
	pthread_mutex_unlock(&w->mu);
}

void
workers_drain(Workers *w)
{
	pthread_mutex_lock(&w->mu);
	w->closed = true;
	while (w->count > 0 || w->running > 0)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

bool
workers_drain_until(Workers *w, int64_t deadline_us)
{
	pthread_mutex_lock(&w->mu);
	w->closed = true;
	while ((w->count > 0 || w->running > 0) &&
	       kc_cond_wait_until(&w->idle, &w->mu, deadline_us) != ETIMEDOUT)
		;
	bool done = w->count == 0 && w->running == 0;
	pthread_mutex_unlock(&w->mu);
	return done;
}

void
workers_free(Workers *w)
{
	if (!w)
		return;
	workers_drain(w);
	pthread_mutex_lock(&w->mu);
	w->stopping = true;
	pthread_cond_broadcast(&w->has_job);
	pthread_mutex_unlock(&w->mu);
	for (int i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->has_job);
	pthread_mutex_destroy(&w->mu);
	free(w->threads);
	free(w->ring);
	free(w);
}
