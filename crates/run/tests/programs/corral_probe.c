// Says whether it runs inside a Corral runtime (a thread named corral-k0 exists: the runtime's
// first kthread), then its arguments, the MARK variable, and what is left of the launcher's
// variables for the shim (CORRAL_RUN_SHIM is the user's, for the launcher) and LD_PRELOAD in
// its environment.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static int has_kthread(void) {
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    int found = 0;
    if (!tasks)
        return 0;
    while (!found && (task = readdir(tasks))) {
        char path[300], name[64] = {0};
        if (task->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", task->d_name);
        FILE *comm = fopen(path, "r");
        if (!comm)
            continue;
        if (fgets(name, sizeof name, comm))
            found = strcmp(name, "corral-k0\n") == 0;
        fclose(comm);
    }
    closedir(tasks);
    return found;
}

int main(int argc, char **argv) {
    int launcher_vars = 0;
    for (char **e = environ; *e; e++)
        launcher_vars += strncmp(*e, "CORRAL_RUN", 10) == 0 && strncmp(*e, "CORRAL_RUN_SHIM=", 16) != 0;
    const char *mark = getenv("MARK"), *preload = getenv("LD_PRELOAD");
    printf("%s\nargs:", has_kthread() ? "corral" : "plain");
    for (int i = 1; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\nmark: %s\nlauncher variables: %d\nLD_PRELOAD: %s\n", mark ? mark : "unset",
           launcher_vars, preload ? preload : "unset");
    return 0;
}
