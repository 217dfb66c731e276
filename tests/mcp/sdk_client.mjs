// SPDX-License-Identifier: MIT
//
// Drives `callgate mcp` with the official MCP TypeScript SDK client.
//
// Usage: node sdk_client.mjs PLAN_JSON
//   PLAN_JSON = {"command": "...", "args": [...], "env": {...},
//                "steps": [{"op": "list"},
//                          {"op": "call", "name": "execute", "arguments": {...}},
//                          {"op": "cancel", "name": "execute", "arguments": {...},
//                           "after_progress": 1}]}
// Prints one JSON object: {"serverInfo", "capabilities", "results": [...]},
// one result per step (the SDK's parsed answer, or {"error": message}).
// The Python e2e test (tests/e2e/test_mcp.py) makes the assertions.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const plan = JSON.parse(process.argv[2]);
const transport = new StdioClientTransport({
  command: plan.command,
  args: plan.args,
  env: { ...process.env, ...(plan.env || {}) },
  stderr: "inherit",
});
const client = new Client({ name: "callgate-e2e-sdk", version: "1.0.0" });
await client.connect(transport);

const out = {
  serverInfo: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  results: [],
};

for (const step of plan.steps) {
  try {
    if (step.op === "list") {
      out.results.push(await client.listTools());
    } else if (step.op === "call") {
      out.results.push(
        await client.callTool({ name: step.name, arguments: step.arguments }, undefined, {
          timeout: 120000,
        }),
      );
    } else if (step.op === "cancel") {
      // Start a long call with a progress token, abort it once enough
      // progress notifications have arrived: the SDK sends
      // notifications/cancelled, and the call's promise rejects.
      const ac = new AbortController();
      let progress = 0;
      const t0 = Date.now();
      try {
        await client.callTool({ name: step.name, arguments: step.arguments }, undefined, {
          signal: ac.signal,
          timeout: 120000,
          onprogress: () => {
            progress += 1;
            if (progress >= (step.after_progress ?? 1)) ac.abort("test cancels");
          },
        });
        out.results.push({ cancelled: false, progress });
      } catch (e) {
        out.results.push({ cancelled: true, progress, error: String(e), ms: Date.now() - t0 });
      }
    } else if (step.op === "ping") {
      out.results.push(await client.ping());
    }
  } catch (e) {
    out.results.push({ error: String(e), code: e.code ?? null });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
