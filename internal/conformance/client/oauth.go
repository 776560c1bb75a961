package main

// OAuth for the auth scenarios: the go-sdk's authorization-code handler, built from the
// scenarios' configuration. (Issue 14 brings OAuth to mcpfsm.Conn; until then the auth
// scenarios cannot run through it.)

import (
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// authHandler makes the go-sdk's authorization-code handler from the scenarios' OAuth
// configuration.
func authHandler(oc *oauthConfig, httpClient *http.Client) (auth.OAuthHandler, error) {
	cfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:              oc.RedirectURL,
		AuthorizationCodeFetcher: oc.Fetch,
		PreregisteredClient:      oc.Preregistered,
		Client:                   httpClient,
	}
	if oc.ClientIDMetadataURL != "" {
		cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: oc.ClientIDMetadataURL}
	}
	if oc.Registration != nil {
		cfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{Metadata: oc.Registration}
	}
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", err)
	}
	return h, nil
}
