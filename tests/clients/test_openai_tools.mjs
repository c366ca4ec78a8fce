// The official `openai` npm client against the real `weir serve` with the trained model: on
// chat completions, a tool round trip (the model is made to call a function, the client sends
// the tool's result back, the model answers in text), the same call streamed through the
// client's own delta accumulation, and a forced "required" call; on /v1/responses, text with
// instructions, the same streamed through the client's event reader, and a function round
// trip with function_call / function_call_output items; embeddings, base64 (the client's
// default, decoded by the client) and float alike. The model never learned tools, so the calls are
// forced by tool_choice (the server's constraint).
//   node test_openai_tools.mjs WEIR_BINARY PLUGIN_DIR MODEL LOG
import OpenAI from "openai";
import { expect, finish, startServer, validArgs, verseParameters, VERSE, QUESTION } from "./weir_serve.mjs";

const tools = [{
  type: "function",
  function: { name: "get_verse", description: "Look up a verse of the King James Bible",
              parameters: verseParameters },
}];

const { proc, baseURL } = await startServer(process.argv.slice(2));
try {
  const client = new OpenAI({ baseURL, apiKey: "unused" });
  const messages = [{ role: "user", content: QUESTION }];
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
  const runner = client.chat.completions.stream({
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
        { role: "tool", tool_call_id: call.id, content: VERSE }],
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

  // 4b. runTools with tool_choice "required" and a budget that cuts the forced list (issue
  // 31): the whole calls arrive as tool_calls with finish_reason "tool_calls" (the client's
  // parser throws LengthFinishReasonError on "length"), the runner runs them and goes on.
  const ran = [];
  const runner2 = client.chat.completions.runTools({
    messages, tool_choice: "required", max_tokens: 120, temperature: 0,
    tools: [{ type: "function", function: {
      name: "get_verse", parameters: verseParameters, parse: JSON.parse,
      function: (args) => { ran.push(args); return VERSE; } } }],
  }, { maxChatCompletions: 2 });
  try {
    await runner2.done();
    expect(ran.length >= 1 && ran.every((a) => validArgs(JSON.stringify(a))),
           "runTools ran " + JSON.stringify(ran));
  } catch (e) {
    expect(false, "runTools with a cut forced list: " + e);
  }

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
    input: QUESTION, tools: rtools,
    tool_choice: { type: "function", name: "get_verse" }, max_output_tokens: 64,
  });
  const fc = asked.output.find((o) => o.type === "function_call");
  expect(fc && fc.name === "get_verse" && validArgs(fc.arguments), "responses call " + JSON.stringify(asked.output));
  if (fc) {
    const answered = await client.responses.create({
      input: [{ role: "user", content: QUESTION }, fc,
              { type: "function_call_output", call_id: fc.call_id, output: VERSE }],
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
  // /v1/embeddings through the client: it asks for base64 by default and decodes it itself,
  // so equal vectors from both encodings prove the bytes are what OpenAI's clients expect.
  const texts = ["In the beginning God created the heaven and the earth.", "Jesus wept."];
  const e64 = await client.embeddings.create({ model: (await client.models.list()).data[0].id,
                                               input: texts });
  const ef = await client.embeddings.create({ input: texts, encoding_format: "float" });
  const a = e64.data[0].embedding, b = ef.data[0].embedding;
  expect(e64.data.length === 2 && Array.isArray(a) && a.length > 0 && a.length === b.length &&
         a.every((x, i) => Math.abs(x - b[i]) < 1e-6) && e64.usage.prompt_tokens > 0,
         "embeddings " + JSON.stringify(e64).slice(0, 300));
  try {
    await client.embeddings.create({ input: "" });
    expect(false, "an empty embeddings input accepted");
  } catch (e) {
    expect(e.status === 400 && e.param === "input", "embeddings error " + e);
  }
} finally {
  proc.kill();
}
finish();
