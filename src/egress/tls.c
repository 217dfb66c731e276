/* SPDX-License-Identifier: MIT */
/*
 * tls — the SNI of a ClientHello (see tls.h). Only the first record is read:
 * a ClientHello split over records is refused as unreadable (fail closed).
 */
#include "tls.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* A bounds-checked reader over one byte range. */
struct rd {
	const unsigned char *p;
	size_t n;
	bool bad;
};

static uint32_t take(struct rd *r, size_t width)
{
	uint32_t v = 0;
	if (r->bad || r->n < width) {
		r->bad = true;
		return 0;
	}
	for (size_t i = 0; i < width; i++)
		v = (v << 8) | r->p[i];
	r->p += width;
	r->n -= width;
	return v;
}

static struct rd sub(struct rd *r, size_t len)
{
	struct rd s = { r->p, len, r->bad || r->n < len };
	if (!s.bad) {
		r->p += len;
		r->n -= len;
	} else {
		r->bad = true;
	}
	return s;
}

/* server_name extension: a list of (type, name); type 0 is a host name. */
static enum cg_tls_hello server_name(struct rd ext, char *name, size_t name_len)
{
	struct rd list = sub(&ext, take(&ext, 2));
	while (!list.bad && list.n) {
		uint32_t type = take(&list, 1);
		struct rd h = sub(&list, take(&list, 2));
		if (list.bad)
			break;
		if (type != 0)
			continue;
		if (h.n == 0 || h.n >= name_len)
			return CG_TLS_BAD;
		for (size_t i = 0; i < h.n; i++) {
			if (!isgraph(h.p[i]))
				return CG_TLS_BAD;
			name[i] = (char)tolower(h.p[i]);
		}
		name[h.n] = '\0';
		return CG_TLS_SNI;
	}
	return list.bad ? CG_TLS_BAD : CG_TLS_NO_SNI;
}

enum cg_tls_hello cg_tls_hello_sni(const unsigned char *p, size_t n, char *name, size_t name_len)
{
	name[0] = '\0';
	if (n == 0)
		return CG_TLS_MORE;
	if (p[0] != 0x16)
		return CG_TLS_NOT_TLS;
	if (n < 5)
		return CG_TLS_MORE;
	size_t rec = ((size_t)p[3] << 8) | p[4];
	if (p[1] != 3 || rec == 0 || rec > 16384 + 256)
		return CG_TLS_BAD;
	if (n < 5 + rec)
		return CG_TLS_MORE;
	struct rd r = { p + 5, rec, false };
	if (take(&r, 1) != 1) /* ClientHello */
		return CG_TLS_BAD;
	struct rd hello = sub(&r, take(&r, 3));
	take(&hello, 2);	      /* legacy_version */
	sub(&hello, 32);	      /* random */
	sub(&hello, take(&hello, 1)); /* legacy_session_id */
	sub(&hello, take(&hello, 2)); /* cipher_suites */
	sub(&hello, take(&hello, 1)); /* legacy_compression_methods */
	if (hello.bad)
		return CG_TLS_BAD;
	if (hello.n == 0)
		return CG_TLS_NO_SNI; /* no extensions at all */
	struct rd exts = sub(&hello, take(&hello, 2));
	while (!exts.bad && exts.n) {
		uint32_t type = take(&exts, 2);
		struct rd ext = sub(&exts, take(&exts, 2));
		if (!exts.bad && type == 0)
			return server_name(ext, name, name_len);
	}
	return exts.bad ? CG_TLS_BAD : CG_TLS_NO_SNI;
}
