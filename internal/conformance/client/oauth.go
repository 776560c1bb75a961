package main

// OAuth for the auth scenarios: the scenarios' OAuth configuration as the
// connection's transport.Auth. The connection's OAuth client runs the go-sdk's
// authorization code handler (discovery, client ID metadata documents,
// pre-registration, dynamic registration, PKCE, step-up) on the server's
// refusals, with the scenario's fetcher playing the user. Tokens stay in memory.

import (
	"net/http"

	"github.com/mcpfsm/mcpfsm/transport"
)

// authConfig returns the connection's auth for the scenarios' OAuth configuration.
// httpClient, if not nil, makes the requests to the authorization server.
func authConfig(oc *oauthConfig, httpClient *http.Client) *transport.Auth {
	a := &transport.Auth{
		RedirectURL:         oc.RedirectURL,
		Fetcher:             oc.Fetch,
		ClientIDMetadataURL: oc.ClientIDMetadataURL,
		Registration:        oc.Registration,
		NoRegistration:      oc.Registration == nil,
		Client:              httpClient,
	}
	if p := oc.Preregistered; p != nil {
		a.ClientID = p.ClientID
		if p.ClientSecretAuth != nil {
			a.ClientSecret = p.ClientSecretAuth.ClientSecret
		}
	}
	return a
}
