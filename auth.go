package mcpfsm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/mcpfsm/mcpfsm/machine"
	"github.com/mcpfsm/mcpfsm/states"
	"github.com/mcpfsm/mcpfsm/transport"
)

// This file is the part of a Conn that concerns authorization (docs/auth.md): the
// OAuth client its sessions share, the credentials trigger, and what a request the
// server refused for its credentials does to the connection.
//
// How a refusal reaches the unauthorized state, with the engine kept generic:
//   - on connect, the refusal is the connect's failure, of cause auth, and the spec's
//     connect_failed edge guarded by "unauthorized" leads there;
//   - mid-session, a request refused with 401 (after the session's OAuth client
//     refreshed the token, or found it could not) reports the session lost with cause
//     auth: the default lifecycle tears it down and connects again, and that connect
//     meets the refusal (or new credentials) and ends as above. Cause auth spends no
//     retry budget and opens no breaker (engine rule 1). A 403 refuses the request,
//     not the credentials: the connection is left as it is.

// ErrNoOAuth is the error of SetCredentials on a connection whose server has no
// OAuth client (transport.Auth with a grant).
var ErrNoOAuth = errors.New("the connection has no OAuth client")

// withAuth returns cfg with the OAuth client its Auth describes built once, so that
// every session of the connection shares it (its tokens, its refresh, its one
// authorization at a time): prev's, if prev was built from the same auth config for
// the same server and URL. cfg's HTTP settings are copied, not changed: the caller's
// config (a Manager's, compared on reload) keeps its plain auth block. built is the
// OAuth client it built, if it built one: the connection's to close (see closeAuth).
func withAuth(cfg transport.Config, prev transport.Config, log *slog.Logger) (_ transport.Config, built *transport.OAuth, _ error) {
	h := cfg.HTTP
	if h == nil {
		h = cfg.SSE
	}
	if h == nil || h.Auth == nil || h.Auth.Handler != nil || h.Auth.Token != nil {
		return cfg, nil, nil
	}
	o := oauthOf(prev)
	if o == nil || !o.For(cfg) {
		var err error
		if log == nil {
			log = slog.Default()
		}
		if o, err = transport.NewOAuth(cfg, log); err != nil {
			return cfg, nil, err
		}
		built = o
	}
	cp := *h
	cp.Auth = &transport.Auth{Handler: o}
	if cfg.HTTP != nil {
		cfg.HTTP = &cp
	} else {
		cfg.SSE = &cp
	}
	return cfg, built, nil
}

// ownAuth records an OAuth client withAuth built for the connection (nil: none).
func (c *Conn) ownAuth(o *transport.OAuth) {
	if o == nil {
		return
	}
	c.authMu.Lock()
	c.auths = append(c.auths, o)
	c.authMu.Unlock()
}

// closeAuth closes the OAuth clients the connection built (its config's, and those
// of the configs a Reconfigure replaced, which sessions dialed before may have used
// until they closed): a token renewal under way, which goes on after the request
// that started it gave up, is waited for until ctx ends (so that its token is
// saved), then abandoned. (Nothing once waited for it: it ran on past Close for up
// to the auth timeout.) The connection's sessions are closed by then.
func (c *Conn) closeAuth(ctx context.Context) {
	c.authMu.Lock()
	auths := c.auths
	c.auths = nil
	c.authMu.Unlock()
	for _, o := range auths {
		_ = o.Close(ctx) // an abandoned renewal is logged
	}
}

// oauthOf returns the OAuth client withAuth built into cfg, or nil.
func oauthOf(cfg transport.Config) *transport.OAuth {
	h := cfg.HTTP
	if h == nil {
		h = cfg.SSE
	}
	if h == nil || h.Auth == nil {
		return nil
	}
	o, _ := h.Auth.Handler.(*transport.OAuth)
	return o
}

// CredentialsChanged tells the connection that its server's credentials changed
// outside it (a login by `mcpfsm auth login` into the token store, a token handed to
// the OAuth client): the OAuth client forgets what failed and reads its store again,
// and a connection in unauthorized tries at once (the spec's credentials trigger)
// instead of at its next re-check. A live session uses the new credentials from its
// next request.
func (c *Conn) CredentialsChanged() {
	if o := oauthOf(c.cfg.Load().cfg); o != nil {
		o.Reset()
	}
	c.m.Post(machine.Event{Trigger: states.Credentials})
}

// SetCredentials hands the connection's OAuth client credentials obtained elsewhere
// (at least a token; with the token URL and client that refresh it, if it can be
// refreshed), calls CredentialsChanged, and waits until the connection has acted on
// it (from unauthorized: a connect with them, within connect_timeout), or ctx ends:
// a request made after it returns sees the outcome. The credentials are saved in the
// token store once the server has accepted them, not before: the stored ones stay
// until the new ones work. ErrNoOAuth if the server's auth is not an OAuth grant (a
// token source or a handler of the caller's is the caller's to change: change it,
// then call CredentialsChanged). Not to be called from an Observer.
func (c *Conn) SetCredentials(ctx context.Context, creds *transport.Credentials) error {
	o := oauthOf(c.cfg.Load().cfg)
	if o == nil {
		return fmt.Errorf("mcpfsm: server %q: %w", c.name, ErrNoOAuth)
	}
	if err := o.SetCredentials(creds); err != nil {
		return err
	}
	c.CredentialsChanged()
	if err := c.m.Sync(ctx); err != nil && !errors.Is(err, machine.ErrClosed) {
		return err
	}
	return nil
}

// refusedCall is what a request the server refused for its credentials (cause auth)
// on s does: a 401 reports the session lost with cause auth (see the file's comment);
// the error returned wraps ErrUnauthorized.
func (c *Conn) refusedCall(s *session, err error) error {
	if authStatus(err) == http.StatusUnauthorized && s.reported.CompareAndSwap(false, true) {
		c.m.Post(machine.Event{Trigger: states.Lost, Cause: states.CauseAuth, Err: err, Session: s.id})
	}
	return fmt.Errorf("%w: %w", ErrUnauthorized, err)
}

// authStatus returns the HTTP status of the refusal err reports (0 if none).
func authStatus(err error) int {
	var ae *transport.AuthError
	if errors.As(err, &ae) {
		return ae.Status
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.HTTPStatus
	}
	return 0
}
