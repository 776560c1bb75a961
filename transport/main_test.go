package transport

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mcpfsm/mcpfsm/transport/testserver"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
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
