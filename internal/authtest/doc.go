// Package authtest is an OAuth 2.1 authorization server and a protected MCP
// endpoint for tests: protected resource metadata (RFC 9728), authorization
// server metadata (RFC 8414), dynamic client registration (RFC 7591), the
// authorization code grant with PKCE (S256), refresh tokens and client
// credentials, with counters and faults (revocation, a hanging token
// endpoint, malformed metadata, a redirect to another host, a scope it never
// grants). It serves on loopback (Start) or on an in-process pipe network
// (NewPipe) that works inside a testing/synctest bubble. No test reaches
// outside loopback.
package authtest
