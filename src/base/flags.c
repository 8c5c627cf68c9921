/* SPDX-License-Identifier: MIT */
/*
 * flags: see flags.h. Values are stored as validated text plus a parsed integer. The text of a
 * value set from the environment or argv is copied into a fixed slot so the registry owns it.
 */
#include "base/flags.h"
#include "base/err.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLAG_VALUE_MAX 512

static const struct {
    const char *name, *env;
    enum flag_kind kind;
    const char *def, *choices, *desc;
} flag_defs[FLAG_COUNT] = {
#define FLAG_ROW(id, name, kind, def, choices, desc)                                               \
    {name, "VERITY_" #id, kind, def, choices, desc},
    FLAG_LIST(FLAG_ROW) FLAG_FAULT_LIST(FLAG_ROW)
#undef FLAG_ROW
};

static flag_info flag_rows[FLAG_COUNT];
static char flag_text[FLAG_COUNT][FLAG_VALUE_MAX];
static int64_t flag_num[FLAG_COUNT];
static bool flag_ready;

/* Validates text against the row's choices; on success stores it. */
static int flag_store(int i, const char *value) {
    const char *choices = flag_defs[i].choices;
    size_t vl = strlen(value);
    bool text = flag_defs[i].kind == FLAG_KIND_STRING || flag_defs[i].kind == FLAG_KIND_SECRET;
    if ((vl == 0 && !text) || vl >= FLAG_VALUE_MAX)
        return err_set(ERR_INVAL, "flag %s: invalid value '%s'", flag_defs[i].name,
                       flag_defs[i].kind == FLAG_KIND_SECRET ? "(secret)" : value);
    int64_t num = 0;
    if (flag_defs[i].kind == FLAG_KIND_ENUM) {
        const char *c = choices;
        bool ok = false;
        int idx = 0;
        while (*c) {
            const char *bar = strchr(c, '|');
            size_t l = bar ? (size_t)(bar - c) : strlen(c);
            if (l == vl && memcmp(c, value, l) == 0) {
                ok = true;
                num = idx;
                break;
            }
            idx++;
            if (!bar)
                break;
            c = bar + 1;
        }
        if (!ok)
            return err_set(ERR_INVAL, "flag %s: invalid value '%s' (choices: %s)",
                           flag_defs[i].name, value, choices);
    } else if (flag_defs[i].kind == FLAG_KIND_BOOL) {
        if (!strcmp(value, "1") || !strcmp(value, "on") || !strcmp(value, "true"))
            num = 1, value = "1";
        else if (!strcmp(value, "0") || !strcmp(value, "off") || !strcmp(value, "false"))
            num = 0, value = "0";
        else
            return err_set(ERR_INVAL, "flag %s: invalid value '%s' (use 0 or 1)", flag_defs[i].name,
                           value);
    } else if (flag_defs[i].kind == FLAG_KIND_STRING || flag_defs[i].kind == FLAG_KIND_SECRET) {
        num = 0;
    } else {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        long long lo = 0, hi = 0;
        sscanf(choices, "%lld:%lld", &lo, &hi);
        if (errno || *end || end == value || v < lo || v > hi)
            return err_set(ERR_INVAL, "flag %s: invalid value '%s' (an integer in %lld..%lld)",
                           flag_defs[i].name, value, lo, hi);
        num = v;
    }
    memcpy(flag_text[i], value, strlen(value) + 1);
    flag_num[i] = num;
    flag_rows[i].value = flag_text[i];
    return 0;
}

int flags_init(void) {
    for (int i = 0; i < FLAG_COUNT; i++) {
        flag_rows[i].name = flag_defs[i].name;
        flag_rows[i].env = flag_defs[i].env;
        flag_rows[i].kind = flag_defs[i].kind;
        flag_rows[i].def = flag_defs[i].def;
        flag_rows[i].choices = flag_defs[i].choices;
        flag_rows[i].desc = flag_defs[i].desc;
        flag_rows[i].from_env = false;
        flag_rows[i].from_cli = false;
        flag_rows[i].secret = flag_defs[i].kind == FLAG_KIND_SECRET;
        int rc = flag_store(i, flag_defs[i].def);
        if (rc)
            return rc; /* a bad default is a bug, reported like any other */
    }
    flag_ready = true;
    for (int i = 0; i < FLAG_COUNT; i++) {
        const char *v = getenv(flag_defs[i].env);
        if (v && (*v || flag_defs[i].kind == FLAG_KIND_STRING)) {
            int rc = flag_store(i, v);
            if (rc)
                return err_wrap(rc, "environment variable %s", flag_defs[i].env);
            flag_rows[i].from_env = true;
        }
    }
    return 0;
}

static void flags_ensure(void) {
    if (!flag_ready)
        flags_init();
}

static int flag_index(const char *name) {
    for (int i = 0; i < FLAG_COUNT; i++)
        if (!strcmp(flag_defs[i].name, name))
            return i;
    return -1;
}

int flags_set(const char *name, const char *value) {
    flags_ensure();
    int i = flag_index(name);
    if (i < 0)
        return err_set(ERR_NOTFOUND, "unknown flag '%s'", name);
    int rc = flag_store(i, value);
    if (rc == 0)
        flag_rows[i].from_cli = true;
    return rc;
}

int flags_parse_args(int *argc, char **argv) {
    flags_ensure();
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            char name[FLAG_VALUE_MAX];
            const char *eq = strchr(a + 2, '=');
            size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (nl < sizeof name) {
                memcpy(name, a + 2, nl);
                name[nl] = 0;
                if (flag_index(name) >= 0) {
                    const char *val;
                    if (eq) {
                        val = eq + 1;
                    } else {
                        if (i + 1 >= *argc)
                            return err_set(ERR_INVAL, "option --%s needs a value", name);
                        val = argv[++i];
                    }
                    int rc = flags_set(name, val);
                    if (rc)
                        return rc;
                    continue;
                }
            }
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

int64_t flags_int(flag_id id) {
    flags_ensure();
    return flag_num[id];
}

const char *flags_str(flag_id id) {
    flags_ensure();
    return flag_text[id];
}

const flag_info *flags_get(int i) {
    flags_ensure();
    if (i < 0 || i >= FLAG_COUNT)
        return NULL;
    return &flag_rows[i];
}

const flag_info *flags_find(const char *name) {
    flags_ensure();
    int i = flag_index(name);
    return i < 0 ? NULL : &flag_rows[i];
}
