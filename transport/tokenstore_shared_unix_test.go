//go:build unix

package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
)

// TestFileStoreKeepsNewerFromElsewhere: two processes share one FileStore (two
// gateways, a gateway and the CLI). Ours refreshed its token and handed the save
// to the store while the other process's save, of credentials obtained later (its
// own refresh, whose rotated refresh token retired ours), held the store's lock.
// Ours, made once the lock was given back, replaced them: the store was left with
// the refresh token the authorization server had retired, and the next start
// needed a login. The store now compares under its lock: ours, obtained earlier,
// is not written (Save says ErrNewerStored, which the client logs as credentials
// kept, not as a failure); credentials obtained later than the stored ones still
// are, and so are any whose time is not known.
func TestFileStoreKeepsNewerFromElsewhere(t *testing.T) {
	dir := t.TempDir()
	// The other process, its save holding the store's lock.
	other := exec.Command(os.Args[0], "-test.run=^$")
	other.Env = append(os.Environ(), storeHelperEnv+"="+dir)
	in, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = other.Process.Kill()
			_ = other.Wait()
		}
	})
	out := bufio.NewReader(stdout)
	said := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if strings.TrimSpace(line) != want {
			t.Fatalf("the other process said %q (%v), want %q", line, err, want)
		}
	}
	said("locked")

	p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true}, false)
	var logs syncBuffer
	store := &FileStore{Dir: dir}
	o, err := NewOAuth(p.config(&Auth{Store: store, Timeout: 300 * time.Millisecond}, false), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil { // expired: refreshed by the first request
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tok, _ := o.bearer(ctx); tok == "" {
		t.Fatal("the refresh gave no token")
	}
	ours := o.current()
	// The refresh's save waits for the lock (a renewal waits for its save for
	// Auth.Timeout only).
	if c, _ := store.Load(ctx, "authed"); c != nil {
		t.Fatal("saved while the other process held the store's lock")
	}

	// The other process's credentials, obtained after ours, land first.
	newer := p.issued(time.Now().Add(time.Hour))
	newer.Server = "authed"
	newer.Obtained = time.Now()
	if ours.Obtained.IsZero() || !newer.Obtained.After(ours.Obtained) {
		t.Fatalf("the refresh's credentials were obtained at %v, not before now: the client does not say when", ours.Obtained)
	}
	if err := json.NewEncoder(in).Encode(map[string]any{"Key": "authed", "Creds": newer}); err != nil {
		t.Fatal(err)
	}
	said("saved")
	exited = true
	if err := other.Wait(); err != nil {
		t.Fatalf("the other process: %v", err)
	}

	// Close waits for our save to land.
	if err := o.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	stored, err := store.Load(ctx, "authed")
	if err != nil || stored == nil {
		t.Fatalf("the store holds %v (%v)", stored, err)
	}
	if stored.Token.RefreshToken != newer.Token.RefreshToken {
		what := "something else"
		if stored.Token.RefreshToken == ours.Token.RefreshToken {
			what = "ours, obtained earlier"
		}
		t.Errorf("the store lost the other process's newer credentials for %s", what)
	}
	if l := logs.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "holds newer credentials") {
		t.Errorf("the client's log, want an info that the newer credentials were kept, no warning:\n%s", l)
	}

	// Direct saves: older ones are refused with ErrNewerStored; newer ones, ones
	// whose time is not known, and any over stored ones obtained after now (by a
	// clock since set back: not trusted) are written.
	older := *ours
	if err := store.Save(ctx, "authed", &older); !errors.Is(err, ErrNewerStored) {
		t.Errorf("a save of older credentials: %v, want ErrNewerStored", err)
	} else if strings.Contains(err.Error(), ours.Token.RefreshToken) || strings.Contains(err.Error(), newer.Token.AccessToken) {
		t.Errorf("the refusal quotes a token: %v", err)
	}
	later := p.issued(time.Now().Add(time.Hour))
	later.Obtained = time.Now()
	unknown := p.issued(time.Now().Add(time.Hour))
	future := p.issued(time.Now().Add(time.Hour))
	future.Obtained = time.Now().Add(time.Hour)
	afterFuture := p.issued(time.Now().Add(time.Hour))
	afterFuture.Obtained = time.Now()
	for _, c := range []*Credentials{later, unknown, future, afterFuture} {
		if err := store.Save(ctx, "authed", c); err != nil {
			t.Fatalf("save: %v", err)
		}
		if got, _ := store.Load(ctx, "authed"); got == nil || got.Token.RefreshToken != c.Token.RefreshToken {
			t.Errorf("a save of credentials obtained at %v was not written", c.Obtained)
		}
	}
}
