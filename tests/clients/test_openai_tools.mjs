// The official `openai` npm client against the real `weir serve` with the trained model: on
// chat completions, a tool round trip (the model is made to call a function, the client sends
// the tool's result back, the model answers in text), the same call streamed through the
// client's own delta accumulation, and a forced "required" call; on /v1/responses, text with
// instructions, the same streamed through the client's event reader, and a function round
// trip with function_call / function_call_output items. The model never learned tools, so the calls are
// forced by tool_choice (the server's constraint).
//   node test_openai_tools.mjs WEIR_BINARY PLUGIN_DIR MODEL LOG
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { openSync } from "node:fs";
import OpenAI from "openai";

const [weir, plugins, model, log] = process.argv.slice(2);
let failures = 0;
function expect(cond, what) {
  if (!cond) {
    failures++;
    console.log("FAIL " + what);
  }
}

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startServer() {
  const port = await freePort();
  const out = openSync(log, "w");
  const proc = spawn(weir, ["serve", "--set", "server.host=127.0.0.1", "--port", String(port),
    "--model", model, "--set", `plugins.dirs=["${plugins}"]`, "--set", "device.threads=1",
    "--set", "cache.memory_bytes=67108864"], { stdio: ["ignore", out, out] });
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      if (r.status === 200) return { proc, port };
    } catch {}
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill();
  throw new Error("weir serve did not become ready; see " + log);
}

const tools = [{
  type: "function",
  function: {
    name: "get_verse",
    description: "Look up a verse of the King James Bible",
    parameters: {
      type: "object",
      properties: {
        book: { type: "string", enum: ["Genesis", "Exodus"] },
        chapter: { type: "integer", minimum: 1, maximum: 50 },
      },
      required: ["book", "chapter"],
    },
  },
}];

function validArgs(text) {
  let a;
  try { a = JSON.parse(text); } catch { return false; }
  return ["Genesis", "Exodus"].includes(a.book) && Number.isInteger(a.chapter) &&
         a.chapter >= 1 && a.chapter <= 50;
}

const { proc, port } = await startServer();
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused" });
  const messages = [{ role: "user", content: "Where is the first verse of Genesis?" }];
  const named = { type: "function", function: { name: "get_verse" } };

  // 1. The call.
  const first = await client.chat.completions.create({
    model: (await client.models.list()).data[0].id, messages, tools, tool_choice: named,
    max_tokens: 64, seed: 3,
  });
  const msg = first.choices[0].message;
  const call = msg.tool_calls?.[0];
  expect(first.choices[0].finish_reason === "tool_calls", "finish " + first.choices[0].finish_reason);
  expect(call && call.type === "function" && call.function.name === "get_verse" &&
         validArgs(call.function.arguments), "call " + JSON.stringify(msg));

  // 2. The same call streamed: the client's helper accumulates tool_calls deltas.
  const runner = client.beta.chat.completions.stream({
    messages, tools, tool_choice: named, max_tokens: 64, seed: 3,
  });
  const streamed = await runner.finalChatCompletion();
  const scall = streamed.choices[0].message.tool_calls?.[0];
  expect(scall && call && scall.function.name === call.function.name &&
         scall.function.arguments === call.function.arguments,
         "streamed call " + JSON.stringify(streamed.choices[0].message));

  // 3. The tool's result goes back; the model answers in text.
  if (call) {
    const second = await client.chat.completions.create({
      messages: [...messages, msg,
        { role: "tool", tool_call_id: call.id, content: "In the beginning God created the heaven and the earth." }],
      tools, max_tokens: 24, seed: 1,
    });
    const answer = second.choices[0].message;
    expect(typeof answer.content === "string" && answer.content.length > 0 && !answer.tool_calls,
           "answer " + JSON.stringify(answer));
  }

  // 4. required, one call.
  const req = await client.chat.completions.create({
    messages, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 80, seed: 5,
  });
  const rc = req.choices[0].message.tool_calls ?? [];
  expect(rc.length === 1 && rc[0].function.name === "get_verse" && validArgs(rc[0].function.arguments),
         "required " + JSON.stringify(req.choices[0].message));

  // 5. A bad request surfaces as the client's BadRequestError naming the parameter.
  try {
    await client.chat.completions.create({ messages, tools,
      tool_choice: { type: "function", function: { name: "nope" } } });
    expect(false, "unknown function accepted");
  } catch (e) {
    expect(e.status === 400 && e.param === "tool_choice", "error " + e);
  }

  // 6. /v1/responses: text with instructions, the same streamed, and a function round trip.
  const base = { input: "In the beginning", instructions: "Continue the verse.",
                 max_output_tokens: 16, temperature: 0 };
  const resp = await client.responses.create(base);
  expect(resp.object === "response" && resp.id.startsWith("resp_") &&
         typeof resp.output_text === "string" && resp.output_text.length > 0 &&
         resp.usage.output_tokens > 0, "responses text " + JSON.stringify(resp));
  const rstream = client.responses.stream(base);
  const seen = [];
  rstream.on("event", (ev) => seen.push(ev.type));
  const rfinal = await rstream.finalResponse();
  // This client builds output_text only from a response.completed event; a reply cut by
  // max_output_tokens ends with response.incomplete, so read the accumulated message.
  const rtext = rfinal.output.filter((o) => o.type === "message")
    .flatMap((o) => o.content).map((c) => c.text).join("");
  expect(rtext === resp.output_text, `responses stream "${rtext}" vs "${resp.output_text}"`);
  expect(seen[0] === "response.created" && seen.includes("response.output_text.delta") &&
         ["response.completed", "response.incomplete"].includes(seen[seen.length - 1]),
         "responses events " + seen.join(","));
  const rtools = [{ type: "function", name: "get_verse", description: "Look up a verse",
                    parameters: tools[0].function.parameters }];
  const asked = await client.responses.create({
    input: "Where is the first verse of Genesis?", tools: rtools,
    tool_choice: { type: "function", name: "get_verse" }, max_output_tokens: 64,
  });
  const fc = asked.output.find((o) => o.type === "function_call");
  expect(fc && fc.name === "get_verse" && validArgs(fc.arguments), "responses call " + JSON.stringify(asked.output));
  if (fc) {
    const answered = await client.responses.create({
      input: [{ role: "user", content: "Where is the first verse of Genesis?" }, fc,
              { type: "function_call_output", call_id: fc.call_id, output: "In the beginning God created the heaven and the earth." }],
      tools: rtools, max_output_tokens: 16, temperature: 0,
    });
    expect(answered.output_text.length > 0 && !answered.output.some((o) => o.type === "function_call"),
           "responses answer " + JSON.stringify(answered.output));
  }
  try {
    await client.responses.create({ input: "x", previous_response_id: "resp_1" });
    expect(false, "previous_response_id accepted");
  } catch (e) {
    expect(e.status === 400 && e.param === "previous_response_id", "responses error " + e);
  }
} finally {
  proc.kill();
}
if (failures) {
  console.log(`${failures} failure(s)`);
  process.exit(1);
}
console.log("ok");
