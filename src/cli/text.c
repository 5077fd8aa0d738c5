/* Sanitising attacker-chosen strings for people and machines (text.h). */
#include "cli/text.h"

#include <stdint.h>

size_t cs_text_utf8_len(const char *str, unsigned *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0], need, min;
    if (c < 0x80) {
        *cp = c;
        return c ? 1 : 0;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1, min = 0x80, c &= 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2, min = 0x800, c &= 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3, min = 0x10000, c &= 0x07;
    } else {
        return 0;
    }
    for (unsigned i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0; /* a NUL ends here too: never read past it */
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return need + 1;
}

char *cs_text_terminal(char *out, size_t n, const char *s)
{
    size_t k = 0;
    for (; n && *s && k + 1 < n; s++)
        out[k++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    if (n)
        out[k] = '\0';
    return out;
}

static int is_control(unsigned cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

void cs_text_prom_label(FILE *out, const char *s)
{
    while (*s) {
        unsigned cp;
        size_t n = cs_text_utf8_len(s, &cp);
        if (n == 1 && (cp == '\\' || cp == '"'))
            fprintf(out, "\\%c", (char)cp);
        else if (n == 1 && cp == '\n')
            fputs("\\n", out);
        else if (n && !is_control(cp))
            fwrite(s, 1, n, out);
        else
            fputs("\xef\xbf\xbd", out); /* U+FFFD */
        s += n ? n : 1;
    }
}

void cs_text_json(FILE *out, const char *s)
{
    fputc('"', out);
    while (*s) {
        unsigned cp;
        size_t n = cs_text_utf8_len(s, &cp);
        if (!n)
            fputs("\\ufffd", out);
        else if (cp == '"' || cp == '\\')
            fprintf(out, "\\%c", (char)cp);
        else if (is_control(cp))
            fprintf(out, "\\u%04x", cp);
        else
            fwrite(s, 1, n, out);
        s += n ? n : 1;
    }
    fputc('"', out);
}
