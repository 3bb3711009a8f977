// Drives CodeSpace with an official TypeScript MCP client, as an agent's client would.
//
// Every tool is called with valid arguments and at least once so that it fails; each call
// checks what an agent is shown: the text block (what the Inspector and most clients show
// the model) and, for a success, the structured content as compact JSON (what Codex and
// Claude Code show the model instead). A call the client itself rejects (a result that does
// not match the tool's output schema, which the SDKs check) throws, and fails the run.
//
// Environment:
//   CS_NODE_MODULES  directory holding @modelcontextprotocol/sdk (1.x) and/or @modelcontextprotocol/client (2.x)
//   CS_SDK           "sdk1" or "client2"
//   CS_TRANSPORT     "stdio" (CS_SERVER_CMD: the server's argv as JSON; CS_SERVER_ENV: its environment as
//                    JSON, default this one's) or "http" (CS_URL, CS_TOKEN)
//   CS_WORKSPACE     the workspace root the server serves
//   CS_INFO_WANTS    optional: a JSON list of strings workspace_info's structured content must hold
//   CS_EXTRA_EXEC    optional: JSON {"args": exec's arguments, "wants": strings its text must hold}, one more
//                    exec call made after the others
// Prints one JSON line {"ok": n, "failed": [...], "tools": [...]} and exits 1 when a check failed.
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

const need = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const req = createRequire(path.join(need("CS_NODE_MODULES"), "index.js"));
const SDK = need("CS_SDK");
const TRANSPORT = need("CS_TRANSPORT");
const WS = need("CS_WORKSPACE");
const INFO_WANTS = JSON.parse(process.env.CS_INFO_WANTS || "[]");
const EXTRA_EXEC = process.env.CS_EXTRA_EXEC ? JSON.parse(process.env.CS_EXTRA_EXEC) : null;

function loadSdk() {
  if (SDK === "sdk1") {
    return {
      Client: req("@modelcontextprotocol/sdk/client/index.js").Client,
      Stdio: req("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport,
      Http: req("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport,
    };
  }
  const main = req("@modelcontextprotocol/client");
  return { Client: main.Client, Stdio: req("@modelcontextprotocol/client/stdio").StdioClientTransport,
           Http: main.StreamableHTTPClientTransport };
}

const failed = [];
let ok = 0;
const called = new Set();

function check(label, condition, shown) {
  if (condition) {
    ok += 1;
  } else {
    failed.push(`${label}: ${typeof shown === "string" ? shown.slice(0, 600) : JSON.stringify(shown).slice(0, 600)}`);
  }
}

function textOf(result) {
  return (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

// A call and what the agent sees. Never throws: a rejected call is a failed check.
async function call(client, name, args) {
  called.add(name);
  try {
    const result = await client.callTool({ name, arguments: args });
    return { result, text: textOf(result), json: result.structuredContent === undefined ? undefined
      : JSON.stringify(result.structuredContent) };
  } catch (err) {
    return { thrown: String(err && err.message || err) };
  }
}

// A success: text and structured view both say what `wants` lists, and the structured JSON
// holds no JSON text inside a string (double-escaped noise for a model).
async function expectOk(client, name, args, wants) {
  const seen = await call(client, name, args);
  const label = `${name} ${JSON.stringify(args).slice(0, 80)}`;
  if (seen.thrown) { check(`${label} threw`, false, seen.thrown); return seen; }
  check(`${label} isError`, seen.result.isError !== true, seen.text);
  check(`${label} structuredContent present`, seen.json !== undefined, seen.text);
  for (const want of wants.text || []) check(`${label} text has ${JSON.stringify(want)}`, seen.text.includes(want), seen.text);
  for (const want of wants.json || []) {
    check(`${label} structured has ${JSON.stringify(want)}`, (seen.json || "").includes(want), seen.json || "");
  }
  // JSON text inside a JSON string shows as {\"key\": ...: every quote escaped once more.
  check(`${label} structured has no JSON inside a string`, !/\{\\"|\\":/.test(seen.json || ""), seen.json || "");
  return seen;
}

// A failure: isError, no structured content, and a text that says what went wrong.
async function expectError(client, name, args, wants) {
  const seen = await call(client, name, args);
  const label = `${name} (failing) ${JSON.stringify(args).slice(0, 80)}`;
  if (seen.thrown) { check(`${label} threw instead of returning the error`, false, seen.thrown); return seen; }
  check(`${label} isError`, seen.result.isError === true, seen.text);
  check(`${label} has no structuredContent`, seen.json === undefined, seen.json || "");
  for (const want of wants) check(`${label} text has ${JSON.stringify(want)}`, seen.text.includes(want), seen.text);
  const meta = (seen.result._meta || {})["codespace/error"];
  check(`${label} _meta codespace/error carries the message`, meta && meta.message === seen.text, seen.result._meta || {});
  return seen;
}

async function files(client) {
  await expectOk(client, "workspace_info", {}, { json: [`"root":${JSON.stringify(WS)}`, ...INFO_WANTS] });
  await expectError(client, "workspace_info", { bogus: 1 }, ["'bogus': unknown argument"]);

  await expectOk(client, "write_file", { path: "notes.txt", content: "alpha\nbeta\n", operation_id: "w-1" },
    { json: ['"created":true', '"operation_id":"w-1"', '"replayed":false'] });
  await expectOk(client, "write_file", { path: "notes.txt", content: "alpha\nbeta\n", operation_id: "w-1" },
    { json: ['"replayed":true'] });
  await expectError(client, "write_file", { path: "notes.txt", content: "other", operation_id: "w-1" },
    ["operation_id 'w-1' was already used for a different call"]);
  await expectError(client, "write_file", { path: "notes.txt", content: "x", must_not_exist: true }, ["exists"]);

  const read = await expectOk(client, "read_file", { path: "notes.txt" },
    { text: ["alpha\nbeta\n"], json: ['"content":"alpha\\nbeta\\n"', '"total_lines":2'] });
  const sha = read.result && read.result.structuredContent && read.result.structuredContent.sha256;
  await expectError(client, "read_file", { path: "missing.txt" }, ["missing.txt"]);
  await expectError(client, "write_file", { path: "notes.txt", content: "gamma\n", expected_sha256: "0".repeat(64) },
    ["notes.txt"]);
  check("read_file gave a sha256", typeof sha === "string" && sha.length === 64, String(sha));

  await expectOk(client, "stat", { path: "notes.txt" }, { json: ['"exists":true', '"kind":"file"'] });
  await expectError(client, "stat", { path: "/proc/1/environ" }, ["refused by policy", "/proc"]);

  await expectOk(client, "make_dir", { path: "src/pkg" }, { json: ['"created":true'] });
  await expectError(client, "make_dir", { path: "src/pkg", exist_ok: false }, ["src/pkg"]);

  await expectOk(client, "list_dir", { path: "." }, { text: ["notes.txt", "src/"], json: ['"name":"notes.txt"'] });
  await expectError(client, "list_dir", { path: "notes.txt" }, ["notes.txt"]);

  await expectOk(client, "walk", { path: "." }, { text: ["src/pkg/", "notes.txt"], json: ['"path":"src/pkg"'] });
  await expectOk(client, "walk", { path: ".", max_entries: 1 }, {
    text: ["(truncated: max_entries (1))"], json: ['"truncated":true', '"truncated_reason":"max_entries (1)"'] });
  await expectError(client, "walk", { path: "nowhere" }, ["nowhere"]);
  await expectError(client, "walk", { path: ".", exclude: ["*a".repeat(40)] },
    ["exclude holds a pattern that is refused because it holds 40 '*', more than 32", "use shorter patterns"]);

  await expectOk(client, "find_files", { query: "notes" },
    { text: ["notes.txt"], json: ['"path":"notes.txt"', '"match_type":"file"'] });
  await expectError(client, "find_files", { query: "notes", path: "nowhere" }, ["nowhere"]);
  await expectOk(client, "grep", { pattern: "beta" }, { text: ["notes.txt:2:beta"], json: ['"line_number":2'] });
  await expectError(client, "grep", { pattern: "(" }, ["not a valid regular expression", "literal"]);

  await expectOk(client, "move", { source: "notes.txt", destination: "src/notes.txt" }, { json: ['"overwritten":false'] });
  await expectError(client, "move", { source: "gone.txt", destination: "src/gone.txt" }, ["gone.txt"]);

  const patch = "*** Begin Patch\n*** Update File: src/notes.txt\n@@\n alpha\n-beta\n+beta two\n*** End Patch\n";
  await expectOk(client, "apply_patch", { patch },
    { text: ["Success. Updated the following files:", "M src/notes.txt", "+beta two"],
      json: ['"summary":"Success. Updated the following files:\\nM src/notes.txt\\n"', "-beta\\n+beta two"] });
  const bad = "*** Begin Patch\n*** Update File: src/notes.txt\n@@\n-not there\n+x\n*** End Patch\n";
  await expectError(client, "apply_patch", { patch: bad }, ["Failed to find expected lines in", "not there"]);
  await expectError(client, "apply_patch", { patch: "not a patch" }, ["Begin Patch"]);

  await expectOk(client, "remove", { path: "src/notes.txt" }, { json: ['"removed":true'] });
  await expectError(client, "remove", { path: "src" }, ["src"]);
}

async function commands(client) {
  await expectOk(client, "exec", { command: ["sh", "-c", "echo out; echo err >&2; exit 3"] },
    { text: ["out\n", "err\n", "[exit 3 in "], json: ['"exit_code":3', '"running":false', "out\\n"] });
  await expectOk(client, "exec", { command: "printf '%s' \"$((6*7))\"" }, { text: ["42", "[exit 0 in "],
    json: ['"output":"42"', '"exit_code":0'] });
  await expectError(client, "exec", { command: ["pwd"], cwd: "/proc" }, ["refused by policy", "/proc"]);
  await expectError(client, "exec", { command: [] }, ["an argv list needs at least the program"]);

  const tty = await expectOk(client, "exec", { command: ["cat"], tty: true, yield_ms: 300 },
    { text: ["[still running: session "], json: ['"running":true', '"tty":true', '"next_step":"still running: call read_output'] });
  const session = tty.result && tty.result.structuredContent && tty.result.structuredContent.session_id;
  check("exec tty returned a session", typeof session === "string", String(session));
  await expectOk(client, "write_stdin", { session_id: session, chars: "ping\n" }, { text: ["ping"], json: ["ping"] });
  await expectError(client, "write_stdin", { session_id: "s-nope", chars: "x" }, ["no session 's-nope'"]);
  await expectOk(client, "resize", { session_id: session, rows: 30, cols: 100 }, { json: ['"rows":30', '"cols":100'] });
  await expectError(client, "resize", { session_id: session, rows: 0, cols: 100 }, ["'rows'"]);
  await expectOk(client, "read_output", { session_id: session }, { json: ['"running":true'] });
  await expectError(client, "read_output", { session_id: "s-nope" }, ["no session 's-nope'"]);
  await expectOk(client, "list_sessions", {}, { json: [`"session_id":"${session}"`] });
  await expectError(client, "list_sessions", { all: true }, ["'all': unknown argument"]);
  await expectOk(client, "terminate", { session_id: session, grace_ms: 200 }, { json: ['"running":false'] });
  await expectError(client, "terminate", { session_id: "s-nope" }, ["no session 's-nope'"]);
  const pipe = await call(client, "exec", { command: ["sleep", "5"], yield_ms: 50 });
  const piped = pipe.result && pipe.result.structuredContent && pipe.result.structuredContent.session_id;
  await expectError(client, "resize", { session_id: piped, rows: 30, cols: 100 }, ["is not a terminal"]);
  await call(client, "terminate", { session_id: piped, signal: "KILL", grace_ms: 0 });
}

// Processes whose command line holds `mark` (the host sees sandboxed processes too).
function marked(mark) {
  const fs = require("node:fs");
  const found = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, "latin1").split("\0");
      const state = fs.readFileSync(`/proc/${entry}/stat`, "latin1").split(") ").pop()[0];
      if (argv[0].endsWith("sleep") && argv.includes(mark) && state !== "Z") found.push(Number(entry));
    } catch (err) { /* gone meanwhile */ }
  }
  return found;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The client gives up on an exec call (an AbortSignal: the SDK sends notifications/cancelled):
// the command must stop, and a retry with the same operation_id says it was cancelled.
async function cancellation(client) {
  const mark = SDK === "sdk1" ? "4321.1" : "4321.2";
  const args = { command: `exec sleep ${mark}`, yield_ms: 60000, operation_id: `cancel-${SDK}-${TRANSPORT}` };
  const abort = new AbortController();
  const options = { signal: abort.signal };
  const pending = SDK === "sdk1" ? client.callTool({ name: "exec", arguments: args }, undefined, options)
    : client.callTool({ name: "exec", arguments: args }, options);
  const outcome = pending.then(() => "answered", (err) => `rejected: ${err && err.message}`);
  for (let i = 0; i < 500 && marked(mark).length === 0; i++) await sleep(10);
  check("the exec to cancel started", marked(mark).length > 0, "no process");
  abort.abort("the agent gave up");
  check("the aborted call rejects on the client", (await outcome).startsWith("rejected"), await outcome);
  for (let i = 0; i < 300 && marked(mark).length > 0; i++) await sleep(10);
  check("the cancelled command was stopped", marked(mark).length === 0, marked(mark));
  // The record is finished just after the command is reaped (its note names the exit): a read in
  // that instant still says running, so wait (bounded) for the server to record the cancellation.
  for (let i = 0; i < 300; i++) {
    const seen = await call(client, "get_operation", { operation_id: args.operation_id });
    if (seen.json === undefined || !seen.json.includes('"status":"running"')) break;
    await sleep(10);
  }
  const record = await expectOk(client, "get_operation", { operation_id: args.operation_id },
    { json: ['"status":"cancelled"', "the command was stopped"] });
  void record;
  await expectError(client, "exec", args, ["the command was stopped", "status cancelled", "new operation_id"]);
  await sleep(100);
  check("the retry did not run the command again", marked(mark).length === 0, marked(mark));
}

async function operations(client) {
  await expectOk(client, "get_operation", { operation_id: "w-1" },
    { json: ['"tool":"write_file"', '"status":"succeeded"', '"arguments":{'] });
  await expectError(client, "get_operation", { operation_id: "op-nope" }, ["no operation 'op-nope' is recorded"]);
  await expectOk(client, "list_operations", { limit: 50 }, { json: ['"operation_id":"w-1"'] });
  await expectError(client, "list_operations", { status: "bogus" }, ["'status'"]);
  await expectError(client, "no_such_tool", {}, ["unknown tool 'no_such_tool'"]);
}

// A client with a wrong token, or none, must be told so: HTTP 401 with the server's own
// explanation, not a reset connection or a transport error that says nothing (CI under load
// once turned the 401 into a reset). Both SDKs put the body in the error's message; the
// status is 1.x's `code`, 2.x's `status`.
async function refusedTokens(Client, Http) {
  const big = "x".repeat(300000);  // a body that is still arriving when the server refuses it
  for (const [label, headers, clientInfo] of [
    ["a wrong token", { Authorization: "Bearer wrong" }, { name: "ts-wrong-token", version: "1.0.0" }],
    ["no token", {}, { name: "ts-no-token", version: "1.0.0" }],
    ["a wrong token and a large body", { Authorization: "Bearer wrong" }, { name: "ts-big", version: big }],
  ]) {
    const client = new Client(clientInfo, { capabilities: {} });
    let thrown = null;
    let status = null;
    try {
      await client.connect(new Http(new URL(need("CS_URL")), { requestInit: { headers } }));
    } catch (err) {
      thrown = String(err && err.message || err);
      status = err && (err.status ?? err.code);  // 2.x: SdkHttpError.status; 1.x: StreamableHTTPError.code
    }
    check(`connecting with ${label} is refused`, thrown !== null, "connected");
    if (thrown !== null) {
      check(`connecting with ${label} gives status 401`, status === 401, `${status}: ${thrown}`);
      check(`connecting with ${label} says what to send`, thrown.includes("Authorization: Bearer <token>"), thrown);
    }
    await client.close().catch(() => {});
  }
}

async function main() {
  const { Client, Stdio, Http } = loadSdk();
  if (TRANSPORT === "http") await refusedTokens(Client, Http);
  let transport;
  if (TRANSPORT === "stdio") {
    const argv = JSON.parse(need("CS_SERVER_CMD"));
    const env = process.env.CS_SERVER_ENV ? JSON.parse(process.env.CS_SERVER_ENV) : { ...process.env };
    transport = new Stdio({ command: argv[0], args: argv.slice(1), env, stderr: "inherit" });
  } else {
    transport = new Http(new URL(need("CS_URL")),
      { requestInit: { headers: { Authorization: `Bearer ${need("CS_TOKEN")}` } } });
  }
  const client = new Client({ name: `ts-${SDK}-test`, version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  const listed = await client.listTools();
  const names = listed.tools.map((t) => t.name).sort();
  await files(client);
  await commands(client);
  if (EXTRA_EXEC) await expectOk(client, "exec", EXTRA_EXEC.args, { text: EXTRA_EXEC.wants });
  await cancellation(client);
  await operations(client);
  for (const name of names) check(`tool ${name} was called`, called.has(name), [...called]);
  await client.close();
  process.stdout.write(JSON.stringify({ ok, failed, tools: names }) + "\n");
  process.exit(failed.length ? 1 : 0);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ ok, failed: [...failed, `fatal: ${err && err.stack || err}`] }) + "\n");
  process.exit(2);
});
