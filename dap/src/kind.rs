//! The kinds of debug adapter stepd knows, and each difference between them
//! that stepd works around. Everything else treats adapters alike and asks
//! the kind, never its name.

/// A kind of adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdapterKind {
    /// `python3 -m debugpy.adapter`.
    Debugpy,
    /// `lldb-dap` / `lldb-vscode`.
    Lldb,
    /// `dlv dap`.
    Dlv,
    /// `gdb -i dap`.
    Gdb,
    /// A command the user named: plain DAP, capabilities as announced.
    Custom,
}

/// The script debugpy's adapter is started through (why: in the script).
const DEBUGPY_ADAPTER_START: &str = include_str!("debugpy_adapter.py");

impl AdapterKind {
    /// The kinds the registry can find by name.
    pub const KNOWN: [Self; 4] = [Self::Debugpy, Self::Lldb, Self::Dlv, Self::Gdb];

    /// A kind by its registry name.
    pub fn named(name: &str) -> Option<Self> {
        Self::KNOWN
            .into_iter()
            .chain([Self::Custom])
            .find(|k| k.name() == name)
    }

    /// The registry name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Debugpy => "debugpy",
            Self::Lldb => "lldb",
            Self::Dlv => "dlv",
            Self::Gdb => "gdb",
            Self::Custom => "custom",
        }
    }

    /// The command line that starts an adapter of this kind from its
    /// command: `python3 -m debugpy.adapter` runs as `python3 -c <start
    /// script>`, which removes debugpy's 40 ms per request.
    pub fn spawn_command(self, command: &[String]) -> Vec<String> {
        let mut command = command.to_vec();
        if self == Self::Debugpy
            && command.len() >= 3
            && command[1] == "-m"
            && command[2] == "debugpy.adapter"
        {
            command[1] = "-c".into();
            command[2] = DEBUGPY_ADAPTER_START.into();
        }
        command
    }

    /// Whether it speaks DAP only on a socket it listens on (`dlv dap
    /// --listen`), not on stdio.
    pub fn listens_on_socket(self) -> bool {
        self == Self::Dlv
    }

    /// Whether a program started with the adapter's own listener (`debugpy
    /// --listen`) serves DAP itself, so attaching talks to it directly.
    pub fn program_serves_dap(self) -> bool {
        self == Self::Debugpy
    }

    /// Whether requests for an earlier stop's handles are harmless: the
    /// adapter answers them with an error and nothing else. debugpy's adapter
    /// also writes each such failure to its stderr, which is the session's
    /// output, so it never gets requests sent ahead (`actor/locals.rs`).
    pub fn quiet_on_stale_handles(self) -> bool {
        matches!(self, Self::Lldb | Self::Dlv)
    }

    /// Whether its scope references name a scope of whichever frame was last
    /// asked for `scopes`, not of one frame: lldb gives every frame's Locals
    /// reference 1, so the frame is part of stepd's handle and is asked for
    /// again before its variables (`session/inspect.rs`).
    pub fn scope_references_follow_frame(self) -> bool {
        self == Self::Lldb
    }

    /// Whether it ignores `start`/`count` on indexed children (debugpy
    /// answers every container with its first 100), so pages beyond them are
    /// read with the language's own slicing (`session/values.rs`).
    pub fn pages_by_slicing(self) -> bool {
        self == Self::Debugpy
    }

    /// The context of an evaluation that names none. lldb's "repl" context
    /// answers in console form ("(int) $0 = 10"), so lldb evaluates values in
    /// "watch" unless the client asks for the console explicitly.
    pub fn default_eval_context(self) -> &'static str {
        if self == Self::Lldb { "watch" } else { "repl" }
    }

    /// Whether a debuggee that ends while stopped goes unreported: dlv
    /// waits for its debuggee only while it runs it, so one killed at a
    /// stop stays a zombie of dlv's and the session would stay stopped.
    /// stepd watches such a debuggee itself (by /proc) while stopped.
    pub fn misses_debuggee_death_while_stopped(self) -> bool {
        self == Self::Dlv
    }

    /// Whether its exception stops are named after the exception filter that
    /// caught them ("cpp_throw: C++ Throw") rather than the exception, so
    /// the exception's text is looked for elsewhere (`actor/exception.rs`).
    pub fn names_exception_stops_by_filter(self) -> bool {
        self == Self::Lldb
    }

    /// The exception filter that caught an exception, from exceptionInfo:
    /// lldb names the filter as the exception's id; debugpy's break mode
    /// names its filter. None when the adapter does not say.
    pub fn filter_that_caught(
        self,
        exception_id: &str,
        break_mode: Option<&str>,
    ) -> Option<String> {
        match self {
            Self::Lldb => Some(exception_id.to_owned()),
            Self::Debugpy => match break_mode? {
                "always" => Some("raised".into()),
                "unhandled" => Some("uncaught".into()),
                "userUnhandled" => Some("userUnhandled".into()),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether an interrupt (`pause`) that reaches the adapter as the
    /// program stops at a breakpoint can lose both stops: lldb's interrupt
    /// then waits out its 20 s timeout and the adapter reports nothing more.
    /// While such an adapter has breakpoints placed, a Pause waits briefly
    /// for the next stop before interrupting (`actor/interrupt.rs`).
    pub fn interrupt_may_cross_a_stop(self) -> bool {
        self == Self::Lldb
    }
}

impl std::fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_found_by_their_names() {
        for kind in AdapterKind::KNOWN.into_iter().chain([AdapterKind::Custom]) {
            assert_eq!(AdapterKind::named(kind.name()), Some(kind));
        }
        assert_eq!(AdapterKind::named("vim"), None);
    }

    #[test]
    fn debugpy_starts_through_its_script_and_others_as_named() {
        let command: Vec<String> = ["python3", "-m", "debugpy.adapter", "--x"]
            .map(String::from)
            .into();
        let spawned = AdapterKind::Debugpy.spawn_command(&command);
        assert_eq!(spawned[1], "-c");
        assert_eq!(spawned[3], "--x");
        assert_eq!(AdapterKind::Lldb.spawn_command(&command), command);
        assert!(spawned[2].contains("runpy.run_module(\"debugpy.adapter\""));
        // A debugpy kind given its own script, and any other kind, start as given.
        let own: Vec<String> = ["py", "/opt/my_adapter.py"].map(String::from).into();
        assert_eq!(AdapterKind::Debugpy.spawn_command(&own), own);
        assert_eq!(AdapterKind::Custom.spawn_command(&command), command);
    }
}
