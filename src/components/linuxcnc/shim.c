/* The variadic part of the C interface rtapi offers LinuxCNC modules (see mod.rs, "The C API").
 *
 * Rust cannot define C-variadic functions on stable, so the printf-style entry points live here: each
 * formats its arguments into a bounded buffer with vsnprintf and hands the result to the Rust side
 * (rtapi_host_* functions, or the non-formatting hal_*_new entry points, also defined in Rust).
 * Types and values follow LinuxCNC 2.9's hal.h / rtapi.h, which define this ABI. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <setjmp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <sys/io.h>
#endif

/* LinuxCNC's HAL_NAME_LEN: a name is at most 47 characters. */
#define NAME_LEN 47
/* One formatted message; longer ones are cut (the cut is marked by the Rust side). */
#define MSG_LEN 1024

/* Implemented in Rust (src/components/linuxcnc/capi/). */
extern void rtapi_host_message(int level, const char *text, int truncated);
extern void rtapi_host_name_too_long(const char *what, const char *fmt);
extern int hal_pin_bit_new(const char *name, int dir, void **ptr, int comp_id);
extern int hal_pin_float_new(const char *name, int dir, void **ptr, int comp_id);
extern int hal_pin_u32_new(const char *name, int dir, void **ptr, int comp_id);
extern int hal_pin_s32_new(const char *name, int dir, void **ptr, int comp_id);
extern int hal_param_bit_new(const char *name, int dir, void *addr, int comp_id);
extern int hal_param_float_new(const char *name, int dir, void *addr, int comp_id);
extern int hal_param_u32_new(const char *name, int dir, void *addr, int comp_id);
extern int hal_param_s32_new(const char *name, int dir, void *addr, int comp_id);

/* The RTAPI_MSG_ALL level of rtapi_print: always shown. */
#define LEVEL_ALL 5

int rtapi_vsnprintf(char *buf, unsigned long size, const char *fmt, va_list ap)
{
    return vsnprintf(buf, size, fmt, ap);
}

int rtapi_snprintf(char *buf, unsigned long size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

static void message(int level, const char *fmt, va_list ap)
{
    char text[MSG_LEN];
    int n = vsnprintf(text, sizeof text, fmt, ap);
    rtapi_host_message(level, text, n >= (int)sizeof text);
}

/* rtapi_set_msg_handler / rtapi_get_msg_handler (rtapi.h's rtapi_msg_handler_t): the default
 * handler formats and hands the text to the Rust side, which filters by level; a module's own handler
 * gets what passes LinuxCNC's filter (level <= the message level, nothing at level NONE). */
typedef void (*rtapi_msg_handler_t)(int level, const char *fmt, va_list ap);
extern int rtapi_get_msg_level(void);

static void default_handler(int level, const char *fmt, va_list ap)
{
    message(level, fmt, ap);
}

static rtapi_msg_handler_t msg_handler = default_handler;

rtapi_msg_handler_t rtapi_get_msg_handler(void)
{
    return msg_handler;
}

void rtapi_set_msg_handler(rtapi_msg_handler_t handler)
{
    msg_handler = handler ? handler : default_handler;
}

static void dispatch(int level, const char *fmt, va_list ap)
{
    if (msg_handler == default_handler) {
        message(level, fmt, ap);
        return;
    }
    int max = rtapi_get_msg_level();
    if (level == LEVEL_ALL || (max != 0 && level <= max))
        msg_handler(level, fmt, ap);
}

void rtapi_print_msg(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dispatch(level, fmt, ap);
    va_end(ap);
}

void rtapi_print(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dispatch(LEVEL_ALL, fmt, ap);
    va_end(ap);
}

/* ---- the LinuxCNC master's tasks (see master/capi.rs and runtime/hosted/) ----
 *
 * hal_lib's thread body loops for ever, calling rtapi_wait() once per period. In the master each task
 * runs inside rtapi's Period::run_foreign (hosted_exit.c's rtapi_hosted_call), and rtapi_wait is the
 * hosted thread's period boundary: rtapi_hosted_wait() records the period, sleeps to the next deadline
 * and, when the task is deleted, longjmps back into rtapi_hosted_call over C frames only (this one,
 * the module's task function's). Off a hosted task (the standalone host, where rtapi's own runtime
 * calls the functions) it returns at once. */
extern void rtapi_hosted_wait(void);

void rtapi_wait(void)
{
    rtapi_hosted_wait();
}

/* Port I/O for modules (the thread needs ioperm/iopl access: rtapi_parport_get grants it). */
unsigned char rtapi_inb(unsigned int port)
{
#if defined(__x86_64__) || defined(__i386__)
    return inb(port);
#else
    (void)port;
    return 0;
#endif
}

void rtapi_outb(unsigned char byte, unsigned int port)
{
#if defined(__x86_64__) || defined(__i386__)
    outb(byte, port);
#else
    (void)byte;
    (void)port;
#endif
}

/* Formats a pin or param name; 0 on success, -EINVAL (after a message) when it is too long. */
static int format_name(char *name, const char *what, const char *fmt, va_list ap)
{
    int n = vsnprintf(name, NAME_LEN + 1, fmt, ap);
    if (n < 0 || n > NAME_LEN) {
        rtapi_host_name_too_long(what, fmt);
        return -EINVAL;
    }
    return 0;
}

#define PIN_NEWF(type)                                                               \
    int hal_pin_##type##_newf(int dir, void **ptr, int comp_id, const char *fmt, ...) \
    {                                                                                \
        char name[NAME_LEN + 1];                                                     \
        va_list ap;                                                                  \
        va_start(ap, fmt);                                                           \
        int r = format_name(name, "pin", fmt, ap);                                   \
        va_end(ap);                                                                  \
        return r ? r : hal_pin_##type##_new(name, dir, ptr, comp_id);                \
    }

#define PARAM_NEWF(type)                                                               \
    int hal_param_##type##_newf(int dir, void *addr, int comp_id, const char *fmt, ...) \
    {                                                                                  \
        char name[NAME_LEN + 1];                                                       \
        va_list ap;                                                                    \
        va_start(ap, fmt);                                                             \
        int r = format_name(name, "param", fmt, ap);                                   \
        va_end(ap);                                                                    \
        return r ? r : hal_param_##type##_new(name, dir, addr, comp_id);               \
    }

PIN_NEWF(bit)
PIN_NEWF(float)
PIN_NEWF(u32)
PIN_NEWF(s32)
PARAM_NEWF(bit)
PARAM_NEWF(float)
PARAM_NEWF(u32)
PARAM_NEWF(s32)
