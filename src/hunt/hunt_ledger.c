/* SPDX-License-Identifier: MIT */
/* hunt_ledger: bisect's ledger, JSON and markdown. See hunt_ledger.h. */
#include "hunt/hunt_ledger.h"
#include "base/arena.h"
#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "hunt/hunt_report.h"
#include "hunt/hunt_stats.h"
#include "hunt/hunt_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hunt_ledger_init(hunt_ledger *lg) {
    memset(lg, 0, sizeof *lg);
    snprintf(lg->state, sizeof lg->state, "running");
}

void hunt_ledger_deinit(hunt_ledger *lg) {
    free(lg->launch);
    free(lg->health);
    free(lg->hunt);
    for (int i = 0; i < lg->n_toggles; i++) {
        free(lg->toggles[i].name);
        free(lg->toggles[i].off);
        free(lg->toggles[i].on);
    }
    free(lg->entries);
    memset(lg, 0, sizeof *lg);
}

hunt_ledger_entry *hunt_ledger_add(hunt_ledger *lg) {
    if (mem_grow((void **)&lg->entries, &lg->cap_entries, (size_t)lg->n_entries + 1,
                 sizeof *lg->entries))
        return NULL;
    hunt_ledger_entry *e = &lg->entries[lg->n_entries++];
    memset(e, 0, sizeof *e);
    e->id = lg->n_entries;
    snprintf(e->verdict, sizeof e->verdict, "running");
    return e;
}

hunt_ledger_entry *hunt_ledger_find(hunt_ledger *lg, bool baseline, uint64_t flipped) {
    for (int i = 0; i < lg->n_entries; i++) {
        hunt_ledger_entry *e = &lg->entries[i];
        if (e->baseline == baseline && (baseline || e->flipped == flipped))
            return e;
    }
    return NULL;
}

int hunt_ledger_restarts(const hunt_ledger *lg) {
    int n = 0;
    for (int i = 0; i < lg->n_entries; i++)
        n += lg->entries[i].restarts;
    return n;
}

void hunt_ledger_names(const hunt_ledger *lg, uint64_t mask, strbuf *out) {
    int n = 0;
    for (int i = 0; i < lg->n_toggles; i++)
        if (mask & ((uint64_t)1 << i)) {
            if (n++)
                strbuf_puts(out, ", ");
            strbuf_puts(out, lg->toggles[i].name);
        }
    if (!n)
        strbuf_puts(out, "(none)");
}

static void jnames(strbuf *o, const hunt_ledger *lg, uint64_t mask) {
    strbuf_putc(o, '[');
    for (int i = 0, n = 0; i < lg->n_toggles; i++)
        if (mask & ((uint64_t)1 << i)) {
            strbuf_puts(o, n++ ? "," : "");
            strbuf_json_cstr(o, lg->toggles[i].name);
        }
    strbuf_putc(o, ']');
}

/* Toggles ruled out: flipped in a configuration that stayed corrupt (flipping them off did not
 * remove the corruption, so none of them alone is needed for it). */
static uint64_t hunt_ledger_ruled_out(const hunt_ledger *lg) {
    uint64_t m = 0;
    for (int i = 0; i < lg->n_entries; i++)
        if (!lg->entries[i].baseline && !strcmp(lg->entries[i].verdict, "corrupt"))
            m |= lg->entries[i].flipped;
    return m;
}

void hunt_ledger_json(const hunt_ledger *lg, strbuf *o) {
    strbuf_puts(o, "{\"verity_bisect\":1,\"launch\":");
    strbuf_json_cstr(o, lg->launch);
    strbuf_puts(o, ",\"health\":");
    strbuf_json_cstr(o, lg->health);
    strbuf_puts(o, ",\"hunt\":");
    strbuf_json_cstr(o, lg->hunt);
    strbuf_puts(o, ",\"toggles\":[");
    for (int i = 0; i < lg->n_toggles; i++) {
        const hunt_toggle *t = &lg->toggles[i];
        strbuf_puts(o, i ? ",{\"name\":" : "{\"name\":");
        strbuf_json_cstr(o, t->name);
        strbuf_puts(o, ",\"off\":");
        strbuf_json_cstr(o, t->off);
        strbuf_puts(o, ",\"on\":");
        strbuf_json_cstr(o, t->on);
        strbuf_puts(o, ",\"likelihood\":");
        strbuf_json_num(o, t->likelihood);
        strbuf_puts(o, ",\"cost\":");
        strbuf_json_num(o, t->cost);
        strbuf_putc(o, '}');
    }
    strbuf_puts(o, "],\"p0\":");
    strbuf_json_num(o, lg->p0);
    strbuf_puts(o, ",\"p1\":");
    strbuf_json_num(o, lg->p1);
    strbuf_puts(o, ",\"base_rate\":");
    strbuf_json_num(o, lg->base_rate);
    strbuf_puts(o, ",\"entries\":[");
    for (int i = 0; i < lg->n_entries; i++) {
        const hunt_ledger_entry *e = &lg->entries[i];
        double lo, hi;
        hunt_wilson(e->corrupt, e->sessions, HUNT_Z95, &lo, &hi);
        strbuf_printf(o, "%s\n{\"id\":%d,\"baseline\":%s,\"flipped\":", i ? "," : "", e->id,
                      e->baseline ? "true" : "false");
        jnames(o, lg, e->flipped);
        strbuf_puts(o, ",\"config\":{");
        for (int t = 0; t < lg->n_toggles; t++) {
            strbuf_puts(o, t ? "," : "");
            strbuf_json_cstr(o, lg->toggles[t].name);
            strbuf_putc(o, ':');
            strbuf_json_cstr(o, (e->flipped >> t) & 1 ? lg->toggles[t].off : lg->toggles[t].on);
        }
        strbuf_puts(o, "},\"hypothesis\":");
        strbuf_json_cstr(o, e->hypothesis);
        strbuf_printf(o, ",\"sessions\":%lld,\"corrupt\":%lld,\"errors\":%lld,\"rate\":",
                      (long long)e->sessions, (long long)e->corrupt, (long long)e->errors);
        strbuf_json_num(o, e->sessions ? (double)e->corrupt / (double)e->sessions : 0);
        strbuf_puts(o, ",\"wilson95\":[");
        strbuf_json_num(o, lo);
        strbuf_putc(o, ',');
        strbuf_json_num(o, hi);
        strbuf_puts(o, "],\"llr\":");
        strbuf_json_num(o, e->llr);
        strbuf_puts(o, ",\"verdict\":");
        strbuf_json_cstr(o, e->verdict);
        strbuf_puts(o, ",\"wall_s\":");
        strbuf_json_num(o, e->wall_s);
        strbuf_printf(o, ",\"restarts\":%d,\"next_session\":%lld,\"note\":", e->restarts,
                      (long long)e->next_index);
        strbuf_json_cstr(o, e->note);
        strbuf_putc(o, '}');
    }
    uint64_t all = lg->n_toggles >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << lg->n_toggles) - 1);
    uint64_t ruled = hunt_ledger_ruled_out(lg) & ~lg->culprit;
    strbuf_puts(o, "],\"summary\":{\"state\":");
    strbuf_json_cstr(o, lg->state);
    strbuf_puts(o, ",\"culprit\":");
    jnames(o, lg, lg->culprit);
    strbuf_puts(o, ",\"ruled_out\":");
    jnames(o, lg, ruled);
    strbuf_puts(o, ",\"remaining\":");
    jnames(o, lg, all & ~ruled & ~lg->culprit);
    strbuf_printf(o, ",\"restarts\":%d,\"conclusion\":", hunt_ledger_restarts(lg));
    strbuf_json_cstr(o, lg->conclusion);
    strbuf_puts(o, "}}\n");
}

void hunt_ledger_md(const hunt_ledger *lg, strbuf *o) {
    strbuf_puts(o, "# verity bisect ledger\n\n- launch: `");
    hunt_md_escape(o, lg->launch ? lg->launch : "", lg->launch ? strlen(lg->launch) : 0, 2000);
    strbuf_puts(o, "`\n- health: `");
    hunt_md_escape(o, lg->health ? lg->health : "", lg->health ? strlen(lg->health) : 0, 2000);
    strbuf_puts(o, "`\n- hunt: `");
    hunt_md_escape(o, lg->hunt ? lg->hunt : "", lg->hunt ? strlen(lg->hunt) : 0, 2000);
    strbuf_puts(o, "`\n- toggles (baseline = every toggle ON):");
    for (int i = 0; i < lg->n_toggles; i++)
        strbuf_printf(o, " `%s=%s:%s`", lg->toggles[i].name, lg->toggles[i].off, lg->toggles[i].on);
    if (lg->p1 > 0)
        strbuf_printf(o,
                      "\n- SPRT: H0 rate <= %.4f (clean) vs H1 rate >= %.4f (still corrupt), "
                      "alpha = beta = 0.05; baseline rate %.3f\n",
                      lg->p0, lg->p1, lg->base_rate);
    else
        strbuf_puts(o, "\n");
    strbuf_puts(o, "\n| # | hypothesis | flipped OFF | sessions | corrupt | rate | Wilson 95% | "
                   "LLR | verdict | wall s | restarts |\n|---|---|---|---|---|---|---|---|---|---|"
                   "---|\n");
    for (int i = 0; i < lg->n_entries; i++) {
        const hunt_ledger_entry *e = &lg->entries[i];
        double lo, hi;
        hunt_wilson(e->corrupt, e->sessions, HUNT_Z95, &lo, &hi);
        strbuf_printf(o, "| %d | ", e->id);
        hunt_md_escape(o, e->hypothesis, strlen(e->hypothesis), 300);
        strbuf_puts(o, " | ");
        hunt_ledger_names(lg, e->flipped, o);
        strbuf_printf(o, " | %lld | %lld | %.1f%% | [%.1f%%, %.1f%%] | %.2f | %s | %.1f | %d |\n",
                      (long long)e->sessions, (long long)e->corrupt,
                      e->sessions ? 100.0 * (double)e->corrupt / (double)e->sessions : 0.0,
                      100 * lo, 100 * hi, e->llr, e->verdict, e->wall_s, e->restarts);
    }
    uint64_t all = lg->n_toggles >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << lg->n_toggles) - 1);
    uint64_t ruled = hunt_ledger_ruled_out(lg) & ~lg->culprit;
    strbuf_printf(o, "\n## Summary (%s, %d restarts)\n\n- culprit: ", lg->state,
                  hunt_ledger_restarts(lg));
    hunt_ledger_names(lg, lg->culprit, o);
    strbuf_puts(o, "\n- ruled out: ");
    hunt_ledger_names(lg, ruled, o);
    strbuf_puts(o, "\n- remaining: ");
    hunt_ledger_names(lg, all & ~ruled & ~lg->culprit, o);
    strbuf_printf(o, "\n\n%s\n", lg->conclusion);
}

int hunt_ledger_save(const hunt_ledger *lg, const char *path) {
    strbuf sb;
    strbuf_init(&sb);
    hunt_ledger_json(lg, &sb);
    int rc = strbuf_failed(&sb) ? err_set(ERR_NOMEM, "out of memory writing the ledger")
                                : hunt_write_file(path, sb.data, sb.len);
    if (!rc) {
        strbuf_reset(&sb);
        hunt_ledger_md(lg, &sb);
        char md[4200];
        size_t n = strlen(path);
        if (n > 5 && !strcmp(path + n - 5, ".json"))
            snprintf(md, sizeof md, "%.*s.md", (int)(n - 5), path);
        else
            snprintf(md, sizeof md, "%s.md", path);
        rc = strbuf_failed(&sb) ? err_set(ERR_NOMEM, "out of memory writing the ledger")
                                : hunt_write_file(md, sb.data, sb.len);
    }
    strbuf_deinit(&sb);
    return rc;
}

static char *ldup(const json_value *v) {
    const char *s;
    size_t n;
    return json_as_str(v, &s, &n) ? strndup(s, n) : NULL;
}

static void lcopy(char *dst, size_t cap, const json_value *v) {
    const char *s;
    size_t n;
    if (json_as_str(v, &s, &n))
        snprintf(dst, cap, "%.*s", (int)n, s);
}

int hunt_ledger_load(const char *path, hunt_ledger *lg) {
    char *text;
    size_t text_len;
    int rc = file_read_all(path, 0, &text, &text_len);
    if (rc)
        return rc;
    arena *a = arena_create(0, 0);
    json_value *root;
    if (!a) {
        rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    if (json_parse(a, text, text_len, &root)) {
        rc = err_wrap(ERR_FORMAT, "%s", path);
        goto out;
    }
    int64_t ver;
    if (!json_as_int(json_get(root, "verity_bisect"), &ver) || ver != 1) {
        rc = err_set(ERR_FORMAT, "%s: not a verity bisect ledger (no \"verity_bisect\": 1)", path);
        goto out;
    }
    lg->launch = ldup(json_get(root, "launch"));
    lg->health = ldup(json_get(root, "health"));
    lg->hunt = ldup(json_get(root, "hunt"));
    const json_value *tg = json_get(root, "toggles");
    for (size_t i = 0; tg && tg->type == JSON_ARRAY && i < tg->arr.n && i < HUNT_MAX_TOGGLES; i++) {
        const json_value *t = tg->arr.items[i];
        hunt_toggle *d = &lg->toggles[lg->n_toggles];
        d->name = ldup(json_get(t, "name"));
        d->off = ldup(json_get(t, "off"));
        d->on = ldup(json_get(t, "on"));
        d->likelihood = 1;
        d->cost = 1;
        json_as_double(json_get(t, "likelihood"), &d->likelihood);
        json_as_double(json_get(t, "cost"), &d->cost);
        lg->n_toggles++;
        if (!d->name || !d->off || !d->on) {
            rc = err_set(ERR_FORMAT, "%s: toggle %zu lacks name, off or on", path, i);
            goto out;
        }
    }
    json_as_double(json_get(root, "p0"), &lg->p0);
    json_as_double(json_get(root, "p1"), &lg->p1);
    json_as_double(json_get(root, "base_rate"), &lg->base_rate);
    const json_value *es = json_get(root, "entries");
    for (size_t i = 0; es && es->type == JSON_ARRAY && i < es->arr.n; i++) {
        const json_value *j = es->arr.items[i];
        hunt_ledger_entry *e = hunt_ledger_add(lg);
        if (!e) {
            rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
            goto out;
        }
        bool b = false;
        json_as_bool(json_get(j, "baseline"), &b);
        e->baseline = b;
        const json_value *fl = json_get(j, "flipped");
        for (size_t k = 0; fl && fl->type == JSON_ARRAY && k < fl->arr.n; k++) {
            const char *s;
            size_t n;
            if (!json_as_str(fl->arr.items[k], &s, &n))
                continue;
            int found = -1;
            for (int t = 0; t < lg->n_toggles; t++)
                if (strlen(lg->toggles[t].name) == n && !memcmp(lg->toggles[t].name, s, n))
                    found = t;
            if (found < 0) {
                rc = err_set(ERR_FORMAT, "%s: entry %zu flips an unknown toggle '%.*s'", path, i,
                             (int)n, s);
                goto out;
            }
            e->flipped |= (uint64_t)1 << found;
        }
        lcopy(e->hypothesis, sizeof e->hypothesis, json_get(j, "hypothesis"));
        json_as_int(json_get(j, "sessions"), &e->sessions);
        json_as_int(json_get(j, "corrupt"), &e->corrupt);
        json_as_int(json_get(j, "errors"), &e->errors);
        json_as_double(json_get(j, "llr"), &e->llr);
        lcopy(e->verdict, sizeof e->verdict, json_get(j, "verdict"));
        json_as_double(json_get(j, "wall_s"), &e->wall_s);
        int64_t rs = 0;
        json_as_int(json_get(j, "restarts"), &rs);
        e->restarts = (int)rs;
        json_as_int(json_get(j, "next_session"), &e->next_index);
        lcopy(e->note, sizeof e->note, json_get(j, "note"));
    }
    const json_value *sm = json_get(root, "summary");
    lcopy(lg->state, sizeof lg->state, json_get(sm, "state"));
    lcopy(lg->conclusion, sizeof lg->conclusion, json_get(sm, "conclusion"));
out:
    arena_destroy(a);
    free(text);
    return rc;
}

static bool hunt_str_eq(const char *a, const char *b) {
    return (!a && !b) || (a && b && !strcmp(a, b));
}

int hunt_ledger_check_same(const hunt_ledger *l, const hunt_ledger *w) {
    if (l->n_toggles != w->n_toggles)
        return err_set(ERR_INVAL, "the ledger has %d toggles, this bisection %d", l->n_toggles,
                       w->n_toggles);
    for (int i = 0; i < l->n_toggles; i++) {
        const hunt_toggle *a = &l->toggles[i], *b = &w->toggles[i];
        if (strcmp(a->name, b->name) || strcmp(a->off, b->off) || strcmp(a->on, b->on))
            return err_set(ERR_INVAL, "toggle %d differs: ledger %s=%s:%s, now %s=%s:%s", i + 1,
                           a->name, a->off, a->on, b->name, b->off, b->on);
    }
    if (!hunt_str_eq(l->launch, w->launch))
        return err_set(ERR_INVAL, "the launch command differs from the ledger's");
    if (!hunt_str_eq(l->hunt, w->hunt))
        return err_set(ERR_INVAL, "the hunt arguments differ from the ledger's");
    return 0;
}
