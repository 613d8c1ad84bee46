//! The MCP protocol engine.
