// fork_tokenize: runs `trident tokenize` many times from one process, for the fuzzers
// (tests/fuzz_tokenizer.py): starting the trident binary costs ~0.2 s in a CUDA build (it
// loads the CUDA libraries), a fork of this process a millisecond.
//
//   fork_tokenize BOUND_S      then, on stdin, one request per line:
//   ERRFILE<TAB>ARG<TAB>ARG...   runs tokenize_main(ARGS) in a child with stdout to /dev/null
//                                and stderr to ERRFILE, and answers on stdout:
//   exit CODE MS | signal N MS | hang MS   (hang: killed after BOUND_S seconds)
//
// The child runs the same code as `trident tokenize ARGS` (main() only dispatches to it).
#include "app/tokenize.h"
#include "base/common.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    log_init();
    double bound = argc > 1 ? atof(argv[1]) : 10.0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (line[len - 1] == '\n') line[--len] = '\0';
        char *args[256];
        int n = 0;
        for (char *tok = strtok(line, "\t"); tok && n < 255; tok = strtok(NULL, "\t"))
            args[n++] = tok;
        if (n < 1) continue;
        args[n] = NULL;
        fflush(stdout);
        double t0 = time_now_s();
        pid_t pid = fork();
        if (pid == 0) {
            int out = open("/dev/null", O_WRONLY),
                err = open(args[0], O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (out < 0 || err < 0) _exit(99);
            dup2(out, 1);
            dup2(err, 2);
            exit(tokenize_main(n - 1, args + 1));
        }
        int status = 0, done = 0;
        while (!(done = waitpid(pid, &status, WNOHANG)) && time_now_s() - t0 < bound) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        double ms = (time_now_s() - t0) * 1e3;
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("hang %.0f\n", ms);
        } else if (WIFSIGNALED(status)) {
            printf("signal %d %.0f\n", WTERMSIG(status), ms);
        } else {
            printf("exit %d %.0f\n", WEXITSTATUS(status), ms);
        }
        fflush(stdout);
    }
    free(line);
    return 0;
}
