package stepd

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stepdv1 "github.com/stepd-dev/stepd/clients/go/gen/stepd/v1"
)

// ErrorDomain is the ErrorInfo domain of stepd's errors.
const ErrorDomain = "stepd.dev"

const reasonPrefix = "ERROR_REASON_"

// Error is a failed stepd call: the gRPC status decoded with its
// google.rpc.ErrorInfo and google.rpc.BadRequest details.
//
// Every method of [Client] returns an *Error for a failed RPC; use
// errors.As to read it, or errors.Is with a sentinel such as
// [ErrPauseNotFound] to test the reason.
type Error struct {
	// Reason is the stepd error reason; ERROR_REASON_UNSPECIFIED when the
	// status carried no stepd ErrorInfo (e.g. the daemon is unreachable).
	Reason stepdv1.ErrorReason
	// ReasonName is ErrorInfo.reason as received, e.g. "PAUSE_NOT_FOUND"
	// (also set for reasons newer than this client).
	ReasonName string
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message.
	Message string
	// Metadata is ErrorInfo.metadata: ids, paths, limits.
	Metadata map[string]string
	// FieldViolations are the malformed request fields (INVALID_ARGUMENT).
	FieldViolations []FieldViolation

	status   *status.Status
	sentinel bool
}

// FieldViolation names one malformed field of a request.
type FieldViolation struct {
	// Field is the path of the field, e.g. "spec.source.line".
	Field string
	// Description says what is wrong with it.
	Description string
}

func (e *Error) Error() string {
	if e.sentinel {
		return "stepd: " + e.ReasonName
	}
	var b strings.Builder
	b.WriteString("stepd: ")
	if e.ReasonName != "" {
		b.WriteString(e.ReasonName)
	} else {
		b.WriteString(e.Code.String())
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's reason, or the context
// error matching a Canceled / DeadlineExceeded code.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		if t == e {
			return true
		}
		return t.sentinel && e.Reason != stepdv1.ErrorReason_ERROR_REASON_UNSPECIFIED && t.Reason == e.Reason
	}
	switch target {
	case context.Canceled:
		return e.Code == codes.Canceled
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	}
	return false
}

// GRPCStatus makes status.FromError and status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status {
	if e.status != nil {
		return e.status
	}
	return status.New(e.Code, e.Message)
}

// Sentinels, one per ErrorReason, for errors.Is.
var (
	ErrSessionNotFound      = sentinel(stepdv1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND)
	ErrPauseNotFound        = sentinel(stepdv1.ErrorReason_ERROR_REASON_PAUSE_NOT_FOUND)
	ErrAlreadyAnswered      = sentinel(stepdv1.ErrorReason_ERROR_REASON_ALREADY_ANSWERED)
	ErrNotStopped           = sentinel(stepdv1.ErrorReason_ERROR_REASON_NOT_STOPPED)
	ErrStaleHandle          = sentinel(stepdv1.ErrorReason_ERROR_REASON_STALE_HANDLE)
	ErrAdapterNotFound      = sentinel(stepdv1.ErrorReason_ERROR_REASON_ADAPTER_NOT_FOUND)
	ErrAdapterDied          = sentinel(stepdv1.ErrorReason_ERROR_REASON_ADAPTER_DIED)
	ErrUnsupportedByAdapter = sentinel(stepdv1.ErrorReason_ERROR_REASON_UNSUPPORTED_BY_ADAPTER)
	ErrProtocolError        = sentinel(stepdv1.ErrorReason_ERROR_REASON_PROTOCOL_ERROR)
	ErrInvalidCommand       = sentinel(stepdv1.ErrorReason_ERROR_REASON_INVALID_COMMAND)
	ErrLimitExceeded        = sentinel(stepdv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED)
	ErrUnauthenticated      = sentinel(stepdv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
	ErrPermissionDenied     = sentinel(stepdv1.ErrorReason_ERROR_REASON_PERMISSION_DENIED)
	ErrInvalidArgument      = sentinel(stepdv1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT)
	ErrBreakpointNotFound   = sentinel(stepdv1.ErrorReason_ERROR_REASON_BREAKPOINT_NOT_FOUND)
	ErrInspectorNotFound    = sentinel(stepdv1.ErrorReason_ERROR_REASON_INSPECTOR_NOT_FOUND)
	ErrNotImplemented       = sentinel(stepdv1.ErrorReason_ERROR_REASON_NOT_IMPLEMENTED)
	ErrShuttingDown         = sentinel(stepdv1.ErrorReason_ERROR_REASON_SHUTTING_DOWN)
	ErrStoreUnavailable     = sentinel(stepdv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE)
	ErrInternal             = sentinel(stepdv1.ErrorReason_ERROR_REASON_INTERNAL)
	ErrSessionEnded         = sentinel(stepdv1.ErrorReason_ERROR_REASON_SESSION_ENDED)
	ErrInvalidValue         = sentinel(stepdv1.ErrorReason_ERROR_REASON_INVALID_VALUE)
	ErrLaunchFailed         = sentinel(stepdv1.ErrorReason_ERROR_REASON_LAUNCH_FAILED)
	ErrAdapterError         = sentinel(stepdv1.ErrorReason_ERROR_REASON_ADAPTER_ERROR)
	ErrReplicaUnavailable   = sentinel(stepdv1.ErrorReason_ERROR_REASON_REPLICA_UNAVAILABLE)
	ErrTokenExpired         = sentinel(stepdv1.ErrorReason_ERROR_REASON_TOKEN_EXPIRED)
	ErrProbeNotReading      = sentinel(stepdv1.ErrorReason_ERROR_REASON_PROBE_NOT_READING)
)

var sentinels = map[stepdv1.ErrorReason]*Error{}

func sentinel(reason stepdv1.ErrorReason) *Error {
	e := &Error{Reason: reason, ReasonName: ReasonName(reason), sentinel: true}
	sentinels[reason] = e
	return e
}

// Sentinel returns the sentinel error of a reason (nil for UNSPECIFIED or an
// unknown value).
func Sentinel(reason stepdv1.ErrorReason) error {
	if e, ok := sentinels[reason]; ok {
		return e
	}
	return nil
}

// ReasonName is a reason as sent in ErrorInfo.reason: the enum value's name
// without the ERROR_REASON_ prefix, e.g. "PAUSE_NOT_FOUND".
func ReasonName(reason stepdv1.ErrorReason) string {
	return strings.TrimPrefix(reason.String(), reasonPrefix)
}

// ParseReason is the inverse of [ReasonName]; false for an unknown name.
func ParseReason(name string) (stepdv1.ErrorReason, bool) {
	v, ok := stepdv1.ErrorReason_value[reasonPrefix+name]
	if !ok || v == 0 {
		return stepdv1.ErrorReason_ERROR_REASON_UNSPECIFIED, false
	}
	return stepdv1.ErrorReason(v), true
}

// FromError decodes an error returned by a generated client into an *Error.
// It returns nil for nil, and err itself when err is not a gRPC status.
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() != ErrorDomain && d.GetDomain() != "" {
				continue
			}
			e.ReasonName = d.GetReason()
			e.Reason, _ = ParseReason(d.GetReason())
			e.Metadata = d.GetMetadata()
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return e
}

// wrap is FromError for the Client's methods.
func wrap(err error) error { return FromError(err) }

// StreamErrorToError turns an `error` event of a subscription (e.g. a failed
// DebugInput) into an *Error.
func StreamErrorToError(se *stepdv1.StreamError) *Error {
	if se == nil {
		return nil
	}
	e := &Error{
		Reason:   se.GetReason(),
		Code:     codes.Code(se.GetCode()),
		Message:  se.GetMessage(),
		Metadata: map[string]string{},
	}
	if e.Reason != stepdv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		e.ReasonName = ReasonName(e.Reason)
	}
	for k, v := range se.GetMetadata() {
		e.Metadata[k] = v
	}
	if _, ok := e.Metadata["key"]; !ok && se.GetKey() != "" {
		e.Metadata["key"] = se.GetKey()
	}
	return e
}
