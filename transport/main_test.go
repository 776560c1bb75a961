package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(storeHelperEnv); dir != "" {
		// This process is another process sharing a token store (see
		// TestFileStoreKeepsNewerFromElsewhere).
		storeHelper(dir)
		return
	}
	if os.Getenv(helperEnv) != "" {
		// This process is the helper of a test (see TestChildDiesWithParent).
		helperParent()
		return
	}
	goleak.VerifyTestMain(m)
}

// helperEnv names the environment variable that makes the test binary a
// helper process (see TestMain).
const helperEnv = "MCPFSM_TRANSPORT_TEST_HELPER"

// helperParent dials a stdio server that ignores stdin EOF and SIGTERM
// (the test server binary, whose path is in helperEnv), prints its pid, and
// waits to be killed.
func helperParent() {
	cfg := Config{Name: "orphan", Stdio: &Stdio{Command: os.Getenv(helperEnv), Args: testserver.Args(testserver.Options{HangClose: true})}}
	s, err := Dial(context.Background(), cfg, Options{})
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	fmt.Println(s.proc.cmd.Process.Pid)
	select {}
}

// storeHelperEnv names the environment variable that makes the test binary
// another process saving to the file store in the directory it names (see
// storeHelper).
const storeHelperEnv = "MCPFSM_TRANSPORT_TEST_STORE"

// storeHelper is a process whose save to the FileStore in dir has taken the
// store's lock: it says "locked", reads a key and the JSON of credentials from a
// line of its input, saves them, says "saved" and exits.
func storeHelper(dir string) {
	s := &FileStore{Dir: dir}
	unlock, err := lockDir(context.Background(), dir)
	if err != nil {
		fmt.Println("lock:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	var in struct {
		Key   string
		Creds *Credentials
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Println("input:", err)
		os.Exit(1)
	}
	if err := s.saveLocked(in.Key, in.Creds); err != nil {
		fmt.Println("save:", err)
		os.Exit(1)
	}
	unlock()
	fmt.Println("saved")
}
