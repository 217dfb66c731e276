/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire — arbitrary bytes through the request codec and back out
 * through the response encoder.
 *
 * Invariants checked (by the sanitizers and the asserts below):
 *  - cg_wire_decode MUST NOT crash, leak or read out of bounds on any input,
 *    with or without a trailing newline.
 *  - It MUST return exactly one of a request or an I/E refusal.
 *  - Every refusal and every accepted id MUST encode into one response line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const allow[] = { "LANG", "DEBIAN_FRONTEND", "FOO", "LD_PRELOAD" };

/* Encode a reply-only response for id; abort (a finding) if that fails. */
static void encode(const char *id, const struct cg_reply *reply)
{
	struct cg_response resp = { .id = id ? id : "",
				    .status = cg_reply_def_of(reply)->status,
				    .reply = reply };
	size_t len = 0;
	char *line = cg_wire_encode_response(&resp, &len);
	if (!line || len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
		abort();
	free(line);
}

static void one(const uint8_t *data, size_t size, bool had_newline)
{
	/* A fixed clock near the seed's example time keeps time checks reachable. */
	struct cg_wire_rules rules = { .now_ns = 1771000000LL * 1000000000LL,
				       .freshness_s = 60,
				       .env_allow = allow,
				       .n_env_allow = sizeof(allow) / sizeof(allow[0]) };
	struct cg_request *req = NULL;
	struct cg_reply *err = NULL;
	char *id = NULL;
	int rc =
	    cg_wire_decode((const char *)data, size, had_newline, false, &rules, &req, &err, &id);

	if ((rc == 0) != (req != NULL) || (rc == 0) == (err != NULL))
		abort();
	if (rc == 0) {
		/* Echo the argv bytes back as stage output to exercise the stage path. */
		struct cg_stage_out st[CG_WIRE_MAX_STAGES];
		for (size_t i = 0; i < req->n_stages; i++)
			st[i] = (struct cg_stage_out){
				.exit_code = (int)i,
				.err = (const unsigned char *)req->stages[i].argv[0],
				.err_len = strlen(req->stages[i].argv[0]),
				.err_truncated = i % 2
			};
		struct cg_reply *ok = cg_reply_new(CG_R_PONG, "{s:s}", "version", "fuzz");
		struct cg_response resp = { .id = req->id,
					    .status = CG_STATUS_OK,
					    .n_stages = req->n_stages,
					    .stages = st,
					    .out = (const unsigned char *)req->reason,
					    .out_len = strlen(req->reason),
					    .out_truncated = req->privileged,
					    .reply = ok,
					    .extra = req->raw };
		size_t len = 0;
		char *line = cg_wire_encode_response(&resp, &len);
		if (!line || len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
			abort();
		free(line);
		cg_reply_free(ok);
	} else {
		encode(id, err);
	}
	cg_request_free(req);
	cg_reply_free(err);
	free(id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	one(data, size, true);
	one(data, size, false);
	return 0;
}
