// Package stepd is the Go client of the stepd debugging daemon.
//
// It wraps the generated stepd.v1 gRPC clients (package
// github.com/stepd-dev/stepd/clients/go/gen/stepd/v1) with:
//
//   - [Dial], which connects to a daemon over TCP or a Unix socket;
//   - context-aware methods for the daemon, breakpoint and session RPCs,
//     whose errors are [*Error] values carrying the stepd error reason;
//   - constructors for breakpoint specs ([SourceBreakpoint], ...) and debug
//     commands ([CmdContinue], [CmdInject] from any JSON-marshalable value, ...);
//   - [Session], a handle on one session ([Client.LaunchSession]) whose Close
//     ends it, and [Client.WaitForPause];
//   - [Client.Subscribe], an event subscription that survives dropped
//     connections: it resumes after the last event it delivered, so no event
//     is lost or delivered twice;
//   - [Client.SessionHistory], a session's recorded events read back page
//     by page, also after it ended.
//   - [Client.EndedSessions], the sessions that ended on any replica
//     sharing the daemon's store, by labels and time, page by page.
//
// The generated clients of the other services (inspector, probe, raw event
// stream) are available from [Client.Inspector], [Client.Probe] and
// [Client.EventService].
package stepd
