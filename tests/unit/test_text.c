/*
 * unit_text: names another party chose, made safe (src/cli/text.c): UTF-8
 * decoding refuses overlong forms, surrogates, code points beyond U+10FFFF
 * and cut sequences; a terminal gets printable ASCII only; a Prometheus
 * label and a JSON string are well-formed UTF-8 with their escapes.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli/text.h"

/* What one of the writers makes of s (freed by the caller). */
static char *written(void (*writer)(FILE *, const char *), const char *s)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    CHECK(f != NULL);
    writer(f, s);
    CHECK(fclose(f) == 0);
    return out;
}

static void utf8(void)
{
    unsigned cp;
    CHECK_EQ(cs_text_utf8_len("a", &cp), 1);
    CHECK_EQ(cp, 'a');
    CHECK_EQ(cs_text_utf8_len("\xc3\xa9", &cp), 2);
    CHECK_EQ(cp, 0xe9);
    CHECK_EQ(cs_text_utf8_len("\xe2\x82\xac", &cp), 3);
    CHECK_EQ(cp, 0x20ac);
    CHECK_EQ(cs_text_utf8_len("\xf0\x9f\x98\x80", &cp), 4);
    CHECK_EQ(cp, 0x1f600);
    CHECK_EQ(cs_text_utf8_len("", &cp), 0);
    CHECK_EQ(cs_text_utf8_len("\xff", &cp), 0);             /* never a lead byte */
    CHECK_EQ(cs_text_utf8_len("\x80", &cp), 0);             /* a continuation alone */
    CHECK_EQ(cs_text_utf8_len("\xc0\xaf", &cp), 0);         /* overlong '/' */
    CHECK_EQ(cs_text_utf8_len("\xe0\x80\xaf", &cp), 0);     /* overlong '/' */
    CHECK_EQ(cs_text_utf8_len("\xed\xa0\x80", &cp), 0);     /* a surrogate */
    CHECK_EQ(cs_text_utf8_len("\xf4\x90\x80\x80", &cp), 0); /* beyond U+10FFFF */
    CHECK_EQ(cs_text_utf8_len("\xe2\x82", &cp), 0);         /* cut by the NUL */
}

static void terminal(void)
{
    char out[64];
    CHECK_STREQ(cs_text_terminal(out, sizeof out, "x\033[2J\033[H\033[8m\xff\r\n\x7f ok"),
                "x?[2J?[H?[8m???? ok");
    CHECK_STREQ(cs_text_terminal(out, 4, "abcdef"), "abc");
    CHECK_STREQ(cs_text_terminal(out, sizeof out, "\xc3\xa9"), "??");
}

static void labels(void)
{
    char *s = written(cs_text_prom_label, "a\"b\\c\nd\xff\xc3\xa9\033\xc2\x9b" "e");
    CHECK_STREQ(s, "a\\\"b\\\\c\\nd\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd" "e");
    free(s);
    s = written(cs_text_json, "q\"\\\x01\xfe\xe2\x82\xac");
    CHECK_STREQ(s, "\"q\\\"\\\\\\u0001\\ufffd\xe2\x82\xac\"");
    free(s);
}

int main(void)
{
    utf8();
    terminal();
    labels();
    printf("unit_text: ok\n");
    return 0;
}
