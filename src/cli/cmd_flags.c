/* SPDX-License-Identifier: MIT */
/*
 * cmd_flags: `verity flags [--json]` lists the toggle registry (P4) with each toggle's name,
 * environment variable, default, current value (after environment and command line) and
 * description. `verity flags --man` prints the verity(1) man page instead (cli_man.c).
 */
#include "base/flags.h"
#include "base/strbuf.h"
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

int cmd_flags(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--man"))
            return cli_man_write();
        else
            return cli_usage_error("flags", "unknown option '%s' (usage: verity flags [--json])",
                                   argv[i]);
    }
    if (json) {
        strbuf sb;
        strbuf_init(&sb);
        strbuf_putc(&sb, '[');
        for (int i = 0; i < FLAG_COUNT; i++) {
            const flag_info *f = flags_get(i);
            static const char *kinds[] = {"int", "enum", "bool", "string", "secret"};
            strbuf_puts(&sb, i ? ",\n {" : "{");
            strbuf_puts(&sb, "\"name\":");
            strbuf_json_str(&sb, f->name, strlen(f->name), false);
            strbuf_puts(&sb, ",\"env\":");
            strbuf_json_str(&sb, f->env, strlen(f->env), false);
            strbuf_printf(&sb, ",\"kind\":\"%s\",\"default\":", kinds[f->kind]);
            strbuf_json_str(&sb, f->def, strlen(f->def), false);
            strbuf_puts(&sb, ",\"value\":");
            const char *shown = f->secret ? (f->value[0] ? "(set)" : "") : f->value;
            strbuf_json_str(&sb, shown, strlen(shown), false);
            strbuf_puts(&sb, ",\"choices\":");
            strbuf_json_str(&sb, f->choices, strlen(f->choices), false);
            strbuf_puts(&sb, ",\"source\":");
            strbuf_puts(&sb, f->from_cli ? "\"cli\"" : f->from_env ? "\"env\"" : "\"default\"");
            strbuf_puts(&sb, ",\"description\":");
            strbuf_json_str(&sb, f->desc, strlen(f->desc), false);
            strbuf_putc(&sb, '}');
        }
        strbuf_puts(&sb, "]\n");
        fwrite(sb.data, 1, sb.len, stdout);
        strbuf_deinit(&sb);
        return 0;
    }
    printf("%-14s %-22s %-10s %-10s %s\n", "NAME", "ENV", "DEFAULT", "VALUE", "DESCRIPTION");
    for (int i = 0; i < FLAG_COUNT; i++) {
        const flag_info *f = flags_get(i);
        const char *shown = f->secret ? (f->value[0] ? "(set)" : "") : f->value;
        printf("%-14s %-22s %-10s %-10s %s [%s]\n", f->name, f->env, f->def, shown, f->desc,
               f->choices);
    }
    return 0;
}
