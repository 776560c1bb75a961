package transport

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpfsm/mcpfsm/internal/authtest"
)

// slowSaves is a TokenStore in memory whose Saves each wait until the test lets
// that one go (or its context ends): a slow keychain, whose saves the test
// finishes in the order it likes.
type slowSaves struct {
	heldStore
	mu      sync.Mutex
	waiting []*slowSave // the Saves that wait, in the order they were called
	calls   int         // Saves called
	most    int         // the most Saves that waited at once
}

type slowSave struct {
	refresh string // the refresh token it saves
	letGo   chan struct{}
}

func (s *slowSaves) Save(ctx context.Context, key string, c *Credentials) error {
	g := &slowSave{refresh: c.Token.RefreshToken, letGo: make(chan struct{})}
	s.mu.Lock()
	s.calls++
	s.waiting = append(s.waiting, g)
	s.most = max(s.most, len(s.waiting))
	s.mu.Unlock()
	select {
	case <-g.letGo:
	case <-ctx.Done():
		s.drop(g)
		return ctx.Err()
	}
	return s.heldStore.Save(ctx, key, c)
}

func (s *slowSaves) drop(g *slowSave) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == g {
			s.waiting = append(s.waiting[:i:i], s.waiting[i+1:]...)
			return
		}
	}
}

// letGoNewestFirst lets every Save that waits go, the one called last first, each
// once the one before it has returned; it reports how many it let go.
func (s *slowSaves) letGoNewestFirst() int {
	s.mu.Lock()
	w := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	for i := len(w) - 1; i >= 0; i-- {
		close(w[i].letGo)
		synctest.Wait()
	}
	return len(w)
}

// TestSavesLandInOrder: the token store's saves were made each on a goroutine of
// its own, as they came: with a slow store, the save of a refresh's credentials and
// that of the next refresh (which rotated the refresh token) were in the store at
// once, and the older could land last: the store then held a refresh token the
// authorization server had retired, and the next process needed a login. The
// saves now go to the store one at a time, in the order the credentials were
// obtained, the newest waiting for the one under way and replacing any older that
// waits: the store ends holding the newest, whatever order its calls would
// finish in. No request waits past its deadline for a save, and Close returns by
// its context and unwindGrace with a save that does not return, and saves
// nothing after.
func TestSavesLandInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre", RotateRefresh: true, TokenLifetime: 4 * time.Second}, false)
		store := &slowSaves{}
		// Auth.Timeout bounds a renewal, its save's wait included: the request
		// that needed it has its token once that passes, the save still under way.
		o, err := NewOAuth(p.config(&Auth{Store: store, Timeout: 100 * time.Millisecond}, false), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.SetCredentials(p.issued(time.Now().Add(-time.Minute))); err != nil { // expired: refreshed by the first request
			t.Fatal(err)
		}
		refreshed := func(what string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			tok, _ := o.bearer(ctx)
			if tok == "" || time.Since(start) > time.Second {
				t.Fatalf("%s: token %q after %v (its deadline 1s)", what, tok, time.Since(start))
			}
			return o.current().Token.RefreshToken
		}
		first := refreshed("the first refresh") // its save waits in the store
		time.Sleep(3 * time.Second)             // the token is about to expire (4s): refreshed again
		second := refreshed("the second refresh")
		if first == second {
			t.Fatal("the refresh token was not rotated")
		}
		for store.letGoNewestFirst() > 0 {
		}
		stored, _ := store.heldStore.Load(context.Background(), "authed")
		store.mu.Lock()
		most := store.most
		store.mu.Unlock()
		if stored == nil || stored.Token.RefreshToken != second {
			t.Errorf("the store holds the refresh token the second refresh retired (at most %d saves under way at once), not the newest", most)
		}
		if most != 1 {
			t.Errorf("%d saves under way at once, want 1", most)
		}

		// A save that does not return (until its context ends), a newer one waiting
		// for it: Close returns by its context and unwindGrace, and the newer one
		// is not made after it.
		time.Sleep(3 * time.Second)
		third := refreshed("the third refresh")
		time.Sleep(3 * time.Second)
		fourth := refreshed("the fourth refresh")
		if third == fourth {
			t.Fatal("the refresh token was not rotated")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = o.Close(ctx)
		if d := time.Since(start); d > 500*time.Millisecond+unwindGrace {
			t.Errorf("Close returned after %v, its context 500ms", d)
		}
		var e *Error
		if !errors.As(err, &e) || e.Op != OpClose {
			t.Errorf("Close abandoned a save and said %v, want an *Error of op close", err)
		}
		synctest.Wait()
		store.mu.Lock()
		calls, waiting := store.calls, len(store.waiting)
		store.mu.Unlock()
		if calls != 3 || waiting != 0 {
			t.Errorf("the store's Save called %d times, %d waiting after Close; want 3 (the third refresh's), none", calls, waiting)
		}
	})
}

// TestAnOlderSaveAfterANewerIsNotMade: credentials handed to save after newer ones
// were (a renewal's goroutine that came late to its save) are not saved: the store
// keeps the newest, whichever save call came last.
func TestAnOlderSaveAfterANewerIsNotMade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeAuth(t, authtest.Options{ClientID: "pre"}, false)
		store := &heldStore{}
		o, err := NewOAuth(p.config(&Auth{Store: store}, false), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close(context.Background())
		older, newer := p.issued(time.Now().Add(time.Hour)), p.issued(time.Now().Add(time.Hour))
		o.save(context.Background(), newer, 2)
		o.save(context.Background(), older, 1)
		synctest.Wait()
		stored, _ := store.Load(context.Background(), "authed")
		if stored == nil || stored.Token.RefreshToken != newer.Token.RefreshToken {
			t.Errorf("the store holds %v, want the newer credentials (refresh token %q)", stored, newer.Token.RefreshToken)
		}
	})
}
