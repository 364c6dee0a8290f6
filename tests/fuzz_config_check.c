// fuzz_config_check.c: the `trident check` and `trident plan` commands of src/app/main.c
// (included below, so the code is the command line's own) run once per case in a forked
// child, for the config fuzzer (tests/fuzz_config.py): a build with CUDA spends about 0.2 s
// loading its libraries at every process start, which a few hundred cases would pay each.
//
// stdin: one case per line, its arguments separated by tabs: "check\tFILE\t--world\t1\t..."
// (the command name first, as after `trident`). stdout, per case: "case RC SECONDS BYTES\n"
// and then BYTES of the child's stdout and stderr together. RC is the exit code, 128 + the
// signal for a child a signal ended, or -1 for one still running after the bound (killed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define main trident_cli_main
#include "app/main.c"
#undef main

#define CASE_BOUND_S 20

static int run_command(int argc, char **argv) {
    if (!strcmp(argv[0], "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(argv[0], "plan")) return cmd_plan(argc - 1, argv + 1);
    fprintf(stderr, "fuzz_config_check: unknown command %s\n", argv[0]);
    return 100;
}

int main(void) {
    log_init();
    char tmpl[] = "/tmp/trident_fuzz_check_XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) return perror("mkstemp"), 1;
    unlink(tmpl);
    static char line[1 << 21]; // the fuzzer's longest --set value is 400 kB
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char *argv[64];
        int argc = 0;
        for (char *tok = strtok(line, "\t"); tok && argc < 63; tok = strtok(NULL, "\t"))
            argv[argc++] = tok;
        argv[argc] = NULL;
        if (!argc) continue;
        if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) return perror("ftruncate"), 1;
        fflush(stdout);
        const double t0 = time_now_s();
        const pid_t pid = fork();
        if (pid < 0) return perror("fork"), 1;
        if (pid == 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            alarm(CASE_BOUND_S);
            const int rc = run_command(argc, argv);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        const double dt = time_now_s() - t0;
        int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) rc = -1;
        const off_t n = lseek(fd, 0, SEEK_END);
        printf("case %d %.3f %lld\n", rc, dt, (long long)n);
        lseek(fd, 0, SEEK_SET);
        char buf[65536];
        for (off_t left = n; left > 0;) {
            const ssize_t got = read(fd, buf, left < (off_t)sizeof buf ? (size_t)left : sizeof buf);
            if (got <= 0) break;
            fwrite(buf, 1, (size_t)got, stdout);
            left -= got;
        }
    }
    fflush(stdout);
    return 0;
}
