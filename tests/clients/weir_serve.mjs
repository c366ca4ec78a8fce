// Shared by the client-library tests: starts the real `weir serve` on a free loopback port
// with the trained model, counts failed expectations, and holds the one function tool the
// tests call (the model never learned tools, so every call is forced by tool_choice).
//   const { proc, baseURL } = await startServer(process.argv.slice(2));
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { openSync } from "node:fs";

let failures = 0;
export function expect(cond, what) {
  if (!cond) {
    failures++;
    console.log("FAIL " + what);
  }
}

// Exits 1 when any expectation failed; prints "ok" otherwise.
export function finish() {
  if (failures) {
    console.log(`${failures} failure(s)`);
    process.exit(1);
  }
  console.log("ok");
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

// argv: WEIR_BINARY PLUGIN_DIR MODEL LOG. Resolves when /health answers 200.
export async function startServer([weir, plugins, model, log]) {
  const port = await freePort();
  const out = openSync(log, "w");
  const proc = spawn(weir, ["serve", "--set", "server.host=127.0.0.1", "--port", String(port),
    "--model", model, "--set", `plugins.dirs=["${plugins}"]`, "--set", "device.threads=1",
    "--set", "cache.memory_bytes=67108864"], { stdio: ["ignore", out, out] });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) {
        const models = await (await fetch(`${base}/v1/models`)).json();
        return { proc, port, baseURL: `${base}/v1`, modelId: models.data[0].id };
      }
    } catch {}
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill();
  throw new Error("weir serve did not become ready; see " + log);
}

export const VERSE = "In the beginning God created the heaven and the earth.";
export const QUESTION = "Where is the first verse of Genesis?";

// JSON Schema of get_verse's arguments.
export const verseParameters = {
  type: "object",
  properties: {
    book: { type: "string", enum: ["Genesis", "Exodus"] },
    chapter: { type: "integer", minimum: 1, maximum: 50 },
  },
  required: ["book", "chapter"],
};

// True when `args` (a JSON string or an already parsed object) fits verseParameters.
export function validArgs(args) {
  let a = args;
  if (typeof args === "string") {
    try { a = JSON.parse(args); } catch { return false; }
  }
  return a !== null && typeof a === "object" && ["Genesis", "Exodus"].includes(a.book) &&
         Number.isInteger(a.chapter) && a.chapter >= 1 && a.chapter <= 50;
}
