/* cache_audit - opens a stopped kcsd's state directory the way kcsd does
 * (the start-up check of data.mdb first) and prints what cache_audit and
 * cache_stats find, as one JSON line, for the HTTP tests:
 *
 *   cache_audit STATE_DIR MAP_BYTES
 *
 * Exit 0 when it could open and audit the store (whatever it found), 1
 * otherwise. A damaged file is moved aside by the open, as kcsd would:
 * the caller looks for data.mdb.damaged-*.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cache.h"

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cache_audit STATE_DIR MAP_BYTES\n");
		return 2;
	}
	CacheOptions opt = {.map_bytes = (size_t)strtoull(argv[2], NULL, 10), .no_collector = true};
	KcErr err = {0};
	Cache *c = cache_open(argv[1], &opt, &err);
	if (!c) {
		fprintf(stderr, "cache_audit: %s\n", err.msg);
		return 1;
	}
	CacheAudit au;
	CacheStats st;
	KcStatus s = cache_audit(c, &au, &err);
	cache_stats(c, &st);
	cache_close(c);
	if (s != KC_OK) {
		fprintf(stderr, "cache_audit: %s\n", err.msg);
		return 1;
	}
	printf("{\"workloads\":%llu,\"schedules\":%llu,\"kernels\":%llu,"
	       "\"unreferenced_workloads\":%llu,\"kernels_without_workload\":%llu,"
	       "\"schedules_without_workload\":%llu,\"bytes_used\":%llu,\"file_bytes\":%llu}\n",
	       (unsigned long long)au.workloads, (unsigned long long)au.schedules,
	       (unsigned long long)au.kernels, (unsigned long long)au.unreferenced_workloads,
	       (unsigned long long)au.kernels_without_workload,
	       (unsigned long long)au.schedules_without_workload, (unsigned long long)st.bytes_used,
	       (unsigned long long)st.file_bytes);
	return 0;
}
