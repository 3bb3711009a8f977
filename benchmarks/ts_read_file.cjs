// The read_file timing of worker_read_bench.py, driven by the official TypeScript MCP client
// (@modelcontextprotocol/sdk 1.x, what the MCP Inspector and Claude Code are built on).
//
//   node ts_read_file.cjs NODE_MODULES SERVER_ARGV_JSON CALLS GAP_MS EXPECT_WORKER EXPECT_TEXT
//
// Starts the server, waits until workspace_info says the expected worker mode serves, lets it
// settle, makes 20 untimed calls, then CALLS timed read_file calls of a.txt (GAP_MS apart) and
// prints {"p50_ms": ...}. Any wrong answer exits 1: a contender that fails is never timed.
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

const [nodeModules, argvJson, callsText, gapText, expectWorker, expectText] = process.argv.slice(2);
const req = createRequire(path.join(nodeModules, "index.js"));
const { Client } = req("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = req("@modelcontextprotocol/sdk/client/stdio.js");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const argv = JSON.parse(argvJson);
  const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), env: process.env, stderr: "ignore" });
  const client = new Client({ name: "worker_read_bench", version: "1" });
  await client.connect(transport);
  let runtime = null;
  for (let i = 0; i < 100; i++) {
    runtime = (await client.callTool({ name: "workspace_info", arguments: {} })).structuredContent.runtime;
    if (runtime.worker !== expectWorker) throw new Error(`the server reports worker=${runtime.worker}, not ${expectWorker}`);
    if (expectWorker === "off" || runtime.serving) break;
    await sleep(100);
  }
  if (expectWorker !== "off" && !runtime.serving) throw new Error(`the ${expectWorker} worker never served`);
  await sleep(1000);
  const calls = Number(callsText);
  const gap = Number(gapText);
  const samples = [];
  for (let i = 0; i < 20 + calls; i++) {
    const start = process.hrtime.bigint();
    const result = await client.callTool({ name: "read_file", arguments: { path: "a.txt" } });
    const elapsed = Number(process.hrtime.bigint() - start) / 1e6;
    if (result.isError || result.structuredContent.content !== expectText) {
      throw new Error(`read_file failed: ${JSON.stringify(result).slice(0, 300)}`);
    }
    if (i >= 20) samples.push(elapsed);
    if (gap > 0) await sleep(gap);
  }
  await client.close();
  samples.sort((a, b) => a - b);
  console.log(JSON.stringify({ p50_ms: samples[Math.floor(samples.length / 2)] }));
}

main().catch((error) => {
  console.error(`ts_read_file: ${error.stack || error}`);
  process.exit(1);
});
