//go:build !unix

package main

import (
	"context"
	"time"
)

// watchHangup is never told of a hang-up where poll(2) is not at hand.
func watchHangup(context.Context, int, time.Duration) <-chan struct{} { return nil }

// watchReaderGone is never told of a reader gone where poll(2) is not at hand.
func watchReaderGone(context.Context, int, time.Duration) <-chan struct{} { return nil }
