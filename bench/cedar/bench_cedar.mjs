// SPDX-License-Identifier: MIT
//
// The Cedar side of bench/bench_policy.c. Reads the spec bench_policy wrote
// (each scenario's policy as `callgate policy dump` shows it, the workspace,
// and the calls with their resolved executables), translates every rule into
// one Cedar statement with the same shape, pre-parses the policy set once,
// and times statefulIsAuthorized per call. Prints one JSON object.
//
// Translation (same allow/deny shapes; Cedar has no first-match order, no
// regular expressions and no path canonicalisation, so it is an
// approximation, stated here rather than hidden):
//   allow/degrade -> permit, deny/defer -> forbid (forbid overrides permit)
//   exe/exe_paths -> a set of paths containing context.exe; exe_glob -> like
//   flags_any/all/none -> containsAny/containsAll/!containsAny on the
//     normalised flags (normalised here, outside the timed loop, with the
//     policy's own `commands` spec, as callgate does before its rules run)
//   subcommand -> the leading positional words; position -> a set
//   args_* predicates -> `like` on the positional arguments joined by spaces;
//     a regex becomes a `like` on its literal prefix
//   min_args/max_args -> comparisons on the positional count
//   context keys (uid, session, ...) and flags_only -> not constrained
// Usage: node bench_cedar.mjs SPEC.json
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(import.meta.url);
const cedar = require("@cedar-policy/cedar-wasm/nodejs");
// The package does not export its package.json; read the pinned one installed.
const pkg = JSON.parse(readFileSync(new URL("./node_modules/@cedar-policy/cedar-wasm/package.json",
  import.meta.url), "utf8"));

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));

const q = (s) => JSON.stringify(String(s));
const set = (xs) => "[" + xs.map(q).join(", ") + "]";
const likeEscape = (s) => String(s).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\*/g, "\\*");

function globToLike(g) {
  // Cedar's like has only '*'. ** / * / ? / [..] all become '*'.
  let out = "";
  for (let i = 0; i < g.length; i++) {
    const c = g[i];
    if (c === "*" || c === "?") {
      if (!out.endsWith("*") || out.endsWith("\\*")) out += "*";
    } else if (c === "[") {
      const j = g.indexOf("]", i + 1);
      i = j < 0 ? g.length : j;
      out += "*";
    } else if (c === "\\" && i + 1 < g.length) {
      out += likeEscape(g[++i]);
    } else if (c === '"') {
      out += '\\"';
    } else {
      out += c;
    }
  }
  return out;
}

function regexToLike(re) {
  const anchored = re.startsWith("^");
  let i = anchored ? 1 : 0, lit = "";
  for (; i < re.length; i++) {
    const c = re[i];
    if ("\\.[]()*+?{}|^$".includes(c)) break;
    lit += c;
  }
  return (anchored ? "" : "*") + likeEscape(lit).replace(/"/g, '\\"') + "*";
}

function predicate(p, ws) {
  const sub = (s) => String(s).replace(/\$\{workspace\}/g, ws).replace(/\$\{cwd\}/g, ws);
  if (p.glob !== undefined) return `context.argline like "*${globToLike(p.glob)}*"`;
  if (p.path !== undefined) return `context.argline like "*${globToLike(sub(p.path))}*"`;
  if (p.within !== undefined) return `context.argline like "*${likeEscape(sub(p.within))}*"`;
  if (p.below !== undefined) return `context.argline like "*${likeEscape(sub(p.below))}/*"`;
  if (p.outside !== undefined) return `!(context.argline like "${likeEscape(sub(p.outside))}*")`;
  if (p.pattern !== undefined) return `context.argline like "${regexToLike(p.pattern)}"`;
  return "true";
}

function canonicalFlags(groups) {
  return (groups || []).map((g) => (Array.isArray(g) ? g[0] : g));
}

function translate(policy, ws) {
  const out = [];
  for (const r of policy.rules) {
    const m = r.match || {};
    const effect = r.decision === "allow" || r.decision === "degrade" ? "permit" : "forbid";
    const conds = [];
    let action = 'Action::"exec"';
    if (r.kind === "action") {
      action = 'Action::"gate"';
      if (m.action_type) conds.push(`${set(m.action_type)}.contains(context.action_type)`);
    }
    if (m.exe_paths && m.exe_paths.length) conds.push(`${set(m.exe_paths)}.contains(context.exe)`);
    else if (m.exe && m.exe.length) conds.push(`${set(m.exe)}.contains(context.base)`);
    if (m.exe_glob && m.exe_glob.length)
      conds.push("(" + m.exe_glob.map((g) => `context.exe like "${globToLike(g)}"`).join(" || ") + ")");
    if (m.argv0 && m.argv0.length) conds.push(`${set(m.argv0)}.contains(context.argv0)`);
    if (m.flags_any) conds.push(`context.flags.containsAny(${set(canonicalFlags(m.flags_any))})`);
    if (m.flags_all) conds.push(`context.flags.containsAll(${set(canonicalFlags(m.flags_all))})`);
    if (m.flags_none) conds.push(`!context.flags.containsAny(${set(canonicalFlags(m.flags_none))})`);
    if (m.subcommand)
      conds.push(`(${set(m.subcommand)}.contains(context.sub1) || ${set(m.subcommand)}.contains(context.sub2))`);
    if (m.position) conds.push(`context.positions.containsAny(${set(m.position)})`);
    for (const [k, neg, join] of [["args_any", false, " || "], ["args_all", false, " || "], ["args_none", true, " || "]]) {
      if (m[k] && m[k].length) {
        const e = "(" + m[k].map((p) => predicate(p, ws)).join(join) + ")";
        conds.push(neg ? `!${e}` : e);
      }
    }
    if (m.resource && m.resource.length)
      conds.push("(" + m.resource.map((p) => predicate(p, ws).replace(/context\.argline/g, "context.resource")).join(" || ") + ")");
    if (m.min_args !== undefined && m.min_args >= 0) conds.push(`context.nargs >= ${m.min_args}`);
    if (m.max_args !== undefined && m.max_args >= 0) conds.push(`context.nargs <= ${m.max_args}`);
    const when = conds.length ? ` when { ${conds.join(" && ")} }` : "";
    out.push(`@id(${q(r.id)})\n${effect}(principal, action == ${action}, resource)${when};`);
  }
  return out.join("\n");
}

// The same normalisation callgate documents (docs/policy.md), done once per call.
function normalise(argv, commands) {
  const base = argv[0].split("/").pop();
  const spec = commands[base] || {};
  const bundling = spec.bundling !== false;
  const valueFlags = new Set(spec.value_flags || []);
  const canon = new Map();
  for (const g of spec.flags || []) for (const f of g) canon.set(f, g[0]);
  const flags = [], args = [];
  let i = 1;
  for (; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") { i++; break; }
    if (a === "-" || !a.startsWith("-")) { args.push(a); continue; }
    if (a.startsWith("--")) {
      const name = a.includes("=") ? a.slice(0, a.indexOf("=")) : a;
      flags.push(canon.get(name) || name);
      if (!a.includes("=") && valueFlags.has(name)) i++;
      continue;
    }
    if (!bundling) { flags.push(canon.get(a) || a); if (valueFlags.has(a)) i++; continue; }
    for (let k = 1; k < a.length; k++) {
      const f = "-" + a[k];
      flags.push(canon.get(f) || f);
      if (valueFlags.has(f)) { if (k === a.length - 1) i++; break; }
    }
  }
  for (; i < argv.length; i++) args.push(argv[i]);
  return { flags, args };
}

function median(xs) { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; }
function p99(xs) { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) * 0.99)]; }

const results = [];
for (const sc of spec.scenarios) {
  const text = translate(sc.policy, sc.workspace);
  const id = "pset-" + sc.name;
  const parsed = cedar.preparsePolicySet(id, { staticPolicies: text });
  if (parsed.type !== "success") {
    console.error(JSON.stringify(parsed.errors).slice(0, 2000));
    process.exit(2);
  }
  for (const call of sc.calls) {
    const { flags, args } = normalise(call.argv, sc.policy.commands || {});
    const req = {
      principal: { type: "Agent", id: "agent" },
      action: { type: "Action", id: "exec" },
      resource: { type: "Exe", id: call.exe },
      context: {
        exe: call.exe, base: call.exe.split("/").pop(), argv0: call.argv[0].split("/").pop(),
        flags, args, argline: args.join(" "), nargs: args.length,
        sub1: args[0] || "", sub2: args.slice(0, 2).join(" "),
        positions: ["first", "last", "only"], action_type: "", resource: "",
      },
      preparsedPolicySetId: id,
      entities: [],
    };
    let ans = cedar.statefulIsAuthorized(req);
    if (ans.type !== "success") {
      console.error(JSON.stringify(ans.errors).slice(0, 2000));
      process.exit(2);
    }
    const decision = ans.response.decision;
    // Cedar through wasm is slow enough that a fixed count could take hours:
    // batches of perBatch run until `iterations` decisions or ~2 s per call.
    const perBatch = 20, budgetNs = 2e9, maxBatches = Math.max(5, Math.floor((spec.iterations | 0) / perBatch));
    for (let i = 0; i < perBatch; i++) cedar.statefulIsAuthorized(req); // warm up
    const ns = [];
    const start = process.hrtime.bigint();
    while (ns.length < maxBatches && (ns.length < 5 || Number(process.hrtime.bigint() - start) < budgetNs)) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < perBatch; i++) ans = cedar.statefulIsAuthorized(req);
      ns.push(Number(process.hrtime.bigint() - t0) / perBatch);
    }
    results.push({ scenario: sc.name, call: call.name, decision, expect: call.expect,
      policies: sc.policy.rules.length, decisions: ns.length * perBatch,
      median_ns: median(ns), p99_ns: p99(ns) });
  }
}
console.log(JSON.stringify({ cedar_version: "Cedar " + cedar.getCedarVersion(),
  package_version: pkg.version, node_version: process.version, results }));
