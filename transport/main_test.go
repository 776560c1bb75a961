package transport

import (
	"os"
	"testing"

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
