package transport

import _ "github.com/modelcontextprotocol/go-sdk/mcp"
