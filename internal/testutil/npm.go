package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NpmCI installs the pinned npm packages of dir (its package-lock.json, with npm
// ci) unless its node_modules was installed from the same lock, and returns dir as an
// absolute path. It skips the test when node or npm is missing, unless
// MCPFSM_REQUIRE_NODE is set (CI sets it): then it fails.
//
// The check and the install hold an exclusive lock on dir (see lockDir): the test
// binaries of several packages, run at once by go test ./..., share a dir
// (testdata/interop), and npm ci removes node_modules before it installs it. Two
// installs at once on a clean clone had one test's node run a server from a
// node_modules the other's npm ci was filling ("Cannot find package").
func NpmCI(t *testing.T, dir string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("MCPFSM_REQUIRE_NODE") != "" {
				t.Fatalf("%s is not installed and MCPFSM_REQUIRE_NODE is set", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stampFile := filepath.Join(dir, "node_modules", ".mcpfsm-lock.sha256")
	if have, _ := os.ReadFile(stampFile); string(have) != want {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
		if err := os.WriteFile(stampFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
