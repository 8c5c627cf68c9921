/* SPDX-License-Identifier: MIT */
/*
 * replay_main: runs a libFuzzer target's entry point over every file of a corpus directory, so
 * the checked-in corpus is replayed by the normal test suite (under ASan/UBSan in `make test`)
 * without needing clang's libFuzzer. Prints one PASS/FAIL line for run.sh.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc != 2) {
        printf("FAIL %s: usage: %s CORPUS_DIR\n", name, name);
        return 1;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        printf("SKIP %s: no corpus at %s\n", name, argv[1]);
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(sz > 0 ? (size_t)sz : 1);
        if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
            printf("FAIL %s: cannot read %s\n", name, path);
            fclose(f);
            free(buf);
            closedir(d);
            return 1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)sz);
        free(buf);
        n++;
    }
    closedir(d);
    printf("PASS %s: %d inputs\n", name, n);
    return 0;
}
