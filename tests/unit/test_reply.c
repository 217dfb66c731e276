/* SPDX-License-Identifier: MIT */
/* Tests for the reply registry and the reply value (seed 001). */
#include <criterion/criterion.h>
#include <errno.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"

Test(registry, every_code_is_well_formed_and_matches_its_fields)
{
	regex_t re;
	cr_assert_eq(regcomp(&re, "^(WA|EN|CT|MCP)-[A-Z]+-[SIDE]-[0-9]{3}$", REG_EXTENDED), 0);
	for (size_t i = 0; i < CG_R__COUNT; i++) {
		const struct cg_reply_def *d = &cg_reply_registry[i];
		cr_assert_eq(regexec(&re, d->code, 0, NULL, 0), 0, "malformed code %s", d->code);
		char want[64];
		snprintf(want, sizeof(want), "%s-%s-%c-%s", cg_layer_name(d->layer),
			 cg_area_name(d->area), cg_rtype_char(d->type), d->nnn);
		cr_assert_str_eq(d->code, want);
		cr_assert_neq(strcmp(d->nnn, "000"), 0, "%s uses 000", d->code);
		cr_assert_eq(d->id, (enum cg_reply_id)i);
	}
	regfree(&re);
}

Test(registry, ownership_rule_holds)
{
	for (size_t i = 0; i < CG_R__COUNT; i++) {
		const struct cg_reply_def *d = &cg_reply_registry[i];
		if (d->layer != CG_LAYER_EN)
			cr_assert_neq(d->type, CG_RTYPE_D, "%s: only EN may deny", d->code);
		else
			cr_assert_neq(d->type, CG_RTYPE_I, "%s: EN never says invalid", d->code);
	}
}

Test(registry, codes_and_keys_are_unique)
{
	for (size_t i = 0; i < CG_R__COUNT; i++)
		for (size_t j = i + 1; j < CG_R__COUNT; j++) {
			cr_assert_str_neq(cg_reply_registry[i].code, cg_reply_registry[j].code);
			cr_assert_str_neq(cg_reply_registry[i].key, cg_reply_registry[j].key);
		}
}

Test(registry, seed_required_entries_exist)
{
	cr_assert_not_null(cg_reply_find_code("MCP-SYS-S-900"));
	cr_assert_not_null(cg_reply_find_code("MCP-SYS-E-001"));
	cr_assert_str_eq(cg_reply_registry[CG_R_SYS_CRASH].code, "MCP-SYS-E-001");
	cr_assert_null(cg_reply_find_code("MCP-SYS-E-999"));
	cr_assert_null(cg_reply_find_code(NULL));
}

Test(reply, renders_named_params)
{
	struct cg_reply *r = cg_reply_new(CG_R_ENV_NOT_ALLOWED, "{s:s}", "name", "FOO");
	char *m = cg_reply_message(r);
	cr_assert_str_eq(m, "Environment variable 'FOO' is not on the allow-list (the policy's "
			    "defaults.env_allow).");
	free(m);
	cg_reply_free(r);
}

Test(reply, missing_param_renders_placeholder_and_numbers_render)
{
	struct cg_reply *r = cg_reply_new(CG_R_TIME_STALE, "{s:s,s:i}", "time", "t", "age_s", 90);
	char *m = cg_reply_message(r);
	cr_assert(strstr(m, "is 90 s old") != NULL, "%s", m);
	cr_assert(strstr(m, "{window_s}") != NULL, "%s", m);
	free(m);
	cg_reply_free(r);
}

Test(reply, stage_index_is_counted_from_one_in_the_message)
{
	/* params keep the 0-based index (pipeline[1] is the second stage); people read "stage 2" */
	struct cg_reply *r =
	    cg_reply_new(CG_R_EXE_NOT_FOUND, "{s:I,s:s,s:s}", "stage", (json_int_t)1, "command",
			 "nosuchcmd", "path", "/usr/bin");
	char *m = cg_reply_message(r);
	cr_assert(strstr(m, "Stage 2: command 'nosuchcmd' was not found on the controlled PATH "
			    "(/usr/bin);") == m,
		  "%s", m);
	free(m);
	cr_assert_eq(json_integer_value(json_object_get(r->params, "stage")), 1);
	cg_reply_free(r);
	/* Not an index: shown as it is, never computed on. */
	r = cg_reply_new(CG_R_EXE_NOT_FOUND, "{s:s,s:s}", "stage", "x", "command", "c");
	m = cg_reply_message(r);
	cr_assert(strstr(m, "Stage {stage+1}:") == m, "%s", m);
	free(m);
	cg_reply_free(r);
	r = cg_reply_new(CG_R_EXE_NOT_FOUND, "{s:I,s:s}", "stage", (json_int_t)-1, "command", "c");
	m = cg_reply_message(r);
	cr_assert(strstr(m, "Stage {stage+1}:") == m, "%s", m);
	free(m);
	cg_reply_free(r);
}

Test(reply, trace_id_fills_template_and_json)
{
	struct cg_reply *r = cg_reply_new(CG_R_SYS_CRASH, NULL);
	cg_reply_set_trace(r, "abc-123");
	char *m = cg_reply_message(r);
	cr_assert_str_eq(m, "Internal failure; report trace id abc-123.");
	free(m);
	json_t *o = cg_reply_to_json(r);
	cr_assert_str_eq(json_string_value(json_object_get(o, "type")), "E");
	cr_assert_str_eq(json_string_value(json_object_get(o, "code")), "MCP-SYS-E-001");
	cr_assert_str_eq(json_string_value(json_object_get(o, "message_key")), "SYS_CRASH");
	cr_assert_str_eq(json_string_value(json_object_get(o, "trace_id")), "abc-123");
	cr_assert(json_is_object(json_object_get(o, "params")));
	cr_assert_null(json_object_get(o, "data"), "data absent unless set");
	json_decref(o);
	cg_reply_free(r);
}

Test(reply, data_is_carried_and_replaced)
{
	struct cg_reply *r = cg_reply_new(CG_R_PONG, "{s:s}", "version", "x");
	cg_reply_set_data(r, json_pack("{s:i}", "a", 1));
	cg_reply_set_data(r, json_pack("{s:i}", "b", 2));
	json_t *o = cg_reply_to_json(r);
	json_t *data = json_object_get(o, "data");
	cr_assert_null(json_object_get(data, "a"));
	cr_assert_eq(json_integer_value(json_object_get(data, "b")), 2);
	json_decref(o);
	cg_reply_free(r);
}

Test(reply, out_of_range_id_becomes_crash_and_bad_params_never_null)
{
	struct cg_reply *r = cg_reply_build_params((enum cg_reply_id)99999, NULL);
	cr_assert_eq(r->id, CG_R_SYS_CRASH);
	cg_reply_free(r);
	/* A params value that is not an object cannot be built: never NULL. */
	r = cg_reply_new_params(CG_R_PONG, json_string("nope"));
	cr_assert_not_null(r);
	cr_assert_eq(r->id, CG_R_OUT_OF_MEMORY);
	cg_reply_free(r);
}

Test(reply, status_follows_the_registry)
{
	cr_assert_eq(cg_reply_registry[CG_R_EXEC_DEADLINE].status, CG_STATUS_TIMEOUT);
	cr_assert_eq(cg_reply_registry[CG_R_DEFAULT_DENY].status, CG_STATUS_DENIED);
	cr_assert_eq(cg_reply_registry[CG_R_JSON_INVALID].status, CG_STATUS_ERROR);
	cr_assert_str_eq(cg_status_name(CG_STATUS_OK), "ok");
	cr_assert_str_eq(cg_errno_name(ENOENT), "ENOENT");
}
