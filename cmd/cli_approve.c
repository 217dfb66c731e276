/* SPDX-License-Identifier: MIT */
/*
 * cli_approve — the human side: `callgate approve` (a terminal UI on
 * /dev/tty), `pending`, `approve ID`, `deny ID`, and `grant open|list|close`,
 * all over the owner-only admin socket.
 *
 * MUST: show every string sanitised (control, ANSI escape, zero-width, bidi
 *       made visible), so an agent cannot make the approver see something
 *       other than what will run.
 * MUST: bind each answer to the request hash that was displayed; flush
 *       typeahead before every prompt so a key pressed earlier (or injected
 *       by a pasted string) cannot answer a request not yet shown.
 * MUST: answer yes only with y/g on the last page, no only with n/d; every
 *       other key answers nothing (a pager key an approver presses by reflex
 *       once denied a call unseen). q and Ctrl-C leave without answering
 *       (the call stays pending and is refused at its deadline).
 */
#include <errno.h>
#include <fnmatch.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "approval.h"
#include "cli.h"
#include "confine.h"
#include "grant.h"
#include "util.h"
#include "verdict.h"
#include "world.h"

/* The admin socket: explicit, or admin.sock beside the agent socket. */
static const char *admin_path(const struct cg_cli *g, char *buf, size_t len)
{
	if (g->admin_socket_path)
		return g->admin_socket_path;
	char copy[PATH_MAX];
	snprintf(copy, sizeof(copy), "%s", g->socket_path);
	snprintf(buf, len, "%s/admin.sock", dirname(copy));
	return buf;
}

/*
 * The global option an answer line needs to reach the same admin socket when
 * pasted (ux-s39: `pending --admin-socket P` printed lines without it, which
 * then failed): --admin-socket when one was given (or set), else --socket
 * when that is not the default. "" when a bare callgate gets there anyway.
 */
static void answer_via(const struct cg_cli *g, char *out, size_t cap)
{
	const char *opt = g->admin_socket_path ? "--admin-socket" : "--socket";
	const char *path = g->admin_socket_path ? g->admin_socket_path : g->socket_path;
	char user[PATH_MAX];
	bool plain = !g->admin_socket_path &&
		     (strcmp(path, CG_DEFAULT_SOCKET) == 0 ||
		      (cg_user_socket_path(user, sizeof(user)) == 0 && strcmp(path, user) == 0));
	out[0] = '\0';
	if (plain)
		return;
	bool bare = path[0] && strspn(path, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					    "0123456789_./-+:@%") == strlen(path);
	char *shown = cg_sanitize_for_terminal(path);
	if (bare || !strchr(shown ? shown : "'", '\''))
		snprintf(out, cap, " %s %s%s%s", opt, bare ? "" : "'", shown ? shown : "?",
			 bare ? "" : "'");
	else /* a quote in the path: named, not pasteable */
		snprintf(out, cap, " %s PATH", opt);
	free(shown);
}

/* Why the last admin_call got no response: an errno (EACCES: this user may not connect). */
static int admin_errno;

/* One admin round trip. Returns the response (caller decrefs) or NULL after printing why. */
static json_t *admin_call(const struct cg_cli *g, json_t *req)
{
	char buf[PATH_MAX + 16], err[256] = "";
	json_t *resp = NULL;
	const char *path = admin_path(g, buf, sizeof(buf));
	if (cg_client_call(path, req, 10000, &resp, err, sizeof(err)) == 0)
		return resp;
	admin_errno = errno;
	struct stat st;
	if ((admin_errno == EACCES || admin_errno == EPERM) && stat(path, &st) == 0) {
		const struct group *gr = getgrgid(st.st_gid);
		fprintf(stderr,
			"callgate: the admin socket %s is not open to uid %d: it serves root, its "
			"owner and group %s (callgated --admin-group); answering calls also needs "
			"an approver (--approver-uid, --approver-group)\n",
			path, (int)getuid(), gr ? gr->gr_name : "(none)");
	} else {
		fprintf(stderr,
			"callgate: cannot reach the admin socket %s: %s; is callgated running "
			"with it? (give it with --admin-socket or $CALLGATE_ADMIN_SOCKET; by "
			"default it is admin.sock beside --socket)\n",
			path, strerror(admin_errno));
	}
	return NULL;
}

/* The exit status for an admin_call that got no response: not allowed, or not reached. */
static int unreached(void)
{
	return admin_errno == EACCES || admin_errno == EPERM ? CG_EXIT_DENIED : CG_EXIT_UNAVAILABLE;
}

static const json_t *reply_of(const json_t *resp)
{
	return json_object_get(resp, "reply");
}

/* Print the reply line of a response; return the exit code it maps to. */
static int report(const json_t *resp, bool json)
{
	const json_t *r = reply_of(resp);
	if (json) {
		char *s = json_dumps(resp, JSON_COMPACT);
		if (s)
			puts(s);
		free(s);
	} else {
		/* What was done goes to stdout; a refusal or an error to stderr. */
		const char *t = json_string_value(json_object_get(r, "type"));
		char *m =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(r, "message")));
		fprintf(t && strcmp(t, "S") == 0 ? stdout : stderr, "callgate: %s %s: %s\n",
			t ? t : "?", json_string_value(json_object_get(r, "code")), m ? m : "");
		free(m);
	}
	const char *type = json_string_value(json_object_get(r, "type"));
	return type && strcmp(type, "S") == 0 ? CG_EXIT_OK : cg_client_exit_code(resp);
}

static json_t *fetch_pending(const struct cg_cli *g)
{
	json_t *req = json_pack("{s:s}", "action", "pending");
	json_t *resp = admin_call(g, req);
	json_decref(req);
	return resp;
}

static const json_t *pending_list(const json_t *resp)
{
	return json_object_get(json_object_get(reply_of(resp), "data"), "pending");
}

/*
 * Find a pending call by its trace id (exact). Borrowed reference. Never by
 * the request id: the agent chooses that one, and can give a new call the
 * trace id of one the approver saw (and the agent withdrew) as its id.
 * Trace ids are the daemon's, random and never reused.
 */
static const json_t *find_pending(const json_t *list, const char *id)
{
	size_t i;
	const json_t *p;
	json_array_foreach(list, i, p)
	{
		const char *t = json_string_value(json_object_get(p, "trace_id"));
		if (t && strcmp(t, id) == 0)
			return p;
	}
	return NULL;
}

/* ---- the approval view, whole (issue 12, item 3) ---------------------------- */

/*
 * The members cg_approvals_list adds to a view; everything else is the view
 * whose SHA-256 (compact, sorted keys) an approval is bound to.
 */
static const char *const progress_keys[] = { "request_sha256", "approvers_needed", "approved_by",
					     "deadline_ms_left" };

/*
 * Recompute the binding hash of a pending entry from the bytes we were
 * given: true when it equals the entry's request_sha256, i.e. what this
 * screen shows is exactly what an approval will be bound to.
 */
static bool view_hash_ok(const json_t *p)
{
	json_t *v = json_deep_copy(p);
	if (!v)
		return false;
	for (size_t i = 0; i < sizeof(progress_keys) / sizeof(progress_keys[0]); i++)
		json_object_del(v, progress_keys[i]);
	char *canon = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(v);
	if (!canon)
		return false;
	char hex[65];
	cg_sha256_hex(canon, strlen(canon), hex);
	free(canon);
	const char *sha = json_string_value(json_object_get(p, "request_sha256"));
	return sha && strcmp(sha, hex) == 0;
}

/* Rows of text to show, already wrapped to the terminal's width. */
struct screen {
	char **rows;
	size_t n, cap;
	int width; /* columns for a value (after the label) */
	bool oom;
};

static void screen_free(struct screen *sc)
{
	for (size_t i = 0; i < sc->n; i++)
		free(sc->rows[i]);
	free(sc->rows);
	memset(sc, 0, sizeof(*sc));
}

static void screen_row(struct screen *sc, const char *label, const char *text, size_t len)
{
	if (sc->n == sc->cap) {
		size_t nc = sc->cap ? sc->cap * 2 : 64;
		char **nr = realloc(sc->rows, nc * sizeof(char *));
		if (!nr) {
			sc->oom = true;
			return;
		}
		sc->rows = nr;
		sc->cap = nc;
	}
	size_t need = len + 40;
	char *r = malloc(need);
	if (!r) {
		sc->oom = true;
		return;
	}
	if (label)
		(void)snprintf(r, need, "  %-14s %.*s", label, (int)len, text);
	else
		(void)snprintf(r, need, "  %.*s", (int)len, text);
	sc->rows[sc->n++] = r;
}

/*
 * One field, sanitised and wrapped: every byte of the value is on some row,
 * never cut. A multi-byte character counts two columns, so a row never
 * overflows the terminal (a wide character takes two), and the terminal
 * never wraps a row by itself, which would push rows off the page.
 */
/* Columns of s[0..n) as screen_field counts them (a multi-byte character is two). */
static int text_cols(const char *s, size_t n)
{
	int cols = 0;
	for (size_t i = 0; i < n; i++)
		cols += (s[i] & 0xc0) == 0x80 ? 0 : (unsigned char)s[i] >= 0x80 ? 2 : 1;
	return cols;
}

/*
 * Runs of 8 or more spaces in s as "<N spaces>", in place: padding pushed an
 * env value's payload rows below `DEBIAN_FRONTEND=noninteractive`, past where
 * an approver reads (found by attack). The screen says how many there are.
 */
static char *squeeze_spaces(char *s)
{
	char *out = malloc(2 * strlen(s) + 1); /* "<8 spaces>" is 10 bytes for 8 */
	if (!out)
		return s;
	size_t o = 0;
	for (const char *p = s; *p;) {
		size_t run = strspn(p, " ");
		if (run >= 8) {
			char note[32];
			int k = snprintf(note, sizeof(note), "<%zu spaces>", run);
			memcpy(out + o, note, (size_t)k);
			o += (size_t)k;
			p += run;
		} else if (run) {
			memcpy(out + o, p, run);
			o += run;
			p += run;
		} else {
			out[o++] = *p++;
		}
	}
	out[o] = '\0';
	free(s);
	return out;
}

static void screen_field(struct screen *sc, const char *label, const char *value)
{
	/*
	 * A value of several lines: each line a row of its own, labelled, so
	 * that a line break cannot pass for the text "\n" (s41d F2: "# ... \n
	 * touch x" read as one comment). No text can make a row or its label.
	 */
	const char *nl = value ? strchr(value, '\n') : NULL;
	if (nl) {
		char *head = strndup(value, (size_t)(nl - value));
		if (!head) {
			sc->oom = true;
			return;
		}
		screen_field(sc, label, head);
		free(head);
		size_t line = 2;
		for (const char *p = nl + 1;; line++) {
			const char *e = strchr(p, '\n');
			char lab[32], *part = strndup(p, e ? (size_t)(e - p) : strlen(p));
			if (!part) {
				sc->oom = true;
				return;
			}
			(void)snprintf(lab, sizeof(lab), "   line %zu", line);
			screen_field(sc, lab, part);
			free(part);
			if (!e)
				break;
			p = e + 1;
		}
		return;
	}
	char *v = cg_sanitize_for_terminal(value ? value : "");
	if (v)
		v = squeeze_spaces(v);
	if (!v) {
		sc->oom = true;
		return;
	}
	/* One word too wide for the value column but not for a row (a hash): a row of its own. */
	size_t vl = strlen(v);
	if (!strchr(v, ' ') && text_cols(v, vl) > sc->width && text_cols(v, vl) <= sc->width + 16) {
		screen_row(sc, label, "", 0);
		screen_row(sc, NULL, v, vl);
		free(v);
		return;
	}
	const char *p = v;
	bool first = true;
	do {
		int cols = 0;
		const char *q = p, *space = NULL;
		while (*q) {
			size_t n = 1;
			while ((q[n] & 0xc0) == 0x80)
				n++;
			int w = n > 1 ? 2 : 1;
			if (cols + w > sc->width)
				break;
			cols += w;
			q += n;
			if (q[-1] == ' ')
				space = q;
		}
		/* Break after the last space that fits; a word longer than a row is cut. */
		if (*q && space)
			q = space;
		screen_row(sc, first ? label : "", p, (size_t)(q - p));
		first = false;
		p = q;
	} while (*p);
	free(v);
}

/*
 * A row under a value with characters outside ASCII, naming each (up to
 * eight) by code point and place: a Cyrillic a, a no-break space or a
 * combining mark looks like ASCII on a terminal but is another argument.
 */
static void non_ascii_row(struct screen *sc, const char *value)
{
	char out[256] = "";
	size_t o = 0, shown = 0, chars = 0, more = 0;
	for (const unsigned char *p = (const unsigned char *)(value ? value : ""); *p;) {
		chars++;
		if (*p < 0x80) {
			p++;
			continue;
		}
		/* The wire took only valid UTF-8: a lead byte and its continuations. */
		size_t n = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
		uint32_t cp = *p & (0x7f >> n);
		for (size_t k = 1; k < n && (p[k] & 0xc0) == 0x80; k++)
			cp = cp << 6 | (p[k] & 0x3f);
		for (p++; (*p & 0xc0) == 0x80; p++)
			;
		if (shown == 8) {
			more++;
			continue;
		}
		int m = snprintf(out + o, sizeof(out) - o, "%sU+%04X at char %zu",
				 shown ? ", " : "", (unsigned)cp, chars);
		if (m > 0 && (size_t)m < sizeof(out) - o)
			o += (size_t)m;
		shown++;
	}
	if (!shown)
		return;
	if (more)
		(void)snprintf(out + o, sizeof(out) - o, " and %zu more", more);
	screen_field(sc, "  ! not ASCII", out);
}

/*
 * An argument of several lines, said in a row of its own: its lines are
 * rows of their own (screen_field), so that "# ... \ntouch x" cannot pass
 * for one comment (s41d F2).
 */
static void line_break_row(struct screen *sc, const char *value)
{
	size_t n = 0;
	for (const char *p = value ? value : ""; (p = strchr(p, '\n')); p++)
		n++;
	if (!n)
		return;
	char text[160];
	(void)snprintf(text, sizeof(text),
		       "%zu line break%s: each line is a row of its own, \"line 2\" and on", n,
		       n == 1 ? "" : "s");
	screen_field(sc, "  ! lines", text);
}

/*
 * Tabs and other control characters, said in a row of their own: on the
 * screen a tab is "\t", as a typed backslash-t would be were backslashes
 * not then doubled (s42b F1: `x<TAB>/ws/target` passed for one path).
 */
static void control_row(struct screen *sc, const char *value)
{
	size_t tabs = 0, other = 0;
	for (const unsigned char *p = (const unsigned char *)(value ? value : ""); *p; p++)
		if (*p == '\t')
			tabs++;
		else if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
			other++;
	if (!tabs && !other)
		return;
	char text[200];
	(void)snprintf(text, sizeof(text),
		       "%zu tab%s and %zu other control character%s: shown \\t and \\xNN, a "
		       "typed backslash shown \\\\",
		       tabs, tabs == 1 ? "" : "s", other, other == 1 ? "" : "s");
	screen_field(sc, "  ! controls", text);
}

/*
 * What a privileged call runs with, said exactly (docs/confinement.md): no
 * view, so hide, tmp, protect and git terms do not apply; its sets' Landlock,
 * net and limit terms bind the stages they govern, with no_new_privs and
 * seccomp; as root it still changes any file's metadata and acts on other
 * processes; it follows no symlink where the agent writes (cg_view_nosymfollow).
 * A stage no set governs, or a call with no set, is unconfined, but follows
 * no such symlink either (unless every stage is mount or umount).
 */
static const char *privileged_text(const json_t *cons, const json_t *pipeline)
{
	if (json_array_size(cons) == 0)
		return "YES: runs as root with no confinement at all (no view, no Landlock, no "
		       "seccomp), except that it follows no symlink where the agent can write (the "
		       "workspaces, its home, /tmp and the like) and mounts it makes stay its own "
		       "(a call of mount or umount alone excepted: it acts on the host's, follows "
		       "them, and a file system it mounts without nodev,nosuid may hold the "
		       "agent's "
		       "device nodes and set-uid programs)";
	/* A set may bind some stages only (the view says which, per stage). */
	size_t i;
	const json_t *st;
	json_array_foreach(pipeline, i, st)
	{
		const json_t *bound = json_object_get(st, "constraint_sets");
		if (json_is_array(bound) && json_array_size(bound) == 0)
			return "YES: runs as root with root's capabilities on the host's own "
			       "files; "
			       "A STAGE BELOW IS BOUND BY NO CONSTRAINT SET and runs with no "
			       "confinement at all (no Landlock, no seccomp, the host's network); "
			       "the others are bound by the sets named at each stage";
	}
	return "YES: runs as root on the host's own files (no view: hide, tmp, protect and git "
	       "do not apply); the constraints below bind what it reads, writes and runs, its "
	       "network and limits (with no_new_privs and seccomp), and every file system but its "
	       "write trees is read-only to it (no chmod or chown there either), but as root it "
	       "can still chown any file inside them and renice or prlimit other processes; it "
	       "follows no symlink where the agent can write (the workspaces, its home, /tmp and "
	       "the like), but it reads what its arguments and the agent's files name: a list of "
	       "paths (tar -T, --files-from) or a config file may name any file";
}

static char *pipeline_text(const json_t *pipe);
static int parse_count(const char *s, int64_t *out);

/* Characters a word needs no quotes for: a command's, and a constraint's (which names ${vars}). */
#define WORD_PLAIN	 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789@%+=:,./_-"
#define CONSTRAINT_PLAIN WORD_PLAIN "*?${}"

static void constraint_word(struct cg_buf *b, const char *w)
{
	cg_shell_word(b, w, CONSTRAINT_PLAIN);
}

/* An array of strings as words joined by spaces, into b; false (nothing added) if v is not one. */
static bool words_text(struct cg_buf *b, const json_t *v)
{
	size_t k;
	const json_t *w;
	if (!json_is_array(v))
		return false;
	json_array_foreach(v, k, w) if (!json_is_string(w)) return false;
	json_array_foreach(v, k, w)
	{
		(void)cg_buf_add(b, " ", k ? 1 : 0);
		constraint_word(b, json_string_value(w));
	}
	return true;
}

/* Which of the constraint sets (1-based, as listed below them) bind a stage. */
static void bound_row(struct screen *sc, const json_t *bound, bool priv)
{
	if (!json_is_array(bound))
		return;
	char line[1024] = "";
	size_t k, off = 0;
	const json_t *x;
	json_array_foreach(bound, k, x)
	{
		if (off + 32 >= sizeof(line))
			break; /* at most 64 sets: never, in practice */
		off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%lld",
					k ? ", " : "constraint set ",
					(long long)json_integer_value(x) + 1);
	}
	if (json_array_size(bound) == 0)
		snprintf(line, sizeof(line), "%s",
			 priv ? "NO constraint set: runs as root, unconfined"
			      : "no constraint set: only the call's own view");
	screen_field(sc, "  bound by", line);
}

/* Words of array v (strings, or integers) after a label, into b: "LABEL w1 w2" (nothing when empty). */
static void words_after(struct cg_buf *b, const char *label, const json_t *v)
{
	if (!json_array_size(v))
		return;
	(void)cg_buf_add(b, label, strlen(label));
	(void)cg_buf_add(b, " ", 1);
	if (words_text(b, v))
		return;
	size_t j;
	const json_t *w;
	json_array_foreach(v, j, w)
	{
		char num[24];
		(void)snprintf(num, sizeof(num), "%s%lld", j ? " " : "",
			       (long long)json_integer_value(w));
		(void)cg_buf_add(b, num, strlen(num));
	}
}

/*
 * What a stage may reach on the network, from the sets that bind it: an
 * approved curl under a rule with no set had the host's whole network, and
 * the screen said only "no constraint set" (s36 walk).
 */
static void network_row(struct screen *sc, const json_t *cons, const json_t *bound)
{
	static const char open[] =
	    "THE HOST'S WHOLE NETWORK: any host, any port (no constraint set "
	    "limits it)";
	if (!json_is_array(bound))
		return;
	struct cg_buf b;
	cg_buf_init(&b, 1u << 16);
	bool none = false;
	size_t k;
	const json_t *x;
	json_array_foreach(bound, k, x)
	{
		const json_t *set = json_array_get(cons, (size_t)json_integer_value(x));
		const char *net = json_string_value(json_object_get(set, "net"));
		if (!net || strcmp(net, "unset") == 0)
			continue;
		none |= strcmp(net, "none") == 0;
		char head[48];
		(void)snprintf(head, sizeof(head), "%sset %lld: ", b.len ? "; " : "",
			       (long long)json_integer_value(x) + 1);
		(void)cg_buf_add(&b, head, strlen(head));
		if (strcmp(net, "loopback") == 0) {
			(void)cg_buf_add(&b, "loopback only", 13);
		} else if (strcmp(net, "tcp") == 0) {
			(void)cg_buf_add(&b, "TCP to any host", 15);
			words_after(&b, ", ports", json_object_get(set, "ports"));
		} else if (strcmp(net, "hosts") == 0) {
			(void)cg_buf_add(&b, "only through the egress proxy, to", 33);
			words_after(&b, "", json_object_get(set, "allow_hosts"));
			words_after(&b, "; never", json_object_get(set, "deny_hosts"));
		} else {
			constraint_word(&b, net);
		}
	}
	bool limited = b.len > 0;
	char *text = cg_buf_cstr(&b);
	screen_field(sc, "  network", none ? "none" : !limited ? open : text ? text : "?");
	free(text);
}

/*
 * The constraint sets as text, one row each: "set N: read /; write none; exec
 * ...; net none". An empty exec list is not "nothing": the program directories
 * apply (and exec implies read), and the row says which. A value that is not
 * a word or a list of words is shown as compact JSON.
 */
static void constraint_rows(struct screen *sc, const char *label, const json_t *cons)
{
	if (json_array_size(cons) == 0) {
		screen_field(sc, label, "none");
		return;
	}
	const json_t *set, *v;
	const char *key;
	size_t ci;
	json_array_foreach(cons, ci, set)
	{
		struct cg_buf b;
		char head[32];
		cg_buf_init(&b, 1u << 20);
		(void)snprintf(head, sizeof(head), "set %zu:", ci + 1);
		(void)cg_buf_add(&b, head, strlen(head));
		size_t n = 0;
		json_object_foreach((json_t *)(uintptr_t)set, key, v)
		{
			(void)cg_buf_add(&b, n ? "; " : " ", n ? 2 : 1);
			n++;
			(void)cg_buf_add(&b, key, strlen(key));
			(void)cg_buf_add(&b, " ", 1);
			bool empty = json_is_array(v) && json_array_size(v) == 0;
			if (strcmp(key, "exec") == 0 && cg_confine_exec_defaulted(set)) {
				static const char dflt[] = "the default program directories (";
				(void)cg_buf_add(&b, dflt, sizeof(dflt) - 1);
				for (size_t d = 0, m = 0; d < CG_ARRAY_LEN(cg_exec_default); d++)
					if (cg_exec_default[d]) {
						(void)cg_buf_add(&b, " ", m++ ? 1 : 0);
						constraint_word(&b, cg_exec_default[d]);
					}
				static const char tail[] = "), which it may also read";
				(void)cg_buf_add(&b, tail, sizeof(tail) - 1);
			} else if (empty) {
				(void)cg_buf_add(&b, "none", 4);
			} else if (words_text(&b, v)) {
				/* a list of words, added */
			} else if (json_is_string(v)) {
				constraint_word(&b, json_string_value(v));
			} else if (json_is_object(v) && json_object_size(v) == 0) {
				(void)cg_buf_add(&b, "none", 4);
			} else if (json_is_object(v)) {
				/* limits, resolve: "name value, name value" */
				const char *sub;
				const json_t *sv;
				size_t m = 0;
				json_object_foreach((json_t *)(uintptr_t)v, sub, sv)
				{
					char *j =
					    json_is_string(sv)
						? strdup(json_string_value(sv))
						: json_dumps(sv, JSON_COMPACT | JSON_ENCODE_ANY);
					(void)cg_buf_add(&b, ", ", m++ ? 2 : 0);
					(void)cg_buf_add(&b, sub, strlen(sub));
					(void)cg_buf_add(&b, " ", 1);
					(void)cg_buf_add(&b, j ? j : "?", strlen(j ? j : "?"));
					free(j);
				}
			} else {
				char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
				(void)cg_buf_add(&b, j ? j : "?", strlen(j ? j : "?"));
				free(j);
			}
		}
		bool cut = b.truncated;
		char *text = cg_buf_cstr(&b);
		sc->oom |= !text || cut;
		screen_field(sc, label, text ? text : "");
		free(text);
	}
}

/*
 * What else a grant binds, a row each, as grant.c reads it: an absent uid,
 * session, cwd or host matches any; env names the values it binds. A key this
 * screen does not know (the daemon refuses them) would be shown as JSON.
 */
static void binding_rows(struct screen *sc, const json_t *grant)
{
	static const char *const shown[] = { "uses", "ttl_s", "privileged", "pipeline" };
	static const char *const any[] = { "uid", "session", "cwd", "host" };
	for (size_t i = 0; i < CG_ARRAY_LEN(any); i++)
		if (!json_object_get(grant, any[i])) {
			char label[32];
			(void)snprintf(label, sizeof(label), "  %s", any[i]);
			screen_field(sc, label, "any");
		}
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)(uintptr_t)grant, key, v)
	{
		bool done = false;
		for (size_t i = 0; i < CG_ARRAY_LEN(shown); i++)
			done |= strcmp(key, shown[i]) == 0;
		char label[40], line[64];
		(void)snprintf(label, sizeof(label), "  %s", key);
		if (done) {
			continue;
		} else if (strcmp(key, "constraints") == 0) {
			constraint_rows(sc, label, v);
			/* What the call under it may reach: every set binds it. */
			json_t *all = json_array();
			for (size_t i = 0; all && i < json_array_size(v); i++)
				json_array_append_new(all, json_integer((json_int_t)i));
			network_row(sc, v, all);
			json_decref(all);
		} else if (strcmp(key, "env") == 0 && json_object_size(v)) {
			const char *name;
			const json_t *val;
			json_object_foreach((json_t *)(uintptr_t)v, name, val)
			{
				char *kv = NULL;
				if (asprintf(&kv, "%s=%s", name,
					     json_string_value(val) ? json_string_value(val) : "") <
				    0)
					kv = NULL;
				sc->oom |= !kv;
				screen_field(sc, label, kv ? kv : "");
				non_ascii_row(sc, kv);
				free(kv);
			}
		} else if (strcmp(key, "timeout_ms") == 0 && json_is_integer(v)) {
			(void)snprintf(line, sizeof(line), "%lld ms at most (the call's deadline)",
				       (long long)json_integer_value(v));
			screen_field(sc, label, line);
		} else if (strcmp(key, "host") == 0 && json_is_string(v) &&
			   !*json_string_value(v)) {
			screen_field(sc, label, "none given (local calls only)");
		} else if (strcmp(key, "session") == 0 && json_is_string(v) &&
			   !*json_string_value(v)) {
			screen_field(sc, label, "none given (calls that name no session only)");
		} else if (json_is_boolean(v)) {
			screen_field(sc, label, json_is_true(v) ? "yes" : "no");
		} else if (json_is_string(v)) {
			screen_field(sc, label, json_string_value(v));
			non_ascii_row(sc, json_string_value(v));
		} else if (json_is_integer(v)) {
			(void)snprintf(line, sizeof(line), "%lld",
				       (long long)json_integer_value(v));
			screen_field(sc, label, line);
		} else if ((json_is_array(v) || json_is_object(v)) && json_array_size(v) == 0 &&
			   json_object_size(v) == 0) {
			screen_field(sc, label, "none");
		} else {
			struct cg_buf b;
			cg_buf_init(&b, 1u << 20);
			bool words = words_text(&b, v);
			char *text = words ? cg_buf_cstr(&b) : json_dumps(v, JSON_COMPACT);
			if (!words)
				cg_buf_free(&b);
			sc->oom |= !text;
			screen_field(sc, label, text ? text : "");
			free(text);
		}
	}
}

/*
 * A grant the agent asks for: what it would let run, unprompted, as whom,
 * how often and for how long, in words before the JSON (an attack hid a
 * week-long root shell behind a reassuring reason).
 */
static void grant_rows(struct screen *sc, const char *title, const json_t *grant)
{
	char line[1024];
	long long uses = (long long)json_integer_value(json_object_get(grant, "uses"));
	long long ttl = (long long)json_integer_value(json_object_get(grant, "ttl_s"));
	char days[32] = "";
	if (ttl >= 86400)
		(void)snprintf(days, sizeof(days), " (%.1f days)", (double)ttl / 86400.0);
	(void)snprintf(line, sizeof(line), "%s, %lld use%s over %lld s%s, with no further prompt",
		       json_is_true(json_object_get(grant, "privileged")) ? "AS ROOT (privileged)"
									  : "as the caller",
		       uses, uses == 1 ? "" : "s", ttl, days);
	screen_field(sc, title, line);
	/* Patterns, as grant.c matches them (fnmatch; never a ".." part or an option word). */
	static const char note[] = "  (* ? [..] match any characters of a word, '/' too, never "
				   "a '..' part, nor a word starting with '-' unless the pattern "
				   "does; a last ** matches any further words, whatever they are)";
	size_t i;
	const json_t *st;
	json_array_foreach(json_object_get(grant, "pipeline"), i, st)
	{
		char label[32];
		json_t *one = json_pack("[O]", json_object_get(st, "argv"));
		char *what = one ? pipeline_text(one) : NULL;
		json_decref(one);
		(void)snprintf(label, sizeof(label), "  stage %zu", i + 1);
		screen_field(sc, label, json_string_value(json_object_get(st, "exe")));
		non_ascii_row(sc, json_string_value(json_object_get(st, "exe")));
		/* The path the agent wrote, when it was a link to the program above (s43b F1). */
		const char *sent = json_string_value(json_object_get(st, "as_sent"));
		if (sent) {
			char via[PATH_MAX + 64];
			(void)snprintf(via, sizeof(via), "%s (a link to the program above)", sent);
			screen_field(sc, "    as sent", via);
			non_ascii_row(sc, sent);
		}
		size_t wl = what ? strlen(what) + sizeof(note) : 0;
		char *shown = what ? malloc(wl) : NULL;
		if (shown)
			(void)snprintf(shown, wl, "%s%s", what, strpbrk(what, "*?[") ? note : "");
		screen_field(sc, "    argv", shown ? shown : "?");
		non_ascii_row(sc, what);
		free(shown);
		free(what);
	}
	binding_rows(sc, grant);
}

/* The whole approval view of one pending call, as rows. */
static void build_view(struct screen *sc, const json_t *p, size_t waiting)
{
	char line[1024];
	const json_t *peer = json_object_get(p, "peer");
	bool priv = json_is_true(json_object_get(p, "privileged"));
	screen_field(sc, "trace", json_string_value(json_object_get(p, "trace_id")));
	screen_field(sc, "request id", json_string_value(json_object_get(p, "id")));
	const char *sess = json_string_value(json_object_get(p, "session"));
	const char *host = json_string_value(json_object_get(p, "host"));
	screen_field(sc, "session", sess && *sess ? sess : "none given");
	/*
	 * The request's own word, never checked: a local call that named a
	 * throw-away machine was shown under that name, and runs here (s42b F3).
	 */
	char here[256] = "", hosttext[600];
	if (gethostname(here, sizeof(here) - 1) != 0)
		snprintf(here, sizeof(here), "?");
	if (host && *host)
		(void)snprintf(hosttext, sizeof(hosttext),
			       "%.256s  (the request's word, unchecked: the call runs where this "
			       "daemon runs, %.256s)",
			       host, here);
	else
		(void)snprintf(hosttext, sizeof(hosttext), "none given (this machine, %.256s)",
			       here);
	screen_field(sc, "host", hosttext);
	(void)snprintf(line, sizeof(line), "uid %lld  gid %lld  pid %lld",
		       (long long)json_integer_value(json_object_get(peer, "uid")),
		       (long long)json_integer_value(json_object_get(peer, "gid")),
		       (long long)json_integer_value(json_object_get(peer, "pid")));
	screen_field(sc, "peer", line);
	/* Read from /proc when the call was queued: the caller may exec another program after. */
	const char *pexe = json_string_value(json_object_get(peer, "exe"));
	char pline[4200];
	(void)snprintf(pline, sizeof(pline),
		       "%s  (what the caller's process ran when the call was "
		       "queued; it may run another since: not proof of who sent it)",
		       pexe && *pexe ? pexe : "unknown");
	screen_field(sc, "peer exe", pline);
	screen_field(sc, "time", json_string_value(json_object_get(p, "time")));
	screen_field(sc, "reason", json_string_value(json_object_get(p, "reason")));
	non_ascii_row(sc, json_string_value(json_object_get(p, "reason")));
	screen_field(
	    sc, "privileged",
	    json_object_get(p, "grant") ? "nothing runs now: the agent asks for the grant below"
	    : priv
		? privileged_text(json_object_get(p, "constraints"), json_object_get(p, "pipeline"))
		: "no: runs as the caller, in a view of its own");
	screen_field(sc, "cwd", json_string_value(json_object_get(p, "cwd")));
	non_ascii_row(sc, json_string_value(json_object_get(p, "cwd")));
	if (json_is_true(json_object_get(p, "forward_agent")))
		screen_field(sc, "ssh agent",
			     "FORWARDED: the call may use the daemon's ssh agent (its keys sign "
			     "for it)");
	if (json_is_integer(json_object_get(p, "timeout_ms"))) {
		(void)snprintf(line, sizeof(line), "%lld ms",
			       (long long)json_integer_value(json_object_get(p, "timeout_ms")));
		screen_field(sc, "timeout", line);
	}
	if (priv)
		/* An attack ran the agent's ws/json/__init__.py as root through python3 -m json.tool. */
		screen_field(
		    sc, "  note",
		    "the agent can write here: a program that loads code from its "
		    "working directory (python3 -m, node, make, a ./script) runs that code "
		    "as root");
	if (json_array_size(json_object_get(p, "pipeline"))) {
		/* The command as one would type it, then each stage word by word. */
		char *c = pipeline_text(json_object_get(p, "pipeline"));
		screen_field(sc, "command", c);
		free(c);
	}
	size_t i;
	const json_t *st;
	json_array_foreach(json_object_get(p, "pipeline"), i, st)
	{
		char label[32];
		const char *exe = json_string_value(json_object_get(st, "exe"));
		const char *found = json_string_value(json_object_get(st, "found"));
		(void)snprintf(label, sizeof(label), "stage %zu runs", i + 1);
		screen_field(sc, label, exe);
		non_ascii_row(sc, exe);
		bound_row(sc, json_object_get(st, "constraint_sets"), priv);
		network_row(sc, json_object_get(p, "constraints"),
			    json_object_get(st, "constraint_sets"));
		if (json_is_true(json_object_get(st, "via_symlink"))) {
			screen_field(sc, "  found as", found);
			non_ascii_row(sc, found);
		}
		const char *argv0 = json_string_value(json_object_get(st, "argv0"));
		if (argv0) {
			char as[PATH_MAX + 96];
			(void)snprintf(as, sizeof(as),
				       "%s (NOT argv[0] below: a program that reads its name, "
				       "xz/xzcat, busybox, acts as this one)",
				       argv0);
			screen_field(sc, "  runs as", as);
			non_ascii_row(sc, argv0);
		}
		size_t k;
		const json_t *a;
		json_array_foreach(json_object_get(st, "argv"), k, a)
		{
			(void)snprintf(label, sizeof(label), "  argv[%zu]", k);
			screen_field(sc, label, json_string_value(a));
			non_ascii_row(sc, json_string_value(a));
			line_break_row(sc, json_string_value(a));
			control_row(sc, json_string_value(a));
		}
	}
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)json_object_get(p, "env"), key, v)
	{
		size_t n =
		    strlen(key) + strlen(json_string_value(v) ? json_string_value(v) : "") + 2;
		char *kv = malloc(n);
		if (!kv) {
			sc->oom = true;
			continue;
		}
		(void)snprintf(kv, n, "%s=%s", key, json_string_value(v));
		screen_field(sc, "env", kv);
		non_ascii_row(sc, kv);
		free(kv);
	}
	if (json_object_get(p, "grant"))
		grant_rows(sc, "ASKS GRANT", json_object_get(p, "grant"));
	constraint_rows(sc, "constraints", json_object_get(p, "constraints"));
	(void)snprintf(line, sizeof(line), "%s (%s, rung %s)",
		       json_string_value(json_object_get(p, "rule_id")),
		       json_string_value(json_object_get(p, "code")),
		       json_string_value(json_object_get(p, "rung")));
	screen_field(sc, "sent by rule", line);
	(void)snprintf(line, sizeof(line), "%lld of %lld distinct approvers; %lld s left",
		       (long long)json_array_size(json_object_get(p, "approved_by")),
		       (long long)json_integer_value(json_object_get(p, "approvers_needed")),
		       (long long)json_integer_value(json_object_get(p, "deadline_ms_left")) /
			   1000);
	screen_field(sc, "approval", line);
	if (waiting) { /* 0: a listing, which numbers its calls itself */
		(void)snprintf(line, sizeof(line), "%zu more waiting", waiting - 1);
		screen_field(sc, "queue", line);
	}
	screen_field(sc, "view sha256", json_string_value(json_object_get(p, "request_sha256")));
}

/* Backslash-escape fnmatch's metacharacters: the pattern matches s and nothing else. */
static char *glob_literal(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(2 * n + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (strchr("\\*?[", s[i]))
			out[o++] = '\\';
		out[o++] = s[i];
	}
	out[o] = '\0';
	return out;
}

static json_t *json_literal(const json_t *s)
{
	char *l = glob_literal(json_string_value(s) ? json_string_value(s) : "");
	json_t *j = l ? json_string(l) : NULL;
	free(l);
	return j;
}

/*
 * The approver's `g`: a grant for exactly the call shown. Every argument and
 * the session become literal patterns (metacharacters escaped, so that a
 * literal `*` in an argument is never a glob), and it binds everything else
 * that changes what runs: the resolved executables, privileged, the peer
 * uid (hence the run uid), cwd, host, env names and values, constraints,
 * forward_agent, and the call's deadline as its longest.
 */
static json_t *literal_grant(const json_t *p, int64_t uses, int64_t ttl)
{
	json_t *pipe = json_array();
	size_t i, k;
	const json_t *st, *a;
	json_array_foreach(json_object_get(p, "pipeline"), i, st)
	{
		json_t *argv = json_array();
		json_array_foreach(json_object_get(st, "argv"), k, a)
		    json_array_append_new(argv, json_literal(a));
		json_array_append_new(
		    pipe, json_pack("{s:O,s:o}", "exe", json_object_get(st, "exe"), "argv", argv));
	}
	/* The call's env names with their exact values: "this exact call". */
	json_t *env = json_is_object(json_object_get(p, "env"))
			  ? json_deep_copy(json_object_get(p, "env"))
			  : json_object();
	json_t *g =
	    json_pack("{s:o,s:o,s:O,s:b,s:o,s:O,s:O,s:I,s:I}", "pipeline", pipe, "session",
		      json_literal(json_object_get(p, "session")), "uid",
		      json_object_get(json_object_get(p, "peer"), "uid"), "privileged",
		      json_is_true(json_object_get(p, "privileged")), "env", env, "host",
		      json_object_get(p, "host"), "constraints", json_object_get(p, "constraints"),
		      "uses", (json_int_t)uses, "ttl_s", (json_int_t)ttl);
	if (g && json_is_string(json_object_get(p, "cwd")))
		json_object_set(g, "cwd", json_object_get(p, "cwd"));
	if (g && json_is_true(json_object_get(p, "forward_agent")))
		json_object_set_new(g, "forward_agent", json_true());
	if (g && json_is_integer(json_object_get(p, "timeout_ms")))
		json_object_set(g, "timeout_ms", json_object_get(p, "timeout_ms"));
	return g;
}

static json_t *answer(const struct cg_cli *g, const char *action, const json_t *p, const char *why,
		      json_t *grant)
{
	json_t *req =
	    json_pack("{s:s,s:O,s:O}", "action", action, "trace_id", json_object_get(p, "trace_id"),
		      "request_sha256", json_object_get(p, "request_sha256"));
	if (why)
		json_object_set_new(req, "why", json_string(why));
	if (grant)
		json_object_set(req, "grant", grant);
	json_t *resp = admin_call(g, req);
	json_decref(req);
	return resp;
}

/* ---- the terminal UI --------------------------------------------------------- */

static struct termios saved_tio;
static int tty_fd = -1;
static volatile sig_atomic_t interrupted;

static void restore_tty(void)
{
	if (tty_fd >= 0)
		tcsetattr(tty_fd, TCSAFLUSH, &saved_tio);
}

static void on_signal(int sig)
{
	interrupted = sig;
}

/* Wait up to ms for one key. Returns the byte, 0 on timeout, -1 on error/EOF. */
static int read_key(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);
	if (n <= 0)
		return n == 0 ? 0 : (errno == EINTR ? 0 : -1);
	unsigned char c;
	ssize_t r = read(fd, &c, 1);
	if (r != 1)
		return -1;
	return c;
}

/* Keys past a byte: the arrows and page keys a pager takes (read_nav). */
enum { KEY_UP = 256, KEY_DOWN, KEY_PGUP, KEY_PGDN, KEY_OTHER };

/*
 * read_key, with an escape sequence read whole: an arrow or page key as one
 * of the KEY_ values, anything else starting with ESC as KEY_OTHER (never
 * its bytes one by one, which would read as separate keys).
 */
static int read_nav(int fd, int ms)
{
	int c = read_key(fd, ms);
	if (c != 27)
		return c;
	char seq[8];
	size_t n = 0;
	int b;
	while (n < sizeof(seq) - 1 && (b = read_key(fd, 30)) > 0) {
		seq[n++] = (char)b;
		if (n >= 2 && ((b >= 'A' && b <= 'Z') || b == '~'))
			break;
	}
	seq[n] = '\0';
	if (strcmp(seq, "[A") == 0 || strcmp(seq, "OA") == 0)
		return KEY_UP;
	if (strcmp(seq, "[B") == 0 || strcmp(seq, "OB") == 0)
		return KEY_DOWN;
	if (strcmp(seq, "[5~") == 0)
		return KEY_PGUP;
	if (strcmp(seq, "[6~") == 0)
		return KEY_PGDN;
	return KEY_OTHER;
}

static bool key_next(int c)
{
	return c == ' ' || c == 'j' || c == '\r' || c == '\n' || c == KEY_DOWN || c == KEY_PGDN;
}

static bool key_back(int c)
{
	return c == 'b' || c == 'k' || c == KEY_UP || c == KEY_PGUP;
}

/* The terminal's size (rows, columns), with a floor that keeps the UI usable. */
static void tty_size(int fd, int *rows, int *cols)
{
	struct winsize ws;
	*rows = 24;
	*cols = 80;
	if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
		*rows = ws.ws_row;
		*cols = ws.ws_col;
	}
	if (*rows < 8)
		*rows = 8;
	if (*cols < 40)
		*cols = 40;
}

/* Rows per page: the screen less the header, a blank and three footer rows. */
static size_t per_page(int rows)
{
	return (size_t)(rows - 6);
}

static size_t n_pages(const struct screen *sc, size_t pp)
{
	return sc->n ? (sc->n + pp - 1) / pp : 1;
}

/*
 * Draw one page. Only the last page offers the answer keys: nothing is
 * approvable that was not on the screen.
 */
/* Keys "[a] x   [b] y" on as many rows as the width needs, broken between keys. */
static void draw_keys(FILE *tty, const char *keys, int width)
{
	const char *p = keys;
	int used = 2;
	fputs("  ", tty);
	while (*p) {
		const char *sep = strstr(p, "   ");
		size_t n = sep ? (size_t)(sep - p) : strlen(p);
		int w = text_cols(p, n);
		if (used > 2 && used + 3 + w > width) {
			fputs("\033[K\r\n  ", tty);
			used = 2;
		} else if (used > 2) {
			fputs("   ", tty);
			used += 3;
		}
		fwrite(p, 1, n, tty);
		used += w;
		p += n;
		while (*p == ' ')
			p++;
	}
	fputs("\033[K\r\n", tty);
}

/*
 * Draw one page, over the last one (each row cleared to its end, the rest
 * below): redrawn every second for the countdown, it must not flicker.
 */
static void draw_page(FILE *tty, const struct screen *sc, size_t page, size_t pp, const char *title,
		      const char *answer_keys, const char *note, const char *more_keys)
{
	size_t np = n_pages(sc, pp);
	int width = sc->width + 18;
	char keys[512];
	fprintf(tty, "\033[H\033[K\r\n  \033[1m%s\033[0m  (page %zu of %zu)\033[K\r\n", title,
		page + 1, np);
	for (size_t i = page * pp; i < sc->n && i < (page + 1) * pp; i++)
		fprintf(tty, "%s\033[K\r\n", sc->rows[i]);
	fputs("\033[K\r\n", tty);
	if (page + 1 < np) {
		snprintf(keys, sizeof(keys), "[space] next page%s   %s", page ? "   [b] back" : "",
			 more_keys);
		draw_keys(tty, keys, width);
		fputs("  the answer keys appear on the last page\033[K\r\n", tty);
	} else {
		snprintf(keys, sizeof(keys), "%s%s", answer_keys, page ? "   [b] back" : "");
		draw_keys(tty, keys, width);
	}
	if (note)
		fprintf(tty, "  %s\033[K\r\n", note);
	fputs("\033[J", tty);
	fflush(tty);
}

/*
 * Show the exact grant `g` would open, paged like the view, and wait for the
 * second keypress. True only for `g` on its last page; anything else goes
 * back to the call without answering.
 */
static bool confirm_grant(FILE *tty, int fd, const json_t *grant, int cols, int rows)
{
	struct screen sc = { .width = cols - 18 };
	grant_rows(&sc, "OPENS GRANT", grant);
	size_t pp = per_page(rows), page = 0;
	bool open = false;
	/* Pager keys page (space on the last page too: it cancelled, s36); n, q, Esc go back. */
	const char *keys = "[g] open exactly this grant (the call runs under it)   [n] or [q] "
			   "return to the call";
	const char *more = "[n] or [q] return to the call";
	const char *note = NULL;
	draw_page(tty, &sc, page, pp, "callgate: the grant `g` would open", keys, NULL, more);
	tcflush(fd, TCIFLUSH);
	while (!interrupted) {
		int c = read_nav(fd, 1000);
		if (c == 0)
			continue;
		bool last = page + 1 >= n_pages(&sc, pp);
		note = NULL;
		if (c == 'g' && last) {
			open = !sc.oom;
			break;
		} else if (c == 'n' || c == 'q' || c == 27 || c == KEY_OTHER || c == 3 || c < 0) {
			break;
		} else if (key_next(c) && !last) {
			page++;
		} else if (key_back(c) && page) {
			page--;
		} else {
			note = c == 'g' ? "not yet: page to the end first (space)"
			       : key_next(c)
				   ? "this is the last page"
				   : "keys: g opens the grant, n or q returns to the call";
		}
		draw_page(tty, &sc, page, pp, "callgate: the grant `g` would open", keys, note,
			  more);
	}
	screen_free(&sc);
	return open;
}

/*
 * `d`: the reason a denial tells the agent, typed on the raw terminal. Enter
 * sends it, Esc or Ctrl-C goes back (false). Printable bytes only; the daemon
 * judges the text as it judges any `why` (UTF-8, nothing a person cannot see).
 */
static bool read_reason(FILE *tty, int fd, char *out, size_t size)
{
	size_t n = 0;
	fprintf(tty, "\r\n  reason the agent is told (Enter denies with it, Esc goes back): ");
	fflush(tty);
	tcflush(fd, TCIFLUSH);
	for (;;) {
		int c = read_key(fd, -1);
		if (c < 0 || c == 3 || c == 27 || interrupted)
			return false;
		if (c == '\r' || c == '\n') {
			out[n] = '\0';
			return n > 0;
		}
		if ((c == 127 || c == 8) && n > 0) {
			/* One character back: its continuation bytes with it. */
			while (n > 0 && ((unsigned char)out[--n] & 0xC0) == 0x80)
				;
			fputs("\b \b", tty);
		} else if (c >= 0x20 && c != 127 && n + 1 < size) {
			out[n++] = (char)c;
			fputc(c, tty);
		}
		fflush(tty);
	}
}

static int tui(const struct cg_cli *g, int64_t grant_uses, int64_t grant_ttl)
{
	tty_fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (tty_fd < 0) {
		fprintf(stderr,
			"callgate: approve needs a terminal (/dev/tty): %s; "
			"use `callgate pending` and `callgate approve ID` instead\n",
			strerror(errno));
		return CG_EXIT_USAGE;
	}
	FILE *tty = fdopen(dup(tty_fd), "w");
	if (!tty || tcgetattr(tty_fd, &saved_tio) != 0) {
		fprintf(stderr, "callgate: cannot use the terminal: %s\n", strerror(errno));
		return CG_EXIT_ERROR;
	}
	struct termios raw = saved_tio;
	raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG | IEXTEN);
	raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	atexit(restore_tty);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (tcsetattr(tty_fd, TCSAFLUSH, &raw) != 0) {
		fprintf(stderr, "callgate: cannot set raw mode: %s\n", strerror(errno));
		return CG_EXIT_ERROR;
	}

	char shown[80] = "";
	struct screen sc = { 0 };
	size_t page = 0, pp = 0;
	bool verified = false, left_waiting = false;
	int rc = CG_EXIT_OK, rows = 24, cols = 80;
	const char *note_kept = NULL; /* the note on screen, kept when the page is redrawn */
	const char *title = "callgate: a call is waiting for your decision";
	while (!interrupted) {
		json_t *resp = fetch_pending(g);
		if (!resp) {
			rc = unreached();
			break;
		}
		const json_t *list = pending_list(resp);
		const json_t *head = json_array_get(list, 0);
		if (!head) {
			if (strcmp(shown, "-") != 0) {
				const json_t *on = json_object_get(
				    json_object_get(reply_of(resp), "data"), "approval");
				fprintf(tty,
					"\033[2J\033[H\r\n  callgate: no calls are waiting. "
					"(q quits)\r\n%s",
					json_is_false(on)
					    ? "  this daemon runs without --approval: a call that "
					      "needs a person is refused at once unless a grant "
					      "covers it\r\n"
					    : "");
				fflush(tty);
				snprintf(shown, sizeof(shown), "-");
			}
			json_decref(resp);
			int c = read_key(tty_fd, 1000);
			if (c == 'q' || c == 3 || c < 0)
				break;
			continue;
		}
		/*
		 * A grant request is answered y (open it) or not at all: no `g` on
		 * a grant. Nor on a call that needs several approvers: a grant is
		 * one person's, and the daemon never lets one cover such a call.
		 */
		bool asks_grant = json_object_get(head, "grant") != NULL;
		bool several = json_integer_value(json_object_get(head, "approvers_needed")) > 1;
		const char *keys =
		    asks_grant ? "[y] open this grant   [n] deny   [d] deny, saying why   [q] "
				 "leave (it stays waiting)"
		    : several  ? "[y] approve (one of the approvers it needs)   [n] deny   "
				 "[d] deny, saying why   [q] leave (it stays waiting)"
			       : "[y] approve once   [g] grant this exact call   [n] deny   "
				 "[d] deny, saying why   [q] leave (it stays waiting)";
		static const char more[] = "[n] deny   [d] deny, saying why   [q] leave (it stays "
					   "waiting)";
		static const char help[] = "keys: y approve, g grant, n deny, d deny saying why, "
					   "q leave; space or arrows page (no other key answers)";
		const char *sha = json_string_value(json_object_get(head, "request_sha256"));
		if (strcmp(shown, sha ? sha : "") != 0) {
			screen_free(&sc);
			tty_size(tty_fd, &rows, &cols);
			sc.width = cols - 18;
			build_view(&sc, head, json_array_size(list));
			/* What is shown must be what the hash binds, byte for byte. */
			verified = view_hash_ok(head) && !sc.oom;
			page = 0;
			pp = per_page(rows);
			note_kept =
			    verified ? NULL
				     : "THIS VIEW DOES NOT MATCH ITS HASH: it cannot be approved";
			draw_page(tty, &sc, page, pp, title, verified ? keys : more, note_kept,
				  more);
			snprintf(shown, sizeof(shown), "%s", sha ? sha : "");
			/* Keys typed before this request was on screen must not answer it. */
			tcflush(tty_fd, TCIFLUSH);
		}
		int c = read_nav(tty_fd, 1000);
		if (c == 0) {
			/* The same call a second later: its time left, drawn again in place. */
			struct screen fresh = { .width = sc.width };
			build_view(&fresh, head, json_array_size(list));
			if (!fresh.oom) {
				screen_free(&sc);
				sc = fresh;
				verified = view_hash_ok(head);
				if (page >= n_pages(&sc, pp))
					page = n_pages(&sc, pp) - 1;
				draw_page(tty, &sc, page, pp, title, verified ? keys : more,
					  note_kept, more);
			} else {
				screen_free(&fresh);
			}
			json_decref(resp);
			continue; /* refresh: it may have been answered elsewhere or timed out */
		}
		if (c == 3 || c == 'q' || c < 0) {
			json_decref(resp);
			left_waiting = true;
			break; /* leave without answering: the call stays pending */
		}
		bool last = page + 1 >= n_pages(&sc, pp);
		const char *note = NULL;
		bool deny = c == 'n' || c == 'd';
		bool yes = verified && (c == 'y' || (c == 'g' && !asks_grant && !several));
		if (key_next(c) && !last)
			page++;
		else if (key_next(c))
			note = "this is the last page";
		else if (key_back(c) && page > 0)
			page--;
		else if (yes && !last)
			note =
			    "not yet: page to the end first (space); nothing unseen is approvable";
		else if (!yes && !deny)
			note = help;
		if (!deny && !(yes && last)) {
			draw_page(tty, &sc, page, pp, title, verified ? keys : more, note, more);
			note_kept = note;
			json_decref(resp);
			continue;
		}
		json_t *ans = NULL;
		if (verified && c == 'y') {
			ans = answer(g, "approve", head, NULL, NULL);
		} else if (yes && c == 'g') {
			json_t *grant = literal_grant(head, grant_uses, grant_ttl);
			bool go = grant && confirm_grant(tty, tty_fd, grant, cols, rows);
			if (go)
				ans = answer(g, "grant_open", head, NULL, grant);
			json_decref(grant);
			if (!go) {
				/* Back to the call, unanswered. */
				draw_page(tty, &sc, page, pp, title, keys, "no grant was opened",
					  more);
				note_kept = "no grant was opened";
				tcflush(tty_fd, TCIFLUSH);
				json_decref(resp);
				continue;
			}
		} else if (c == 'd') {
			char why[256];
			if (!read_reason(tty, tty_fd, why, sizeof(why))) {
				draw_page(tty, &sc, page, pp, title, verified ? keys : more,
					  "not denied: no reason was given", more);
				note_kept = "not denied: no reason was given";
				tcflush(tty_fd, TCIFLUSH);
				json_decref(resp);
				continue;
			}
			ans = answer(g, "deny", head, why, NULL);
		} else {
			ans = answer(g, "deny", head, "denied at the terminal", NULL);
		}
		const json_t *r = reply_of(ans);
		const char *type = json_string_value(json_object_get(r, "type"));
		char *m =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(r, "message")));
		bool done = ans && type && strcmp(type, "S") == 0;
		bool refused = ans && cg_client_exit_code(ans) == CG_EXIT_DENIED && !done;
		fprintf(tty, "\r\n  -> %s %s: %s\r\n", type ? type : "E",
			ans ? json_string_value(json_object_get(r, "code")) : "(no answer)",
			m ? m : "");
		/* A failed answer stays on screen until a key; one that is not yours ends here. */
		if (!done)
			fprintf(tty, "  %s\r\n",
				refused ? "you may not answer calls here: press a key to leave"
					: "the call was not answered: press a key to go on");
		fflush(tty);
		free(m);
		json_decref(ans);
		json_decref(resp);
		shown[0] = '\0';
		note_kept = NULL;
		tcflush(tty_fd, TCIFLUSH);
		(void)read_key(tty_fd, done ? 1500 : -1);
		if (refused) {
			rc = CG_EXIT_DENIED;
			break;
		}
	}
	screen_free(&sc);
	restore_tty();
	fclose(tty);
	close(tty_fd);
	tty_fd = -1;
	if ((left_waiting || interrupted) && shown[0] && strcmp(shown, "-") != 0)
		fprintf(stderr, "callgate approve: left without answering; the call on screen is "
				"still waiting (callgate pending lists it)\n");
	return rc;
}

/* ---- non-interactive commands ------------------------------------------------ */

/*
 * A pipeline ([{exe?, argv: [...]}, ...] or [[...], ...]) as one line of shell-
 * like text: words that need it single-quoted, stages joined by " | ".
 * Terminal-safe; caller frees. NULL on allocation failure.
 */
static char *pipeline_text(const json_t *pipe)
{
	struct cg_buf b;
	cg_buf_init(&b, 1u << 20);
	size_t i, j;
	const json_t *st, *w;
	json_array_foreach(pipe, i, st)
	{
		const json_t *argv = json_is_array(st) ? st : json_object_get(st, "argv");
		if (i)
			(void)cg_buf_add(&b, " | ", 3);
		json_array_foreach(argv, j, w)
		{
			const char *s = json_string_value(w);
			if (!s)
				s = "";
			if (j)
				(void)cg_buf_add(&b, " ", 1);
			cg_shell_word(&b, s, WORD_PLAIN);
		}
	}
	bool cut = b.truncated;
	char *raw = cg_buf_cstr(&b);
	char *safe = raw ? cg_sanitize_for_terminal(raw) : NULL;
	free(raw);
	if (safe && cut) {
		/* Said, never silent: each word is still on its own row of the view. */
		static const char more[] = " ... [CUT at 1 MiB: every word is on the argv rows]";
		size_t n = strlen(safe);
		char *s = realloc(safe, n + sizeof(more));
		if (!s) {
			free(safe);
			return NULL;
		}
		memcpy(s + n, more, sizeof(more));
		safe = s;
	}
	return safe;
}

/* One grant as text: id, what it covers, and its scope. */
static void print_grant(const json_t *gr)
{
	char *what = pipeline_text(json_object_get(gr, "pipeline"));
	char *id = cg_sanitize_for_terminal(json_string_value(json_object_get(gr, "grant_id")));
	char *sess = cg_sanitize_for_terminal(json_string_value(json_object_get(gr, "session")));
	const char *exp = json_string_value(json_object_get(gr, "expires"));
	char *exe = cg_sanitize_for_terminal(json_string_value(
	    json_object_get(json_array_get(json_object_get(gr, "pipeline"), 0), "exe")));
	printf("%s  %s  (%s)\n    uses left %lld (used %lld), expires %s, %s%s%s\n", id ? id : "?",
	       what ? what : "?", exe ? exe : "?",
	       (long long)json_integer_value(json_object_get(gr, "uses_left")),
	       (long long)json_integer_value(json_object_get(gr, "used")), exp ? exp : "?",
	       json_is_true(json_object_get(gr, "privileged")) ? "privileged" : "unprivileged",
	       sess && sess[0] ? ", session " : "", sess ? sess : "");
	/* Everything else it is bound to, so that a listing shows what it covers. */
	const json_t *uid = json_object_get(gr, "uid"), *env = json_object_get(gr, "env");
	printf("    uid %s", json_is_integer(uid) ? "" : "any");
	if (json_is_integer(uid))
		printf("%lld", (long long)json_integer_value(uid));
	static const char *const rest[] = { "env",   "cwd",	   "host",
					    "paths", "timeout_ms", "constraints" };
	for (size_t i = 0; i < CG_ARRAY_LEN(rest); i++) {
		json_t *v = json_object_get(gr, rest[i]);
		if (!v || (json_is_array(v) && json_array_size(v) == 0 && strcmp(rest[i], "env")))
			continue;
		bool none = (json_is_array(v) && json_array_size(v) == 0) ||
			    (json_is_object(v) && json_object_size(v) == 0);
		printf("; %s%s ", rest[i],
		       strcmp(rest[i], "env") == 0 && json_is_object(env) && !none
			   ? " (values bound)"
			   : "");
		if (none)
			printf("none");
		else if (json_is_string(v) && !*json_string_value(v))
			printf("none given (local calls only)"); /* host "": the call named none */
		else
			cg_cli_print_value(stdout, v); /* as text, control characters replaced */
	}
	if (json_is_true(json_object_get(gr, "forward_agent")))
		printf("; ssh agent forwarded");
	const json_t *cons = json_object_get(gr, "constraints");
	if (json_is_array(cons) && json_array_size(cons) == 0)
		printf("; network: THE HOST'S WHOLE NETWORK (no constraint set limits it)");
	printf("\n");
	free(what);
	free(id);
	free(sess);
	free(exe);
}

static int cmd_pending(const struct cg_cli *g, bool json)
{
	json_t *resp = fetch_pending(g);
	if (!resp)
		return unreached();
	const json_t *list = pending_list(resp);
	if (json) {
		char *s = json_dumps(resp, JSON_COMPACT);
		puts(s ? s : "{}");
		free(s);
	} else if (json_array_size(list) == 0) {
		const json_t *on =
		    json_object_get(json_object_get(reply_of(resp), "data"), "approval");
		/* Which daemon said so (ux-s42e L4: two daemons, the wrong one asked). */
		char buf[PATH_MAX];
		printf("%s (admin socket %s)\n",
		       json_is_false(on)
			   ? "no calls are waiting: this daemon runs without --approval, so a call "
			     "that needs a person is refused at once unless a grant covers it"
			   : "no calls are waiting",
		       admin_path(g, buf, sizeof(buf)));
	} else {
		/*
		 * Each call whole, as the terminal UI shows it (build_view): what
		 * `approve TRACE_ID` answers must be on the page, privilege, cwd,
		 * env, what each stage resolved to, and a grant the agent asks for.
		 */
		int rows, cols = 100;
		const char *env_cols = getenv("COLUMNS");
		int64_t want = 0;
		if (isatty(STDOUT_FILENO))
			tty_size(STDOUT_FILENO, &rows, &cols);
		else if (env_cols && parse_count(env_cols, &want) == 0 && want >= 40 &&
			 want <= 1000)
			cols = (int)want; /* a pipe: as wide as the caller says */
		size_t i, n = json_array_size(list);
		const json_t *p;
		printf("%zu call%s waiting, oldest first\n", n, n == 1 ? "" : "s");
		json_array_foreach(list, i, p)
		{
			struct screen sc = { .width = cols - 18 };
			build_view(&sc, p, 0);
			printf("\n-- call %zu of %zu --\n", i + 1, n);
			if (sc.oom) {
				screen_free(&sc);
				json_decref(resp);
				fprintf(stderr, "callgate pending: out of memory\n");
				return CG_EXIT_ERROR;
			}
			for (size_t k = 0; k < sc.n; k++)
				printf("%s\n", sc.rows[k]);
			screen_free(&sc);
			/* The answer for exactly this view: its trace id and hash. */
			char *t = cg_sanitize_for_terminal(
			    json_string_value(json_object_get(p, "trace_id")));
			char *h = cg_sanitize_for_terminal(
			    json_string_value(json_object_get(p, "request_sha256")));
			char via[PATH_MAX + 32];
			answer_via(g, via, sizeof(via));
			printf("  answer:        callgate%s approve %s --hash %s\n"
			       "                 callgate%s deny %s\n",
			       via, t ? t : "?", h ? h : "?", via, t ? t : "?");
			free(t);
			free(h);
		}
	}
	json_decref(resp);
	return CG_EXIT_OK;
}

/*
 * approve ID / deny ID. With --hash, the answer is bound to that view hash
 * (what a notifier or a person was shown), not to whatever is pending now:
 * if the call changed, the daemon refuses with APPROVAL_HASH_MISMATCH.
 */
/*
 * A trace id's first 8 or more characters, as a person copies them off the
 * screen (ux-s41 L2): the one waiting call whose id starts so, said back in
 * full. Two that do: which, and nothing answered (-1). None: *p stays NULL.
 */
static int answer_by_prefix(const char *action, const json_t *list, const char *id,
			    const json_t **p)
{
	size_t n = strlen(id), i, hits = 0;
	const json_t *q;
	if (n < 8 || strspn(id, "0123456789abcdef-") != n)
		return 0;
	json_array_foreach(list, i, q)
	{
		const char *t = json_string_value(json_object_get(q, "trace_id"));
		if (t && strncmp(t, id, n) == 0) {
			*p = hits++ ? NULL : q;
			if (hits > 1) {
				fprintf(stderr,
					"callgate %s: more than one waiting call's trace id starts "
					"with %s; nothing was answered: give more of it "
					"('callgate pending' lists them)\n",
					action, id);
				return -1;
			}
		}
	}
	if (*p)
		fprintf(stderr, "callgate %s: %s is trace %s\n", action, id,
			json_string_value(json_object_get(*p, "trace_id")));
	return 0;
}

static int cmd_answer(const struct cg_cli *g, const char *action, const char *id, const char *hash,
		      const char *why, bool json)
{
	json_t *resp = fetch_pending(g);
	if (!resp)
		return unreached();
	const json_t *p = find_pending(pending_list(resp), id);
	if (!p && answer_by_prefix(action, pending_list(resp), id, &p) != 0) {
		json_decref(resp);
		return CG_EXIT_INVALID;
	}
	/*
	 * A waiting call's request id is the agent's to choose: one that is (or
	 * begins with) what was typed answers nothing, even when it is also
	 * another call's trace id (s41c F3: a request id set to the trace id of
	 * the agent's waiting root call had `approve ID` run that call, shown
	 * only afterwards). The person reads the calls and answers by trace id
	 * with the view's hash, which binds the answer to what they read.
	 */
	size_t i, n = strlen(id);
	const json_t *q;
	json_array_foreach(pending_list(resp), i, q)
	{
		const char *r = json_string_value(json_object_get(q, "id"));
		if (!r || q == p || !(strcmp(r, id) == 0 || (n >= 8 && strncmp(r, id, n) == 0)))
			continue;
		const char *sha =
		    p ? json_string_value(json_object_get(p, "request_sha256")) : NULL;
		if (p && hash && sha && strcmp(hash, sha) == 0)
			continue; /* bound to the view of the call read */
		char *t =
		    cg_sanitize_for_terminal(json_string_value(json_object_get(q, "trace_id")));
		fprintf(
		    stderr,
		    "callgate %s: '%s' is%s the request id of a waiting call (trace %s), which "
		    "the agent chose; nothing was answered. Read the calls ('callgate pending') "
		    "and answer one by its trace id%s\n",
		    action, id, strcmp(r, id) == 0 ? "" : " the start of", t ? t : "?",
		    p ? " with --hash and the view hash shown there (that trace id is another "
			"call's request id)"
		      : "");
		free(t);
		json_decref(resp);
		return CG_EXIT_INVALID;
	}
	const char *tid = p ? json_string_value(json_object_get(p, "trace_id")) : id;
	const char *sha = hash ? hash
			  : p  ? json_string_value(json_object_get(p, "request_sha256"))
			       : "";
	/* Not found: let the daemon say it, with its code, rather than guessing here. */
	json_t *req = json_pack("{s:s,s:s,s:s}", "action", action, "trace_id", tid ? tid : id,
				"request_sha256", sha ? sha : "");
	if (req && why)
		json_object_set_new(req, "why", json_string(why));
	json_t *ans = req ? admin_call(g, req) : NULL;
	json_decref(req);
	int rc = ans ? report(ans, json) : unreached();
	if (rc == CG_EXIT_OK && !json && p) {
		/* What the answer applied to, said back: its command and any grant it asked. */
		char *c = pipeline_text(json_object_get(p, "pipeline"));
		if (!c || *c) /* a grant request names no call of its own */
			printf("  call: %s\n", c ? c : "?");
		free(c);
		if (json_object_get(p, "grant")) {
			char *gs =
			    json_dumps(json_object_get(p, "grant"), JSON_COMPACT | JSON_SORT_KEYS);
			char *safe = gs ? cg_sanitize_for_terminal(gs) : NULL;
			printf("  grant asked: %s\n", safe ? safe : "?");
			free(gs);
			free(safe);
		}
	}
	json_decref(ans);
	json_decref(resp);
	return rc;
}

static int parse_duration(const char *s, int64_t *out)
{
	/* A grant lives at most 7 days (grant.c): said here, before anyone reads a call. */
	int64_t ms;
	if (cg_parse_duration_ms(s, 1000, false, (int64_t)CG_GRANT_MAX_TTL_S * 1000, &ms) != 0)
		return -1;
	*out = ms / 1000;
	return 0;
}

/* A bad duration named with the forms that work and the bound. */
static int bad_duration(const char *cmd, const char *flag, const char *value)
{
	char v[48];
	snprintf(v, sizeof(v), "%s", value);
	for (char *c = v; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	fprintf(stderr,
		"callgate %s: bad value '%s' for '%s': a whole number of s, m, h or d, at most 7d "
		"(see 'callgate %s --help')\n",
		cmd, v, flag, cmd);
	return CG_EXIT_USAGE;
}

/* A non-negative decimal integer, nothing else. */
static int parse_count(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 0)
		return -1;
	*out = v;
	return 0;
}

static const struct cg_cli_opt grant_open_opts[] = {
	{ "--exe", "PATH",
	  "the resolved executable (one stage; a bare name: the controlled PATH's)" },
	{ "--argv", "PATTERN...",
	  "argv patterns, argv[0] (the command's name) first, up to the next grant option "
	  "(fnmatch; a final ** = any rest; "
	  "--version is a pattern; a grant option's name, or a word one edit from one, is "
	  "written \\--uses)" },
	{ "--session", "GLOB", "only calls of matching sessions" },
	{ "--uid", "UID", "only calls from this peer uid" },
	{ "--path", "DIR",
	  "the cwd and every word naming a file stay within DIR (repeatable; a screen on the "
	  "words: docs/approval.md)" },
	{ "--privileged", NULL, "cover privileged calls (default: only unprivileged ones)" },
	{ "--forward-agent", NULL,
	  "cover calls that forward the daemon's ssh agent (default: only calls without)" },
	{ "--env", "NAME", "the calls set exactly these env names (repeatable; default none)" },
	{ "--cwd", "DIR", "only calls with exactly this working directory" },
	{ "--host", "HOST", "only calls with exactly this host" },
	{ "--uses", "N", "number of uses (required)" },
	{ "--ttl", "DURATION", "lifetime: N, Ns, Nm or Nh (required)" },
	{ "--timeout", "DURATION", "only calls whose deadline is at most DURATION" },
	{ "--json", NULL, "print the daemon's response as JSON" },
	{ 0 },
};

/* Is word one of grant open's own options (where an --argv list ends)? */
static bool grant_open_opt(const char *word)
{
	for (const struct cg_cli_opt *o = grant_open_opts; o->name; o++)
		if (strcmp(o->name, word) == 0)
			return true;
	return strcmp(word, "-h") == 0 || strcmp(word, "--help") == 0;
}

static const struct cg_cli_opt grant_opts[] = {
	{ "--json", NULL, "print the daemon's response as JSON (open, list)" },
	{ 0 },
};

static int grant_usage(void)
{
	return cg_cli_help(
	    "callgate grant open --exe PATH --argv PATTERN... --uses N --ttl DURATION "
	    "[options]\n"
	    "       callgate grant list [--json]\n"
	    "       callgate grant close GRANT_ID",
	    "Open, list or close grants: a grant lets calls of one exact shape run "
	    "without a prompt, for a number of uses and a time. It binds the "
	    "executables, argv patterns, privileged (default: unprivileged only), "
	    "the env names, and where given the session, uid, cwd, host and paths.",
	    grant_open_opts);
}

/* grant's subcommands, for a mistyped one's did-you-mean. */
static const struct cg_cli_opt grant_commands[] = {
	{ "open", NULL, "" },
	{ "list", NULL, "" },
	{ "close", NULL, "" },
	{ 0 },
};

/* The first executable regular file NAME in CG_WORLD_PATH's directories: 0, else -1. */
static int controlled_path_lookup(const char *name, char *out, size_t cap)
{
	const char *p = CG_WORLD_PATH;
	while (*p) {
		size_t dl = strcspn(p, ":");
		struct stat st;
		if (snprintf(out, cap, "%.*s/%s", (int)dl, p, name) < (int)cap &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
			return 0;
		p += dl + (p[dl] == ':');
	}
	return -1;
}

static int cmd_grant(const struct cg_cli *g, int argc, char **argv)
{
	if (cg_cli_wants_help(argc, argv)) {
		if (argc >= 2 && strcmp(argv[1], "list") == 0)
			return cg_cli_help("callgate grant list [--json]",
					   "List the open grants: id, shape, uses and time left.",
					   grant_opts);
		if (argc >= 2 && strcmp(argv[1], "close") == 0)
			return cg_cli_help("callgate grant close GRANT_ID",
					   "Close a grant now: no further call runs under it.",
					   NULL);
		return grant_usage();
	}
	if (argc < 2) {
		fprintf(stderr, "callgate grant: say open, list or close (see 'callgate grant "
				"--help')\n");
		return CG_EXIT_USAGE;
	}
	bool json = false;
	json_t *req = NULL;
	if (strcmp(argv[1], "list") == 0) {
		for (int i = 2; i < argc; i++) {
			if (strcmp(argv[i], "--json") != 0)
				return cg_cli_bad_option("grant list", argv[i], NULL, grant_opts);
			json = true;
		}
		req = json_pack("{s:s}", "action", "grant_list");
	} else if (strcmp(argv[1], "close") == 0) {
		if (argc > 3 || (argc == 3 && argv[2][0] == '-'))
			return cg_cli_bad_option("grant close", argv[argc - 1],
						 "unexpected argument", grant_opts);
		if (argc != 3) {
			fprintf(stderr, "callgate grant close: GRANT_ID is required\n");
			return CG_EXIT_USAGE;
		}
		req = json_pack("{s:s,s:s}", "action", "grant_close", "grant_id", argv[2]);
	} else if (strcmp(argv[1], "open") == 0) {
		json_t *stage = json_object();
		json_t *args = json_array();
		json_t *spec = json_object();
		json_t *paths = json_array();
		json_t *env = json_array();
		int bad = 0;
		for (int i = 2; i < argc && !bad; i++) {
			const char *a = argv[i];
			const char *v = i + 1 < argc ? argv[i + 1] : NULL;
			int64_t n;
			if (strcmp(a, "--json") == 0) {
				json = true;
				continue;
			}
			if (strcmp(a, "--privileged") == 0) {
				json_object_set_new(spec, "privileged", json_true());
				continue;
			}
			if (strcmp(a, "--forward-agent") == 0) {
				json_object_set_new(spec, "forward_agent", json_true());
				continue;
			}
			if (strcmp(a, "--argv") == 0) {
				/*
				 * Every following word up to the next grant option is one
				 * pattern, so `--version` or `--force` can be granted (an
				 * option's own name is written `\--uses`: fnmatch quoting).
				 */
				for (i++; i < argc && !grant_open_opt(argv[i]); i++) {
					const char *typo = cg_cli_typo_of(argv[i], grant_open_opts);
					if (typo) {
						/* A mistyped option must not become a pattern. */
						fprintf(
						    stderr,
						    "callgate grant open: '%s' after --argv looks "
						    "like "
						    "'%s' mistyped; a pattern that is this word is "
						    "written \\%s (see 'callgate grant --help')\n",
						    argv[i], typo, argv[i]);
						bad = CG_EXIT_USAGE;
						break;
					}
					json_array_append_new(args, json_string(argv[i]));
				}
				i--;
				continue;
			}
			bool known = false;
			for (const struct cg_cli_opt *o = grant_open_opts; o->name; o++)
				known |= strcmp(o->name, a) == 0 && o->arg;
			if (!known) {
				bad = cg_cli_bad_option("grant open", a, NULL, grant_open_opts);
				break;
			}
			if (!v) {
				bad = cg_cli_bad_option("grant open", a, "missing value for",
							grant_open_opts);
				break;
			}
			if (strcmp(a, "--exe") == 0)
				json_object_set_new(stage, "exe", json_string(v));
			else if (strcmp(a, "--session") == 0)
				json_object_set_new(spec, "session", json_string(v));
			else if (strcmp(a, "--uid") == 0 && parse_count(v, &n) == 0)
				json_object_set_new(spec, "uid", json_integer(n));
			else if (strcmp(a, "--path") == 0)
				json_array_append_new(paths, json_string(v));
			else if (strcmp(a, "--env") == 0)
				json_array_append_new(env, json_string(v));
			else if (strcmp(a, "--cwd") == 0)
				json_object_set_new(spec, "cwd", json_string(v));
			else if (strcmp(a, "--host") == 0)
				json_object_set_new(spec, "host", json_string(v));
			else if (strcmp(a, "--uses") == 0 && parse_count(v, &n) == 0)
				json_object_set_new(spec, "uses", json_integer(n));
			else if (strcmp(a, "--ttl") == 0 && parse_duration(v, &n) == 0)
				json_object_set_new(spec, "ttl_s", json_integer(n));
			else if (strcmp(a, "--ttl") == 0)
				bad = bad_duration("grant open", a, v);
			else if (strcmp(a, "--timeout") == 0 && parse_duration(v, &n) == 0)
				json_object_set_new(spec, "timeout_ms", json_integer(n * 1000));
			else if (strcmp(a, "--timeout") == 0)
				bad = bad_duration("grant open", a, v);
			else
				bad = cg_cli_bad_option("grant open", a, "bad value for",
							grant_open_opts);
			i++;
		}
		/* The flags a grant cannot go without, named as the user typed them. */
		const char *exe = json_string_value(json_object_get(stage, "exe"));
		char given[NAME_MAX + 1] = "";
		if (exe)
			(void)snprintf(given, sizeof(given), "%s",
				       strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe);
		char found[PATH_MAX];
		if (!bad && exe && !strchr(exe, '/')) {
			/*
			 * A bare name is the program a call's bare name would run: the
			 * first on the daemon's controlled PATH (ux-s40 L12: "--exe wget"
			 * was refused, needing an absolute path).
			 */
			if (controlled_path_lookup(exe, found, sizeof(found)) != 0) {
				fprintf(
				    stderr,
				    "callgate grant open: --exe %s: not found on the controlled "
				    "PATH (%s); give its absolute path\n",
				    exe, CG_WORLD_PATH);
				bad = CG_EXIT_USAGE;
			} else {
				fprintf(stderr, "callgate grant open: --exe %s is %s\n", exe,
					found);
				json_object_set_new(stage, "exe", json_string(found));
				exe = json_string_value(json_object_get(stage, "exe"));
			}
		}
		const char *missing = bad		       ? NULL
				      : !exe		       ? "--exe PATH is required"
				      : exe[0] != '/'	       ? "--exe needs an absolute path"
				      : !json_array_size(args) ? "--argv PATTERN... is required"
				      : !json_object_get(spec, "uses") ? "--uses N is required"
				      : !json_object_get(spec, "ttl_s")
					  ? "--ttl DURATION is required"
					  : NULL;
		if (missing) {
			fprintf(stderr, "callgate grant open: %s (see 'callgate grant --help')\n",
				missing);
			bad = CG_EXIT_USAGE;
		}
		/*
		 * The first pattern is argv[0], the command's own name: `--argv
		 * install '**'` opened a grant no npm call could meet (ux-s42e M3).
		 * Said, not refused: a multi-call program is called by other names.
		 */
		const char *p0 = json_string_value(json_array_get(args, 0));
		const char *resolved = exe && strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
		if (!bad && p0 && resolved && fnmatch(p0, given, 0) != 0 &&
		    fnmatch(p0, resolved, 0) != 0)
			fprintf(stderr,
				"callgate grant open: note: the first --argv pattern, '%s', is "
				"matched against argv[0], the command's own name ('%s'); a call "
				"sends it first: --argv %s %s...\n",
				p0, given, given, p0);
		if (bad) {
			json_decref(stage);
			json_decref(args);
			json_decref(spec);
			json_decref(paths);
			json_decref(env);
			return bad;
		}
		json_object_set_new(stage, "argv", args);
		json_object_set_new(spec, "pipeline", json_pack("[o]", stage));
		if (json_array_size(paths))
			json_object_set_new(spec, "paths", paths);
		else
			json_decref(paths);
		json_object_set_new(spec, "env", env);
		/* The daemon validates the spec and names what is wrong (CT codes). */
		req = json_pack("{s:s,s:o}", "action", "grant_open", "grant", spec);
	} else {
		return cg_cli_bad_option("grant", argv[1], "unknown subcommand", grant_commands);
	}
	json_t *resp = admin_call(g, req);
	json_decref(req);
	if (!resp)
		return unreached();
	int rc = report(resp, json);
	const json_t *grants = json_object_get(json_object_get(reply_of(resp), "data"), "grants");
	if (!json && rc == CG_EXIT_OK && json_is_array(grants)) {
		size_t i;
		const json_t *gr;
		json_array_foreach(grants, i, gr) print_grant(gr);
	}
	json_decref(resp);
	return rc;
}

static const struct cg_cli_opt approve_opts[] = {
	{ "--hash", "SHA256", "with ID: bind the answer to this view hash (from pending --json)" },
	{ "--json", NULL, "with ID: print the daemon's response as JSON" },
	{ "--grant-uses", "N", "uses of a grant opened with g (default 10)" },
	{ "--grant-ttl", "DURATION", "lifetime of a grant opened with g (default 30m)" },
	{ 0 },
};
static const struct cg_cli_opt pending_opts[] = {
	{ "--json", NULL, "the views as JSON: the bytes each approval hash covers" },
	{ 0 },
};
static const struct cg_cli_opt deny_opts[] = {
	{ "--why", "TEXT", "the reason the agent is told" },
	{ "--hash", "SHA256", "bind the answer to this view hash" },
	{ "--json", NULL, "print the daemon's response as JSON" },
	{ 0 },
};

int cg_cli_approve(const struct cg_cli *g, int argc, char **argv)
{
	const char *cmd = argv[0];
	bool json = false;
	const char *why = NULL, *id = NULL, *hash = NULL;
	int64_t uses = 10, ttl = 1800;
	if (strcmp(cmd, "grant") == 0)
		return cmd_grant(g, argc, argv);
	bool is_pending = strcmp(cmd, "pending") == 0, is_deny = strcmp(cmd, "deny") == 0;
	const struct cg_cli_opt *opts = is_pending ? pending_opts
					: is_deny  ? deny_opts
						   : approve_opts;
	if (cg_cli_wants_help(argc, argv)) {
		if (is_pending)
			return cg_cli_help("callgate pending [--json]",
					   "List the calls waiting for a person, with the view "
					   "each approval is bound to.",
					   opts);
		if (is_deny)
			return cg_cli_help("callgate deny ID [--why TEXT] [--hash SHA256]",
					   "Refuse a waiting call; it is answered at once and "
					   "never runs.",
					   opts);
		return cg_cli_help("callgate approve [ID [--hash SHA256]] [options]",
				   "Without ID: the terminal approver, which shows each waiting "
				   "call whole (paged; the answer keys appear on its last page). "
				   "With ID: approve that call, bound to its view hash.",
				   opts);
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has_v = i + 1 < argc;
		if (strcmp(a, "--json") == 0) {
			json = true;
		} else if (strcmp(a, "--why") == 0 && is_deny && has_v) {
			why = argv[++i];
		} else if (strcmp(a, "--hash") == 0 && !is_pending && has_v) {
			hash = argv[++i];
			/* A view hash is 64 hex digits: anything else answers nothing. */
			if (strlen(hash) != 64 || strspn(hash, "0123456789abcdef") != 64) {
				fprintf(
				    stderr,
				    "callgate %s: --hash wants the view's SHA-256, 64 lower-case "
				    "hex digits, got '%.70s'; 'callgate pending' prints each "
				    "call's, or leave --hash out to bind the view just fetched\n",
				    cmd, hash);
				return CG_EXIT_USAGE;
			}
		} else if (strcmp(a, "--grant-uses") == 0 && !is_pending && !is_deny && has_v) {
			if (parse_count(argv[i + 1], &uses) != 0 || uses < 1)
				return cg_cli_bad_option(cmd, a, "bad value for", opts);
			i++;
		} else if (strcmp(a, "--grant-ttl") == 0 && !is_pending && !is_deny && has_v) {
			if (parse_duration(argv[i + 1], &ttl) != 0)
				return bad_duration(cmd, a, argv[i + 1]);
			i++;
		} else if (a[0] != '-' && !id && !is_pending) {
			id = a;
		} else {
			/* A known flag of this command whose value is missing is named as such. */
			bool known = false;
			for (const struct cg_cli_opt *o = opts; o->name && !known; o++)
				known = o->arg && strcmp(o->name, a) == 0;
			return cg_cli_bad_option(cmd, a,
						 known	       ? "a value is needed after"
						 : a[0] == '-' ? NULL
							       : "unexpected argument",
						 opts);
		}
	}
	if (is_pending)
		return cmd_pending(g, json);
	if (is_deny) {
		if (!id) {
			fprintf(stderr,
				"callgate deny: ID is required (see 'callgate deny --help')\n");
			return CG_EXIT_USAGE;
		}
		return cmd_answer(g, "deny", id, hash, why ? why : "denied by the operator", json);
	}
	if (id)
		return cmd_answer(g, "approve", id, hash, NULL, json);
	if (hash) {
		fprintf(stderr,
			"callgate %s: --hash binds the answer to one call's view: give the call's "
			"trace id too (callgate %s TRACE_ID --hash SHA256)\n",
			cmd, cmd);
		return CG_EXIT_USAGE;
	}
	return tui(g, uses, ttl);
}
