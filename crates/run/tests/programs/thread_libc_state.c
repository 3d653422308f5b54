// The C library's per-thread state in created threads: character classes and case mapping,
// per-thread locales (uselocale), number parsing under a locale, errno kept apart, and the
// lookups that use resolver and NSS state. Prints one line per check; the output must be the
// same under corral-run as plain.
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <wchar.h>
#include <wctype.h>

#define CHECK(name, cond) printf("%-48s %s\n", name, (cond) ? "ok" : "FAILED")

// Every <ctype.h> classifier and mapping, for every value they accept (EOF and 0..255).
typedef int (*ctype_fn)(int);
static const ctype_fn CTYPE_FNS[] = {isalnum, isalpha, isblank, iscntrl, isdigit, isgraph,
                                     islower, isprint, ispunct, isspace, isupper, isxdigit,
                                     isascii, tolower, toupper};
#define NFNS (sizeof CTYPE_FNS / sizeof CTYPE_FNS[0])
#define NVALUES 257

static void ctype_table(int out[NFNS][NVALUES]) {
    for (size_t f = 0; f < NFNS; f++)
        for (int v = -1; v < 256; v++)
            // Classifiers return any non-zero for true; compare truth, and mappings exactly.
            out[f][v + 1] = f < NFNS - 2 ? !!CTYPE_FNS[f](v) : CTYPE_FNS[f](v);
}

static int main_table[NFNS][NVALUES];

struct result {
    int index;
    int ctype_same;
    int wide_upper;
    int strtod_ok;
    int locale_own;
    int locale_restored;
    int errno_own;
    int passwd_ok;
    int addrinfo_ok;
    int res_init_ok;
    struct __res_state *res;
};

static pthread_barrier_t errno_set, errno_checked;

static void *libc_state(void *arg) {
    struct result *r = arg;
    int table[NFNS][NVALUES];
    ctype_table(table);
    r->ctype_same = memcmp(table, main_table, sizeof table) == 0;

    // A thread's own locale: wide case mapping and number parsing under C.UTF-8, while the
    // process (and every other thread) stays in "C".
    locale_t utf8 = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
    locale_t before = uselocale(utf8);
    r->wide_upper = utf8 != (locale_t)0 && towupper(L'\u00e9') == L'\u00c9' &&
                    iswalpha(L'\u00e9') && MB_CUR_MAX > 1;
    char *end;
    double d = strtod("3.25e2xyz", &end);
    r->strtod_ok = d == 325.0 && strcmp(end, "xyz") == 0;
    r->locale_own = uselocale((locale_t)0) == utf8;
    uselocale(before);
    r->locale_restored = uselocale((locale_t)0) == LC_GLOBAL_LOCALE && MB_CUR_MAX == 1;
    if (utf8 != (locale_t)0)
        freelocale(utf8);

    // errno is per thread: each sets its own, waits until all have, and reads its own back.
    errno = 1000 + r->index;
    int mine = errno;
    pthread_barrier_wait(&errno_set);
    r->errno_own = errno == mine;
    pthread_barrier_wait(&errno_checked);

    char buf[4096];
    struct passwd pw, *found = NULL;
    r->passwd_ok = getpwuid_r(0, &pw, buf, sizeof buf, &found) == 0 && found == &pw &&
                   strcmp(pw.pw_name, "root") == 0 && pw.pw_uid == 0;

    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    r->addrinfo_ok = getaddrinfo("localhost", "80", &hints, &ai) == 0 && ai != NULL &&
                     ai->ai_family == AF_INET &&
                     ntohs(((struct sockaddr_in *)ai->ai_addr)->sin_port) == 80 &&
                     ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) == 0x7f000001;
    if (ai)
        freeaddrinfo(ai);

    // Resolver state is per thread: initializing this thread's leaves main's alone.
    r->res_init_ok = res_init() == 0 && (_res.options & RES_INIT) != 0;
    r->res = &_res;
    return NULL;
}

#define THREADS 4

int main(void) {
    ctype_table(main_table);
    pthread_barrier_init(&errno_set, NULL, THREADS);
    pthread_barrier_init(&errno_checked, NULL, THREADS);
    struct result results[THREADS];
    pthread_t threads[THREADS];
    memset(results, 0, sizeof results);
    for (int i = 0; i < THREADS; i++)
        results[i].index = i;
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, libc_state, &results[i]) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    int all[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < THREADS; i++) {
        all[0] &= results[i].ctype_same;
        all[1] &= results[i].wide_upper;
        all[2] &= results[i].strtod_ok;
        all[3] &= results[i].locale_own;
        all[4] &= results[i].locale_restored;
        all[5] &= results[i].errno_own;
        all[6] &= results[i].passwd_ok;
        all[7] &= results[i].addrinfo_ok;
        all[8] &= results[i].res_init_ok;
        all[9] &= results[i].res != &_res;
        for (int j = 0; j < i; j++)
            all[9] &= results[i].res != results[j].res;
    }
    CHECK("ctype classes and mappings as in main", all[0]);
    CHECK("towupper/iswalpha under a thread's C.UTF-8", all[1]);
    CHECK("strtod under a thread's locale", all[2]);
    CHECK("uselocale is per thread", all[3]);
    CHECK("uselocale restores the global locale", all[4]);
    CHECK("errno is per thread", all[5]);
    CHECK("getpwuid_r finds root", all[6]);
    CHECK("getaddrinfo resolves localhost", all[7]);
    CHECK("res_init in a thread", all[8]);
    CHECK("each thread has its own resolver state", all[9] && !(_res.options & RES_INIT));
    CHECK("main still in the C locale", MB_CUR_MAX == 1 && isupper('A') && !isalpha(0xe9));
    return 0;
}
