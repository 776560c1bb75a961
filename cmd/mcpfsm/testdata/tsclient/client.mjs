// client.mjs lists the tools of an MCP server and calls one, through the TypeScript
// SDK's client, and prints what it got as one JSON line. The cmd tests run it against
// mcpfsm serve:
//
//   node client.mjs stdio COMMAND [ARG...] -- TOOL ARGS_JSON
//   node client.mjs http URL -- TOOL ARGS_JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (argv.length < 4 || sep < 2 || sep + 2 >= argv.length + 1) {
  console.error("usage: client.mjs stdio COMMAND [ARG...] -- TOOL ARGS_JSON | http URL -- TOOL ARGS_JSON");
  process.exit(2);
}
const [kind, ...target] = argv.slice(0, sep);
const [tool, argsJSON] = argv.slice(sep + 1);
const transport = kind === "stdio"
  ? new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(target[0]));
const client = new Client({ name: "mcpfsm-tsclient", version: "1.0.0" });
const timer = setTimeout(() => { console.error("timed out"); process.exit(1); }, 20000);
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJSON || "{}") });
  console.log(JSON.stringify({
    server: client.getServerVersion(),
    tools: tools.map((t) => t.name),
    result,
  }));
  await client.close();
  clearTimeout(timer);
} catch (e) {
  console.error(String(e && e.stack || e));
  process.exit(1);
}
