/* SPDX-License-Identifier: MIT */
/*
 * replay_main: runs a libFuzzer target without libFuzzer, over a checked-in corpus, so the normal
 * test suite (tests/run.sh) exercises every fuzz target under ASan/UBSan. Calls
 * LLVMFuzzerTestOneInput once per regular file in the directory argv[1] (sorted by name, so runs
 * are reproducible) and prints one line: "PASS replay_<name>: N inputs", or "FAIL replay_<name>:
 * reason". A crash in the target is a crash of this binary, which run.sh reports as a failure.
 * A corpus that is missing, empty or unreadable is a failure, not a pass: a replay that ran no
 * input checked nothing (a renamed or emptied corpus directory would otherwise go unnoticed).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv) {
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc != 2) {
        printf("FAIL %s: usage: %s CORPUS_DIR\n", prog, prog);
        return 1;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        printf("FAIL %s: cannot open corpus directory %s\n", prog, argv[1]);
        return 1;
    }
    size_t n = 0, cap = 64;
    int oom = 0;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap *= 2) * sizeof *names);
            if (!nn) {
                oom = 1;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            oom = 1;
            break;
        }
        n++;
    }
    closedir(d);
    if (!names || oom) {
        printf("FAIL %s: out of memory listing %s\n", prog, argv[1]);
        for (size_t i = 0; names && i < n; i++)
            free(names[i]);
        free(names);
        return 1;
    }
    qsort(names, n, sizeof *names, cmp_names);
    size_t ran = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], names[i]);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        FILE *f = fopen(path, "rb");
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        if (!f || !buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
            printf("FAIL %s: cannot read %s\n", prog, path);
            rc = 1;
        } else {
            LLVMFuzzerTestOneInput(buf, (size_t)st.st_size);
            ran++;
        }
        if (f)
            fclose(f);
        free(buf);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (!rc && ran == 0) {
        printf("FAIL %s: no input in corpus directory %s (an empty corpus checks nothing)\n", prog,
               argv[1]);
        rc = 1;
    }
    if (!rc)
        printf("PASS %s: %zu inputs\n", prog, ran);
    return rc;
}
