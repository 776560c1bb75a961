package simulate_test

import (
	"io"
	"log/slog"
)

type slogLogger = slog.Logger

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
