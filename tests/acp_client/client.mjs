// The reference ACP client (@agentclientprotocol/sdk) driving an agent through a
// scenario, for tests/server/test_acp.py.
//
//   node client.mjs SCENARIO.json
//
// SCENARIO: {"command": [argv of the agent], "buffers": {ABS_PATH: unsaved text},
//            "steps": [...]}; each step one of
//   {"op": "initialize", "fs": true|false}
//   {"op": "new", "cwd": DIR}                      -> the session used by later steps
//   {"op": "load", "cwd": DIR}                     -> session/load of that session
//   {"op": "config", "id": ..., "value": ...}
//   {"op": "prompt", "text": ..., "permissions": ["allow"|"always"|"reject", ...],
//    "cancelOn": TOOL_NAME,                        -> session/cancel once that tool's call starts
//    "secondPromptOn": TOOL_NAME}                  -> another session/prompt then (refused)
//   {"op": "raw", "method": ..., "params": {...}}  -> any request, its error kept
// Prints one JSON document: every event in order (updates, permission requests,
// fs calls, responses, errors), each with the milliseconds since the start.
import { spawn } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const scenario = JSON.parse(readFileSync(process.argv[2], "utf8"));
const started = performance.now();
const log = [];
const note = (kind, data) => log.push({ kind, ms: +(performance.now() - started).toFixed(3), ...data });

const child = spawn(scenario.command[0], scenario.command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

let answers = [];
let cancelOn = null;
let secondOn = null;
let sessionId = null;

const app = acp
  .client()
  .onNotification("session/update", async ({ params, agent }) => {
    const update = params.update;
    note("update", { update });
    if (secondOn && update.sessionUpdate === "tool_call" && update.title.startsWith(secondOn)) {
      secondOn = null;  // a second prompt while the first one runs
      request(agent, "session/prompt", { sessionId: params.sessionId, prompt: [{ type: "text", text: "again" }] });
    }
    if (cancelOn && update.sessionUpdate === "tool_call" && update.title.startsWith(cancelOn)) {
      cancelOn = null;
      note("cancel", {});
      await agent.notify("session/cancel", { sessionId: params.sessionId });
    }
  })
  .onRequest("session/request_permission", async ({ params }) => {
    const answer = answers.shift() ?? "reject";
    note("permission", { toolCall: params.toolCall, options: params.options.map((o) => o.optionId), answer });
    return { outcome: { outcome: "selected", optionId: answer } };
  })
  .onRequest("fs/read_text_file", async ({ params }) => {
    const buffered = scenario.buffers?.[params.path];
    note("fs_read", { path: params.path, buffer: buffered !== undefined });
    if (buffered !== undefined) return { content: buffered };
    if (!existsSync(params.path)) throw acp.RequestError.resourceNotFound(params.path);
    return { content: readFileSync(params.path, "utf8") };
  })
  .onRequest("fs/write_text_file", async ({ params }) => {
    note("fs_write", { path: params.path, content: params.content });
    if (scenario.buffers?.[params.path] !== undefined) scenario.buffers[params.path] = params.content;
    return {};
  });

async function request(agent, method, params) {
  try {
    const result = await agent.request(method, params);
    note("response", { method, result });
    return result;
  } catch (error) {
    note("error", { method, code: error.code, message: error.message, data: error.data });
    return null;
  }
}

try {
  await app.connectWith(stream, async (agent) => {
    for (const step of scenario.steps) {
      if (step.op === "initialize") {
        await request(agent, "initialize", {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: { fs: { readTextFile: !!step.fs, writeTextFile: !!step.fs } },
          clientInfo: { name: "tachy-test", version: "1" },
        });
      } else if (step.op === "new") {
        const result = await request(agent, "session/new", { cwd: step.cwd, mcpServers: [] });
        if (result) sessionId = result.sessionId;
      } else if (step.op === "load") {
        await request(agent, "session/load", { cwd: step.cwd, sessionId, mcpServers: [] });
      } else if (step.op === "config") {
        await request(agent, "session/set_config_option", { sessionId, configId: step.id, value: step.value });
      } else if (step.op === "prompt") {
        answers = [...(step.permissions ?? [])];
        cancelOn = step.cancelOn ?? null;
        secondOn = step.secondPromptOn ?? null;
        note("prompt", { text: step.text });
        await request(agent, "session/prompt", { sessionId, prompt: [{ type: "text", text: step.text }] });
      } else if (step.op === "raw") {
        const params = JSON.parse(JSON.stringify(step.params ?? {}).replaceAll("$SESSION", sessionId ?? ""));
        await request(agent, step.method, params);
      }
    }
  });
} catch (error) {
  note("connection_error", { message: String(error) });
}
child.kill("SIGTERM");
process.stdout.write(JSON.stringify({ log, sessionId }) + "\n");
