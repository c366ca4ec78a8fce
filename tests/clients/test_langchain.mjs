// LangChain JS (`@langchain/openai`'s ChatOpenAI) against the real `weir serve`: bindTools
// with a tool round trip (the model calls get_verse, the tool's ToolMessage goes back, the
// model answers in text), the same call streamed and joined from tool_call_chunks, the same
// round trip on /v1/responses (useResponsesApi), and withStructuredOutput by its default
// method (response_format json_schema) and by function calling. The model never learned
// tools, so calls are forced by tool_choice and structure by the server's constraint.
//   node test_langchain.mjs WEIR_BINARY PLUGIN_DIR MODEL LOG
import { ChatOpenAI } from "@langchain/openai";
import { tool } from "@langchain/core/tools";
import { HumanMessage } from "@langchain/core/messages";
import { z } from "zod";
import { expect, finish, startServer, validArgs, VERSE, QUESTION } from "./weir_serve.mjs";

const getVerse = tool(async () => VERSE, {
  name: "get_verse",
  description: "Look up a verse of the King James Bible",
  schema: z.object({
    book: z.enum(["Genesis", "Exodus"]),
    chapter: z.number().int().min(1).max(50),
  }),
});

// bindTools, the call executed by the tool itself, then a text answer.
async function roundTrip(what, llm) {
  const human = new HumanMessage(QUESTION);
  const ai = await llm.bindTools([getVerse], { tool_choice: "get_verse" }).invoke([human]);
  const call = ai.tool_calls?.[0];
  expect(ai.tool_calls?.length === 1 && call.name === "get_verse" && validArgs(call.args) &&
         typeof call.id === "string" && call.id.length > 0,
         `${what}: call ${JSON.stringify(ai.tool_calls)}`);
  if (!call) return null;
  const toolMessage = await getVerse.invoke(call);
  expect(toolMessage.content === VERSE && toolMessage.tool_call_id === call.id,
         `${what}: tool message ${JSON.stringify(toolMessage)}`);
  const answer = await llm.bindTools([getVerse], { tool_choice: "none" })
    .invoke([human, ai, toolMessage]);
  expect(typeof answer.text === "string" && answer.text.length > 0 &&
         (answer.tool_calls ?? []).length === 0, `${what}: answer ${JSON.stringify(answer)}`);
  return call;
}

const { proc, baseURL, modelId } = await startServer(process.argv.slice(2));
try {
  const settings = { model: modelId, apiKey: "unused", configuration: { baseURL },
                     temperature: 0, maxTokens: 64 };
  const llm = new ChatOpenAI(settings);

  // 1. bindTools on chat completions.
  const call = await roundTrip("chat", llm);

  // 2. The same call streamed: LangChain joins tool_call_chunks into tool_calls.
  let joined;
  for await (const chunk of await llm.bindTools([getVerse], { tool_choice: "get_verse" })
    .stream([new HumanMessage(QUESTION)])) {
    joined = joined === undefined ? chunk : joined.concat(chunk);
  }
  expect(call && joined?.tool_calls?.length === 1 && joined.tool_calls[0].name === "get_verse" &&
         JSON.stringify(joined.tool_calls[0].args) === JSON.stringify(call.args),
         "streamed call " + JSON.stringify(joined?.tool_calls));

  // 3. bindTools on /v1/responses.
  await roundTrip("responses", new ChatOpenAI({ ...settings, useResponsesApi: true }));

  // 4. withStructuredOutput: the default method (json_schema) and function calling.
  const Verse = z.object({
    book: z.enum(["Genesis", "Exodus"]),
    chapter: z.number().int().min(1).max(50),
    verse: z.number().int().min(1).max(99),
  });
  for (const method of [undefined, "functionCalling"]) {
    const out = await llm.withStructuredOutput(Verse, { name: "verse", method, includeRaw: true })
      .invoke("Name a verse.");
    const ok = Verse.safeParse(out.parsed);
    expect(ok.success, `withStructuredOutput(${method ?? "default"}): ${JSON.stringify(out.parsed)}`);
    if (method === "functionCalling")
      expect(out.raw.tool_calls?.[0]?.name === "verse", "structured call " + JSON.stringify(out.raw.tool_calls));
    else
      expect(JSON.stringify(JSON.parse(out.raw.content)) === JSON.stringify(out.parsed),
             "structured content " + JSON.stringify(out.raw.content));
  }

  // 5. A 400 surfaces as LangChain's error with the server's message.
  try {
    await llm.bindTools([getVerse], { tool_choice: "no_such_tool" }).invoke(QUESTION);
    expect(false, "unknown tool_choice accepted");
  } catch (e) {
    expect(e.status === 400 && /tool_choice/.test(e.message), "error " + e);
  }
} finally {
  proc.kill();
}
finish();
