"""MCP transports: stdio (default) and loopback streamable HTTP."""
