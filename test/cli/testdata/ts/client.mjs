// An MCP host we did not write: the official TypeScript SDK's client drives
// `kubectl-workbench mcp` over stdio and prints what it saw as one JSON object.
// Usage: node client.mjs <kubectl-workbench> <args...>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, stderr: "inherit" });
const client = new Client({ name: "ts-sdk-test", version: "0.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const environments = await client.callTool({ name: "list_environments", arguments: {} });
const run = await client.callTool({ name: "run_command", arguments: { argv: ["git", "status"], environment: "e" } });
const refused = await client.callTool({ name: "run_command", arguments: { argv: ["git", "push"], environment: "e", profile: "git-strict" } });
const server = client.getServerVersion();
await client.close();
console.log(JSON.stringify({ server, tools: tools.tools.map((t) => t.name).sort(), environments, run, refused }));
