// A stdio MCP server on the TypeScript SDK that prints to stdout what is not a
// message, as many servers do: a banner at its start, a log line when it is
// connected, and one in each call of its echo tool (console.log writes to stdout).
// The TypeScript SDK's own client skips such lines; mcpfsm does too
// (TestInterop_ServerPrintingToStdout).
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

console.log("Banner server v1.0 starting on stdio...");

const server = new Server({ name: "banner-server", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [{
    name: "echo",
    description: "Echoes its text, and logs the call to stdout.",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  }],
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  console.log(`[INFO] echo called with ${JSON.stringify(req.params.arguments)}`);
  console.log(JSON.stringify({ level: "info", msg: "echo", at: new Date().toISOString() }));
  return { content: [{ type: "text", text: String(req.params.arguments?.text ?? "") }] };
});
await server.connect(new StdioServerTransport());
console.log("connected");
