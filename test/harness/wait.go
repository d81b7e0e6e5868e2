package harness

import (
	"testing"
	"time"
)

// Patience bounds every wait of the tests: generous, because a loaded CI machine is slow, not
// because anything should take long.
const Patience = 60 * time.Second

// Backoff is client-go's reconnect backoff after an outage (up to 30 s), which a recovery waits
// for on top of Patience.
const Backoff = 30 * time.Second

// Eventually retries check until it returns nil, failing t with its last error after Patience.
func Eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	EventuallyWithin(t, Patience, what, check)
}

// EventuallyLong is Eventually for recoveries from an outage: Patience and Backoff.
func EventuallyLong(t testing.TB, what string, check func() error) {
	t.Helper()
	EventuallyWithin(t, Patience+Backoff, what, check)
}

// EventuallyWithin retries check every 50 ms until it returns nil, failing t with its last error
// after d.
func EventuallyWithin(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
