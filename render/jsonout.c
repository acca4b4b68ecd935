/* JSON values on a stream: what every --json printer and description writes. */
#include "jsonout.h"

#include <math.h>

void hs_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void hs_json_number(FILE *f, double v, int digits)
{
    if (isfinite(v))
        fprintf(f, "%.*g", digits, v);
    else
        fputs("null", f);
}

void hs_json_fixed(FILE *f, double v, int decimals)
{
    if (isfinite(v))
        fprintf(f, "%.*f", decimals, v);
    else
        fputs("null", f);
}

/* ,"value":v,"stderr":e,"n":n} */
static void value_tail(FILE *f, double value, double stderr_value, long long n)
{
    fputs(",\"value\":", f), hs_json_number(f, value, 9);
    fputs(",\"stderr\":", f), hs_json_number(f, stderr_value, 9);
    fprintf(f, ",\"n\":%lld}", n);
}

void hs_json_head_rows(FILE *f, const hs_metric_row *rows, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"layer\":%d,\"head\":%d,\"metric\":", i ? "," : "", rows[i].layer,
                rows[i].head);
        hs_json_string(f, rows[i].metric);
        value_tail(f, rows[i].value, rows[i].stderr_value, rows[i].n);
    }
    fputc(']', f);
}

void hs_json_position_rows(FILE *f, const hs_position_row *rows, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"layer\":%d,", i ? "," : "", rows[i].layer);
        if (rows[i].head >= 0) /* per head (SPEC §18's sink_alpha) */
            fprintf(f, "\"head\":%d,", rows[i].head);
        fprintf(f, "\"position\":%d,\"metric\":", rows[i].position);
        hs_json_string(f, rows[i].metric);
        value_tail(f, rows[i].value, rows[i].stderr_value, rows[i].n);
    }
    fputc(']', f);
}

void hs_json_edge_rows(FILE *f, const hs_edge_row *rows, long n)
{
    fputc('[', f);
    for (long i = 0; i < n; i++) {
        fprintf(f, "%s{\"sender\":", i ? "," : "");
        hs_json_string(f, rows[i].sender);
        fputs(",\"receiver\":", f), hs_json_string(f, rows[i].receiver);
        fputs(",\"metric\":", f), hs_json_string(f, rows[i].metric);
        value_tail(f, rows[i].value, rows[i].stderr_value, rows[i].n);
    }
    fputc(']', f);
}
