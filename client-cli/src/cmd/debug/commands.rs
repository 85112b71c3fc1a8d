//! The words `stepctl debug` understands: gdb/pdb/dlv habits (`p`, `l`, `b`,
//! `bt`, `up`, `finish`, …), stepd's own pause commands (`c`, `cs`, `ca`,
//! `t`, `inj`, …) and every `stepctl input` word, with their help.

use std::collections::HashMap;

use stepd_proto::v1::{CommandKind, StepOutCommand, debug_command::Command};

use crate::{cmd::sessions::debug_command, exit::Failure, render::pauses::command_word};

/// What a typed line asks for.
#[derive(Debug)]
pub enum Action {
    /// A command that answers the current pause.
    Send(Command),
    /// Run to LINE (or the next line below) in the stopped file.
    Until(Option<u32>),
    Backtrace,
    Print(String),
    /// `list`, `list N`, `list FILE:N`.
    List(Option<String>),
    Break {
        location: String,
        condition: String,
    },
    Clear(Option<String>),
    /// Frames up (towards the caller), or down when negative.
    Move(isize),
    Frame(Option<usize>),
    Display(Option<String>),
    Undisplay(Option<usize>),
    InfoLocals,
    InfoBreakpoints,
    InfoDisplay,
    PauseProgram,
    Pauses,
    Switch(String),
    Help(Option<String>),
    Exit,
}

/// One command of the help: its names, arguments and what it does.
struct Spec {
    names: &'static [&'static str],
    args: &'static str,
    summary: &'static str,
    detail: &'static str,
}

const COMMANDS: &[Spec] = &[
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
        names: &["finish", "o", "out"],
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
        detail: "",
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
        names: &["b", "break"],
        args: "FILE:LINE | LINE | FUNC [if COND]",
        summary: "add a breakpoint (stops only when COND is true)",
        detail: "A relative FILE is found from here, then beside the stopped file. \
                 Breakpoints are the daemon's: they apply to every session and outlive this one.",
    },
    Spec {
        names: &["clear"],
        args: "[ID | FILE:LINE | LINE | FUNC]",
        summary: "remove breakpoints (alone: those on the current line)",
        detail: "",
    },
    Spec {
        names: &["bt", "where", "backtrace"],
        args: "",
        summary: "the stack; > marks the selected frame",
        detail: "",
    },
    Spec {
        names: &["up"],
        args: "[N]",
        summary: "select the caller's frame (N frames up)",
        detail: "print, info locals and list follow the selected frame.",
    },
    Spec {
        names: &["down"],
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
        args: "locals | breakpoints | display",
        summary: "the selected frame's locals, the breakpoints, the displays",
        detail: "",
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
        summary: "repeat the last command",
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

/// `stepctl input` words accepted as they are.
const INPUT_WORDS: &[&str] = &[
    "next",
    "in",
    "out",
    "out!",
    "continue",
    "continue-scope",
    "continue-all",
    "here",
    "here!",
    "trace",
    "eval",
    "inject",
    "skip",
    "inspect",
    "inspect-prompt",
    "locals",
    "stacktrace",
    "quit",
    "expression",
];

/// Short names of pause commands, as `stepctl input` spells them.
fn input_word(word: &str) -> Option<&'static str> {
    Some(match word {
        "n" => "next",
        "i" | "s" | "step" => "in",
        "o" => "out",
        "o!" => "out!",
        "c" | "cont" => "continue",
        "cs" => "continue-scope",
        "ca" => "continue-all",
        "h" => "here",
        "h!" => "here!",
        "t" => "trace",
        "e" => "eval",
        "inj" => "inject",
        "q" => "quit",
        other => return INPUT_WORDS.iter().find(|w| **w == other).copied(),
    })
}

/// Every word Tab completes first, and the fixed words of some arguments.
pub fn vocabulary() -> (Vec<String>, HashMap<String, Vec<String>>) {
    let mut words: Vec<String> = COMMANDS
        .iter()
        .flat_map(|s| s.names.iter())
        .chain(INPUT_WORDS.iter())
        .filter(|w| w.chars().all(|c| c.is_ascii_alphabetic() || c == '-'))
        .map(|w| (*w).to_owned())
        .collect();
    words.sort();
    words.dedup();
    let info = ["locals", "breakpoints", "display"]
        .map(String::from)
        .to_vec();
    let arguments = HashMap::from([
        ("info".to_owned(), info),
        ("help".to_owned(), words.clone()),
    ]);
    (words, arguments)
}

/// Commands whose argument is a file path, for Tab.
pub const PATH_COMMANDS: &[&str] = &["l", "list", "b", "break", "clear", "h", "here", "h!"];

fn unknown(word: &str) -> String {
    format!("unknown command {word:?} (? lists the commands)")
}

/// Parses a typed line.
pub fn parse_line(line: &str) -> Result<Action, String> {
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (line, ""),
    };
    let arg = (!rest.is_empty()).then(|| rest.to_owned());
    let no_arg = |action: Action| match &arg {
        Some(_) => Err(format!("{word} takes no argument")),
        None => Ok(action),
    };
    let count = |default: usize| -> Result<usize, String> {
        match &arg {
            None => Ok(default),
            Some(n) => n
                .parse()
                .map_err(|_| format!("{word} takes a number, not {n:?}")),
        }
    };
    let needs = |what: &str| format!("{word} needs {what} (help {word})");
    Ok(match word {
        "?" | "help" => Action::Help(arg),
        "exit" => no_arg(Action::Exit)?,
        "pauses" => no_arg(Action::Pauses)?,
        "pause" => no_arg(Action::PauseProgram)?,
        "sw" | "switch" => Action::Switch(arg.ok_or_else(|| needs("a pause KEY or number"))?),
        "p" | "print" => Action::Print(arg.ok_or_else(|| needs("an expression"))?),
        "l" | "list" => Action::List(arg),
        "b" | "break" => {
            let arg = arg.ok_or_else(|| needs("FILE:LINE, LINE or FUNC"))?;
            let (location, condition) = match arg.split_once(" if ") {
                Some((location, condition)) => (location.trim(), condition.trim()),
                None => (arg.as_str(), ""),
            };
            Action::Break {
                location: location.to_owned(),
                condition: condition.to_owned(),
            }
        }
        "clear" => Action::Clear(arg),
        "bt" | "where" | "backtrace" | "stacktrace" => no_arg(Action::Backtrace)?,
        "up" => Action::Move(count(1)? as isize),
        "down" => Action::Move(-(count(1)? as isize)),
        "frame" | "f" => Action::Frame(arg.is_some().then(|| count(0)).transpose()?),
        "display" => Action::Display(arg),
        "undisplay" => Action::Undisplay(arg.is_some().then(|| count(0)).transpose()?),
        "info" => match arg.as_deref() {
            Some("locals" | "l" | "args") => Action::InfoLocals,
            Some("breakpoints" | "break" | "b") => Action::InfoBreakpoints,
            Some("display") => Action::InfoDisplay,
            _ => return Err("info takes locals, breakpoints or display".into()),
        },
        "finish" => no_arg(Action::Send(Command::StepOut(StepOutCommand {
            force: false,
        })))?,
        "until" | "unt" => Action::Until(
            arg.map(|n| {
                n.parse()
                    .map_err(|_| format!("until takes a line number, not {n:?}"))
            })
            .transpose()?,
        ),
        other => {
            let full = input_word(other).ok_or_else(|| unknown(other))?;
            debug_command(full, arg, false)
                .map(Action::Send)
                .map_err(|failure| match failure {
                    Failure::Usage(message) => format!("{message} (? lists the commands)"),
                    other => format!("{other:?}"),
                })?
        }
    })
}

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

/// The short name typed for a command kind, as offered at a pause.
pub fn alias(kind: i32) -> String {
    match CommandKind::try_from(kind) {
        Ok(CommandKind::Next) => "n".into(),
        Ok(CommandKind::In) => "s".into(),
        Ok(CommandKind::Out) => "finish/o!".into(),
        Ok(CommandKind::Here) => "until/h/h!".into(),
        Ok(CommandKind::Continue) => "c".into(),
        Ok(CommandKind::ContinueScope) => "cs".into(),
        Ok(CommandKind::ContinueAll) => "ca".into(),
        Ok(CommandKind::Trace) => "t".into(),
        Ok(CommandKind::Eval) => "e".into(),
        Ok(CommandKind::Inject) => "inj".into(),
        Ok(CommandKind::Stacktrace) => "bt".into(),
        Ok(CommandKind::Quit) => "q".into(),
        Ok(CommandKind::Expression) => "(type the expression)".into(),
        _ => command_word(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepd_proto::v1::{HereCommand, TraceCommand};

    #[test]
    fn aliases_parse() {
        assert!(matches!(
            parse_line("n"),
            Ok(Action::Send(Command::Next(_)))
        ));
        assert!(matches!(
            parse_line("o!"),
            Ok(Action::Send(Command::StepOut(StepOutCommand {
                force: true
            })))
        ));
        assert!(matches!(
            parse_line("finish"),
            Ok(Action::Send(Command::StepOut(StepOutCommand {
                force: false
            })))
        ));
        assert!(matches!(
            parse_line("h! 12"),
            Ok(Action::Send(Command::Here(HereCommand {
                line: 12,
                force: true,
                ..
            })))
        ));
        assert!(matches!(
            parse_line("h @0,2"),
            Ok(Action::Send(Command::Here(HereCommand { ref coor, force: false, .. }))) if *coor == [0, 2]
        ));
        assert!(matches!(
            parse_line("t 5"),
            Ok(Action::Send(Command::Trace(TraceCommand { max_steps: 5 })))
        ));
        assert!(matches!(
            parse_line("e items[1] + 100"),
            Ok(Action::Send(Command::Eval(e))) if e.code == "items[1] + 100"
        ));
        assert!(matches!(
            parse_line("inj total = 1000"),
            Ok(Action::Send(Command::Inject(_)))
        ));
        assert!(matches!(parse_line("p total"), Ok(Action::Print(e)) if e == "total"));
        assert!(matches!(parse_line("list 12"), Ok(Action::List(Some(n))) if n == "12"));
        assert!(matches!(
            parse_line("b loop.py:10 if i == 3"),
            Ok(Action::Break { location, condition }) if location == "loop.py:10" && condition == "i == 3"
        ));
        assert!(matches!(parse_line("up"), Ok(Action::Move(1))));
        assert!(matches!(parse_line("down 2"), Ok(Action::Move(-2))));
        assert!(matches!(parse_line("frame 3"), Ok(Action::Frame(Some(3)))));
        assert!(matches!(parse_line("until"), Ok(Action::Until(None))));
        assert!(matches!(
            parse_line("until 19"),
            Ok(Action::Until(Some(19)))
        ));
        assert!(matches!(parse_line("info locals"), Ok(Action::InfoLocals)));
        assert!(matches!(parse_line("sw 2"), Ok(Action::Switch(k)) if k == "2"));
        assert!(matches!(parse_line("pause"), Ok(Action::PauseProgram)));
        assert!(matches!(parse_line("pauses"), Ok(Action::Pauses)));
        assert!(matches!(parse_line("exit"), Ok(Action::Exit)));
        assert!(parse_line("n 3").is_err());
        assert!(parse_line("sw").is_err());
        assert_eq!(
            parse_line("jump 3").unwrap_err(),
            "unknown command \"jump\" (? lists the commands)"
        );
        assert_eq!(alias(CommandKind::ContinueAll as i32), "ca");
    }

    #[test]
    fn help_knows_every_command() {
        let all = help(None).unwrap();
        assert!(all.contains("p, print EXPR"), "{all}");
        assert!(help(Some("up")).unwrap().contains("selected frame"));
        assert!(help(Some("where")).unwrap().starts_with("bt, where"));
        assert!(help(Some("jump")).is_none());
    }
}
