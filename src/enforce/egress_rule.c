/* SPDX-License-Identifier: MIT */
/*
 * egress_rule — judging one outbound connection by name and address (see
 * egress_rule.h).
 */
#include "egress_rule.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool cg_host_is_address(const char *name)
{
	unsigned char buf[sizeof(struct in6_addr)];
	return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

static int parse_port(const char *s, uint16_t *port)
{
	char *end = NULL;
	if (!*s || !isdigit((unsigned char)*s))
		return -1;
	unsigned long v = strtoul(s, &end, 10);
	if (*end || v < 1 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

/* A DNS name: labels of letters, digits, '-' and '_', optionally "*." first. */
static bool name_ok(const char *s)
{
	if (strncmp(s, "*.", 2) == 0)
		s += 2;
	size_t label = 0;
	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s == '.') {
			if (label == 0)
				return false;
			label = 0;
		} else if (isalnum((unsigned char)*s) || *s == '-' || *s == '_') {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return label > 0;
}

int cg_host_entry_parse(const char *text, char *name, size_t name_len, uint16_t *port,
			const char **why)
{
	char buf[CG_HOST_NAME_MAX + 16];
	*port = 0;
	if (!text || !*text || strlen(text) >= sizeof(buf)) {
		*why = "empty or longer than a host name may be";
		return -1;
	}
	memcpy(buf, text, strlen(text) + 1);
	char *host = buf, *colon = NULL;
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');
		if (!close || (close[1] && close[1] != ':')) {
			*why = "an IPv6 address in brackets, optionally followed by :PORT";
			return -1;
		}
		*close = '\0';
		host = buf + 1;
		colon = close[1] ? close + 1 : NULL;
	} else if (strchr(buf, ':') == strrchr(buf, ':')) {
		colon = strchr(buf, ':'); /* one colon: name:port; more: a bare IPv6 */
	}
	if (colon) {
		*colon = '\0';
		if (parse_port(colon + 1, port) != 0) {
			*why = "the port must be a number from 1 to 65535";
			return -1;
		}
	}
	for (char *c = host; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	size_t n = strlen(host);
	if (n > 1 && host[n - 1] == '.')
		host[--n] = '\0';
	if (!cg_host_is_address(host) && !name_ok(host)) {
		*why = "not a host name, '*.suffix' or an IP address";
		return -1;
	}
	if (n >= name_len) {
		*why = "longer than a host name may be";
		return -1;
	}
	memcpy(name, host, n + 1);
	return 0;
}

static bool name_matches(const char *pattern, const char *host)
{
	if (strncmp(pattern, "*.", 2) != 0)
		return strcmp(pattern, host) == 0;
	const char *suffix = pattern + 1; /* ".example.org" */
	size_t ls = strlen(suffix), lh = strlen(host);
	return lh > ls && strcmp(host + lh - ls, suffix) == 0;
}

/*
 * An allow entry without a port allows the default ports 80 and 443; a deny
 * entry without one denies every port (a name denied is denied everywhere).
 */
static bool entry_matches(const struct cg_host_entry *e, const char *host, uint16_t port, bool deny)
{
	bool port_ok = e->port ? e->port == port : (deny || port == 80 || port == 443);
	return port_ok && name_matches(e->name, host);
}

static bool list_matches(const struct cg_host_entry *v, size_t n, const char *host, uint16_t port,
			 bool deny)
{
	for (size_t i = 0; i < n; i++)
		if (entry_matches(&v[i], host, port, deny))
			return true;
	return false;
}

struct cg_reply *cg_egress_judge_name(const struct cg_constraints *const *sets, size_t n,
				      const char *host, uint16_t port, const char *rule_id)
{
	const char *rule = rule_id ? rule_id : "(none)";
	for (size_t i = 0; i < n; i++)
		if (sets[i]->net == CG_NET_HOSTS &&
		    list_matches(sets[i]->deny_hosts, sets[i]->n_deny_hosts, host, port, true))
			return cg_reply_new(CG_R_EGRESS_DENIED, "{s:s,s:i,s:s}", "host", host,
					    "port", (int)port, "rule_id", rule);
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		if (sets[i]->net != CG_NET_HOSTS)
			continue;
		any = true;
		if (!list_matches(sets[i]->allow_hosts, sets[i]->n_allow_hosts, host, port, false))
			return cg_reply_new(CG_R_EGRESS_NOT_LISTED, "{s:s,s:i,s:s}", "host", host,
					    "port", (int)port, "rule_id", rule);
	}
	if (!any)
		return cg_reply_new(CG_R_EGRESS_NOT_LISTED, "{s:s,s:i,s:s}", "host", host, "port",
				    (int)port, "rule_id", rule);
	return NULL;
}

const char *cg_egress_pin(const struct cg_constraints *const *sets, size_t n, const char *host)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; sets[i]->net == CG_NET_HOSTS && j < sets[i]->n_pins; j++)
			if (strcmp(sets[i]->pins[j].name, host) == 0)
				return sets[i]->pins[j].address;
	return NULL;
}

/* An address literal as 16 bytes, an IPv4 one in its IPv4-mapped form. */
static bool address_bytes(const char *s, unsigned char out[16])
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	memcpy(out, mapped, sizeof(mapped));
	return inet_pton(AF_INET, s, out + 12) == 1 || inet_pton(AF_INET6, s, out) == 1;
}

/* Two address literals for the same address ("::1" and "0::1"; "::ffff:10.0.0.1" and "10.0.0.1")? */
static bool same_address(const char *a, const char *b)
{
	unsigned char x[16], y[16];
	return address_bytes(a, x) && address_bytes(b, y) && memcmp(x, y, 16) == 0;
}

/* The address set s pins host to, when it is not this one; else NULL. */
static const char *pinned_elsewhere(const struct cg_constraints *s, const char *host,
				    const char *address)
{
	for (size_t j = 0; j < s->n_pins; j++)
		if (strcmp(s->pins[j].name, host) == 0 &&
		    !same_address(s->pins[j].address, address))
			return s->pins[j].address;
	return NULL;
}

/*
 * Does set s name this address for host:port: a pin of this host to it, or
 * the literal on its allow list, for this port (80 and 443 when the entry
 * names none, as for names)?
 */
static bool set_names(const struct cg_constraints *s, const char *host, uint16_t port,
		      const char *address)
{
	for (size_t j = 0; j < s->n_pins; j++)
		if (strcmp(s->pins[j].name, host) == 0 && same_address(s->pins[j].address, address))
			return true;
	for (size_t j = 0; j < s->n_allow_hosts; j++) {
		const struct cg_host_entry *e = &s->allow_hosts[j];
		bool port_ok = e->port ? e->port == port : (port == 80 || port == 443);
		if (port_ok && same_address(e->name, address))
			return true;
	}
	return false;
}

/*
 * Every set with a host list must let this address be reached, as every one
 * must allow the name (cg_egress_judge_name): none may pin the host to
 * another address, and an address of a class (private, loopback, the host's
 * own, ...) must be named by each. One stage's pin or literal never opens an
 * address to another stage's program.
 */
struct cg_reply *cg_egress_judge_address(const struct cg_constraints *const *sets, size_t n,
					 const char *host, uint16_t port, const char *address,
					 const char *cls, const char *rule_id)
{
	const char *rule = rule_id ? rule_id : "(none)";
	bool named = true, any = false;
	/*
	 * An address on a deny list is denied however it is reached: by its
	 * literal, or through a name allowed that resolves to it (an attack
	 * reached a denied 127.0.0.1 through an allowed good.test).
	 */
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; sets[i]->net == CG_NET_HOSTS && j < sets[i]->n_deny_hosts; j++) {
			const struct cg_host_entry *e = &sets[i]->deny_hosts[j];
			if ((!e->port || e->port == port) && same_address(e->name, address))
				return cg_reply_new(CG_R_EGRESS_DENIED, "{s:s,s:i,s:s}", "host",
						    host, "port", (int)port, "rule_id", rule);
		}
	for (size_t i = 0; i < n; i++) {
		if (sets[i]->net != CG_NET_HOSTS)
			continue;
		any = true;
		const char *pin = pinned_elsewhere(sets[i], host, address);
		if (pin)
			return cg_reply_new(CG_R_EGRESS_PINNED_ELSEWHERE, "{s:s,s:i,s:s,s:s,s:s}",
					    "host", host, "port", (int)port, "address", address,
					    "pinned", pin, "rule_id", rule);
		named = named && set_names(sets[i], host, port, address);
	}
	if (!cls && any)
		return NULL;
	if (named && any)
		return NULL;
	return cg_reply_new(CG_R_EGRESS_ADDRESS, "{s:s,s:i,s:s,s:s,s:s}", "host", host, "port",
			    (int)port, "address", address, "class", cls ? cls : "unlisted",
			    "rule_id", rule);
}

struct cg_reply *cg_egress_mismatch(const char *host, uint16_t port, const char *what,
				    const char *other, const char *rule_id)
{
	return cg_reply_new(CG_R_EGRESS_MISMATCH, "{s:s,s:i,s:s,s:s,s:s}", "host", host, "port",
			    (int)port, "what", what, "other", other, "rule_id",
			    rule_id ? rule_id : "(none)");
}

struct cg_reply *cg_egress_bad_request(const char *detail, const char *rule_id)
{
	return cg_reply_new(CG_R_EGRESS_BAD_REQUEST, "{s:s,s:s}", "detail", detail, "rule_id",
			    rule_id ? rule_id : "(none)");
}

struct cg_reply *cg_egress_call_cap(size_t count, size_t limit, const char *rule_id)
{
	return cg_reply_new(CG_R_EGRESS_CALL_CAP, "{s:I,s:I,s:s}", "count", (json_int_t)count,
			    "limit", (json_int_t)limit, "rule_id", rule_id ? rule_id : "(none)");
}

struct cg_reply *cg_egress_allowed(const char *host, uint16_t port, const char *address,
				   const char *rule_id)
{
	return cg_reply_new(CG_R_EGRESS_ALLOWED, "{s:s,s:i,s:s,s:s}", "host", host, "port",
			    (int)port, "address", address, "rule_id", rule_id ? rule_id : "(none)");
}
