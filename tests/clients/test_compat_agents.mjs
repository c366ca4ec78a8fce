// The two clients issue 31 names beside openai's runTools, against the real `weir serve`,
// each with a forced tool call whose list max_tokens cuts:
//   - `@ai-sdk/openai-compatible` (the AI SDK's generic provider for OpenAI-compatible
//     servers) throws ToolChoiceViolationError when toolChoice "required" comes back without
//     a call; weir returns the whole calls as tool calls, which the SDK runs;
//   - the OpenAI Agents SDK (`@openai/agents`, over chat completions) throws
//     ModelBehaviorError when a forced reply is not a well-formed call; the run must call the
//     tool, then answer in text after the SDK resets toolChoice.
//   node test_compat_agents.mjs WEIR_BINARY PLUGIN_DIR MODEL LOG
import { generateText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { Agent, run, tool as agentTool, setDefaultOpenAIClient, setOpenAIAPI,
         setTracingDisabled } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import { expect, finish, startServer, validArgs, VERSE, QUESTION } from "./weir_serve.mjs";

const schema = z.object({
  book: z.enum(["Genesis", "Exodus"]),
  chapter: z.number().int().min(1).max(50),
});

const { proc, baseURL, modelId } = await startServer(process.argv.slice(2));
try {
  // 1. @ai-sdk/openai-compatible, toolChoice "required", a budget that cuts the call list.
  const executed = [];
  const weir = createOpenAICompatible({ name: "weir", baseURL, apiKey: "unused" });
  const tools = {
    get_verse: tool({
      description: "Look up a verse of the King James Bible", inputSchema: schema,
      execute: async (input) => { executed.push(input); return VERSE; },
    }),
  };
  for (const budget of [70, 90, 120]) {
    const before = executed.length;
    try {
      const r = await generateText({ model: weir(modelId), tools, prompt: QUESTION,
                                     toolChoice: "required", maxOutputTokens: budget,
                                     temperature: 0 });
      const calls = r.steps[0]?.toolCalls ?? [];
      // A budget too small for one whole call yields none and finish "length"; any whole
      // call comes back as a call the SDK runs, never as text.
      const ok = calls.length >= 1
        ? calls.every((c) => validArgs(c.input)) && r.steps[0].finishReason === "tool-calls" &&
          executed.length === before + calls.length
        : r.steps[0].finishReason === "length" && !r.text.includes("parameters");
      expect(ok, `openai-compatible, max ${budget}: ${JSON.stringify(calls)} ` +
                 `${r.steps[0]?.finishReason} ${JSON.stringify(r.text)}`);
    } catch (e) {
      expect(false, `openai-compatible, max ${budget}: threw ${e.name}: ${e.message}`);
    }
  }
  expect(executed.length >= 1, `openai-compatible ran ${executed.length} calls`);

  // 2. The Agents SDK over chat completions, tool choice required, a small budget.
  setTracingDisabled(true);
  setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: "unused" }));
  setOpenAIAPI("chat_completions");
  const agentCalls = [];
  const agent = new Agent({
    name: "verses", instructions: "Answer questions about the Bible.", model: modelId,
    tools: [agentTool({
      name: "get_verse", description: "Look up a verse of the King James Bible",
      parameters: schema,
      execute: async (input) => { agentCalls.push(input); return VERSE; },
    })],
    modelSettings: { toolChoice: "required", maxTokens: 120, temperature: 0 },
  });
  try {
    const r = await run(agent, QUESTION, { maxTurns: 4 });
    expect(agentCalls.length >= 1 && agentCalls.every(validArgs),
           `agents: calls ${JSON.stringify(agentCalls)}`);
    expect(typeof r.finalOutput === "string" && r.finalOutput.length > 0 &&
           !r.finalOutput.includes('"parameters"'),
           `agents: final output ${JSON.stringify(r.finalOutput)}`);
  } catch (e) {
    expect(false, `agents: threw ${e.name}: ${e.message}`);
  }
} finally {
  proc.kill();
}
finish();
