// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) against the real `weir serve`. Its default
// OpenAI provider talks to /v1/responses: generateText runs a tool round trip in two steps
// (the model calls get_verse, the SDK executes it and sends a function_call_output back, the
// model answers in text); streamText streams the same round trip through response.* events
// and streams plain text that must equal the non-streamed text. The chat-completions
// provider (`openai.chat`) runs the same round trip. The model never learned tools, so the
// first step is forced by toolChoice and the second has toolChoice "none". A "required" call
// whose list max_tokens cuts still comes back as tool calls the SDK runs.
//   node test_ai_sdk.mjs WEIR_BINARY PLUGIN_DIR MODEL LOG
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";
import { expect, finish, startServer, validArgs, VERSE, QUESTION } from "./weir_serve.mjs";

const executed = [];
const tools = {
  get_verse: tool({
    description: "Look up a verse of the King James Bible",
    inputSchema: z.object({
      book: z.enum(["Genesis", "Exodus"]),
      chapter: z.number().int().min(1).max(50),
    }),
    execute: async (input) => {
      executed.push(input);
      return VERSE;
    },
  }),
};
const forcedThenText = ({ stepNumber }) =>
  ({ toolChoice: stepNumber === 0 ? { type: "tool", toolName: "get_verse" } : "none" });

// A two-step round trip's result, however it was produced (generateText or streamText).
function checkRoundTrip(what, steps, text) {
  const call = steps[0]?.toolCalls?.[0];
  expect(steps.length === 2, `${what}: ${steps.length} steps`);
  expect(call && call.toolName === "get_verse" && validArgs(call.input),
         `${what}: call ${JSON.stringify(steps[0]?.toolCalls)}`);
  expect(steps[0]?.finishReason === "tool-calls", `${what}: first finish ${steps[0]?.finishReason}`);
  const result = steps[0]?.toolResults?.[0];
  expect(result && result.output === VERSE, `${what}: tool result ${JSON.stringify(result)}`);
  expect(typeof text === "string" && text.length > 0 && steps[1]?.toolCalls?.length === 0,
         `${what}: answer ${JSON.stringify(text)}`);
}

const { proc, baseURL, modelId } = await startServer(process.argv.slice(2));
try {
  const openai = createOpenAI({ baseURL, apiKey: "unused" });

  // 1. generateText with tools through the default provider (/v1/responses).
  const gen = await generateText({
    model: openai(modelId), tools, prompt: QUESTION, prepareStep: forcedThenText,
    stopWhen: stepCountIs(2), maxOutputTokens: 64, temperature: 0,
  });
  checkRoundTrip("generateText (responses)", gen.steps, gen.text);
  expect(executed.length === 1, `executed ${executed.length} times`);

  // 2. streamText, the same round trip: the call arrives as streamed argument deltas.
  const st = streamText({
    model: openai(modelId), tools, prompt: QUESTION, prepareStep: forcedThenText,
    stopWhen: stepCountIs(2), maxOutputTokens: 64, temperature: 0,
  });
  const kinds = new Set();
  for await (const part of st.fullStream) kinds.add(part.type);
  checkRoundTrip("streamText (responses)", await st.steps, await st.text);
  expect(kinds.has("tool-input-delta") && kinds.has("tool-call") && kinds.has("text-delta") &&
         !kinds.has("error"), "stream parts " + [...kinds].join(","));
  expect(JSON.stringify((await st.steps)[0].toolCalls[0].input) ===
         JSON.stringify(gen.steps[0].toolCalls[0].input), "streamed call differs from generated");

  // 3. streamText, plain text: the chunks join to what generateText gives (greedy).
  const plain = { model: openai(modelId), system: "Continue the verse.", prompt: "In the beginning",
                  maxOutputTokens: 16, temperature: 0 };
  const whole = await generateText(plain);
  const s2 = streamText(plain);
  const chunks = [];
  for await (const c of s2.textStream) chunks.push(c);
  expect(whole.text.length > 0 && chunks.join("") === whole.text && chunks.length > 1,
         `streamed text ${JSON.stringify(chunks)} vs ${JSON.stringify(whole.text)}`);
  expect(whole.usage.outputTokens > 0 && whole.usage.inputTokens > 0,
         "usage " + JSON.stringify(whole.usage));

  // 4. The chat-completions provider runs the same round trip.
  const chat = await generateText({
    model: openai.chat(modelId), tools, prompt: QUESTION, prepareStep: forcedThenText,
    stopWhen: stepCountIs(2), maxOutputTokens: 64, temperature: 0,
  });
  checkRoundTrip("generateText (chat)", chat.steps, chat.text);

  // 5. toolChoice "required" with a budget that cuts the forced list (issue 31): the whole
  // calls come back as tool calls with finish "tool-calls", so the SDK runs them instead of
  // throwing ToolChoiceViolationError; the call cut short is dropped.
  const before = executed.length;
  const cut = await generateText({
    model: openai.chat(modelId), tools, prompt: QUESTION, toolChoice: "required",
    maxOutputTokens: 120, temperature: 0,
  });
  const cutCalls = cut.steps[0]?.toolCalls ?? [];
  expect(cutCalls.length >= 1 && cutCalls.every((c) => validArgs(c.input)) &&
         cut.steps[0].finishReason === "tool-calls" && executed.length === before + cutCalls.length,
         `required cut by the budget: ${JSON.stringify(cut.steps[0]?.toolCalls)} ` +
         `${cut.steps[0]?.finishReason}`);

  // 6. A refused feature surfaces as the SDK's API error with the server's message.
  try {
    await generateText({ model: openai(modelId), prompt: "x",
                         providerOptions: { openai: { previousResponseId: "resp_1" } } });
    expect(false, "previousResponseId accepted");
  } catch (e) {
    expect(e.statusCode === 400 && /previous_response_id/.test(e.message), "error " + e);
  }
} finally {
  proc.kill();
}
finish();
