/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * rkubelet's own pause program for the local image `localhost/pause:1`
 * (no registry is reachable on the development machines, so the sandbox
 * image is built here; see scripts/build-images.sh).
 *
 * Behaviour:
 *   - blocks until SIGINT or SIGTERM arrives, then exits 0;
 *   - as PID 1 of a shared PID namespace it is the reaper of orphans, so it
 *     reaps every exited child on SIGCHLD (otherwise zombies accumulate);
 *   - `pause -v` prints a version string and exits (handy for smoke tests).
 *
 * Built with `gcc -static -O2` so the image needs no libc or other files.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAUSE_VERSION "rkubelet-pause 1"

static volatile sig_atomic_t stop_requested = 0;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void on_child(int sig) {
    (void)sig;
    int saved = errno; /* waitpid may clobber errno of the interrupted code */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static void install(int sig, void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    /* SA_NOCLDSTOP: stopped/continued children are not our business. */
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (sigaction(sig, &sa, NULL) < 0) {
        perror("pause: sigaction");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("%s\n", PAUSE_VERSION);
        return 0;
    }
    if (getpid() != 1) {
        /* Not fatal: it still works, it just will not be the orphan reaper. */
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }

    /* Block the signals we handle, then wait for them atomically with
     * sigsuspend so a signal arriving between checks is never lost. */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &block, &waitmask) < 0) {
        perror("pause: sigprocmask");
        return 1;
    }
    sigdelset(&waitmask, SIGINT);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGCHLD);

    install(SIGINT, on_stop);
    install(SIGTERM, on_stop);
    install(SIGCHLD, on_child);

    /* Reap anything that exited before the handler was installed. */
    on_child(SIGCHLD);

    while (!stop_requested) {
        sigsuspend(&waitmask); /* always returns -1/EINTR after a handler ran */
    }
    fprintf(stderr, "pause: shutting down on signal\n");
    return 0;
}
