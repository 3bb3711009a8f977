"""The floor: a bare low-level mcp Server with one trivial tool over the SDK's stdio transport.

CodeSpace's server-ready time is compared with this server's, measured in the same run.
"""

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="echo", description="echo", input_schema={"type": "object"})])


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


server = Server("floor", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
