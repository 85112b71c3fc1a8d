//! The commands of `stepctl debug` as `help` tells them: names, arguments,
//! a summary and, for `help CMD`, why it behaves as it does.

/// One command of the help: its names, arguments and what it does.
pub(super) struct Spec {
    pub(super) names: &'static [&'static str],
    args: &'static str,
    summary: &'static str,
    detail: &'static str,
}

pub(super) const COMMANDS: &[Spec] = &[
    Spec {
        names: &["n", "next"],
        args: "",
        summary: "step over the current line",
        detail: "",
    },
    Spec {
        names: &["s", "step", "i", "in"],
        args: "",
        summary: "step into the call on the current line",
        detail: "",
    },
    Spec {
        names: &["finish", "o", "out", "so", "stepout"],
        args: "",
        summary: "run until the current function returns (o! also skips breakpoints)",
        detail: "Stops in the caller, right after the call.",
    },
    Spec {
        names: &["c", "continue"],
        args: "",
        summary: "continue to the next breakpoint",
        detail: "",
    },
    Spec {
        names: &["until"],
        args: "[LINE]",
        summary: "run to the first line at or after LINE in this frame, or until it returns",
        detail: "Like pdb's and gdb's until: leaves a loop without stepping through it. \
                 A breakpoint on the way stops it first.",
    },
    Spec {
        names: &["h", "here"],
        args: "[FILE:]LINE",
        summary: "run to a line (h! also skips breakpoints)",
        detail: "",
    },
    Spec {
        names: &["cs"],
        args: "",
        summary: "continue-scope: ignore breakpoints until this frame returns",
        detail: "",
    },
    Spec {
        names: &["ca"],
        args: "",
        summary: "continue-all: breakpoints off until the next pause request",
        detail: "",
    },
    Spec {
        names: &["t", "trace"],
        args: "[N]",
        summary: "step on, reporting each line, at most N steps",
        detail: "",
    },
    Spec {
        names: &["p", "print"],
        args: "EXPR",
        summary: "evaluate EXPR in the selected frame",
        detail: "The frame is the stopped one unless up, down or frame chose another.",
    },
    Spec {
        names: &["e", "eval"],
        args: "[EXPR]",
        summary: "evaluate through the pause; `e` alone asks for the expression",
        detail: "The result is shown as the pause's value and other clients see it.",
    },
    Spec {
        names: &["inj"],
        args: "NAME = EXPR",
        summary: "inject: assign in the paused frame, then continue",
        detail: "NAME = EXPR alone assigns and stays stopped.",
    },
    Spec {
        names: &["NAME ="],
        args: "EXPR",
        summary: "assign to a variable of the selected frame and stay stopped",
        detail: "As in pdb, even when NAME is a command's name (n = 3). \
                 x.f = EXPR, x[i] = EXPR and x += 1 run as statements (see !).",
    },
    Spec {
        names: &["!"],
        args: "STMT",
        summary: "run a statement in the selected frame and stay stopped",
        detail: "Evaluated in the adapter's REPL context: debugpy runs Python statements, \
                 dlv and lldb their own expression syntax.",
    },
    Spec {
        names: &["pp"],
        args: "EXPR",
        summary: "pretty-print EXPR in the selected frame",
        detail: "",
    },
    Spec {
        names: &["whatis"],
        args: "EXPR",
        summary: "the type of EXPR, as the adapter names it",
        detail: "",
    },
    Spec {
        names: &["a", "args"],
        args: "",
        summary: "the arguments of the selected frame's function",
        detail: "Read from the function's signature in its source; \
                 when the source cannot be read, all the locals.",
    },
    Spec {
        names: &["retval", "rv"],
        args: "",
        summary: "the value the function just left returned (after finish or a step out)",
        detail: "debugpy shows it among the locals as `(return) NAME`; \
                 other adapters do not report return values.",
    },
    Spec {
        names: &["display"],
        args: "[EXPR]",
        summary: "show EXPR at every stop (alone: show them all now)",
        detail: "undisplay N removes one; info display lists them.",
    },
    Spec {
        names: &["undisplay"],
        args: "[N]",
        summary: "stop showing display N (alone: all of them)",
        detail: "",
    },
    Spec {
        names: &["l", "list"],
        args: "[LINE | FILE:LINE]",
        summary: "source around the stop, the current line marked; again: the next lines",
        detail: "",
    },
    Spec {
        names: &["ll", "longlist"],
        args: "",
        summary: "the whole function of the selected frame, the current line marked",
        detail: "",
    },
    Spec {
        names: &["b", "break"],
        args: "[--global] LOCATION [if COND]",
        summary: "add a breakpoint for this session (stops only when COND is true); alone: list them",
        detail: "LOCATION is FILE:LINE, LINE (in the stopped file) or a function. \
                 A relative FILE is found from here, then beside the stopped file. \
                 It applies to this session (and to the next one after restart); \
                 --global makes it apply to every session. Breakpoints are the daemon's: \
                 they outlive stepctl.",
    },
    Spec {
        names: &["breakpoints", "bp"],
        args: "",
        summary: "the breakpoints that apply to this session (as info breakpoints)",
        detail: "",
    },
    Spec {
        names: &["tbreak"],
        args: "[--global] LOCATION [if COND]",
        summary: "a breakpoint that stops once, then is deleted",
        detail: "",
    },
    Spec {
        names: &["condition", "cond"],
        args: "N [COND]",
        summary: "stop at breakpoint N only when COND is true (no COND: always)",
        detail: "N is the breakpoint's number: 7 or bp-7.",
    },
    Spec {
        names: &["ignore"],
        args: "N COUNT",
        summary: "pass the next COUNT hits of breakpoint N (0: stop at every hit again)",
        detail: "Hits are counted across sessions.",
    },
    Spec {
        names: &["enable", "disable"],
        args: "[N…]",
        summary: "turn breakpoints on or off (alone: all those of this session)",
        detail: "",
    },
    Spec {
        names: &["delete"],
        args: "[N…]",
        summary: "delete breakpoints by number (alone: those added for this session)",
        detail: "clear takes a place instead: clear 6 is line 6.",
    },
    Spec {
        names: &["watch"],
        args: "EXPR",
        summary: "stop when EXPR changes (data breakpoint; not available yet)",
        detail: "stepd has no data breakpoints yet: the command says so, \
                 and whether the adapter could have them.",
    },
    Spec {
        names: &["clear"],
        args: "[ID | FILE:LINE | LINE | FUNC]",
        summary: "remove breakpoints (alone: those on the current line)",
        detail: "",
    },
    Spec {
        names: &["bt", "where", "w", "backtrace", "stack"],
        args: "",
        summary: "the stack; > marks the selected frame",
        detail: "",
    },
    Spec {
        names: &["up", "u"],
        args: "[N]",
        summary: "select the caller's frame (N frames up)",
        detail: "print, info locals and list follow the selected frame.",
    },
    Spec {
        names: &["down", "d"],
        args: "[N]",
        summary: "select the callee's frame (N frames down)",
        detail: "",
    },
    Spec {
        names: &["frame", "f"],
        args: "[N]",
        summary: "select frame N (alone: show the selected frame)",
        detail: "",
    },
    Spec {
        names: &["info"],
        args: "locals|args|breakpoints|display|threads",
        summary: "the selected frame's locals or args, the breakpoints, the displays, the threads",
        detail: "",
    },
    Spec {
        names: &["j", "jump"],
        args: "LINE",
        summary: "set the next line to run, without running the lines between",
        detail: "DAP goto, as pdb's jump: the program stops again at LINE. Where the \
                 adapter cannot jump (dlv, lldb), it says so.",
    },
    Spec {
        names: &["goroutines", "threads"],
        args: "",
        summary: "the session's threads (dlv: goroutines); * marks the current one",
        detail: "",
    },
    Spec {
        names: &["thread", "goroutine"],
        args: "[N]",
        summary: "send commands to thread N's pause (alone: the current thread)",
        detail: "A thread stopped without a pause of its own (dlv stops every goroutine) \
                 shows its stack.",
    },
    Spec {
        names: &["restart", "run"],
        args: "",
        summary: "end the program and launch it again, with the same arguments",
        detail: "Only when this stepctl launched it. This session's breakpoints apply \
                 to the new one.",
    },
    Spec {
        names: &["q", "quit"],
        args: "",
        summary: "terminate the debuggee",
        detail: "",
    },
    Spec {
        names: &["pause"],
        args: "",
        summary: "pause the running program",
        detail: "",
    },
    Spec {
        names: &["pauses"],
        args: "",
        summary: "list the pending pauses; sw KEY|N switches to one",
        detail: "",
    },
    Spec {
        names: &["sw", "switch"],
        args: "KEY | N",
        summary: "send commands to another pending pause",
        detail: "",
    },
    Spec {
        names: &["!!"],
        args: "",
        summary: "repeat the last command (so does Enter on an empty line)",
        detail: "",
    },
    Spec {
        names: &["?", "help"],
        args: "[CMD]",
        summary: "this help, or one command's",
        detail: "",
    },
    Spec {
        names: &["exit"],
        args: "",
        summary: "leave stepctl (the session goes on)",
        detail: "",
    },
];

fn usage(spec: &Spec) -> String {
    let names = spec.names.join(", ");
    if spec.args.is_empty() {
        names
    } else {
        format!("{names} {}", spec.args)
    }
}

/// The whole help, or one command's; `None` when CMD is unknown.
pub fn help(command: Option<&str>) -> Option<String> {
    let Some(word) = command else {
        let width = COMMANDS.iter().map(|s| usage(s).len()).max().unwrap_or(0);
        let mut text = String::from("commands:\n");
        for spec in COMMANDS {
            text.push_str(&format!("  {:<width$}  {}\n", usage(spec), spec.summary));
        }
        text.push_str(
            "`stepctl input` words work too (next, continue-all, inspect, …); help CMD tells more.",
        );
        return Some(text);
    };
    let spec = COMMANDS.iter().find(|s| s.names.contains(&word))?;
    let mut text = format!("{}\n  {}", usage(spec), spec.summary);
    if !spec.detail.is_empty() {
        text.push_str(&format!("\n  {}", spec.detail));
    }
    Some(text)
}
