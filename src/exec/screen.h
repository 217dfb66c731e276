/* SPDX-License-Identifier: MIT */
/*
 * screen — result screening (seed 003's result side): command output that is
 * returned to the agent and kept in evidence is scanned for secrets, which
 * are redacted, and for injection-shaped text, which is flagged so the reply
 * can mark the output as quarantined.
 *
 * The patterns are compiled once, with the same linear-time matcher the
 * policy uses (Vectorscan), into two databases: secret shapes (with
 * start-of-match so that spans can be cut out) and injection shapes (a yes/no
 * answer). A scan costs time linear in the input, whatever the input.
 *
 * The secret screen is a best effort over known token shapes; the injection
 * screen is a heuristic and is evadable by design of the problem. Neither is
 * a security boundary: the guarantee is the gate, which decides what may run
 * before anything runs. The screen only narrows what leaks back.
 *
 * Invariants:
 *  - cg_screen_run MUST either return a copy in which every secret span it
 *    found is replaced by "[REDACTED:<kind>]", or fail; it MUST NOT return a
 *    partially screened copy. A caller that gets -1 MUST NOT pass the
 *    unscreened bytes on (withhold them and answer MCP-SCRN-E-002).
 *  - A private key block whose END line is missing is redacted to the end of
 *    the input (a cut-off key is still a key).
 *  - cg_screen_run is thread-safe: scratch space is pooled per screen, never
 *    shared between concurrent scans.
 */
#ifndef CG_SCREEN_H
#define CG_SCREEN_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "reply.h"

struct cg_screen;

/*
 * Compile the screen's pattern databases. Returns 0 and *out (free with
 * cg_screen_free), or -1 and *err (MCP-SCRN-E-001; caller frees).
 */
int cg_screen_new(struct cg_screen **out, struct cg_reply **err)
    __attribute__((warn_unused_result));

/* Release a screen and its scratch pool. Safe on NULL. No scan may be running. */
void cg_screen_free(struct cg_screen *s);

/*
 * Screen in[0..len). redact: find and redact secrets (policy
 * screen_secrets); detect_injection: look for injection shapes (policy
 * screen_injection).
 *
 * On success returns 0 with *out a malloc'd copy (NUL-terminated for
 * convenience; *out_len excludes the NUL; the caller frees) in which each
 * secret span is replaced by "[REDACTED:<kind>]"; for every redacted span,
 * counts (an object, may be NULL) gets counts[kind] incremented (existing
 * integer values are added to, so one object can total several streams);
 * *quarantined (may be NULL) is set true when an injection shape was seen and
 * is left untouched otherwise (so it can be OR-ed over streams).
 *
 * On failure returns -1 with errno (ENOMEM, E2BIG past 4 GiB or too many
 * spans, EIO when the matcher fails) and *out NULL.
 */
int cg_screen_run(const struct cg_screen *s, bool redact, bool detect_injection,
		  const unsigned char *in, size_t len, unsigned char **out, size_t *out_len,
		  json_t *counts, bool *quarantined) __attribute__((warn_unused_result));

/*
 * Screen text for a record (an argv element, a reason): secrets redacted as
 * cg_screen_run does, but a span is cut only where it holds nothing but what
 * a secret is made of (no shell syntax, no spaces; a private key only as a
 * whole block of base64 lines): what ran stays readable in the evidence. 0,
 * or -1 with errno as cg_screen_run.
 */
int cg_screen_record(const struct cg_screen *s, const unsigned char *in, size_t len,
		     unsigned char **out, size_t *out_len) __attribute__((warn_unused_result));

struct cg_exec_result;

/*
 * Screen a finished pipeline's output in place, for the kernel: the last
 * stage's stdout and every stage's stderr are replaced by their screened
 * copies (truncation flags kept). On success returns 0 and *screening, a new
 * object for the reply data and the evidence "screening" event:
 *   {"redactions": {kind: n, …}, "redacted": total, "quarantined": bool,
 *    "secrets_screened": redact, "injection_screened": detect_injection}
 * On failure returns -1 with errno, *screening NULL, and every stream
 * emptied (len 0), so that unscreened bytes cannot be passed on even by a
 * caller that forgets to check; answer MCP-SCRN-E-002 then.
 */
int cg_screen_exec_result(const struct cg_screen *s, bool redact, bool detect_injection,
			  struct cg_exec_result *res, json_t **screening)
    __attribute__((warn_unused_result));

/* The secret kinds the screen knows, NULL-terminated (for docs and tests). */
extern const char *const cg_screen_secret_kinds[];

#endif
