// features.mjs drives mcpfsm serve through the TypeScript SDK v2's client
// (@modelcontextprotocol/client, pinned to protocol 2026-07-28: stateless requests
// carrying their own _meta, server/discover instead of initialize, a backend's
// sampling, elicitation and roots as input requests inside a result, answered by a
// retry; subscriptions and list changes on a subscriptions/listen stream), against a
// gateway whose config holds the example server as "example" (on 2026-07-28) and as
// "old" (pinned to 2025-11-25). It prints one JSON line: {CHECK: {ok, detail, ms}}
// for every check, and exits 0 unless the script itself broke. The cmd tests run it
// (TestServeTypeScriptV2):
//
//   node features.mjs stdio COMMAND [ARG...]
//   node features.mjs http URL GATEWAY_PID
//
// MCPFSM_NEXT_CONFIG names a config the script moves over MCPFSM_CONFIG before it
// sends the gateway SIGHUP (a hot reload that adds the server "two").
import { existsSync, readFileSync, readdirSync, renameSync } from "node:fs";
import { Client, LOG_LEVEL_META_KEY, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [kind, ...target] = process.argv.slice(2);
if (kind !== "stdio" && kind !== "http") {
  console.error("usage: features.mjs stdio COMMAND [ARG...] | http URL GATEWAY_PID");
  process.exit(2);
}
const timer = setTimeout(() => { console.error("timed out"); process.exit(1); }, 100000);
const PROTOCOL = "2026-07-28";

// Every HTTP exchange of every client, for the stateless check.
const exchanges = [];
async function recordingFetch(url, init) {
  const res = await fetch(url, init);
  const h = new Headers(init && init.headers);
  exchanges.push({ method: (init && init.method) || "GET", mcpMethod: h.get("mcp-method"), status: res.status, session: res.headers.get("mcp-session-id") });
  return res;
}

function transport() {
  return kind === "stdio"
    ? new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target[0]), { fetch: recordingFetch });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// until polls f (which returns a truthy value when done) every 20 ms for up to ms.
async function until(what, ms, f) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`no ${what} within ${ms} ms`);
    await sleep(20);
  }
}

const text = (res) => (res.content || []).map((c) => c.text).join("\n");
const errText = (e) => String((e && e.message) || e);

// newClient makes a client pinned to 2026-07-28 (no fallback to initialize: a gateway
// that did not offer 2026-07-28 fails the connect) that declares caps and, for each
// capability it declares, answers as its name says.
function newClient(name, caps, roots) {
  const c = new Client({ name, version: "1.0.0" }, { capabilities: caps, versionNegotiation: { mode: { pin: PROTOCOL } } });
  c.asked = [];
  if (caps.sampling) {
    c.setRequestHandler("sampling/createMessage", async (req) => {
      c.asked.push("sampling");
      return {
        role: "assistant",
        model: "ts2-model",
        content: { type: "text", text: "sampled: " + req.params.messages.map((m) => m.content.text).join(" ") },
      };
    });
  }
  if (caps.elicitation) {
    c.setRequestHandler("elicitation/create", async () => {
      c.asked.push("elicitation");
      return { action: "accept", content: { answer: "yes" } };
    });
  }
  if (caps.roots) {
    c.setRequestHandler("roots/list", async () => {
      c.asked.push("roots");
      return { roots: roots.map((uri) => ({ uri, name: uri })) };
    });
  }
  // The SDK hands a notification to its handler in a microtask but a response at
  // once, forgetting the call's progress handler (as 1.32.2 does): a progress read in
  // the same chunk as its call's result reaches onerror as "unknown token" instead of
  // onprogress. Kept, with every other error the client reports.
  c.lateProgress = [];
  c.errors = [];
  c.onerror = (e) => {
    const m = /Received a progress notification for an unknown token: (.*)$/s.exec(errText(e));
    if (m) c.lateProgress.push(JSON.parse(m[1]).params);
    else c.errors.push(errText(e));
  };
  return c;
}

// record keeps what a connected client's transport reads and writes: the messages
// in (wire.in) and out (wire.out).
function record(tr) {
  const wire = { in: [], out: [] };
  const onmessage = tr.onmessage;
  tr.onmessage = (m, extra) => { wire.in.push(m); onmessage.call(tr, m, extra); };
  const send = tr.send.bind(tr);
  tr.send = (m, opts) => { wire.out.push(m); return send(m, opts); };
  return wire;
}

// The client under test declares sampling, elicitation and roots and answers them.
const seen = { logs: [], updated: [], tools: 0, prompts: 0, resources: 0 };
const client = newClient("mcpfsm-tsclient2-features", { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } }, ["file:///ts2-root"]);
client.setNotificationHandler("notifications/message", (n) => { seen.logs.push(n.params); });
client.setNotificationHandler("notifications/resources/updated", (n) => { seen.updated.push(n.params.uri); });
client.setNotificationHandler("notifications/tools/list_changed", () => { seen.tools++; });
client.setNotificationHandler("notifications/prompts/list_changed", () => { seen.prompts++; });
client.setNotificationHandler("notifications/resources/list_changed", () => { seen.resources++; });

const checks = {};
async function check(name, f) {
  const start = Date.now();
  try {
    const detail = await f();
    checks[name] = { ok: true, detail: detail === undefined ? "" : String(detail), ms: Date.now() - start };
  } catch (e) {
    checks[name] = { ok: false, detail: errText(e), ms: Date.now() - start };
  }
}
function expect(cond, what) {
  if (!cond) throw new Error(what);
}

async function call(name, args, opts, c = client) {
  return c.callTool({ name, arguments: args || {} }, opts);
}
async function callText(name, args, opts, c = client) {
  const res = await call(name, args, opts, c);
  expect(!res.isError, `${name} answered an error: ${text(res)}`);
  return text(res);
}
async function toolNames() {
  // 'refresh': the client's response cache is not what is under test.
  return (await client.listTools(undefined, { cacheMode: "refresh" })).tools.map((t) => t.name);
}

const tr = transport();
await client.connect(tr);
const wire = record(tr);
const gatewayPid = kind === "stdio" ? tr.pid : Number(target[1]);

// ins returns what the client read since the mark n = wire.in.length: the results
// that asked for input, and the requests of the server's own (none on 2026-07-28).
function ins(n) {
  const got = wire.in.slice(n);
  return {
    inputRequired: got.filter((m) => m.result && m.result.resultType === "input_required").length,
    requests: got.filter((m) => m.method && m.id !== undefined).map((m) => m.method),
  };
}

await check("protocol", async () => {
  const v = client.getNegotiatedProtocolVersion();
  expect(v === PROTOCOL, `negotiated ${v}`);
  expect(client.getProtocolEra() === "modern", `era ${client.getProtocolEra()}`);
  const d = client.getDiscoverResult();
  expect(d && d.supportedVersions && d.supportedVersions.includes(PROTOCOL), `server/discover: ${JSON.stringify(d)}`);
  const info = client.getServerVersion();
  expect(info && info.name === "mcpfsm-gateway", `server ${JSON.stringify(info)}`);
  if (kind === "http") {
    const methods = exchanges.map((x) => x.mcpMethod);
    expect(methods[0] === "server/discover" && !methods.includes("initialize"), `the connect sent ${methods}`);
  }
  return `${v} (${client.getProtocolEra()}), discover offers ${d.supportedVersions}`;
});

// Over stdio the client probes with server/discover on a sibling process of its own
// (a second gateway), reaped (stdin closed, SIGTERM, SIGKILL after 1 s) before the
// connect returns: that gateway must go, with the backends it started.
if (kind === "stdio") {
  await check("stdio_probe", async () => {
    if (!existsSync("/proc/self/stat")) return "not checked: no /proc here";
    const bin = target[0];
    const procs = () => {
      const out = [];
      for (const d of readdirSync("/proc")) {
        if (!/^\d+$/.test(d)) continue;
        try {
          const argv = readFileSync(`/proc/${d}/cmdline`, "utf8").split("\0");
          if (argv[0] !== bin) continue;
          const stat = readFileSync(`/proc/${d}/stat`, "utf8");
          const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
          out.push({ pid: Number(d), ppid, what: argv[1] });
        } catch {
          // gone meanwhile
        }
      }
      return out;
    };
    let got;
    await until("the probe's gateway and its backends gone", 5000, () => {
      got = procs();
      return got.every((p) => (p.what === "serve" && p.pid === gatewayPid) || (p.what === "example-server" && p.ppid === gatewayPid));
    }).catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(got)} (the session's gateway is ${gatewayPid})`); });
    return `${got.length} processes, all the session's gateway's`;
  });
}

await check("tools", async () => {
  const names = await toolNames();
  for (const n of ["example__echo", "example__sample", "old__echo", "old__sample"]) expect(names.includes(n), `tools lack ${n}: ${names}`);
  const got = await callText("example__echo", { text: "from typescript v2" });
  expect(got === "from typescript v2", `echo answered ${got}`);
  const old = await callText("old__echo", { text: "to the old one" });
  expect(old === "to the old one", `old echo answered ${old}`);
  return `${names.length} tools`;
});

await check("prompts", async () => {
  const { prompts } = await client.listPrompts(undefined, { cacheMode: "refresh" });
  expect(prompts.some((p) => p.name === "example__greet"), `prompts ${prompts.map((p) => p.name)}`);
  const res = await client.getPrompt({ name: "example__greet", arguments: { name: "ts2" } });
  const got = res.messages[0].content.text;
  expect(got === "Hello, ts2!", `greet answered ${got}`);
});

await check("resources", async () => {
  const { resources } = await client.listResources(undefined, { cacheMode: "refresh" });
  expect(resources.some((r) => r.uri === "test://static/a"), `resources ${resources.map((r) => r.uri)}`);
  const { resourceTemplates } = await client.listResourceTemplates(undefined, { cacheMode: "refresh" });
  expect(resourceTemplates.some((r) => r.uriTemplate === "test://items/{id}"), `templates ${JSON.stringify(resourceTemplates)}`);
  const b = (await client.readResource({ uri: "test://static/b" }, { cacheMode: "bypass" })).contents[0].text;
  expect(b === "b v0", `read b: ${b}`);
  const item = (await client.readResource({ uri: "test://items/42" }, { cacheMode: "bypass" })).contents[0].text;
  expect(item === "item 42 v0", `read item: ${item}`);
});

await check("completion", async () => {
  const p = await client.complete({ ref: { type: "ref/prompt", name: "example__greet" }, argument: { name: "name", value: "ali" } });
  expect(JSON.stringify(p.completion.values) === '["alice","alicia"]', `prompt completion ${JSON.stringify(p.completion)}`);
  const r = await client.complete({ ref: { type: "ref/resource", uri: "test://items/{id}" }, argument: { name: "id", value: "ap" } });
  expect(JSON.stringify(r.completion.values) === '["apple","apricot"]', `template completion ${JSON.stringify(r.completion)}`);
});

// On 2026-07-28 there is no logging/setLevel (the client refuses to send it): a
// request asks for its own log messages with a level in its _meta, which the gateway
// passes to a backend on 2026-07-28, and sets a 2025-11-25 backend to. Run before any
// call is cancelled (see cancel_window).
await check("logging", async () => {
  let refused;
  try {
    await client.setLoggingLevel("debug");
  } catch (e) {
    refused = errText(e);
  }
  expect(refused && /not supported by the negotiated protocol version/.test(refused), `setLoggingLevel on 2026-07-28: ${refused || "sent"}`);
  const at = (level) => ({ _meta: { [LOG_LEVEL_META_KEY]: level } });
  const n = seen.logs.length;
  const got = await client.callTool({ name: "example__log", arguments: { level: "info", text: "hello ts2" }, ...at("debug") });
  expect(text(got) === "sent", `the backend's log at level debug was ${text(got)}`);
  await until("the log message", 5000, () => seen.logs.slice(n).some((l) => l.data === "hello ts2" && /^example/.test(l.logger)));
  const quiet = await client.callTool({ name: "example__log", arguments: { level: "info", text: "quiet" }, ...at("error") });
  expect(text(quiet) === "filtered", `the backend's log at level error was ${text(quiet)}`);
  const none = await client.callTool({ name: "example__log", arguments: { level: "info", text: "no level" } });
  expect(text(none) === "filtered", `the backend's log with no level was ${text(none)}`);
  // The old backend (2025-11-25) takes a level by logging/setLevel only: the
  // gateway sets it to the level the request asks for before the call goes there.
  const old = await client.callTool({ name: "old__log", arguments: { level: "debug", text: "old debug" }, ...at("debug") });
  expect(text(old) === "sent", `the old backend's log at level debug was ${text(old)}`);
  await until("the old backend's log message", 5000, () => seen.logs.slice(n).some((l) => l.data === "old debug" && /^old/.test(l.logger)));
  return `${JSON.stringify(seen.logs.slice(n))}`;
});

await check("progress", async () => {
  const got = [];
  let resolved = false;
  const late = client.lateProgress.length;
  const res = await call("example__slow_progress", { ms: 20, steps: 3 }, {
    onprogress: (p) => { got.push({ ...p, afterResult: resolved }); },
  });
  resolved = true;
  expect(!res.isError && text(res) === "progressed 3", `slow_progress answered ${text(res)}`);
  expect(got.every((p) => !p.afterResult), `progress after the result: ${JSON.stringify(got)}`);
  // Every progress the gateway sent arrived: to onprogress, or (the SDK's race
  // above) to onerror, the gateway having written it before the result.
  await sleep(50);
  const dropped = client.lateProgress.slice(late);
  const all = [...got.map((p) => p.progress), ...dropped.map((p) => p.progress)].sort((a, b) => a - b);
  expect(JSON.stringify(all) === "[1,2,3]",
    `progress ${JSON.stringify(all)} of [1,2,3]: onprogress ${JSON.stringify(got)}, dropped by the SDK ${JSON.stringify(dropped)}`);
  return dropped.length === 0 ? "3 of 3 to onprogress" : `${got.length} to onprogress, ${dropped.length} read with the result and dropped by the SDK`;
});

// Sampling, elicitation and roots asked by each backend during a call: the client
// gets them as input requests inside the call's result (never as requests of the
// server's), answers them with its handlers, and retries; the call's answer is what
// the backend made of them. Roots are this client's own.
for (const server of ["example", "old"]) {
  const asked = async (name, args, want, kinds) => {
    const n = wire.in.length;
    client.asked = [];
    const got = await callText(`${server}__${name}`, args);
    expect(got === want, `${name} answered ${JSON.stringify(got)}`);
    const w = ins(n);
    expect(w.requests.length === 0, `the server sent requests of its own: ${w.requests}`);
    expect(w.inputRequired === kinds.length, `${w.inputRequired} input-required results, want ${kinds.length}`);
    expect(JSON.stringify(client.asked) === JSON.stringify(kinds), `the client's handlers saw ${client.asked}`);
    return `${w.inputRequired} input-required round(s): ${client.asked}`;
  };
  await check(`sampling/${server}`, () => asked("sample", { prompt: "hi" }, "sampled: hi", ["sampling"]));
  await check(`elicitation/${server}`, () => asked("elicit", { message: "ok?" }, 'accept {"answer":"yes"}', ["elicitation"]));
  await check(`roots/${server}`, () => asked("roots", {}, '["file:///ts2-root"]', ["roots"]));
  await check(`multi_round/${server}`, () =>
    asked("sample_then_elicit", { prompt: "p", message: "m" }, 'sampled: p\naccept {"answer":"yes"}', ["sampling", "elicitation"]));
}

// A backend's progress during a call that takes input goes on the stream of the
// round it is sent in, under that round's progress token: the retry is a new request.
await check("progress_rounds", async () => {
  const out = [];
  for (const server of ["example", "old"]) {
    const nIn = wire.in.length, nOut = wire.out.length, late = client.lateProgress.length;
    const got = [];
    const res = await call(`${server}__elicit`, { message: "ok?", progress: true }, { onprogress: (p) => got.push(p.message) });
    expect(text(res) === 'accept {"answer":"yes"}', `${server}: elicit answered ${text(res)}`);
    const calls = wire.out.slice(nOut).filter((m) => m.method === "tools/call");
    expect(calls.length === 2, `${server}: ${calls.length} tools/call sent, want the call and its retry`);
    const tokens = calls.map((m) => m.params._meta.progressToken);
    const progress = wire.in.slice(nIn).filter((m) => m.method === "notifications/progress").map((m) => `${m.params.message}@${m.params.progressToken}`);
    // The example backend (2026-07-28) runs the tool again on the retry, and says
    // "asking" again; the old one (2025-11-25) waits for its own request's answer.
    const want = server === "example"
      ? [`asking@${tokens[0]}`, `asking@${tokens[1]}`, `answered@${tokens[1]}`]
      : [`asking@${tokens[0]}`, `answered@${tokens[1]}`];
    expect(JSON.stringify(progress) === JSON.stringify(want), `${server}: progress on the wire ${progress}, want ${want}`);
    // The client adds a progress of its own for each round it fulfils; the others
    // reach onprogress, or onerror (the race above).
    await sleep(50);
    const dropped = client.lateProgress.slice(late).map((p) => p.message);
    const backend = [...got.filter((m) => !/^Fulfilling input required/.test(m)), ...dropped].sort();
    expect(JSON.stringify(backend) === JSON.stringify(want.map((w) => w.split("@")[0]).sort()),
      `${server}: onprogress ${JSON.stringify(got)}, dropped by the SDK ${JSON.stringify(dropped)}`);
    expect(got.some((m) => /^Fulfilling input required by 'tools\/call' \(round 1\)/.test(m)), `${server}: no progress of the client's own: ${got}`);
    out.push(`${server}: ${progress.join(" ")}${dropped.length ? ` (${dropped.length} dropped by the SDK)` : ""}`);
  }
  return out.join(" | ");
});

// Each client's calls see its own roots: a second client with roots of its own, one
// call after the other on both backends, and both at once on the 2026-07-28 one.
await check("roots_per_client", async () => {
  const other = newClient("mcpfsm-tsclient2-other", { roots: {} }, ["file:///other-root"]);
  await other.connect(transport());
  try {
    for (const server of ["example", "old"]) {
      const mine = await callText(`${server}__roots`);
      const theirs = await callText(`${server}__roots`, {}, undefined, other);
      expect(mine === '["file:///ts2-root"]' && theirs === '["file:///other-root"]', `${server}: this client's call got ${mine}, the other's ${theirs}`);
    }
    const [mine, theirs] = await Promise.all([callText("example__roots"), callText("example__roots", {}, undefined, other)]);
    expect(mine === '["file:///ts2-root"]' && theirs === '["file:///other-root"]', `at once: this client's call got ${mine}, the other's ${theirs}`);
  } finally {
    await other.close();
  }
});

// A client that declares none of sampling, elicitation and roots: what a backend
// asks of it is refused. On 2026-07-28 the backend's call answers input-required,
// which the gateway refuses with -32021 (missing client capability, gateway/doc.go);
// on 2025-11-25 the backend's own request is refused, and its tool fails.
await check("refusal", async () => {
  const bare = newClient("mcpfsm-tsclient2-bare", {});
  await bare.connect(transport());
  try {
    const out = [];
    for (const [tool, args, what] of [["sample", { prompt: "hi" }, "sampling"], ["elicit", { message: "ok?" }, "elicitation"], ["roots", {}, "roots"]]) {
      try {
        const res = await call(`old__${tool}`, args, undefined, bare);
        expect(res.isError && text(res).includes(`the front client does not support ${what}`), `old__${tool}: ${JSON.stringify(res)}`);
      } catch (e) {
        throw new Error(`old__${tool}: a protocol error, not a tool error: ${errText(e)}`);
      }
      let res, err;
      try {
        res = await call(`example__${tool}`, args, undefined, bare);
      } catch (e) {
        err = e;
      }
      expect(err && err.code === -32021 && errText(err).includes(`the front client does not support ${what}`),
        `example__${tool}: ${err ? `${err.code} ${errText(err)}` : JSON.stringify(res)}`);
      out.push(what);
    }
    expect(bare.asked.length === 0, `the bare client was asked ${bare.asked}`);
    return `refused: ${out.join(", ")}`;
  } finally {
    await bare.close();
  }
});

// resources/subscribe is gone on 2026-07-28 (the client refuses to send it): a
// subscription is a subscriptions/listen stream, which carries the list changes too.
let sub;
await check("subscription", async () => {
  let refused;
  try {
    await client.subscribeResource({ uri: "test://static/a" });
  } catch (e) {
    refused = errText(e);
  }
  expect(refused && /not supported by the negotiated protocol version/.test(refused), `subscribeResource on 2026-07-28: ${refused || "sent"}`);
  sub = await client.listen({ resourceSubscriptions: ["test://static/a"], toolsListChanged: true, promptsListChanged: true, resourcesListChanged: true });
  const h = sub.honoredFilter;
  expect(h.toolsListChanged && h.promptsListChanged && h.resourcesListChanged && JSON.stringify(h.resourceSubscriptions) === '["test://static/a"]',
    `honored ${JSON.stringify(h)}`);
  const n = seen.updated.length;
  await callText("example__touch", { uri: "test://static/b" }); // not subscribed
  await callText("example__touch", { uri: "test://static/a" });
  await until("resources/updated", 5000, () => seen.updated.slice(n).includes("test://static/a"));
  await sleep(100);
  expect(!seen.updated.slice(n).includes("test://static/b"), `updated ${seen.updated.slice(n)}: b is not subscribed`);
  return `honored ${JSON.stringify(h)}`;
});

await check("list_changed", async () => {
  const t = seen.tools, p = seen.prompts, r = seen.resources;
  await callText("example__change_tools");
  await callText("example__change_prompts");
  await callText("example__change_resources");
  await until("tools/list_changed", 5000, () => seen.tools > t);
  await until("prompts/list_changed", 5000, () => seen.prompts > p);
  await until("resources/list_changed", 5000, () => seen.resources > r);
  expect((await toolNames()).includes("example__extra"), "example__extra not listed");
});

// An aborted call: the client's call ends at once, and the backend (on either
// protocol) gets notifications/cancelled.
await check("cancellation", async () => {
  const out = [];
  for (const server of ["example", "old"]) {
    const cancelled = async () => JSON.parse(await callText(`${server}__stats`))["notifications/cancelled"] || 0;
    const before = await cancelled();
    const errors = client.errors.length;
    const ac = new AbortController();
    const start = Date.now();
    const p = call(`${server}__slow`, { ms: 20000 }, { signal: ac.signal });
    await sleep(300);
    ac.abort("the TS v2 client gave up");
    await p.then(() => { throw new Error(`${server}: the aborted call answered`); }, () => {});
    const ms = Date.now() - start;
    expect(ms < 5000, `${server}: the abort took ${ms} ms`);
    await until(`notifications/cancelled at ${server}`, 5000, async () => (await cancelled()) > before);
    // The gateway answers no request its client cancelled (the spec's SHOULD NOT):
    // the client would report the answer as one to an unknown request.
    await sleep(100);
    const stray = client.errors.slice(errors).filter((e) => /unknown message ID/.test(e));
    expect(stray.length === 0, `${server}: ${stray}`);
    out.push(`${server} in ${ms} ms`);
  }
  return out.join(", ");
});

// Right after a cancelled call, a backend's messages that say no call of theirs
// (a 2025-11-25 backend's requests, any backend's log messages) go to the call in
// flight only if every call in flight there, and every call cancelled there that the
// backend may still be running, is the same front session's (gateway/backend.go).
// Over HTTP on 2026-07-28 every request is a session of its own (stateless): while
// a cancelled call counts, the gateway refuses the old backend's sampling, rather
// than risk asking the wrong client, and a log message goes to every 2026-07-28
// request in flight to the backend, at its own level. The cancelled calls above no
// longer count: both backends (go-sdk servers over stdio) answered them as they
// stopped, and the gateway read those answers (it counted them for 30 s before,
// whatever the backend did).
await check("cancel_window", async () => {
  const res = await call("old__sample", { prompt: "hi" });
  const n = seen.logs.length;
  const log = await client.callTool({ name: "example__log", arguments: { level: "info", text: "after cancel" }, _meta: { [LOG_LEVEL_META_KEY]: "debug" } });
  expect(text(log) === "sent", `the backend's log was ${text(log)}`);
  await sleep(300);
  const logged = seen.logs.slice(n).some((l) => l.data === "after cancel");
  expect(!res.isError && text(res) === "sampled: hi", `old__sample: ${text(res)}`);
  expect(logged, "the log message did not come");
  return "sampled and logged";
});

// kill -9 the backend: a call fails fast as a tool error while it is down; it is
// respawned; its lists (extra gone) change; the listen stream holds.
let oldPid, toolsBase;
await check("down_fails_fast", async () => {
  oldPid = Number(await callText("example__pid"));
  toolsBase = seen.tools;
  process.kill(oldPid, "SIGKILL");
  // Until the gateway has seen it die (its status resource says the backend is not
  // ready): a call made before that is written to the dead session and, a read-only
  // one, sent again on the next, which answers it. (A fixed 200 ms was not always
  // enough on a loaded machine.)
  await until("the gateway to see the backend down", 5000, async () => {
    const st = JSON.parse((await client.readResource({ uri: "mcpfsm://status" }, { cacheMode: "bypass" })).contents[0].text);
    return st.some((s) => s.server === "example" && s.state !== "ready");
  });
  const res = await until("a tool error while the backend is down", 5000, async () => {
    const start = Date.now();
    let r;
    try {
      r = await call("example__echo", { text: "x" });
    } catch (e) {
      throw new Error(`a protocol error, not a tool error: ${errText(e)}`);
    }
    return r.isError ? { r, ms: Date.now() - start } : null;
  });
  const msg = text(res.r);
  expect(/server "example"/.test(msg) && /last failure/.test(msg), `the tool error says ${msg}`);
  expect(res.ms < 1000, `the failing call took ${res.ms} ms`);
  return `${res.ms} ms: ${msg}`;
});

await check("respawn", async () => {
  const pid = await until("a respawned backend", 20000, async () => {
    const r = await call("example__pid");
    return !r.isError && Number(text(r)) !== oldPid ? Number(text(r)) : null;
  });
  const got = await callText("example__echo", { text: "back" });
  expect(got === "back", `echo after the respawn answered ${got}`);
  return `pid ${oldPid} -> ${pid}`;
});

await check("respawn_list_changed", async () => {
  await until("example__extra gone after the respawn", 10000, async () => !(await toolNames()).includes("example__extra"));
  await until("tools/list_changed after the respawn", 5000, () => seen.tools > toolsBase);
});

await check("subscription_after_respawn", async () => {
  const n = seen.updated.length;
  await callText("example__touch", { uri: "test://static/a" });
  await until("resources/updated after the respawn", 5000, () => seen.updated.slice(n).includes("test://static/a"));
  const state = JSON.parse(await callText("example__state"));
  expect((state.subscriptions || []).includes("test://static/a"), `the respawned backend is subscribed to ${state.subscriptions}`);
});

await check("reload", async () => {
  const t = seen.tools;
  renameSync(process.env.MCPFSM_NEXT_CONFIG, process.env.MCPFSM_CONFIG);
  process.kill(gatewayPid, "SIGHUP");
  await until("tools/list_changed after SIGHUP", 20000, () => seen.tools > t);
  await until("two__echo listed", 20000, async () => (await toolNames()).includes("two__echo"));
  const got = await callText("two__echo", { text: "reloaded" });
  expect(got === "reloaded", `two__echo answered ${got}`);
});

// Closing the listen stream ends the subscription: no more updates, and the gateway
// drops it at the backend (the example server's state says what the gateway's
// session there is subscribed to). The client both aborts the stream and sends
// notifications/cancelled for it. Over stdio the gateway ends the listen and writes
// no answer to it. Over HTTP the client POSTs that notification without Mcp-Method
// (the SDK v2 sends the header on requests only, and its server asks it of requests
// only), and the gateway's go-sdk server, which asks it of every POST, refuses it
// (400, -32020), which the client reports on onerror; nothing is lost: on stateless
// HTTP the notification is a request of its own, which could not reach the listen
// anyway, and the abort of the stream ends it.
await check("listen_closed", async () => {
  const subscribed = async () => JSON.parse(await callText("example__state")).subscriptions || [];
  expect((await subscribed()).includes("test://static/a"), `the backend is not subscribed: ${await subscribed()}`);
  const errors = client.errors.length;
  await sub.close();
  const how = await sub.closed;
  expect(how === "local", `closed ${how}`);
  await until("the backend's subscription dropped", 5000, async () => !(await subscribed()).includes("test://static/a"));
  const n = seen.updated.length;
  await callText("example__touch", { uri: "test://static/a" });
  await sleep(300);
  expect(seen.updated.length === n, `updated after the close: ${seen.updated.slice(n)}`);
  const refused = client.errors.slice(errors);
  if (kind === "stdio") {
    expect(refused.length === 0, `the client reported: ${refused}`);
    return how;
  }
  expect(refused.length === 1 && /^Error POSTing to endpoint: .*"code":-32020.*missing required Mcp-Method header/.test(refused[0]),
    `the client reported: ${JSON.stringify(refused)}`);
  return `${how}; the notification refused: ${refused[0]}`;
});

// 2026-07-28 over HTTP is stateless: every exchange a POST, no session ID given.
if (kind === "http") {
  await check("stateless", async () => {
    const bad = exchanges.filter((x) => x.method !== "POST" || x.session);
    expect(exchanges.length > 0 && bad.length === 0, `${bad.length} of ${exchanges.length} exchanges were not stateless POSTs: ${JSON.stringify(bad.slice(0, 5))}`);
    return `${exchanges.length} POSTs, no Mcp-Session-Id`;
  });
}

checks.client_errors = { ok: true, detail: JSON.stringify(client.errors), ms: 0 };
console.log(JSON.stringify(checks));
await client.close();
clearTimeout(timer);
