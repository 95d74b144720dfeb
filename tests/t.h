/* t.h - a TAP-sized test harness (picotest-like). Each test binary prints
 * "ok N - ..." / "not ok N - ..." lines and a plan; ctest runs the binaries.
 *
 *   static void adds(void) { OK(1 + 1 == 2); }
 *   int main(void) { t_sub("adds", adds); return t_done(); }
 *
 * T_ONLY=name[,name...] in the environment runs just those subtests.
 */
#ifndef KCS_T_H
#define KCS_T_H

#include <stdbool.h>

void t_ok(int cond, const char *file, int line, const char *expr);
#define OK(cond) t_ok(!!(cond), __FILE__, __LINE__, #cond)
/* Like OK but prints a formatted note on failure. */
void t_okf(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define OKF(cond, ...) t_okf(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
void t_sub(const char *name, void (*fn)(void));
/* Marks the current subtest skipped with a reason (e.g. ../shared absent). */
void t_skip(const char *why);
/* Prints the plan and a summary line; returns the process exit code. */
int t_done(void);
/* Path of the shared corpus (../shared/corpus/akg next to the checkout), or
 * NULL when it is absent (a user's own clone): tests then skip. */
const char *t_corpus_dir(void);

#endif
