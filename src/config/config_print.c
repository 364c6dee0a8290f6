// config_print.c: the resolved config as YAML (same keys, same order as the table) or as one
// JSON object, by walking the key table.
#include "config/config_print_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "config/config_keys_internal.h"

void config_format_double(double v, char *buf, size_t n) {
    if (!isfinite(v)) {
        snprintf(buf, n, "%s", isnan(v) ? ".nan" : v > 0 ? ".inf" : "-.inf");
        return;
    }
    char tmp[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    // %g writes 300 as "3e+02" at precision 1; plain digits read better up to 1e16.
    char *exp = strchr(tmp, 'e');
    if (exp && atoi(exp + 1) >= 0 && atoi(exp + 1) < 17)
        snprintf(tmp, sizeof tmp, "%.*g", atoi(exp + 1) + 1, v);
    if (strchr(tmp, '.')) {
        snprintf(buf, n, "%s", tmp);
        return;
    }
    char *e = strchr(tmp, 'e');
    if (e) snprintf(buf, n, "%.*s.0%s", (int)(e - tmp), tmp, e);
    else snprintf(buf, n, "%s.0", tmp);
}

// Writes s double-quoted with escapes valid in both JSON and YAML. The Unicode line
// breaks U+0085, U+2028, U+2029 are escaped since YAML would fold them.
void config_print_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else if (p[0] == 0xc2 && p[1] == 0x85) fputs("\\u0085", f), p++;
        else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
            fprintf(f, "\\u%04x", 0x2000 + p[2] - 0x80), p += 2;
        else fputc(*p, f);
    }
    fputc('"', f);
}

// A string that YAML reads back as the same string when written plain: a name or path
// made of safe characters, not starting like a number, and not a null/boolean word.
static int plain_safe(const char *s) {
    static const char *const reserved[] = {"null", "true", "false", "yes", "no",
                                           "on",   "off",  "y",     "n",   NULL};
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '/')) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("_-./", *p)))
            return 0;
    for (int i = 0; reserved[i]; i++)
        if (!strcasecmp(s, reserved[i])) return 0;
    return 1;
}

// A glob as a string key's value; a list in flow style (JSON is YAML's flow style too).
static void print_sources(const config_data_sources *s, FILE *f, int json) {
    if (!s->listed) {
        if (!json && plain_safe(s->items[0].path)) fputs(s->items[0].path, f);
        else config_print_quoted(f, s->items[0].path);
        return;
    }
    fputc('[', f);
    for (int i = 0; i < s->n; i++) {
        const config_data_source *it = &s->items[i];
        fputs(!i ? "" : json ? "," : ", ", f);
        fputs(json ? "{\"" : "{", f);
        if (it->name) {
            fputs(json ? "name\":" : "name: ", f);
            config_print_quoted(f, it->name);
            fputs(json ? ",\"" : ", ", f);
        }
        fputs(json ? "path\":" : "path: ", f);
        config_print_quoted(f, it->path);
        if (!it->name) {
            char num[48];
            config_format_double(it->weight, num, sizeof num);
            fprintf(f, json ? ",\"weight\":%s" : ", weight: %s", num);
        }
        fputc('}', f);
    }
    fputc(']', f);
}

// Writes key k's value as YAML (json = 0) or JSON (json = 1).
static void print_value(const run_config *cfg, key_id k, FILE *f, int json) {
    const void *p = config_key_cfield(cfg, k);
    char num[48];
    switch (CONFIG_KEYS[k].type) {
    case KT_INT: fprintf(f, "%d", *(const int *)p); break;
    case KT_U64: fprintf(f, "%" PRIu64, *(const uint64_t *)p); break;
    case KT_BOOL: fputs(*(const int *)p ? "true" : "false", f); break;
    case KT_F64:
        config_format_double(*(const double *)p, num, sizeof num);
        fputs(json && !isfinite(*(const double *)p) ? "null" : num, f);
        break;
    case KT_DP:
        if (*(const int *)p == DP_AUTO) fputs(json ? "\"auto\"" : "auto", f);
        else fprintf(f, "%d", *(const int *)p);
        break;
    case KT_ENUM: {
        const char *name = config_enum_name(CONFIG_KEYS[k].names, INT_MAX, *(const int *)p);
        if (json) config_print_quoted(f, name);
        else fputs(name, f);
        break;
    }
    case KT_SOURCES: print_sources(p, f, json); break;
    case KT_STR: {
        const char *s = *(char *const *)p;
        if (!s) fputs("null", f);
        else if (!json && plain_safe(s)) fputs(s, f);
        else config_print_quoted(f, s);
        break;
    }
    }
}

char *config_value_text(const run_config *cfg, key_id k, int json) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tri_out_of_host_memory(0, "a config value's text");
    print_value(cfg, k, f, json);
    fclose(f);
    return text;
}

char *config_quoted(const char *s) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tri_out_of_host_memory(0, "a config value's text");
    config_print_quoted(f, s);
    fclose(f);
    return text;
}

static int starts_section(key_id k) {
    return k == 0 || strcmp(CONFIG_KEYS[k].section, CONFIG_KEYS[k - 1].section) != 0;
}

void config_print_yaml(const run_config *cfg, FILE *f, int indent) {
    for (int k = 0; k < K_COUNT; k++) {
        if (starts_section(k)) fprintf(f, "%*s%s:\n", indent, "", CONFIG_KEYS[k].section);
        fprintf(f, "%*s  %s: ", indent, "", CONFIG_KEYS[k].key);
        print_value(cfg, k, f, 0);
        fputc('\n', f);
    }
}

void config_print_json(const run_config *cfg, FILE *f) {
    fputc('{', f);
    for (int k = 0; k < K_COUNT; k++) {
        if (starts_section(k)) fprintf(f, "%s\"%s\":{", k ? "}," : "", CONFIG_KEYS[k].section);
        else fputc(',', f);
        fprintf(f, "\"%s\":", CONFIG_KEYS[k].key);
        print_value(cfg, k, f, 1);
    }
    fputs("}}", f);
}

char *config_key_value(const run_config *cfg, const char *path, int *given) {
    const char *dot = strchr(path, '.');
    if (!dot || (size_t)(dot - path) >= 32) return NULL;
    char section[32];
    memcpy(section, path, (size_t)(dot - path));
    section[dot - path] = 0;
    const int k = config_find_key(section, dot + 1);
    if (k < 0) return NULL;
    *given = cfg->given[k];
    return config_value_text(cfg, (key_id)k, 0);
}
