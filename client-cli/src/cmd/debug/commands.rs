//! The words `stepctl debug` understands: gdb/pdb/dlv habits (`p`, `l`, `b`,
//! `bt`, `up`, `finish`, …), stepd's own pause commands (`c`, `cs`, `ca`,
//! `t`, `inj`, …) and every `stepctl input` word, with their help.

use std::collections::HashMap;

use stepd_proto::v1::{CommandKind, StepOutCommand, debug_command::Command};

use super::help::COMMANDS;
use crate::{cmd::pauses::debug_command, exit::Failure, render::pauses::command_word};

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
        /// `--global`: every session, not only this one.
        global: bool,
        /// `tbreak`: removed after its first hit.
        temporary: bool,
    },
    /// `condition N [EXPR]`: set or remove breakpoint N's condition.
    Condition(String, String),
    /// `ignore N COUNT`: skip the next COUNT hits of breakpoint N.
    Ignore(String, u64),
    /// `enable`/`disable [N…]` (none: this session's breakpoints).
    Enable(Vec<String>, bool),
    /// `delete [N…]` (none: the breakpoints added for this session).
    Delete(Vec<String>),
    /// `watch EXPR`: a data breakpoint.
    Watch(String),
    /// `j LINE`: move the current line without running.
    Jump(String),
    /// `!STMT`: a statement run in the selected frame; the pause stays.
    Statement(String),
    /// `NAME = EXPR`: assign in the selected frame; the pause stays.
    Assign(String, String),
    /// `pp EXPR`: pretty-printed.
    PrettyPrint(String),
    /// `whatis EXPR`: its type.
    WhatIs(String),
    /// `a`/`args`: the selected frame's arguments.
    Args,
    /// `ll`: the whole function of the selected frame.
    LongList,
    /// `retval`: what the function just left returned.
    Retval,
    /// `restart`: end the program and launch it again.
    Restart,
    /// `goroutines`/`threads`: the session's threads.
    Threads,
    /// `thread N`: commands go to thread N's pause.
    Thread(Option<i64>),
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
    let info = ["locals", "args", "breakpoints", "display", "threads"]
        .map(String::from)
        .to_vec();
    let arguments = HashMap::from([
        ("info".to_owned(), info),
        ("help".to_owned(), words.clone()),
    ]);
    (words, arguments)
}

/// Commands whose argument is a file path, for Tab.
pub const PATH_COMMANDS: &[&str] = &[
    "l", "list", "b", "break", "tbreak", "clear", "h", "here", "h!",
];

fn unknown(word: &str) -> String {
    format!("unknown command {word:?} (? lists the commands)")
}

/// `[--global] FILE:LINE|LINE|FUNC [if COND]`, of `b` and `tbreak`.
fn breakpoint(arg: String, temporary: bool) -> Result<Action, String> {
    let (global, arg) = match arg.strip_prefix("--global") {
        Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
            (true, rest.trim())
        }
        _ => (false, arg.as_str()),
    };
    if arg.is_empty() {
        return Err("a breakpoint needs FILE:LINE, LINE or FUNC (help b)".into());
    }
    let (location, condition) = match arg.split_once(" if ") {
        Some((location, condition)) => (location.trim(), condition.trim()),
        None => (arg, ""),
    };
    Ok(Action::Break {
        location: location.to_owned(),
        condition: condition.to_owned(),
        global,
        temporary,
    })
}

/// A breakpoint as typed, `7` or `bp-7`, as the daemon names it.
fn breakpoint_id(text: &str) -> Result<String, String> {
    let number = text.strip_prefix("bp-").unwrap_or(text);
    match number.parse::<u64>() {
        Ok(n) => Ok(format!("bp-{n}")),
        Err(_) => Err(format!(
            "{text:?} is not a breakpoint number (info breakpoints lists them)"
        )),
    }
}

fn breakpoint_ids(text: &str) -> Result<Vec<String>, String> {
    text.split_whitespace().map(breakpoint_id).collect()
}

/// `NAME = EXPR` (or `x.f = EXPR`, `x += 1`): an assignment, as pdb reads one
/// even when NAME is a command's name. `None` when the line is not one.
fn assignment(line: &str) -> Option<Action> {
    let at = line.find('=')?;
    let (target, value) = (line[..at].trim_end(), line[at + 1..].trim());
    if value.starts_with('=') || value.is_empty() || target.is_empty() {
        return None;
    }
    let (target, augmented) = match target.strip_suffix(['+', '-', '*', '/', '%', '&', '|', '^']) {
        Some(t) => (t.trim_end(), true),
        None => (target, false),
    };
    let is_name = |t: &str| {
        t.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && t.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    let lvalue = !target.is_empty()
        && !target.starts_with(|c: char| c.is_ascii_digit())
        && target
            .chars()
            .all(|c| c.is_alphanumeric() || "_.[]'\"".contains(c))
        && target.starts_with(|c: char| c.is_alphabetic() || c == '_');
    if !lvalue {
        return None;
    }
    Some(if is_name(target) && !augmented {
        Action::Assign(target.to_owned(), value.to_owned())
    } else {
        Action::Statement(line.to_owned())
    })
}

/// Parses a typed line.
pub fn parse_line(line: &str) -> Result<Action, String> {
    if let Some(statement) = line.strip_prefix('!').filter(|s| !s.starts_with('!')) {
        let statement = statement.trim();
        if statement.is_empty() {
            return Err("! needs a statement (help !)".into());
        }
        return Ok(Action::Statement(statement.to_owned()));
    }
    if let Some(action) = assignment(line) {
        return Ok(action);
    }
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
        "w" => no_arg(Action::Backtrace)?,
        "u" => Action::Move(count(1)? as isize),
        "d" => Action::Move(-(count(1)? as isize)),
        "a" | "args" => no_arg(Action::Args)?,
        "pp" => Action::PrettyPrint(arg.ok_or_else(|| needs("an expression"))?),
        "whatis" => Action::WhatIs(arg.ok_or_else(|| needs("an expression"))?),
        "ll" | "longlist" => no_arg(Action::LongList)?,
        "retval" | "rv" => no_arg(Action::Retval)?,
        "j" | "jump" => Action::Jump(arg.ok_or_else(|| needs("a LINE"))?),
        "tbreak" => breakpoint(arg.ok_or_else(|| needs("FILE:LINE, LINE or FUNC"))?, true)?,
        "condition" | "cond" => {
            let arg = arg.ok_or_else(|| needs("a breakpoint N"))?;
            let (id, expression) = arg.split_once(char::is_whitespace).unwrap_or((&arg, ""));
            Action::Condition(breakpoint_id(id)?, expression.trim().to_owned())
        }
        "ignore" => {
            let arg = arg.ok_or_else(|| needs("N COUNT"))?;
            let Some((id, n)) = arg.split_once(char::is_whitespace) else {
                return Err(needs("N COUNT"));
            };
            let n = n
                .trim()
                .parse()
                .map_err(|_| format!("ignore takes a COUNT, not {:?}", n.trim()))?;
            Action::Ignore(breakpoint_id(id)?, n)
        }
        "enable" | "disable" => Action::Enable(breakpoint_ids(rest)?, word == "enable"),
        "delete" => Action::Delete(breakpoint_ids(rest)?),
        "watch" => Action::Watch(arg.ok_or_else(|| needs("an expression"))?),
        "restart" | "run" => no_arg(Action::Restart)?,
        "goroutines" | "threads" => no_arg(Action::Threads)?,
        "thread" | "goroutine" => Action::Thread(
            arg.map(|n| {
                n.parse()
                    .map_err(|_| format!("{word} takes a thread number, not {n:?}"))
            })
            .transpose()?,
        ),
        "exit" => no_arg(Action::Exit)?,
        "pauses" => no_arg(Action::Pauses)?,
        "pause" => no_arg(Action::PauseProgram)?,
        "sw" | "switch" => Action::Switch(arg.ok_or_else(|| needs("a pause KEY or number"))?),
        "p" | "print" => Action::Print(arg.ok_or_else(|| needs("an expression"))?),
        "l" | "list" => Action::List(arg),
        // Alone, as in pdb: the breakpoints.
        "b" | "break" if arg.is_none() => Action::InfoBreakpoints,
        "breakpoints" | "bp" => no_arg(Action::InfoBreakpoints)?,
        "b" | "break" => breakpoint(arg.ok_or_else(|| needs("FILE:LINE, LINE or FUNC"))?, false)?,
        "clear" => Action::Clear(arg),
        "bt" | "where" | "backtrace" | "stacktrace" | "stack" => no_arg(Action::Backtrace)?,
        "up" => Action::Move(count(1)? as isize),
        "down" => Action::Move(-(count(1)? as isize)),
        "frame" | "f" => Action::Frame(arg.is_some().then(|| count(0)).transpose()?),
        "display" => Action::Display(arg),
        "undisplay" => Action::Undisplay(arg.is_some().then(|| count(0)).transpose()?),
        "info" => match arg.as_deref() {
            Some("locals" | "l") => Action::InfoLocals,
            Some("args") => Action::Args,
            Some("threads" | "goroutines") => Action::Threads,
            Some("breakpoints" | "break" | "b") => Action::InfoBreakpoints,
            Some("display") => Action::InfoDisplay,
            _ => return Err("info takes locals, args, breakpoints, display or threads".into()),
        },
        "finish" | "so" | "stepout" => no_arg(Action::Send(Command::StepOut(StepOutCommand {
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
        Ok(CommandKind::Jump) => "j".into(),
        _ => command_word(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::debug::help::help;
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
            Ok(Action::Break { location, condition, global: false, temporary: false })
                if location == "loop.py:10" && condition == "i == 3"
        ));
        assert!(matches!(
            parse_line("tbreak --global step"),
            Ok(Action::Break { location, global: true, temporary: true, .. }) if location == "step"
        ));
        assert!(matches!(
            parse_line("condition 3 i > 2"),
            Ok(Action::Condition(id, c)) if id == "bp-3" && c == "i > 2"
        ));
        assert!(
            matches!(parse_line("condition bp-3"), Ok(Action::Condition(_, c)) if c.is_empty())
        );
        assert!(matches!(parse_line("ignore 2 5"), Ok(Action::Ignore(id, 5)) if id == "bp-2"));
        assert!(
            matches!(parse_line("disable 1 bp-2"), Ok(Action::Enable(ids, false)) if ids == ["bp-1", "bp-2"])
        );
        assert!(matches!(parse_line("delete"), Ok(Action::Delete(ids)) if ids.is_empty()));
        assert!(parse_line("delete x").is_err());
        // Assignments, even to a command's name; statements.
        assert!(matches!(parse_line("n = 3"), Ok(Action::Assign(n, v)) if n == "n" && v == "3"));
        assert!(matches!(parse_line("total=total*2"), Ok(Action::Assign(n, _)) if n == "total"));
        assert!(
            matches!(parse_line("info['i'] = 9"), Ok(Action::Statement(s)) if s == "info['i'] = 9")
        );
        assert!(matches!(parse_line("total += 1"), Ok(Action::Statement(_))));
        assert!(matches!(parse_line("!x = [1]"), Ok(Action::Statement(s)) if s == "x = [1]"));
        assert!(matches!(parse_line("p a == b"), Ok(Action::Print(_))));
        assert!(matches!(
            parse_line("b f.py:3 if x == 1"),
            Ok(Action::Break { .. })
        ));
        assert!(matches!(parse_line("w"), Ok(Action::Backtrace)));
        assert!(matches!(parse_line("u 2"), Ok(Action::Move(2))));
        assert!(matches!(parse_line("d"), Ok(Action::Move(-1))));
        assert!(matches!(parse_line("a"), Ok(Action::Args)));
        assert!(matches!(
            parse_line("thread 7"),
            Ok(Action::Thread(Some(7)))
        ));
        assert!(matches!(parse_line("info threads"), Ok(Action::Threads)));
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
        assert!(matches!(parse_line("jump 3"), Ok(Action::Jump(l)) if l == "3"));
        assert_eq!(
            parse_line("frobnicate 3").unwrap_err(),
            "unknown command \"frobnicate\" (? lists the commands)"
        );
        assert_eq!(alias(CommandKind::ContinueAll as i32), "ca");
    }

    #[test]
    fn help_knows_every_command() {
        let all = help(None).unwrap();
        assert!(all.contains("p, print EXPR"), "{all}");
        assert!(help(Some("up")).unwrap().contains("selected frame"));
        assert!(help(Some("where")).unwrap().starts_with("bt, where"));
        assert!(help(Some("frobnicate")).is_none());
        // Every word parse_line knows has its help.
        for word in [
            "w",
            "u",
            "d",
            "a",
            "args",
            "pp",
            "ll",
            "retval",
            "!",
            "j",
            "jump",
            "tbreak",
            "condition",
            "ignore",
            "enable",
            "disable",
            "delete",
            "watch",
            "restart",
            "goroutines",
            "threads",
            "thread",
            "goroutine",
            "whatis",
        ] {
            assert!(help(Some(word)).is_some(), "help {word}");
            assert!(all.contains(word), "{word} in {all}");
        }
    }
}
