package transport

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
)

// TestStoreGetsTheCredentialsRenewedWhileItHung: a token store whose Load hung
// (abandoned) while a refresh rotated the refresh token: the refresh's save was not
// made (the store is not called while a call of it hangs), and once the store came
// back it held the old credentials, whose refresh token the token endpoint had
// retired, for good (until the next refresh): the next process, or another sharing
// the store, needed a login. The credentials held are saved once the store's last
// abandoned call returns.
func TestStoreGetsTheCredentialsRenewedWhileItHung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true}, false)
		store := &hungStore{}
		old := p.issued(time.Now().Add(10 * time.Second)) // to be refreshed before it is sent
		if err := store.heldStore.Save(context.Background(), "authed", old); err != nil {
			t.Fatal(err)
		}
		o, err := NewOAuth(p.config(&Auth{Store: store}, false), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		defer store.release()
		if err := o.load(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The store hangs in a read (a Reset: read it again), which is abandoned.
		store.hang()
		o.Reset()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_ = o.load(ctx)
		cancel()
		time.Sleep(storeTimeout + storeGrace)
		synctest.Wait()
		// A request refreshes the token meanwhile: the refresh token is rotated.
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		tok, _ := o.bearer(ctx)
		cancel()
		renewed := o.current()
		if tok == "" || renewed.Token.RefreshToken == old.Token.RefreshToken {
			t.Fatalf("not refreshed: token %q", tok)
		}
		// The store comes back.
		store.release()
		synctest.Wait()
		c, err := store.heldStore.Load(context.Background(), "authed")
		if err != nil {
			t.Fatal(err)
		}
		if c == nil || c.Token.RefreshToken != renewed.Token.RefreshToken {
			t.Errorf("the store holds the refresh token the endpoint retired, not the one renewed while it hung")
		}
	})
}
