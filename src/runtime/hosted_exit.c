/* Leaving a hosted thread's foreign loop without unwinding (src/runtime/hosted/period.rs).
 *
 * LinuxCNC 2.9's hal_lib runs each thread as `thread_task`, a loop that never returns: it runs the
 * thread's functions and calls rtapi_wait() once per period. rtapi ends such a thread without
 * pthread_cancel (whose forced unwinding would cross Rust frames): rtapi_hosted_call() calls the
 * task after a setjmp, and rtapi_hosted_wait() -- the period boundary, called by the task instead of
 * (or as) rtapi_wait -- longjmps back there when rtapi's Period::wait says Stop. The jump starts in
 * this C function and ends in this C function: only C frames (the task's) lie between, and
 * rtapi_hosted_period_wait, the Rust side, has returned normally before it.
 */
#include <setjmp.h>
#include <stddef.h>

/* Rust (hosted/period.rs): the calling thread's Period::wait(); 0 = continue, 1 = stop. */
extern int rtapi_hosted_period_wait(void);

/* The innermost rtapi_hosted_call of this thread, if any. */
static __thread jmp_buf *rtapi_hosted_exit;

/* Calls task(arg); returns 0 if it returned by itself, 1 if rtapi_hosted_wait left it. */
int rtapi_hosted_call(void (*task)(void *), void *arg)
{
    jmp_buf here;
    jmp_buf *volatile outer = rtapi_hosted_exit;
    rtapi_hosted_exit = &here;
    if (setjmp(here) == 0) {
        task(arg);
        rtapi_hosted_exit = outer;
        return 0;
    }
    rtapi_hosted_exit = outer;
    return 1;
}

/* The period boundary for foreign code: waits for the next period, or leaves the task when the
 * thread is asked to end (never returns then). Outside rtapi_hosted_call it just returns. */
void rtapi_hosted_wait(void)
{
    if (rtapi_hosted_period_wait() != 0 && rtapi_hosted_exit != NULL)
        longjmp(*rtapi_hosted_exit, 1);
}

/* A task of the shape of LinuxCNC's thread_task, for tests and examples: counts its periods into
 * *(unsigned long *)counter and never returns on its own. */
void rtapi_hosted_loop_forever(void *counter)
{
    volatile unsigned long *n = counter;
    for (;;) {
        rtapi_hosted_wait();
        *n += 1;
    }
}
