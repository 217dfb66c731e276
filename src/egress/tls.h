/* SPDX-License-Identifier: MIT */
/*
 * tls — the server name a TLS client asks for, read from its ClientHello
 * (RFC 8446 4.1.2, RFC 6066 3), so the proxy can hold it against the name
 * the client asked the proxy for. Reads bytes; never writes, never decrypts.
 */
#ifndef CG_EGRESS_TLS_H
#define CG_EGRESS_TLS_H

#include <stddef.h>

enum cg_tls_hello {
	CG_TLS_MORE,	/* a TLS handshake record, not complete yet */
	CG_TLS_NOT_TLS, /* the first byte is not a TLS handshake record */
	CG_TLS_SNI,	/* a ClientHello with a host name (in name) */
	CG_TLS_NO_SNI,	/* a ClientHello without one */
	CG_TLS_BAD,	/* a handshake record that is not a readable ClientHello */
};

/* Look at the first bytes of a tunnel. name gets the lower-cased host name. */
enum cg_tls_hello cg_tls_hello_sni(const unsigned char *p, size_t n, char *name, size_t name_len);

#endif
