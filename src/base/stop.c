// stop.c: stop requests and the start-up watchdog (stop.h).
#include "base/stop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"

// Written by the signal handler (any thread), read everywhere.
static volatile sig_atomic_t g_signal;      // the first stop signal, 0 when none
static volatile sig_atomic_t g_sigint_seen; // a first SIGINT arrived

// Shared between the main thread (phases, progress) and the watchdog.
static _Atomic(const char *) g_phase = "start-up";
static _Atomic long long g_progress_ms; // CLOCK_MONOTONIC ms of the last progress
static _Atomic long long g_timeout_ms;  // the deadline after the last progress; 0 = none
static atomic_int g_on;                 // the watchdog runs
static atomic_int g_hooks_set;
static stop_peer_hooks g_hooks; // written once before g_hooks_set (release)

static void (*volatile g_exit_hook)(int code);

// _exit(code), after telling the exit hook.
static void stop_exit(int code) {
    if (g_exit_hook) g_exit_hook(code);
    _exit(code);
}

void stop_set_exit_hook(void (*hook)(int code)) { g_exit_hook = hook; }

static pthread_t g_thread;
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;

static long long now_ms(void) { return (long long)(time_now_s() * 1e3); }

// write(2) of the whole string: usable where stdio's lock may be held by a blocked thread.
static void write_all(int fd, const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

// Pushes out what stdout holds (the last step lines), unless another thread holds its lock.
static void flush_stdout_if_free(void) {
    if (ftrylockfile(stdout) != 0) return;
    fflush_unlocked(stdout);
    funlockfile(stdout);
}

// ---- stop requests ----

static void on_stop_signal(int sig) {
    if (sig == SIGINT) {
        if (g_sigint_seen) {
            static const char msg[] = "trident: second SIGINT: exiting at once, without a "
                                      "checkpoint\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            stop_exit(130);
        }
        g_sigint_seen = 1;
    }
    if (!g_signal) g_signal = sig;
}

void stop_install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    // SA_RESTART: a read or write that the signal interrupts goes on (a data read must not
    // fail with EINTR because of a preemption notice); the flag is polled in any case.
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int stop_signal(void) { return g_signal; }

void stop_request(int sig) {
    if (!g_signal) g_signal = sig;
}

const char *stop_signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    }
    return "a signal";
}

tri_status stop_poll(void) {
    stop_progress();
    return g_signal ? TRI_STOPPED : TRI_OK;
}

tri_status stop_poll_resume(void) {
    static int delay_ms = -1;
    if (delay_ms < 0) delay_ms = env_int(ENV_TEST_RESUME_DELAY_MS, 0);
    if (delay_ms > 0) {
        struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !g_signal) {
        }
    }
    return stop_poll();
}

// ---- the start-up watchdog ----

static void on_report_alarm(int sig) {
    (void)sig;
    stop_exit(TRI_ERR_COMM);
}

// The deadline passed: name the phase and the ranks that never reached it, end with exit 5.
static void deadline_exit(long long silent_ms) {
    const char *phase = atomic_load(&g_phase);
    char head[1024], peers[1024] = "", msg[3072];
    snprintf(head, sizeof head,
             "%serror: start-up made no progress for %.0f s (system.init_timeout_s) in phase "
             "'%s'",
             log_rank_prefix(), (double)silent_ms / 1e3, phase);
    // Asking the other ranks goes through the launcher (PMIx) and may itself hang: an alarm
    // ends the process with exit 5 then (the first line is out already).
    write_all(2, head);
    write_all(2, "\n");
    if (atomic_load_explicit(&g_hooks_set, memory_order_acquire) && g_hooks.report) {
        signal(SIGALRM, on_report_alarm);
        alarm(10);
        g_hooks.report(phase, peers, sizeof peers);
        alarm(0);
    }
    snprintf(msg, sizeof msg,
             "%serror: start-up stalled in phase '%s'%s%s; ending the job (exit 5)\n"
             "%sHINT: a rank is stopped, dead or very slow (the launcher's log may say which), "
             "or the launcher's PMIx/MPI start-up is stuck; raise system.init_timeout_s for a "
             "slow start (0 turns the deadline off)\n",
             log_rank_prefix(), phase, peers[0] ? ": " : "", peers, log_rank_prefix());
    write_all(2, msg);
    flush_stdout_if_free();
    stop_exit(TRI_ERR_COMM);
}

// A stop requested during start-up was not honoured in time: end with exit 0 and the reason.
static void stop_bound_exit(void) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "%sstopped by %s during start-up (phase '%s'), before the first step: nothing to "
             "checkpoint; the phase did not end within %.0f s of the request (it waits for "
             "other ranks or inside the launcher), so the process ends now (exit 0)\n",
             log_rank_prefix(), stop_signal_name(g_signal), atomic_load(&g_phase),
             STOP_STARTUP_GRACE_S);
    flush_stdout_if_free();
    write_all(2, msg);
    stop_exit(0);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    long long stop_seen_ms = 0;
    pthread_mutex_lock(&g_mutex);
    while (atomic_load(&g_on)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g_wake, &g_mutex, &until);
        if (!atomic_load(&g_on)) break;
        const long long now = now_ms();
        if (g_signal && !stop_seen_ms) stop_seen_ms = now;
        if (stop_seen_ms && now - stop_seen_ms > (long long)(STOP_STARTUP_GRACE_S * 1e3))
            stop_bound_exit();
        const long long timeout = atomic_load(&g_timeout_ms);
        const long long silent = now - atomic_load(&g_progress_ms);
        if (timeout > 0 && silent > timeout) deadline_exit(silent);
    }
    pthread_mutex_unlock(&g_mutex);
    return NULL;
}

void stop_startup_begin(double timeout_s) {
    stop_startup_set_timeout(timeout_s);
    stop_progress();
    if (atomic_exchange(&g_on, 1)) return;
    if (pthread_create(&g_thread, NULL, watchdog_main, NULL) != 0) {
        atomic_store(&g_on, 0);
        LOG_WARN("could not start the start-up watchdog: system.init_timeout_s is not enforced");
    }
}

void stop_startup_set_timeout(double timeout_s) {
    atomic_store(&g_timeout_ms, timeout_s > 0 ? (long long)(timeout_s * 1e3) : 0);
}

void stop_phase(const char *phase) {
    atomic_store(&g_phase, phase);
    stop_progress();
    if (atomic_load_explicit(&g_hooks_set, memory_order_acquire) && g_hooks.announce)
        g_hooks.announce(phase);
}

const char *stop_phase_name(void) { return atomic_load(&g_phase); }

void stop_progress(void) { atomic_store(&g_progress_ms, now_ms()); }

void stop_startup_end(void) {
    pthread_mutex_lock(&g_mutex);
    int was_on = atomic_exchange(&g_on, 0);
    pthread_cond_signal(&g_wake);
    pthread_mutex_unlock(&g_mutex);
    if (was_on) pthread_join(g_thread, NULL);
}

int stop_in_startup(void) { return atomic_load(&g_on); }

void stop_set_peer_hooks(const stop_peer_hooks *hooks) {
    if (atomic_load(&g_hooks_set)) return; // once per process, before the watchdog reads it
    g_hooks = *hooks;
    atomic_store_explicit(&g_hooks_set, 1, memory_order_release);
}
