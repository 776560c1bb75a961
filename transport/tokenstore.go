package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/oauth2"
)

// A TokenStore keeps the OAuth credentials of servers across restarts, one
// entry per key (a server's name). Implementations must be safe for concurrent
// use. Load returns nil, nil when it holds nothing for key. Load and Save are
// given a context that ends within 5 s (and at the OAuth client's Close):
// heed it. An OAuth client calls its store from goroutines of its own (one
// Load at a time, and one Save at a time, in the order the credentials were
// obtained: a Save waiting for the one under way is replaced by a newer one,
// never made after it, and dropped if the client takes newer credentials from
// the store meanwhile: another process's), which a request waits for until its
// own deadline only. A
// call still running 100 ms after its context ended is abandoned: said once in
// the log, and the store is not called again until that call returns (its
// reads and saves fail meanwhile; the credentials held in memory serve, and
// are saved once it returns if a save failed so), so
// that a store that hangs holds one goroutine, its own, and no request and no
// Close. A panic in Load or Save is that call's error, its stack logged.
//
// That order holds within one client. A store shared by several processes (two
// gateways, a gateway and the CLI) sees their saves interleave: a Save already
// made by one may come after newer credentials another saved (its refresh, whose
// rotated refresh token retired the older one's). Such a store should, as
// FileStore does, compare before it writes, atomically with the write: if what it
// holds for key was obtained later than c (Credentials.Obtained; both set, and
// the stored one not past the store's clock), keep it and return an error
// wrapping ErrNewerStored, which the client takes as
// another process's credentials kept, not as a failure (it reads the store before
// its next refresh). A store that does not compare keeps the last Save made.
type TokenStore interface {
	Load(ctx context.Context, key string) (*Credentials, error)
	Save(ctx context.Context, key string, c *Credentials) error
}

// Credentials are what an OAuth client keeps of a server's authorization: the
// token, and what refreshing it needs. Token and ClientSecret are secrets:
// String and Status never show them.
type Credentials struct {
	Server   string `json:"server,omitempty"`   // the server's name, for people reading the store
	Resource string `json:"resource,omitempty"` // the MCP endpoint the token is for; never sent elsewhere
	// TokenURL, AuthStyle, ClientID and ClientSecret are the client the token
	// was issued to, at the token endpoint that refreshes it.
	TokenURL     string        `json:"token_url,omitempty"`
	AuthStyle    int           `json:"auth_style,omitempty"` // an oauth2.AuthStyle
	ClientID     string        `json:"client_id,omitempty"`
	ClientSecret string        `json:"client_secret,omitempty"`
	Scopes       []string      `json:"scopes,omitempty"` // granted
	Token        *oauth2.Token `json:"token"`            // the access token, its expiry and refresh token
	// Obtained is when the OAuth client obtained them (a new authorization, a
	// refresh, a SetCredentials), by its wall clock: what a store shared by
	// processes compares to keep the newer (see TokenStore). Zero: unknown (an
	// entry written before it was kept), never taken for newer or older.
	Obtained time.Time `json:"obtained,omitzero"`
	Saved    time.Time `json:"saved,omitzero"` // when it was last saved
}

// ErrNewerStored is wrapped by the error of a TokenStore's Save that did not
// write the credentials given, because the store holds newer ones for the key
// (obtained later: another process's). The client keeps working with its own, and
// reads the store's before its next refresh.
var ErrNewerStored = errors.New("the token store holds newer credentials")

// String describes the credentials without their secrets.
func (c *Credentials) String() string {
	st := c.Status()
	return fmt.Sprintf("credentials for %s (token %v, refresh token %v, expiry %v, scopes %q)", safeURL(c.Resource), st.HasToken, st.HasRefresh, st.Expiry, c.Scopes)
}

// Status describes the credentials without their secrets.
func (c *Credentials) Status() TokenStatus {
	if c == nil || c.Token == nil {
		return TokenStatus{}
	}
	return TokenStatus{
		HasToken: c.Token.AccessToken != "", HasRefresh: c.Token.RefreshToken != "",
		Expiry: c.Token.Expiry, Scopes: c.Scopes,
	}
}

// FileStore is a TokenStore in a directory: one JSON file per key, readable by
// its owner only (0600, in a 0700 directory), replaced atomically (written
// aside, synced, renamed) so that a crash leaves the old file or the new one,
// never half of either. Saving credentials without a refresh token keeps the
// stored one for the same client: a refresh answer without one does not erase
// it. Saves from several processes are serialized by a lock file where the
// system has flock; a save waits for it until its context ends. Under that lock,
// a save compares before it writes: credentials obtained earlier than those stored
// (Credentials.Obtained, both set) are not written, and Save returns an error
// wrapping ErrNewerStored (a save of one process's, made after another's newer
// credentials had landed, once replaced them: the older refresh token, which the
// newer's refresh had retired, was what the next start found). The times are the
// processes' wall clocks: stored ones later than the saving process's clock are
// not trusted (a clock set back would have every save refused until it caught
// up), and are replaced. Where there is no flock the compare and the write are
// not atomic across processes.
type FileStore struct {
	Dir string // the directory; created (0700) at the first save
}

var _ TokenStore = (*FileStore)(nil)

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// Path returns the file of key: the key itself when it is letters, digits, -
// and _ (a server name), else a cleaned form with a hash of the key.
func (s *FileStore) Path(key string) string {
	name := key
	if clean := unsafeKeyChars.ReplaceAllString(key, "_"); clean != key || key == "" {
		sum := sha256.Sum256([]byte(key))
		name = clean + "-" + hex.EncodeToString(sum[:6])
	}
	return filepath.Join(s.Dir, name+".json")
}

// maxStoreFile bounds what FileStore.Load reads of a file: credentials are a
// few kilobytes (a token endpoint's answer is read up to 1 MiB).
const maxStoreFile = 4 << 20

// Load reads key's credentials; nil, nil if there are none. A file larger than
// 4 MiB, or one that is not a regular file (a FIFO would hold the read for ever), is
// not read: it is an error.
func (s *FileStore) Load(_ context.Context, key string) (*Credentials, error) {
	f, err := openRegular(s.Path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStoreFile+1))
	if err != nil {
		return nil, fmt.Errorf("token store: %w", err)
	}
	if len(data) > maxStoreFile {
		return nil, fmt.Errorf("token store: %s is larger than %d MiB: not credentials", s.Path(key), maxStoreFile>>20)
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil {
		// The file's text holds tokens: its name, not its contents.
		return nil, fmt.Errorf("token store: %s is not valid JSON credentials", s.Path(key))
	}
	return &c, nil
}

// openRegular opens path for reading if it is a regular file, and never blocks on
// one that is not (see readNoWait).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, readNoWait, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}

// Save writes key's credentials, atomically, unless newer ones are stored (see
// FileStore).
func (s *FileStore) Save(ctx context.Context, key string, c *Credentials) error {
	if c == nil || c.Token == nil {
		return errors.New("token store: no credentials to save")
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	unlock, err := lockDir(ctx, s.Dir)
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	defer unlock()
	return s.saveLocked(key, c)
}

// saveLocked is Save under the store's lock.
func (s *FileStore) saveLocked(key string, c *Credentials) error {
	cp := *c
	if old, err := s.Load(context.Background(), key); err == nil && old != nil && old.Token != nil {
		// A stored time past this process's clock is not trusted: a clock set
		// back (or another machine's, ahead) would have every later save
		// refused until the clock caught up, and the store keep a retired
		// refresh token meanwhile.
		if !old.Obtained.IsZero() && !cp.Obtained.IsZero() && old.Obtained.After(cp.Obtained) && !old.Obtained.After(time.Now()) {
			return fmt.Errorf("token store: %s: credentials obtained %s kept, not replaced by older ones (obtained %s): %w",
				s.Path(key), old.Obtained.Format(time.RFC3339Nano), cp.Obtained.Format(time.RFC3339Nano), ErrNewerStored)
		}
		if cp.Token.RefreshToken == "" && old.Token.RefreshToken != "" && sameClient(old, &cp) {
			t := *cp.Token
			t.RefreshToken = old.Token.RefreshToken
			cp.Token = &t
		}
	}
	data, err := json.MarshalIndent(&cp, "", "  ")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	path := s.Path(key)
	f, err := os.CreateTemp(s.Dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("token store: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("token store: %w", err)
	}
	ok = true
	if d, err := os.Open(s.Dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		d.Close()
	}
	return nil
}

// DefaultTokenDir is where the servers config keeps tokens unless its auth
// block names a store: $XDG_CONFIG_HOME/mcpfsm/tokens (os.UserConfigDir).
func DefaultTokenDir() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "mcpfsm", "tokens"), nil
}
