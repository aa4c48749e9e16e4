// Drives a running `seqkv serve` with the official openai client.
// usage: SEQKV_URL=http://127.0.0.1:PORT SEQKV_KEY=KEY node tests/server/openai_test.mjs
// Prints PASS/FAIL lines (tests/run.sh protocol) and exits 1 if any case failed.
import OpenAI from "openai";

const base = process.env.SEQKV_URL + "/v1";
const key = process.env.SEQKV_KEY || "none";
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const NAME = "test_server_openai";
let failed = 0;

function check(cond, why) {
  if (!cond) throw new Error(why);
}

async function run(name, fn) {
  try {
    await fn();
    console.log(`PASS ${NAME}:${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${NAME}:${name}: ${e && e.message ? e.message : e}`);
  }
}

const messages = [
  { role: "system", content: "The words of the preacher." },
  { role: "user", content: "In the beginning God created" },
];

async function chatOnce() {
  return client.chat.completions.create({ model: "kjv", messages, max_tokens: 12, temperature: 0 });
}

async function chatStream() {
  const stream = await client.chat.completions.create({
    model: "kjv", messages, max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const out = { roles: 0, text: "", finish: null, usage: null, chunks: 0 };
  for await (const c of stream) {
    out.chunks++;
    check(c.object === "chat.completion.chunk", "chunk object " + c.object);
    if (c.usage) out.usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta && ch.delta.role) out.roles++;
      if (ch.delta && ch.delta.content) out.text += ch.delta.content;
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  return out;
}

await run("models_list", async () => {
  const list = await client.models.list();
  check(list.data.length === 1 && typeof list.data[0].id === "string", "one model expected");
});

await run("chat", async () => {
  const r = await chatOnce();
  check(r.object === "chat.completion", "object " + r.object);
  const m = r.choices[0].message;
  check(m.role === "assistant" && typeof m.content === "string" && m.content.length > 0, "no content");
  check(["stop", "length"].includes(r.choices[0].finish_reason), "finish_reason " + r.choices[0].finish_reason);
  check(r.usage.completion_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens,
    "usage " + JSON.stringify(r.usage));
  check(typeof r.usage.prompt_tokens_details.cached_tokens === "number", "no cached_tokens");
});

await run("chat_greedy_deterministic", async () => {
  const a = await chatOnce(), b = await chatOnce();
  check(a.choices[0].message.content === b.choices[0].message.content, "two greedy runs differ");
  check(b.usage.prompt_tokens_details.cached_tokens === b.usage.prompt_tokens - 1,
    "repeat not served from the cache: " + JSON.stringify(b.usage));
});

await run("chat_stream", async () => {
  const whole = await chatOnce();
  const s = await chatStream();
  check(s.roles === 1, "role chunks: " + s.roles);
  check(s.text === whole.choices[0].message.content, `stream "${s.text}" != "${whole.choices[0].message.content}"`);
  check(s.finish === whole.choices[0].finish_reason, "finish " + s.finish);
  check(s.usage && s.usage.completion_tokens === whole.usage.completion_tokens, "usage chunk " + JSON.stringify(s.usage));
});

await run("completions", async () => {
  const args = { model: "kjv", prompt: "And God said, Let there be", max_tokens: 10, temperature: 0 };
  const r = await client.completions.create(args);
  check(r.object === "text_completion" && r.choices[0].text.length > 0, "no text");
  let text = "", finish = null;
  for await (const c of await client.completions.create({ ...args, stream: true })) {
    for (const ch of c.choices) {
      text += ch.text || "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(text === r.choices[0].text, `stream "${text}" != "${r.choices[0].text}"`);
  check(finish === r.choices[0].finish_reason, "finish " + finish);
});

await run("bad_key", async () => {
  const bad = new OpenAI({ baseURL: base, apiKey: key + "x", maxRetries: 0 });
  try {
    await bad.chat.completions.create({ model: "kjv", messages, max_tokens: 2 });
  } catch (e) {
    check(e.status === 401 && e.error && e.error.type === "authentication_error", "status " + e.status);
    return;
  }
  throw new Error("a wrong key was accepted");
});

await run("bad_request", async () => {
  try {
    await client.chat.completions.create({ model: "kjv", messages: [], max_tokens: 2 });
  } catch (e) {
    check(e.status === 400 && e.error && e.error.code === 400, "status " + e.status);
    return;
  }
  throw new Error("empty messages accepted");
});

process.exit(failed ? 1 : 0);
