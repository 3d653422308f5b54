// exec_via HOW PROBE: replaces itself with PROBE (given as a path; its directory is on PATH)
// through the exec function HOW, with the arguments 1 to 7 (more than the registers hold), or
// starts PROBE as a child (fork, posix_spawn, system) and waits for it.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static const char *probe, *how;
static char *explicit_env[] = {"MARK=explicit", NULL};

static const char *base(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int run(void) {
    char *argv[] = {(char *)probe, "1", "2", "3", "4", "5", "6", "7", NULL};
    if (!strcmp(how, "execl"))
        execl(probe, probe, "1", "2", "3", "4", "5", "6", "7", (char *)NULL);
    else if (!strcmp(how, "execlp"))
        execlp(base(probe), probe, "1", "2", "3", "4", "5", "6", "7", (char *)NULL);
    else if (!strcmp(how, "execle"))
        execle(probe, probe, "1", "2", "3", "4", "5", "6", "7", (char *)NULL, explicit_env);
    else if (!strcmp(how, "execv"))
        execv(probe, argv);
    else if (!strcmp(how, "execvp"))
        execvp(base(probe), argv);
    else if (!strcmp(how, "execvpe"))
        execvpe(base(probe), argv, explicit_env);
    else if (!strcmp(how, "execve"))
        execve(probe, argv, explicit_env);
    else if (!strcmp(how, "fexecve")) {
        int fd = open(probe, O_RDONLY | O_CLOEXEC);
        fexecve(fd, argv, environ);
    } else if (!strcmp(how, "fork")) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            execv(probe, argv);
            _exit(127);
        }
        int status;
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else if (!strcmp(how, "spawn")) {
        pid_t child;
        int status, rc = posix_spawn(&child, probe, NULL, NULL, argv, environ);
        if (rc != 0) {
            fprintf(stderr, "posix_spawn: %s\n", strerror(rc));
            return 1;
        }
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else if (!strcmp(how, "system")) {
        char command[4200];
        fflush(stdout);
        snprintf(command, sizeof command, "'%s' 1 2 3 4 5 6 7", probe);
        int status = system(command);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    } else if (!strcmp(how, "missing")) {
        // A failed exec returns its error, and the program goes on as it was.
        execl("/nonexistent/program", "program", (char *)NULL);
        printf("execl: %s\n", strerror(errno));
        fflush(stdout);
        execv(probe, argv);
    } else {
        fprintf(stderr, "unknown HOW %s\n", how);
        return 2;
    }
    perror(how);
    return 1;
}

static void *in_thread(void *unused) {
    (void)unused;
    exit(run());
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: exec_via HOW PROBE\n");
        return 2;
    }
    how = argv[1];
    probe = argv[2];
    setenv("MARK", "inherited", 1);
    if (!strncmp(how, "thread-", 7)) {
        // From a created thread: a uthread on whichever kthread runs it.
        how += 7;
        pthread_t t;
        pthread_create(&t, NULL, in_thread, NULL);
        pthread_join(t, NULL);
        return 1;
    }
    return run();
}
