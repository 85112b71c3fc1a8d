package stepd_test

import (
	"errors"
	"testing"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
	"github.com/stepd-dev/stepd/clients/go/stepd"
)

// Every ErrorReason value (but UNSPECIFIED) has its own sentinel, which
// matches exactly the errors of that reason.
func TestEveryReasonHasADistinctSentinel(t *testing.T) {
	seen := map[error]stepdv1.ErrorReason{}
	for v := range stepdv1.ErrorReason_name {
		reason := stepdv1.ErrorReason(v)
		if reason == stepdv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			if stepd.Sentinel(reason) != nil {
				t.Error("UNSPECIFIED has a sentinel")
			}
			continue
		}
		s := stepd.Sentinel(reason)
		if s == nil {
			t.Errorf("%v has no sentinel", reason)
			continue
		}
		if other, dup := seen[s]; dup {
			t.Errorf("%v and %v share a sentinel", reason, other)
		}
		seen[s] = reason

		name := stepd.ReasonName(reason)
		if parsed, ok := stepd.ParseReason(name); !ok || parsed != reason {
			t.Errorf("ParseReason(%q) = %v, %v", name, parsed, ok)
		}
		err := error(&stepd.Error{Reason: reason, ReasonName: name})
		for other := range stepdv1.ErrorReason_name {
			otherSentinel := stepd.Sentinel(stepdv1.ErrorReason(other))
			if otherSentinel == nil {
				continue
			}
			if got, want := errors.Is(err, otherSentinel), other == v; got != want {
				t.Errorf("errors.Is(%s error, %v) = %v", name, otherSentinel, got)
			}
		}
	}
	if len(seen) != len(stepdv1.ErrorReason_name)-1 {
		t.Errorf("%d sentinels for %d reasons", len(seen), len(stepdv1.ErrorReason_name)-1)
	}
	// The named variables are those sentinels.
	if stepd.Sentinel(stepdv1.ErrorReason_ERROR_REASON_PAUSE_NOT_FOUND) != stepd.ErrPauseNotFound {
		t.Error("ErrPauseNotFound is not the PAUSE_NOT_FOUND sentinel")
	}
	if stepd.ReasonName(stepdv1.ErrorReason_ERROR_REASON_PAUSE_NOT_FOUND) != "PAUSE_NOT_FOUND" {
		t.Error("reason names drop the ERROR_REASON_ prefix")
	}
	// An error without a stepd reason matches no sentinel.
	if errors.Is(&stepd.Error{}, stepd.ErrInternal) {
		t.Error("an error without reason matches ErrInternal")
	}
}
