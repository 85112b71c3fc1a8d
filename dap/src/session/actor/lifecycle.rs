//! The debuggee's lifecycle in a DAP session: starting, then running and
//! stopped in turn, then ended — and how it ended, from what the adapter
//! said on the way (an exit code, lldb's crash signal, a QUIT asked for,
//! a Disconnect). No I/O: the actor tells it what happened, asks it which
//! end a session has, and does the rest.

use stepd_proto::v1::{DisconnectMode, EndReason, SessionState};

use super::exception::{signal_name, signal_number};
use crate::process::Ended;

/// The lifecycle. Invariants: the session ends once, with the first end
/// reason it is given; an exit code that was a signal (lldb) is not kept as
/// an exit code; the entry stop is expected only by the first stop.
#[derive(Debug)]
pub(super) struct Lifecycle {
    /// The state clients see (`Session.state`).
    state: SessionState,
    /// Why the session ended, once it did.
    end: Option<EndReason>,
    /// The next stop is the entry stop asked for (lldb reports it as
    /// "exception").
    entry_expected: bool,
    exit_code: Option<i32>,
    /// The signal the last exception stop was ("SIGSEGV"), if it was one.
    crash_signal: Option<String>,
    /// The signal that ended the debuggee.
    end_signal: Option<String>,
    /// A QUIT was answered: the end that follows is END_REASON_QUIT.
    quitting: bool,
}

/// What the end of a session carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ending {
    pub reason: EndReason,
    pub exit_code: Option<i32>,
    /// The signal that ended the debuggee; empty for none.
    pub signal: String,
    /// The adapter died or broke the protocol: the debuggee is killed with
    /// it, never left running without its debugger.
    pub kill_everything: bool,
}

impl Lifecycle {
    /// A session starting, which stops on entry when `stop_on_entry`.
    pub(super) fn new(stop_on_entry: bool) -> Self {
        Self {
            state: SessionState::Starting,
            end: None,
            entry_expected: stop_on_entry,
            exit_code: None,
            crash_signal: None,
            end_signal: None,
            quitting: false,
        }
    }

    /// The state clients see.
    pub(super) fn state(&self) -> SessionState {
        self.state
    }

    /// Whether the session has ended.
    pub(super) fn is_ended(&self) -> bool {
        self.end.is_some()
    }

    /// The configuration sequence is done: the program runs.
    pub(super) fn started(&mut self) -> SessionState {
        self.state = SessionState::Running;
        self.state
    }

    /// A stop is shown.
    pub(super) fn stopped(&mut self) -> SessionState {
        self.state = SessionState::Stopped;
        self.state
    }

    /// The program moved on; with no pause left it runs. None: the state
    /// is as it was.
    pub(super) fn resumed(&mut self, pauses_left: bool) -> Option<SessionState> {
        if pauses_left {
            return None;
        }
        self.state = SessionState::Running;
        Some(self.state)
    }

    /// Whether this stop is the entry stop asked for: only the first stop
    /// is, whatever reason the adapter gives it.
    pub(super) fn take_entry(&mut self) -> bool {
        std::mem::take(&mut self.entry_expected)
    }

    /// An exception stop was this signal, or none.
    pub(super) fn crashed(&mut self, signal: Option<String>) {
        self.crash_signal = signal;
    }

    /// The adapter's `exited` event. lldb reports a debuggee killed by a
    /// signal as exited with the signal's number as its code, right after
    /// the exception stop that showed the signal: that exit is the signal,
    /// and has no exit code. A plain exit code is no signal.
    pub(super) fn exited(&mut self, code: i64) {
        self.exit_code = i32::try_from(code).ok();
        self.end_signal = self
            .crash_signal
            .as_ref()
            .filter(|signal| signal_number(signal) == self.exit_code)
            .cloned();
        if self.end_signal.is_some() {
            self.exit_code = None;
        }
    }

    /// The watched debuggee ended while stopped, as its zombie tells (None:
    /// it could not be read).
    pub(super) fn ended_while_stopped(&mut self, how: Option<Ended>) {
        match how {
            Some(Ended::Signaled(number)) => {
                self.end_signal = Some(
                    signal_name(number).map_or_else(|| format!("signal {number}"), str::to_owned),
                );
                self.exit_code = None;
            }
            Some(Ended::Exited(code)) => self.exit_code = Some(code),
            None => {}
        }
    }

    /// A QUIT was answered: the program is being terminated at a client's
    /// word.
    pub(super) fn quit_asked(&mut self) {
        self.quitting = true;
    }

    /// How the debuggee ended, once it was told: by a signal or exited.
    fn debuggee_end(&self) -> Option<EndReason> {
        if self.end_signal.is_some() {
            Some(EndReason::Signaled)
        } else {
            self.exit_code.map(|_| EndReason::Exited)
        }
    }

    /// The end at the adapter's `terminated` event.
    pub(super) fn at_terminated(&self) -> EndReason {
        if self.quitting {
            EndReason::Quit
        } else {
            self.debuggee_end().unwrap_or(EndReason::Terminated)
        }
    }

    /// The end when the adapter closed its connection: an adapter that goes
    /// before its debuggee's end was told died.
    pub(super) fn at_adapter_closed(&self) -> EndReason {
        self.debuggee_end().unwrap_or(EndReason::AdapterDied)
    }

    /// The end when the watched debuggee ended while stopped.
    pub(super) fn at_debuggee_gone(&self) -> EndReason {
        self.debuggee_end().unwrap_or(EndReason::Terminated)
    }

    /// The session ends: None when it had ended already (the first end
    /// stands).
    pub(super) fn end(&mut self, reason: EndReason) -> Option<Ending> {
        if self.end.is_some() {
            return None;
        }
        self.end = Some(reason);
        self.state = SessionState::Ended;
        Some(Ending {
            reason,
            exit_code: self.exit_code,
            signal: self.end_signal.clone().unwrap_or_default(),
            kill_everything: matches!(reason, EndReason::AdapterDied | EndReason::ProtocolError),
        })
    }

    /// The debuggee's exit code, once told.
    pub(super) fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }
}

/// What a Disconnect does: whether the debuggee is terminated, and the end
/// it makes. A launched program is terminated, an attached one let go,
/// unless the mode says otherwise.
pub(super) fn disconnect(mode: DisconnectMode, attached: bool) -> (bool, EndReason) {
    let terminate = match mode {
        DisconnectMode::Terminate => true,
        DisconnectMode::Detach => false,
        DisconnectMode::Unspecified => !attached,
    };
    let reason = if terminate {
        EndReason::Terminated
    } else {
        EndReason::Detached
    };
    (terminate, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_goes_from_starting_through_running_and_stopped_to_ended() {
        let mut life = Lifecycle::new(false);
        assert_eq!(life.state(), SessionState::Starting);
        assert_eq!(life.started(), SessionState::Running);
        assert_eq!(life.stopped(), SessionState::Stopped);
        assert_eq!(life.resumed(true), None, "another thread is still stopped");
        assert_eq!(life.state(), SessionState::Stopped);
        assert_eq!(life.resumed(false), Some(SessionState::Running));
        assert!(!life.is_ended());
        let ending = life.end(EndReason::Terminated).expect("the first end");
        assert_eq!(ending.reason, EndReason::Terminated);
        assert_eq!(life.state(), SessionState::Ended);
        assert!(
            life.end(EndReason::AdapterDied).is_none(),
            "the first end stands"
        );
        life.stopped();
        assert!(life.is_ended(), "nothing after the end undoes it");
    }

    #[test]
    fn only_the_first_stop_is_the_entry_stop_asked_for() {
        let mut asked = Lifecycle::new(true);
        assert!(asked.take_entry());
        assert!(!asked.take_entry());
        assert!(!Lifecycle::new(false).take_entry());
    }

    /// What happened before the end, in order.
    #[derive(Clone, Copy)]
    enum Told {
        Crash(&'static str),
        ExitCode(i64),
        QuitAnswered,
        Zombie(Ended),
    }

    fn told(events: &[Told]) -> Lifecycle {
        let mut life = Lifecycle::new(false);
        life.started();
        for event in events {
            match *event {
                Told::Crash(signal) => life.crashed(Some(signal.to_owned())),
                Told::ExitCode(code) => life.exited(code),
                Told::QuitAnswered => life.quit_asked(),
                Told::Zombie(how) => life.ended_while_stopped(Some(how)),
            }
        }
        life
    }

    /// What was told; the end at terminated, at the adapter's close and at
    /// the debuggee gone while stopped; the exit code and signal kept.
    type Case<'a> = (
        &'a str,
        &'a [Told],
        EndReason,
        EndReason,
        EndReason,
        Option<i32>,
        &'a str,
    );

    #[test]
    fn the_end_reason_of_each_way_to_end() {
        let sigsegv = i64::from(signal_number("SIGSEGV").unwrap());
        use EndReason::*;
        use Told::*;
        let cases: &[Case] = &[
            (
                "nothing told",
                &[],
                Terminated,
                AdapterDied,
                Terminated,
                None,
                "",
            ),
            (
                "an exit code",
                &[ExitCode(3)],
                Exited,
                Exited,
                Exited,
                Some(3),
                "",
            ),
            (
                "lldb's exit with the signal's number after the crash is the signal",
                &[Crash("SIGSEGV"), ExitCode(sigsegv)],
                Signaled,
                Signaled,
                Signaled,
                None,
                "SIGSEGV",
            ),
            (
                "a plain exit code after a crash is no signal",
                &[Crash("SIGSEGV"), ExitCode(1)],
                Exited,
                Exited,
                Exited,
                Some(1),
                "",
            ),
            (
                "a QUIT answered ends as QUIT at terminated only",
                &[QuitAnswered, ExitCode(0)],
                Quit,
                Exited,
                Exited,
                Some(0),
                "",
            ),
            (
                "a zombie killed by a signal",
                &[Zombie(Ended::Signaled(9))],
                Signaled,
                Signaled,
                Signaled,
                None,
                "SIGKILL",
            ),
            (
                "a zombie that exited",
                &[Zombie(Ended::Exited(7))],
                Exited,
                Exited,
                Exited,
                Some(7),
                "",
            ),
        ];
        for (what, events, terminated, closed, gone, code, signal) in cases {
            let life = told(events);
            assert_eq!(life.at_terminated(), *terminated, "{what}: terminated");
            assert_eq!(life.at_adapter_closed(), *closed, "{what}: closed");
            assert_eq!(life.at_debuggee_gone(), *gone, "{what}: gone");
            let ending = told(events).end(*terminated).unwrap();
            assert_eq!(ending.exit_code, *code, "{what}: exit code");
            assert_eq!(ending.signal, *signal, "{what}: signal");
        }
    }

    #[test]
    fn only_an_adapter_that_died_or_broke_the_protocol_takes_the_debuggee_with_it() {
        use EndReason::*;
        for (reason, kills) in [
            (AdapterDied, true),
            (ProtocolError, true),
            (Terminated, false),
            (Detached, false),
            (Exited, false),
            (Quit, false),
        ] {
            let ending = Lifecycle::new(false).end(reason).unwrap();
            assert_eq!(ending.kill_everything, kills, "{reason:?}");
        }
    }

    #[test]
    fn a_disconnect_terminates_a_launched_program_and_lets_an_attached_one_go() {
        use DisconnectMode::*;
        let cases = [
            (Unspecified, false, (true, EndReason::Terminated)),
            (Unspecified, true, (false, EndReason::Detached)),
            (Terminate, true, (true, EndReason::Terminated)),
            (Detach, false, (false, EndReason::Detached)),
        ];
        for (mode, attached, want) in cases {
            assert_eq!(
                disconnect(mode, attached),
                want,
                "{mode:?} attached={attached}"
            );
        }
    }
}
