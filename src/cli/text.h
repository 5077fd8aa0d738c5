/*
 * Strings another party chose (ledger paths, container directory names,
 * anything read from a file a tenant can write) on their way to a person's
 * terminal, a JSON reader or a metrics scraper. Every renderer of the node
 * view and of a ledger passes such strings through here: a name must never
 * move the cursor, clear a screen, end a label or make a scrape invalid.
 * Pure functions, no state.
 */
#ifndef CS_CLI_TEXT_H
#define CS_CLI_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* Bytes of the well-formed UTF-8 character at s (1..4); 0 when s does not
 * start one (overlong forms, surrogates, beyond U+10FFFF, a cut sequence)
 * or is the terminating NUL. *cp gets the code point. */
size_t cs_text_utf8_len(const char *s, unsigned *cp);

/* s for a terminal: printable ASCII kept, every other byte '?' (the node
 * view is plain ASCII by design). Into out[0..n), NUL-terminated, cut to
 * fit. Returns out. */
char *cs_text_terminal(char *out, size_t n, const char *s);

/* s as the inside of a Prometheus label value: well-formed UTF-8 only
 * (each byte that starts no character becomes U+FFFD), backslash, double
 * quote and line feed escaped as the text format says, every other
 * control character (C0, DEL, C1) U+FFFD. */
void cs_text_prom_label(FILE *out, const char *s);

/* s as a JSON string, quotes included: valid UTF-8 (invalid bytes
 * \ufffd), control characters \u-escaped. */
void cs_text_json(FILE *out, const char *s);

#endif
